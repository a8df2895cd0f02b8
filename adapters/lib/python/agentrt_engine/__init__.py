"""What agentrt's engine plugins share, whichever engine they patch (vLLM's ``agentrt_vllm``,
SGLang's ``agentrt_sglang``): the eviction wire protocol (``wire``), the connection to the
eviction service (``client``), a request's agent and session from the proxy's tags
(``request_tag``), the ``AGENTRT_EVICTION_*`` settings (``settings``), which engine versions
to patch (``versions``) and the start every ``register()`` makes (``plugin``). It imports nothing of any engine.

Each plugin's wheel carries this package (its ``pyproject.toml`` maps it from
``adapters/lib/python``), so an operator installs one wheel into the engine's environment.
"""
