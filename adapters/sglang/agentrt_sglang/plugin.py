"""The SGLang general-plugin entry point (``sglang.srt.plugins``: ``agentrt``).

SGLang calls ``register()`` (``sglang.srt.plugins.load_plugins``) in each of its processes, the
scheduler's included, before it builds the tree cache. Configuration is by environment, so it
reaches the scheduler process: the ``AGENTRT_EVICTION_*`` settings every engine's plugin reads
(``agentrt_engine.settings``; SGLang offers ``AGENTRT_EVICTION_MAX_CANDIDATES`` tree nodes per
ranking, oldest first), and ``AGENTRT_SGLANG_ALLOW_UNTESTED=1`` to patch an SGLang version the
plugin was not written against.

SGLang must also be started with ``--radix-cache-backend agentrt`` (the cache the plugin ranks).
"""

from __future__ import annotations

import logging

from agentrt_engine.plugin import Install, start_plugin

log = logging.getLogger("sglang.agentrt_sglang")

ALLOW_UNTESTED = "AGENTRT_SGLANG_ALLOW_UNTESTED"


def register() -> None:
    start_plugin(log, ALLOW_UNTESTED, _install)


def _install(_allowed: bool) -> Install:
    """SGLang's patch; its install checks SGLang's version itself (``force``: the operator allowed
    an untested one)."""
    from .patch import install

    return install
