"""What every engine plugin's ``register()`` does, whichever engine calls it.

vLLM (``vllm.general_plugins``) and SGLang (``sglang.srt.plugins``) each call their plugin's
``register()`` in every process they start; each hands :func:`start_plugin` its logger, the name of
its ``AGENTRT_<ENGINE>_ALLOW_UNTESTED`` variable and how to load its patch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from .settings import eviction_settings

# An engine's install: (socket path, *, deadline_ms, max_candidates, force) → anything.
Install = Callable[..., object]


def start_plugin(log: logging.Logger, allow_untested: str, load: Callable[[bool], Install]) -> None:
    """Read the ``AGENTRT_EVICTION_*`` settings (:func:`eviction_settings`); with no socket set, do
    nothing. Otherwise call ``load(allowed)`` — ``allowed``: the operator set ``allow_untested`` to
    1 — which imports the engine's patch only now (an inactive plugin imports nothing of its engine)
    and may refuse an engine version the plugin was not written against, and install what it
    returns with the settings."""
    settings = eviction_settings(log)
    if settings is None:
        return
    allowed = os.environ.get(allow_untested) == "1"
    install = load(allowed)
    install(
        settings.socket_path,
        deadline_ms=settings.deadline_ms,
        max_candidates=settings.max_candidates,
        force=allowed,
    )
