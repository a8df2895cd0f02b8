"""The eviction service's settings an engine plugin reads from its environment.

Shared by every engine's plugin (vLLM's ``agentrt_vllm``, SGLang's ``agentrt_sglang``): the
operator sets the same ``AGENTRT_EVICTION_*`` variables whichever engine runs.

- ``AGENTRT_EVICTION_SOCKET``: the agentrt eviction service's Unix socket. Unset: do nothing.
- ``AGENTRT_EVICTION_DEADLINE_MS``: how long an eviction waits for a ranking (default 2).
- ``AGENTRT_EVICTION_MAX_CANDIDATES``: candidates offered per ranking (default 256).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class EvictionSettings:
    socket_path: str
    deadline_ms: float
    max_candidates: int


def eviction_settings(log: logging.Logger) -> EvictionSettings | None:
    """``AGENTRT_EVICTION_SOCKET``, ``_DEADLINE_MS`` (default 2) and ``_MAX_CANDIDATES`` (default
    256); ``None``, logged, when the socket is unset (the plugin stays inactive) or a value does
    not parse."""
    path = os.environ.get("AGENTRT_EVICTION_SOCKET")
    if not path:
        log.debug("agentrt: AGENTRT_EVICTION_SOCKET unset; plugin inactive")
        return None
    try:
        deadline_ms = float(os.environ.get("AGENTRT_EVICTION_DEADLINE_MS", "2"))
        max_candidates = int(os.environ.get("AGENTRT_EVICTION_MAX_CANDIDATES", "256"))
    except ValueError as e:
        log.error("agentrt: bad AGENTRT_EVICTION_* setting (%s); plugin inactive", e)
        return None
    return EvictionSettings(path, deadline_ms, max_candidates)
