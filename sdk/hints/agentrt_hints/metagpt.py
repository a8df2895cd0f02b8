"""MetaGPT: name the session and the agents on a team's model calls, say which role acts next, and
close the session when the team's run ends.

    from agentrt_hints import AgentrtHints
    from agentrt_hints.metagpt import hint_team

    team = Team()
    team.hire([ProductManager(), Architect(), Engineer()])
    hint_team(team, hints, session)
    await team.run(n_round=5, idea=idea)

MetaGPT's model client takes no extra headers from its configuration, so the hook sets them: at
the start of each run, every hired role's OpenAI-compatible client sends ``x-session-id`` (the
session) and ``x-agent-id`` (the role's name) — the names the hints use. Then:

- a role publishes a message (its action's result; the run's idea first): each other role that
  watches that action and receives the message acts next — ``handoff`` from the publisher (none
  for the idea) to it;
- ``team.run`` returns (its rounds are spent or every role is idle, after the last model call):
  ``session_closed``.

A run that fails sends no close (MetaGPT logs the error, saves the team to be recovered and
returns nothing); a team run again continues the session, which its next request reopens. Roles whose model is not OpenAI-compatible keep their client as
it is (their requests then name neither; the hints still go).

Needs ``metagpt`` (0.8; the team, roles and OpenAI provider).
"""

from __future__ import annotations

import functools
from typing import Any

from ._framework import check_setup, name_or_none, require
from .client import AgentrtHints
from .wire import SESSION_HEADER, headers_for

_common = require("metagpt.utils.common", "metagpt", "agentrt_hints.metagpt")

AGENT_HEADER = "x-agent-id"
# Marks a team already hooked, so that a second call does not double its hints.
_HOOKED = "_agentrt_hints_session"


def hint_team(team: Any, hints: AgentrtHints, session: str) -> Any:
    """Hook `team` (a ``metagpt.team.Team``) to `session`: its runs name the session and agents on
    their model calls, say each handoff, and close the session at the end; returns `team`."""
    session = check_setup(hints, session)
    env = getattr(team, "env", None)
    if not callable(getattr(team, "run", None)) or not callable(getattr(env, "publish_message", None)):
        raise ValueError(f"team: expected a metagpt Team (with run and env), got {type(team).__name__}")
    if team.__dict__.get(_HOOKED) is not None:
        raise ValueError(f"team: already hooked to session {team.__dict__[_HOOKED]!r}")
    run, publish = team.run, env.publish_message

    @functools.wraps(run)
    async def hinted_run(*args: Any, **kwargs: Any) -> Any:
        _name_requests(env, session)
        history = await run(*args, **kwargs)
        # A run that fails returns nothing: MetaGPT logged the error and saved the team, to be
        # recovered later. Only a run that ended closes the session.
        if history is not None:
            await hints.asend([{"type": "session_closed", "session": session}])
        return history

    @functools.wraps(publish)
    def hinted_publish(message: Any, *args: Any, **kwargs: Any) -> Any:
        published = publish(message, *args, **kwargs)
        handoffs = _handoffs(session, message, env)
        if handoffs:
            hints.send(handoffs)
        return published

    # Instance attributes, past pydantic's field check: a team's `run` and its environment's
    # `publish_message` (which the roles call through the environment) now go through the hook.
    object.__setattr__(team, "run", hinted_run)
    object.__setattr__(env, "publish_message", hinted_publish)
    object.__setattr__(team, _HOOKED, session)
    return team


def _name_requests(env: Any, session: str) -> None:
    """Every role's OpenAI-compatible client names the session and the role."""
    for role in env.roles.values():
        llm = getattr(role, "llm", None)
        client = getattr(llm, "aclient", None)
        name = name_or_none(getattr(role, "name", None))
        if client is None or not callable(getattr(client, "with_options", None)):
            continue
        headers = headers_for(session)
        if name is not None:
            headers[AGENT_HEADER] = name
        if getattr(client, "default_headers", {}).get(SESSION_HEADER) != session:
            llm.aclient = client.with_options(default_headers=headers)


def _handoffs(session: str, message: Any, env: Any) -> list:
    """A handoff to each role that acts on `message` — it receives it and watches the action it
    came from — from the role that published it (when a role did)."""
    publisher = next((r for r, addresses in env.member_addrs.items() if message.sent_from in addresses), None)
    from_agent = name_or_none(getattr(publisher, "name", None))
    handoffs = []
    for role, addresses in env.member_addrs.items():
        to_agent = name_or_none(getattr(role, "name", None))
        acts = _common.is_send_to(message, addresses) and message.cause_by in role.rc.watch
        if not acts or role is publisher or to_agent is None:
            continue
        hint = {"type": "handoff", "session": session, "to_agent": to_agent}
        if from_agent is not None:
            hint["from_agent"] = from_agent
        handoffs.append(hint)
    return handoffs
