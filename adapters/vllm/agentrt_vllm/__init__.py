"""agentrt's vLLM plugin: agent-aware KV-cache eviction ranked by an agentrt policy host.

Thin by design: it tags blocks with agents, reports stores/touches/removals, and moves the host's
chosen victims to the head of vLLM's free queue. The policy itself runs in the host (Wasm).
See ``plugin.py`` for configuration and ``patch.py`` for the hook points.
"""

from .patch import SUPPORTED_VERSIONS, attach, begin_step, install, stats  # noqa: F401
