"""CrewAI: say which agent runs next as a crew's tasks hand over, and close the session when its
kickoff completes.

    from agentrt_hints import AgentrtHints, headers_for
    from agentrt_hints.crewai import hint_crew

    llm = LLM(model="openai/MODEL", base_url="http://127.0.0.1:8080/v1", api_key=KEY,
              default_headers=headers_for(session))
    crew = hint_crew(Crew(agents=[...], tasks=[...]), hints, session)
    crew.kickoff(inputs=...)                    # or kickoff_async / akickoff

The crew's requests name the session with ``headers_for(session)`` on its ``LLM``, as above;
handoffs name the agents by their ``role`` (give each agent an ``LLM`` whose headers add
``x-agent-id: ROLE`` for the proxy to tie them to the agents' calls).

The hook listens on CrewAI's event bus for this crew's events only:

- a task completes and the crew is sequential: the next task's agent runs next — ``handoff`` from
  this task's agent to it (nothing when the same agent goes on, or after the last task);
- the kickoff completes (``CrewKickoffCompletedEvent``, after the crew's last model call):
  ``session_closed``.

A kickoff that fails sends nothing (it may be retried); a crew kicked off again continues the
session, which its next request reopens. CrewAI runs sync listeners on a thread of its own, so a
hint reaches the proxy shortly after the event, not before the kickoff returns
(``crewai.events.crewai_event_bus.flush()`` waits for it). The listeners go when the crew does.

Needs ``crewai``.
"""

from __future__ import annotations

import weakref
from typing import Any

from ._framework import check_setup, name_or_none, require
from .client import AgentrtHints

_events = require("crewai.events", "crewai", "agentrt_hints.crewai")

# Marks a crew whose events are already listened to, so that a second call does not double.
_HOOKED = "_agentrt_hints_session"


def hint_crew(crew: Any, hints: AgentrtHints, session: str) -> Any:
    """Make every kickoff of `crew` (a ``crewai.Crew``) tell the proxy its handoffs and close
    `session` when it completes; returns `crew`."""
    session = check_setup(hints, session)
    if not isinstance(getattr(crew, "tasks", None), list) or not callable(getattr(crew, "kickoff", None)):
        raise ValueError(f"crew: expected a crewai.Crew, got {type(crew).__name__}")
    if crew.__dict__.get(_HOOKED) is not None:
        raise ValueError(f"crew: already hooked to session {crew.__dict__[_HOOKED]!r}")
    this = weakref.ref(crew)

    def task_completed(source: Any, event: Any) -> None:
        crew = this()
        if crew is None or not _sequential(crew):
            return
        tasks = crew.tasks
        at = next((i for i, task in enumerate(tasks) if task is source), None)
        if at is None or at + 1 >= len(tasks):
            return
        from_agent, to_agent = _role(tasks[at]), _role(tasks[at + 1])
        if to_agent is not None and to_agent != from_agent:
            hint = {"type": "handoff", "session": session, "to_agent": to_agent}
            if from_agent is not None:
                hint["from_agent"] = from_agent
            hints.send([hint])

    def kickoff_completed(source: Any, event: Any) -> None:
        if source is this():
            hints.send([{"type": "session_closed", "session": session}])

    bus = _events.crewai_event_bus
    listeners = [(_events.TaskCompletedEvent, task_completed), (_events.CrewKickoffCompletedEvent, kickoff_completed)]
    for event_type, handler in listeners:
        bus.on(event_type)(handler)
    weakref.finalize(crew, _unlisten, bus, listeners)
    # A plain attribute of the instance, past pydantic's field check: not a field of the crew.
    object.__setattr__(crew, _HOOKED, session)
    return crew


def _sequential(crew: Any) -> bool:
    return str(getattr(crew.process, "value", crew.process)) == "sequential"


def _role(task: Any) -> Any:
    """The role of the task's agent, as the proxy takes a name (else None)."""
    return name_or_none(getattr(getattr(task, "agent", None), "role", None))


def _unlisten(bus: Any, listeners: list) -> None:
    for event_type, handler in listeners:
        bus.off(event_type, handler)
