"""AutoGen AgentChat: close the session when a team's run terminates.

    from agentrt_hints import AgentrtHints
    from agentrt_hints.autogen import close_on_termination

    hints = AgentrtHints("http://127.0.0.1:8080/v1")
    team = close_on_termination(RoundRobinGroupChat([...], termination_condition=...), hints, session)
    result = await team.run(task=task)          # or team.run_stream(task=task)

A team's run ends when its termination condition fires (or ``max_turns`` is reached): the run
yields its ``TaskResult`` last, and the hook sends ``session_closed`` just before handing it on —
after the run's last model call, and whether the caller uses ``run`` or ``run_stream`` (``run``
consumes ``run_stream``). A run that fails or is cancelled sends nothing (it may be retried). A
team run again later continues the same conversation: its next request reopens the session, and
its end closes it again.

``await run_and_close(team, hints, session, task=...)`` does the same for one call without
touching the team.

Needs ``autogen-agentchat``.
"""

from __future__ import annotations

import functools
from typing import Any

from ._framework import check_setup, require
from .client import AgentrtHints

_base = require("autogen_agentchat.base", "autogen-agentchat", "agentrt_hints.autogen")

# Marks a team whose run_stream is already wrapped, so that a second call does not close twice.
_WRAPPED = "_agentrt_hints_session"


def close_on_termination(team: Any, hints: AgentrtHints, session: str) -> Any:
    """Make every run of `team` close `session` when it terminates; returns `team`."""
    session = check_setup(hints, session)
    if not callable(getattr(team, "run_stream", None)):
        raise ValueError(f"team: expected an AgentChat team (with run_stream), got {type(team).__name__}")
    if getattr(team, _WRAPPED, None) is not None:
        raise ValueError(f"team: already closes session {getattr(team, _WRAPPED)!r} on termination")
    run_stream = team.run_stream

    @functools.wraps(run_stream)
    async def closing_run_stream(*args: Any, **kwargs: Any) -> Any:
        async for item in run_stream(*args, **kwargs):
            if isinstance(item, _base.TaskResult):
                # Before yielding: a caller of run_stream may stop iterating at the result.
                await hints.asend([{"type": "session_closed", "session": session}])
            yield item

    # An instance attribute shadows the class's method: the team's own run() calls
    # self.run_stream(), so both paths go through the wrapper.
    team.run_stream = closing_run_stream
    setattr(team, _WRAPPED, session)
    return team


async def run_and_close(team: Any, hints: AgentrtHints, session: str, **run_kwargs: Any) -> Any:
    """``await team.run(**run_kwargs)``, then close `session`; returns the run's `TaskResult`."""
    session = check_setup(hints, session)
    result = await team.run(**run_kwargs)
    await hints.asend([{"type": "session_closed", "session": session}])
    return result
