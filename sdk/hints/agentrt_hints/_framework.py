"""Importing a framework for a hook, with the install line when it is missing."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, package: str, hook: str) -> ModuleType:
    """Import `module`, or fail naming the package to install for `hook`."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{hook} needs {package} (module {module!r} is not importable: {error}); "
            f"install it with `pip install {package}` in the environment the framework runs in"
        ) from error
