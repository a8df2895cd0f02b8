"""agentrt's SGLang plugin: the radix cache's eviction ranked by an agentrt policy host.

Thin by design, like the vLLM plugin whose wire and client it shares: it tags tree nodes with
agents, reports stores/touches/removals, and evicts the host's chosen nodes. The policy itself
runs in the host (Wasm). See ``plugin.py`` for configuration and ``patch.py`` for the hook points.
"""

from .patch import BACKEND, SUPPORTED_VERSIONS, attach, install, serving, stats  # noqa: F401
