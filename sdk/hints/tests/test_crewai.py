"""hint_crew in real CrewAI crews (sequential, two agents with their tasks, CrewAI's native OpenAI
client aimed at the stand-in for `agentrt serve`, tests/standin.py): each task's end hands over to
the next task's agent, the kickoff's end closes the session, in that order after the model calls.
"""

from __future__ import annotations

import asyncio
import os

import pytest

# CrewAI's telemetry and tracing would try the network: off, before it is imported.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

pytest.importorskip("crewai", reason="crewai is not installed here: its venv is sdk/hints/setup-venv.sh's")

from crewai import LLM, Agent, Crew, Process, Task  # noqa: E402
from crewai.events import crewai_event_bus  # noqa: E402

from agentrt_hints import AgentrtHints, headers_for  # noqa: E402
from agentrt_hints.crewai import hint_crew  # noqa: E402


def crew_of(base_url: str, session: str, roles=("researcher", "writer"), process=Process.sequential) -> Crew:
    """One task per role, in order, each agent with a model client naming the session and itself."""
    agents, tasks = [], []
    for role in roles:
        llm = LLM(model="openai/stand-in", base_url=base_url, api_key="k", custom_openai=True,
                  default_headers={**headers_for(session), "x-agent-id": role})
        agent = Agent(role=role, goal=f"do the {role}'s part", backstory="a test agent", llm=llm)
        agents.append(agent)
        tasks.append(Task(description=f"the {role}'s task", expected_output="a word", agent=agent))
    return Crew(agents=agents, tasks=tasks, process=process)


def kickoff(crew: Crew) -> None:
    crew.kickoff()
    # CrewAI runs listeners on a thread of its own: wait for them, as a caller that needs the
    # hints sent before it goes on would.
    assert crewai_event_bus.flush(timeout=10)


def test_a_sequential_crew_hands_over_between_its_agents_and_closes_at_the_end(agentrt):
    crew = hint_crew(crew_of(agentrt.root + "/v1", "cw-1"), AgentrtHints(agentrt.root + "/v1"), "cw-1")
    kickoff(crew)
    hints = agentrt.wait_for_hints(2)
    assert hints == [
        {"type": "handoff", "session": "cw-1", "from_agent": "researcher", "to_agent": "writer"},
        {"type": "session_closed", "session": "cw-1"},
    ]
    assert agentrt.kinds() == ["chat", "hints", "chat", "hints"], "each hint after the model call before it"
    assert [h["x-session-id"] for h, _ in agentrt.chats()] == ["cw-1", "cw-1"]
    assert [h["x-agent-id"] for h, _ in agentrt.chats()] == ["researcher", "writer"]


def test_the_same_agent_going_on_is_no_handoff_and_an_async_kickoff_closes_too(agentrt):
    crew = crew_of(agentrt.root + "/v1", "cw-2", roles=("writer",))
    crew.tasks.append(Task(description="more", expected_output="a word", agent=crew.agents[0]))
    hint_crew(crew, AgentrtHints(agentrt.root + "/v1"), "cw-2")
    asyncio.run(crew.kickoff_async())
    assert crewai_event_bus.flush(timeout=10)
    assert agentrt.wait_for_hints(1) == [{"type": "session_closed", "session": "cw-2"}]
    assert len(agentrt.chats()) == 2


def test_another_crews_kickoff_sends_nothing_for_this_one(agentrt):
    hint_crew(crew_of(agentrt.root + "/v1", "cw-3"), AgentrtHints(agentrt.root + "/v1"), "cw-3")
    kickoff(crew_of(agentrt.root + "/v1", "other"))
    assert agentrt.wait_for_hints(1, timeout=1.0) == []


def test_a_crew_kicked_off_again_closes_again(agentrt):
    crew = hint_crew(crew_of(agentrt.root + "/v1", "cw-4", roles=("writer",)), AgentrtHints(agentrt.root + "/v1"),
                     "cw-4")
    kickoff(crew)
    kickoff(crew)
    closes = [h for h in agentrt.wait_for_hints(2) if h["type"] == "session_closed"]
    assert len(closes) == 2
    assert agentrt.kinds() == ["chat", "hints", "chat", "hints"], "the second run reopened the session"


def test_bad_setup_fails_at_once(agentrt):
    crew = crew_of(agentrt.root + "/v1", "cw-5")
    with pytest.raises(ValueError, match="hints: expected an AgentrtHints"):
        hint_crew(crew, agentrt.root, "cw-5")
    with pytest.raises(ValueError, match="session: must not be empty"):
        hint_crew(crew, AgentrtHints(agentrt.root + "/v1"), "")
    with pytest.raises(ValueError, match="expected a crewai.Crew"):
        hint_crew(object(), AgentrtHints(agentrt.root + "/v1"), "cw-5")
    hint_crew(crew, AgentrtHints(agentrt.root + "/v1"), "cw-5")
    with pytest.raises(ValueError, match="already hooked to session 'cw-5'"):
        hint_crew(crew, AgentrtHints(agentrt.root + "/v1"), "cw-6")
