"""OpenAI Agents SDK: run hooks that send handoffs, tool waits and the run's end.

    from agentrt_hints import AgentrtHints
    from agentrt_hints.openai_agents import AgentrtRunHooks

    hints = AgentrtHints("http://127.0.0.1:8080/v1")
    result = await Runner.run(agent, task, hooks=AgentrtRunHooks(hints, session))

- ``on_handoff`` → ``handoff`` (from the agent handing off to the one that runs next);
- ``on_tool_start`` → ``wait`` of kind ``tool``, naming the tool and the agent that called it;
- ``on_agent_end`` — the SDK calls it once per run, for the agent whose output is the run's final
  output → ``session_closed``. A session made of several runs (one agent's output fed to the next
  ``Runner.run``) gives the hooks to its last run, or ``close=False`` to the others.

Needs ``openai-agents``.
"""

from __future__ import annotations

from typing import Any, Optional

from ._framework import check_setup, name_or_none, require
from .client import AgentrtHints
from .wire import check_name, expected_ms

_agents = require("agents", "openai-agents", "agentrt_hints.openai_agents.AgentrtRunHooks")


def _name(agent: Any) -> Optional[str]:
    return name_or_none(getattr(agent, "name", None))


class AgentrtRunHooks(_agents.RunHooks):
    """`RunHooks` that tell `agentrt serve` about `session`. ``close``: send ``session_closed`` when
    the run ends. ``tool_expected_s``: per tool name, how long it usually takes (seconds), sent
    with its wait."""

    def __init__(
        self,
        hints: AgentrtHints,
        session: str,
        close: bool = True,
        tool_expected_s: Optional[dict] = None,
    ):
        super().__init__()
        self.session = check_setup(hints, session)
        self.hints = hints
        self.close = bool(close)
        # Converted now, so that a bad figure fails at setup rather than in the middle of a run.
        self.tool_expected_ms = {
            check_name("tool_expected_s key", tool): expected_ms(seconds)
            for tool, seconds in (tool_expected_s or {}).items()
        }

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        target = _name(to_agent)
        if target is None:
            return
        hint = {"type": "handoff", "session": self.session, "to_agent": target}
        source = _name(from_agent)
        if source is not None:
            hint["from_agent"] = source
        await self.hints.asend_from_hook([hint])

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        tool_name = getattr(tool, "name", None)
        if not isinstance(tool_name, str) or not tool_name:
            return
        hint = {"type": "wait", "session": self.session, "kind": "tool", "tool": tool_name}
        agent_name = _name(agent)
        if agent_name is not None:
            hint["agent"] = agent_name
        expected = self.tool_expected_ms.get(tool_name)
        if expected is not None:
            hint["expected_ms"] = expected
        await self.hints.asend_from_hook([hint])

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        if self.close:
            await self.hints.asend_from_hook([{"type": "session_closed", "session": self.session}])
