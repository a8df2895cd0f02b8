"""The vLLM general-plugin entry point (``vllm.general_plugins``: ``agentrt``).

vLLM calls ``register()`` in every process it starts, before the engine core builds its scheduler
and block pool. Configuration is by environment, so it reaches the engine-core process:

- ``AGENTRT_EVICTION_SOCKET``: the agentrt eviction service's Unix socket. Unset: do nothing.
- ``AGENTRT_EVICTION_DEADLINE_MS``: how long an allocation waits for a ranking (default 2).
- ``AGENTRT_EVICTION_MAX_CANDIDATES``: candidates per ranking, spread over agents (default 256).
- ``AGENTRT_VLLM_ALLOW_UNTESTED=1``: patch a vLLM version the plugin was not written against.

An operator who set ``AGENTRT_EVICTION_SOCKET`` asked for agentrt's eviction ranking: on a vLLM
version the plugin does not know, ``register()`` stops vLLM's start with an error that names the
version and the two ways on (``AGENTRT_VLLM_ALLOW_UNTESTED=1``, or unsetting the socket), rather
than serving without the ranking and saying so only in a log line.
"""

from __future__ import annotations

import logging
import os

from .settings import eviction_settings

log = logging.getLogger("vllm.agentrt_vllm")

ALLOW_UNTESTED = "AGENTRT_VLLM_ALLOW_UNTESTED"


class UntestedVllmError(RuntimeError):
    """vLLM is a version the plugin was not written against, and the operator did not allow it."""


def version_gate(version: str, supported: tuple[str, ...], allowed: bool) -> None:
    """Raise :class:`UntestedVllmError` for a vLLM ``version`` not in ``supported`` unless
    ``allowed``; an allowed one is warned about."""
    base = version.split("+", 1)[0]
    if base in supported:
        return
    known = ", ".join(supported)
    if allowed:
        log.warning("agentrt: vLLM %s is not a version this plugin was tested with (%s); patching it anyway "
                    "because %s=1", version, known, ALLOW_UNTESTED)
        return
    raise UntestedVllmError(
        f"agentrt: vLLM {version} is not a version the agentrt plugin was tested with ({known}), so it will "
        f"not patch vLLM's block pool. Set {ALLOW_UNTESTED}=1 to patch it anyway (the plugin checks every hook "
        f"it needs and refuses a vLLM that lacks one), or unset AGENTRT_EVICTION_SOCKET to run vLLM without "
        f"agentrt's eviction ranking."
    )


def register() -> None:
    settings = eviction_settings(log)
    if settings is None:
        return
    from .patch import SUPPORTED_VERSIONS, install, vllm_version

    allowed = os.environ.get(ALLOW_UNTESTED) == "1"
    version_gate(vllm_version(), SUPPORTED_VERSIONS, allowed)
    install(
        settings.socket_path,
        deadline_ms=settings.deadline_ms,
        max_candidates=settings.max_candidates,
        force=allowed,
    )
