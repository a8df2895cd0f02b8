"""The vLLM general-plugin entry point (``vllm.general_plugins``: ``agentrt``).

vLLM calls ``register()`` in every process it starts, before the engine core builds its scheduler
and block pool. Configuration is by environment, so it reaches the engine-core process: the
``AGENTRT_EVICTION_*`` settings every engine's plugin reads (``agentrt_engine.settings``; vLLM
spreads ``AGENTRT_EVICTION_MAX_CANDIDATES`` over agents), and ``AGENTRT_VLLM_ALLOW_UNTESTED=1`` to
patch a vLLM version the plugin was not written against.

An operator who set ``AGENTRT_EVICTION_SOCKET`` asked for agentrt's eviction ranking: on a vLLM
version the plugin does not know, ``register()`` stops vLLM's start with an error that names the
version and the two ways on (``AGENTRT_VLLM_ALLOW_UNTESTED=1``, or unsetting the socket), rather
than serving without the ranking and saying so only in a log line.
"""

from __future__ import annotations

import logging

from agentrt_engine.plugin import Install, start_plugin
from agentrt_engine.versions import is_supported

log = logging.getLogger("vllm.agentrt_vllm")

ALLOW_UNTESTED = "AGENTRT_VLLM_ALLOW_UNTESTED"


class UntestedVllmError(RuntimeError):
    """vLLM is a version the plugin was not written against, and the operator did not allow it."""


def version_gate(version: str, supported: tuple[str, ...], allowed: bool) -> None:
    """Raise :class:`UntestedVllmError` for a vLLM ``version`` not in ``supported`` unless
    ``allowed``; an allowed one is warned about."""
    if is_supported(version, supported):
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
    start_plugin(log, ALLOW_UNTESTED, _gated_install)


def _gated_install(allowed: bool) -> Install:
    """vLLM's patch, once this vLLM's version passed :func:`version_gate`."""
    from .patch import SUPPORTED_VERSIONS, install, vllm_version

    version_gate(vllm_version(), SUPPORTED_VERSIONS, allowed)
    return install
