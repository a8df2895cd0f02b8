"""The SGLang general-plugin entry point (``sglang.srt.plugins``: ``agentrt``).

SGLang calls ``register()`` (``sglang.srt.plugins.load_plugins``) in each of its processes, the
scheduler's included, before it builds the tree cache. Configuration is by environment, so it
reaches the scheduler process:

- ``AGENTRT_EVICTION_SOCKET``: the agentrt eviction service's Unix socket. Unset: do nothing.
- ``AGENTRT_EVICTION_DEADLINE_MS``: how long an eviction waits for a ranking (default 2).
- ``AGENTRT_EVICTION_MAX_CANDIDATES``: tree nodes offered per ranking, oldest first (default 256).
- ``AGENTRT_SGLANG_ALLOW_UNTESTED=1``: patch an SGLang version the plugin was not written against.

SGLang must also be started with ``--radix-cache-backend agentrt`` (the cache the plugin ranks).
"""

from __future__ import annotations

import logging
import os

from agentrt_vllm.settings import eviction_settings

log = logging.getLogger("sglang.agentrt_sglang")


def register() -> None:
    settings = eviction_settings(log)
    if settings is None:
        return
    from .patch import install

    install(
        settings.socket_path,
        deadline_ms=settings.deadline_ms,
        max_candidates=settings.max_candidates,
        force=os.environ.get("AGENTRT_SGLANG_ALLOW_UNTESTED") == "1",
    )
