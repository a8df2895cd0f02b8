"""The vLLM general-plugin entry point (``vllm.general_plugins``: ``agentrt``).

vLLM calls ``register()`` in every process it starts, before the engine core builds its scheduler
and block pool. Configuration is by environment, so it reaches the engine-core process:

- ``AGENTRT_EVICTION_SOCKET``: the agentrt eviction service's Unix socket. Unset: do nothing.
- ``AGENTRT_EVICTION_DEADLINE_MS``: how long an allocation waits for a ranking (default 2).
- ``AGENTRT_EVICTION_MAX_CANDIDATES``: candidates per ranking, spread over agents (default 256).
- ``AGENTRT_VLLM_ALLOW_UNTESTED=1``: patch a vLLM version the plugin was not written against.
"""

from __future__ import annotations

import logging
import os

from .settings import eviction_settings

log = logging.getLogger("vllm.agentrt_vllm")


def register() -> None:
    settings = eviction_settings(log)
    if settings is None:
        return
    from .patch import install

    install(
        settings.socket_path,
        deadline_ms=settings.deadline_ms,
        max_candidates=settings.max_candidates,
        force=os.environ.get("AGENTRT_VLLM_ALLOW_UNTESTED") == "1",
    )
