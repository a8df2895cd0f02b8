"""Which engine versions a plugin patches: the ones it was written against, or any the operator
allows (``AGENTRT_<ENGINE>_ALLOW_UNTESTED=1``)."""

from __future__ import annotations

import logging


def is_supported(version: str, supported: tuple[str, ...]) -> bool:
    """``version`` without its local part (``0.32.0+cpu`` → ``0.32.0``) is one of ``supported``."""
    return version.split("+", 1)[0] in supported


def may_patch(log: logging.Logger, engine: str, version: str, supported: tuple[str, ...], force: bool,
              patched: str, allow_untested: str) -> bool:
    """Whether to patch ``engine`` ``version``: a supported one, or any with ``force``. A refusal is
    logged with the variable that allows it, so the operator sees why the engine runs unranked."""
    if force or is_supported(version, supported):
        return True
    log.error(
        "agentrt: %s %s is not a version this plugin knows (%s); NOT patching %s (set %s=1 to try anyway)",
        engine,
        version,
        ", ".join(supported),
        patched,
        allow_untested,
    )
    return False
