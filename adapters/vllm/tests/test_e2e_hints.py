"""End to end: what a framework's session closings are worth to CacheSage on a real vLLM.

The same LangGraph workload runs twice through ``agentrt serve`` (CacheSage) in front of a real
vLLM (CPU, the tiny model, an 80-block cache), each run on a fresh vLLM and a fresh proxy: once
as the framework runs today (the proxy names each graph run's session by its task and ends it
after ``serve``'s default 60 s of silence), once with the agentrt hint package's one line of setup
(each run a named session, closed by ``AgentrtCallback`` when the graph reaches END).

The workload, fixed before any run and not tuned: LangGraph's chat loop (``MessagesState``, one
``ChatOpenAI`` node that revises its answer on feedback until it has answered ``TURNS`` times, a
conditional edge back to itself), 12 tasks (examples/langgraph's five, cycled, each with its own
150-word context), four graph runs in flight at a time (threads), every call streaming 8 tokens;
the runs in flight take turns calling the model in a fixed rotation, so that both passes send
the same requests in the same order (free-running threads interleave by timing, and two cold
passes of the same prompts then differed by ten points of hit rate).
Each call resends the run's whole conversation, so a run's blocks are asked for again while it
lasts and never once it is over — which only the framework knows. (examples/langgraph's
planner → coder → reviewer graph reuses nothing but its system prompts between calls: each node's
prompt starts with its own, so closings could not matter there.)

Judged by the user requests' prompt-cache hit rate as the proxy counts it
(``agentrt_tenant_cached_tokens_total / agentrt_tenant_prompt_tokens_total``: vLLM's
``cached_tokens`` of each call; CacheSage's warm-ups are not user requests).

Asserted: every run's closing reaches the policy once (`applied` at `/metrics`), nothing
fails, and the user requests hit the prefix cache more often with the closings than without
(measured on this machine: 0.532 against 0.407–0.423, docs/results-vllm.md).

Slow (two vLLM starts): AGENTRT_SKIP_VLLM_SERVE=1 skips it. AGENTRT_E2E_RESULTS=path.md also
writes the table (docs/results-vllm.md, "Session closings from LangGraph").
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from conftest import SKIP_SERVE_REASON
from test_e2e_serve import _words, load_langgraph_example, series

pytestmark = pytest.mark.skipif(os.environ.get("AGENTRT_SKIP_VLLM_SERVE") == "1", reason=SKIP_SERVE_REASON)

TASKS = 12
TURNS = 4
IN_FLIGHT = 4
CONTEXT_WORDS = 150
SEED = 5
SYSTEM = ("You are a careful software engineer. Answer the task with a minimal patch in unified diff format, "
          "then revise it whenever the reviewer gives feedback.")
FEEDBACK = "Review: tighten the error handling, name the test that proves it, and keep the diff minimal."


def _tasks(example) -> list[str]:
    rng = random.Random(SEED)
    return [f"{example.TASKS[i % len(example.TASKS)]} Context: {_words(rng, CONTEXT_WORDS)}" for i in range(TASKS)]


class Rotation:
    """The runs in flight (slots) call the model one at a time, in turn: slot 0, 1, 2, 3, 0, …;
    a slot with no task left leaves the rotation."""

    def __init__(self, slots: int) -> None:
        self.cond = threading.Condition()
        self.active = list(range(slots))
        self.next = 0

    @contextmanager
    def turn(self, slot: int):
        with self.cond:
            self.cond.wait_for(lambda: self.active[self.next] == slot)
        try:
            yield
        finally:
            with self.cond:
                self.next = (self.next + 1) % len(self.active)
                self.cond.notify_all()

    def leave(self, slot: int) -> None:
        with self.cond:
            at = self.active.index(slot)
            self.active.pop(at)
            if at < self.next:
                self.next -= 1
            if self.active:
                self.next %= len(self.active)
            self.cond.notify_all()


def build_chat_loop(base: str, turn, headers: dict | None = None):
    """LangGraph's chat loop: one ChatOpenAI node answering the whole conversation, a reviewer's
    fixed feedback appended after each answer, until the node has answered `TURNS` times; each
    call made within `turn()` (its slot's place in the rotation)."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    llm = ChatOpenAI(model="tiny", base_url=base, api_key="not-needed", max_tokens=8, temperature=0,
                     max_retries=0, streaming=True, default_headers=headers)

    # No annotations: LangGraph reads a node's state type from the graph (and this module's
    # `from __future__ import annotations` would leave it a string it cannot resolve here).
    def engineer(state):
        with turn():
            answer = llm.invoke(state["messages"])
        answers = sum(isinstance(m, AIMessage) for m in state["messages"]) + 1
        feedback = [] if answers >= TURNS else [HumanMessage(FEEDBACK)]
        return {"messages": [answer, *feedback]}

    def more(state):
        return "engineer" if isinstance(state["messages"][-1], HumanMessage) else END

    graph = StateGraph(MessagesState)
    graph.add_node("engineer", engineer)
    graph.add_edge(START, "engineer")
    graph.add_conditional_edges("engineer", more, ["engineer", END])
    return graph.compile()


def _run_graphs(example, base: str, tasks: list[str], hints: bool) -> list[str]:
    """Run every task's graph, `IN_FLIGHT` at a time (slot k runs tasks k, k + IN_FLIGHT, …), the
    slots' calls in rotation; with `hints`, each run is a named session the hint package closes at
    END. Returns the sessions named (empty without hints)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    package = example.agentrt_hints()
    client = package.AgentrtHints(base) if hints else None
    sessions: list[str] = []
    rotation = Rotation(IN_FLIGHT)

    def run(slot: int, task: str) -> None:
        start = {"messages": [SystemMessage(SYSTEM), HumanMessage(task)]}
        turn = lambda: rotation.turn(slot)  # noqa: E731
        if client is None:
            result = build_chat_loop(base, turn).invoke(start)
        else:
            session = f"langgraph-{uuid.uuid4().hex[:12]}"
            sessions.append(session)
            graph = build_chat_loop(base, turn, headers=package.headers_for(session))
            result = graph.invoke(start, config={"callbacks": [package.AgentrtCallback(client, session)]})
        assert sum(isinstance(m, AIMessage) for m in result["messages"]) == TURNS, result

    def slot_runs(slot: int) -> None:
        try:
            for task in tasks[slot::IN_FLIGHT]:
                run(slot, task)
        finally:
            rotation.leave(slot)

    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        for done in pool.map(slot_runs, range(IN_FLIGHT)):
            assert done is None
    return sessions


def test_langgraph_session_closings_raise_cachesage_hit_rate(start_stack):
    """With the hint package on, every graph run's closing reaches CacheSage (counted `applied` at
    `/metrics`), no call fails, and the user requests hit the prefix cache more often than in the
    same run without hints; both rates are printed and written to $AGENTRT_E2E_RESULTS."""
    example = load_langgraph_example()
    tasks = _tasks(example)
    rows = []
    rates = {}
    for hints in (False, True):
        stack = start_stack("cachesage")
        sessions = _run_graphs(example, stack.serve.base + "/v1", tasks, hints)
        time.sleep(0.5)  # the last finish and closing reach the counters
        proxy = stack.serve.metrics()
        text = stack.serve.metrics_text()
        prompt = proxy["agentrt_tenant_prompt_tokens_total"]
        cached = proxy["agentrt_tenant_cached_tokens_total"]
        closed = series(text, "agentrt_hints_total", 'kind="closed"')
        applied = series(text, "agentrt_hints_total", 'outcome="applied"')
        vllm = stack.vllm.metrics()
        rates[hints] = cached / prompt
        rows.append((hints, rates[hints], prompt, cached, closed, proxy["agentrt_proxy_requests_total"],
                     vllm.get("vllm:prefix_cache_hits_total", 0.0)
                     / max(1.0, vllm.get("vllm:prefix_cache_queries_total", 0.0))))
        assert proxy["agentrt_proxy_requests_total"] == TURNS * TASKS, proxy
        assert proxy["agentrt_proxy_requests_failed_total"] == 0
        assert proxy["agentrt_engine_rank_requests_total"] > 0, "the 80-block cache must evict for the policy to matter"
        if hints:
            assert len(sessions) == TASKS
            assert closed == TASKS and applied == TASKS, f"every run's closing applied once: {text}"
        else:
            assert closed == 0
        stack.stop()

    table = ("| hints | hit rate (user requests) | prompt tokens | cached tokens | closings heard | requests | "
             "hit rate (vLLM counters) |\n|---|---:|---:|---:|---:|---:|---:|\n")
    for hints, rate, prompt, cached, closed, requests, vllm_rate in rows:
        table += (f"| {'on (AgentrtCallback)' if hints else 'off'} | {rate:.3f} | {prompt:.0f} | {cached:.0f} | "
                  f"{closed:.0f} | {requests:.0f} | {vllm_rate:.3f} |\n")
    print("\n" + table)
    if path := os.environ.get("AGENTRT_E2E_RESULTS"):
        with open(path, "a", encoding="utf-8") as out:
            out.write(table + "\n")
    assert rates[True] > rates[False], f"the closings should raise CacheSage's hit rate:\n{table}"
