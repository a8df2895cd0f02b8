"""AgentrtCallback in real LangGraph runs: StateGraphs whose nodes call a real ChatOpenAI aimed at
the stand-in for `agentrt serve` (tests/standin.py), which also takes the hints."""

from __future__ import annotations

import asyncio
from typing import TypedDict

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed here: its venv is adapters/vllm/setup-venv.sh's")
pytest.importorskip("langchain_openai", reason="langchain-openai is not installed here: run adapters/vllm/setup-venv.sh")

from langchain_core.messages import HumanMessage, SystemMessage  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from agentrt_hints import AgentrtHints, headers_for  # noqa: E402
from agentrt_hints.langgraph import AgentrtCallback  # noqa: E402


class State(TypedDict, total=False):
    task: str
    plan: str
    patch: str
    approved: str


def build(base_url: str, session: str, ask_user: bool = False, checkpointer=None):
    """planner → coder (→ a human approval when `ask_user`) → END; each node one chat call."""
    llm = ChatOpenAI(model="stand-in", base_url=base_url, api_key="k", max_retries=0, default_headers=headers_for(session))

    def plan(state: State) -> State:
        return {"plan": llm.invoke([SystemMessage("You plan."), HumanMessage(state["task"])]).content}

    def code(state: State) -> State:
        return {"patch": llm.invoke([SystemMessage("You code."), HumanMessage(state["task"]), HumanMessage(state["plan"])]).content}

    def approve(state: State) -> State:
        return {"approved": interrupt("approve the patch?")}

    graph = StateGraph(State)
    graph.add_node("planner", plan)
    graph.add_node("coder", code)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "coder")
    if ask_user:
        graph.add_node("approve", approve)
        graph.add_edge("coder", "approve")
        graph.add_edge("approve", END)
    else:
        graph.add_edge("coder", END)
    return graph.compile(checkpointer=checkpointer)


def test_the_session_is_closed_exactly_once_after_the_graphs_last_model_call(agentrt):
    hints = AgentrtHints(agentrt.root + "/v1")
    graph = build(agentrt.root + "/v1", "run-1")
    result = graph.invoke({"task": "add a flag"}, config={"callbacks": [AgentrtCallback(hints, "run-1")]})
    assert result["patch"] == "ok"
    # Two model calls (planner, coder), both naming the session, then one close and nothing else.
    assert agentrt.kinds() == ["chat", "chat", "hints"]
    assert [headers["x-session-id"] for headers, _ in agentrt.chats()] == ["run-1", "run-1"]
    assert agentrt.hints() == [{"type": "session_closed", "session": "run-1"}]


def test_each_run_closes_its_own_session(agentrt):
    hints = AgentrtHints(agentrt.root + "/v1")
    for session in ("run-a", "run-b"):
        build(agentrt.root + "/v1", session).invoke({"task": session}, config={"callbacks": [AgentrtCallback(hints, session)]})
    assert agentrt.hints() == [
        {"type": "session_closed", "session": "run-a"},
        {"type": "session_closed", "session": "run-b"},
    ]
    assert agentrt.kinds() == ["chat", "chat", "hints"] * 2


def test_an_async_streamed_run_closes_once_too(agentrt):
    hints = AgentrtHints(agentrt.root)
    graph = build(agentrt.root + "/v1", "run-async")

    async def run() -> list:
        config = {"callbacks": [AgentrtCallback(hints, "run-async")]}
        return [chunk async for chunk in graph.astream({"task": "t"}, config=config)]

    chunks = asyncio.run(run())
    assert len(chunks) == 2  # one update per node
    agentrt.wait_for_hints(1)
    assert agentrt.kinds() == ["chat", "chat", "hints"]
    assert agentrt.hints() == [{"type": "session_closed", "session": "run-async"}]


def test_a_graph_invoked_inside_another_chain_is_closed_when_the_graph_ends(agentrt):
    # The callback is given to the graph only, inside an outer chain that does not have it: the
    # graph's run has a parent, yet it is the outermost run this callback sees.
    hints = AgentrtHints(agentrt.root)
    graph = build(agentrt.root + "/v1", "run-nested")
    callback = AgentrtCallback(hints, "run-nested")
    outer = RunnableLambda(lambda task: graph.invoke({"task": task}, config={"callbacks": [callback]})["patch"])
    assert outer.invoke("t") == "ok"
    assert agentrt.hints() == [{"type": "session_closed", "session": "run-nested"}]


def test_an_interrupted_run_waits_for_its_user_and_the_resumed_run_closes(agentrt):
    hints = AgentrtHints(agentrt.root)
    graph = build(agentrt.root + "/v1", "run-h", ask_user=True, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "run-h"}, "callbacks": [AgentrtCallback(hints, "run-h", agent="approver")]}
    first = graph.invoke({"task": "t"}, config=config)
    assert "__interrupt__" in first
    assert agentrt.hints() == [{"type": "wait", "session": "run-h", "kind": "user", "agent": "approver"}]
    resumed = graph.invoke(Command(resume="yes"), config=config)
    assert resumed["approved"] == "yes"
    assert agentrt.hints()[1:] == [{"type": "session_closed", "session": "run-h"}]
    assert agentrt.kinds() == ["chat", "chat", "hints", "hints"]  # resuming asks the model nothing


def test_a_failed_run_is_not_closed(agentrt):
    hints = AgentrtHints(agentrt.root)
    graph = build("http://127.0.0.1:9/v1", "run-f")  # nothing listens there: the planner's call fails
    with pytest.raises(Exception):
        graph.invoke({"task": "t"}, config={"callbacks": [AgentrtCallback(hints, "run-f")]})
    assert agentrt.hint_calls() == []


def test_a_bad_session_fails_at_setup_not_inside_the_graph(agentrt):
    with pytest.raises(ValueError, match="session: 257 bytes"):
        AgentrtCallback(AgentrtHints(agentrt.root), "x" * 257)
    with pytest.raises(ValueError, match="expected an AgentrtHints"):
        AgentrtCallback(agentrt.root, "s")
