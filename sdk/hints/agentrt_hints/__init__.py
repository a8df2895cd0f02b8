"""Session lifecycle hints from agent frameworks to `agentrt serve`.

A framework knows what a KV cache cannot: that a session is over, that an agent waits for a tool
or a user, which agent runs next. `AgentrtHints` tells the proxy (POST /v1/agentrt/hints), and
`headers_for` names a request's session and carries the hints a request can carry. One hook per
framework sends them with one line of setup; each imports its framework only when imported:

- LangGraph / LangChain: ``from agentrt_hints.langgraph import AgentrtCallback``
- OpenAI Agents SDK: ``from agentrt_hints.openai_agents import AgentrtRunHooks``
- AutoGen AgentChat: ``from agentrt_hints.autogen import close_on_termination, run_and_close``
- CrewAI: ``from agentrt_hints.crewai import hint_crew``
- MetaGPT: ``from agentrt_hints.metagpt import hint_team``
"""

from __future__ import annotations

import importlib
from typing import Any

from .client import AgentrtHints, endpoint_url
from .wire import headers_for

__all__ = [
    "AgentrtHints",
    "headers_for",
    "endpoint_url",
    "AgentrtCallback",
    "AgentrtRunHooks",
    "close_on_termination",
    "run_and_close",
    "hint_crew",
    "hint_team",
]
__version__ = "0.1.0"

# The hooks, importable from the package root too; resolved on first use, so that importing
# agentrt_hints never imports a framework.
_HOOKS = {
    "AgentrtCallback": "langgraph",
    "AgentrtRunHooks": "openai_agents",
    "close_on_termination": "autogen",
    "run_and_close": "autogen",
    "hint_crew": "crewai",
    "hint_team": "metagpt",
}


def __getattr__(name: str) -> Any:
    module = _HOOKS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrt_hints' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
