"""What the framework hooks share: importing a framework (with the install line when it is
missing), checking a hook's setup, and taking a name the framework chose."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Optional

from .client import AgentrtHints
from .wire import MAX_NAME_BYTES, check_name


def require(module: str, package: str, hook: str) -> ModuleType:
    """Import `module`, or fail naming the package to install for `hook`."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{hook} needs {package} (module {module!r} is not importable: {error}); "
            f"install it with `pip install {package}` in the environment the framework runs in"
        ) from error


def check_setup(hints: Any, session: Any) -> str:
    """A hook's client and session, checked when the hook is made (so that a mistake fails at
    setup, not in the middle of a run); returns the session."""
    if not isinstance(hints, AgentrtHints):
        raise ValueError("hints: expected an AgentrtHints (agentrt_hints.AgentrtHints(base_url))")
    return check_name("session", session)


def name_or_none(name: Any) -> Optional[str]:
    """A name the framework chose (an agent's, a role's), as the proxy takes it; None — the hint
    goes without it — when there is none, or one over the proxy's 256 bytes, which frameworks
    allow."""
    if not isinstance(name, str) or not name or len(name.encode("utf-8")) > MAX_NAME_BYTES:
        return None
    return name
