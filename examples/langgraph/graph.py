#!/usr/bin/env python3
"""A three-agent LangGraph workflow — planner → coder → reviewer — talking to `agentrt serve`.

Each node is a plain ``ChatOpenAI`` with its own system prompt. The only agentrt-specific thing is
``base_url``: it points at `agentrt serve` instead of the model server. No headers, no agent ids,
no session ids: the proxy names each agent by its anchor (system prompt + tools) and each run of
the graph by its task (the first user message, which every node sends first).

    python examples/langgraph/graph.py --base-url http://127.0.0.1:8080/v1 --tasks 3 [--stream]

With ``--stream`` every node streams its answer (``ChatOpenAI(streaming=True)``), as most agent
frameworks call a model; LangChain then asks for no usage (it does only against OpenAI's own
URL), and the proxy still counts each call's prompt and cached tokens.

With ``--hints`` each run of the graph is a named session (``x-session-id``) and the agentrt hint
package's LangChain callback closes it when the graph reaches END (sdk/hints/README.md): the
proxy's policy then knows which sessions' cached context will not be asked for again. Off by
default, so that a run with and a run without hints can be compared.

Needs ``langgraph`` and ``langchain-openai`` (adapters/vllm/setup-venv.sh installs them into
.venv-vllm).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path
from typing import TypedDict

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

PLANNER = (
    "You are the planner of a small software team. Turn the user's task into a short numbered plan: "
    "for each step the files to change and the test that proves it. Do not write code."
)
CODER = (
    "You are the coder of a small software team. Implement the plan you are given as a minimal patch in "
    "unified diff format, in the style of the existing code. End with the list of files you touched."
)
REVIEWER = (
    "You are the reviewer of a small software team. Read the task, the plan and the patch. Answer APPROVE "
    "or REQUEST CHANGES, then list concrete problems: bugs, missing tests, unclear names."
)


class TaskState(TypedDict, total=False):
    task: str
    plan: str
    patch: str
    review: str


def build_graph(base_url: str, model: str = "tiny", api_key: str = "not-needed", max_tokens: int = 16,
                stream: bool = False, headers: dict | None = None):
    """The compiled graph. Every node is a ChatOpenAI aimed at ``base_url`` (the proxy), streaming
    its answers when ``stream``, sending ``headers`` with every request."""

    def llm() -> ChatOpenAI:
        return ChatOpenAI(model=model, base_url=base_url, api_key=api_key, max_tokens=max_tokens, temperature=0,
                          max_retries=0, streaming=stream, default_headers=headers)

    planner, coder, reviewer = llm(), llm(), llm()

    def plan(state: TaskState) -> TaskState:
        answer = planner.invoke([SystemMessage(PLANNER), HumanMessage(state["task"])])
        return {"plan": answer.content}

    def code(state: TaskState) -> TaskState:
        answer = coder.invoke([SystemMessage(CODER), HumanMessage(state["task"]),
                               HumanMessage(f"The plan:\n{state['plan']}")])
        return {"patch": answer.content}

    def review(state: TaskState) -> TaskState:
        answer = reviewer.invoke([SystemMessage(REVIEWER), HumanMessage(state["task"]),
                                  HumanMessage(f"The plan:\n{state['plan']}\n\nThe patch:\n{state['patch']}")])
        return {"review": answer.content}

    graph = StateGraph(TaskState)
    graph.add_node("planner", plan)
    graph.add_node("coder", code)
    graph.add_node("reviewer", review)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "coder")
    graph.add_edge("coder", "reviewer")
    graph.add_edge("reviewer", END)
    return graph.compile()


def agentrt_hints():
    """The hint package: installed (`pip install sdk/hints`), else this checkout's."""
    checkout = str(Path(__file__).resolve().parents[2] / "sdk" / "hints")
    if checkout not in sys.path:
        sys.path.append(checkout)
    import agentrt_hints

    return agentrt_hints


TASKS = [
    "Add a --dry-run flag to the export command that prints what would be written without writing it.",
    "The invoice report times out for accounts with more than 10,000 rows; page the query.",
    "Retry the webhook sender three times with exponential backoff before giving up.",
    "Make the login handler reject passwords longer than 1024 bytes with a clear error.",
    "Cache the parsed configuration file and reload it when the file changes.",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8080/v1", help="agentrt serve's /v1 URL")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--tasks", type=int, default=3, help=f"how many tasks to run (at most {len(TASKS)})")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--stream", action="store_true", help="stream every answer, as most frameworks do")
    parser.add_argument("--hints", action="store_true",
                        help="name each run's session and close it at the graph's end (sdk/hints)")
    args = parser.parse_args(argv)
    graph = build_graph(args.base_url, args.model, max_tokens=args.max_tokens, stream=args.stream)
    hints = agentrt_hints().AgentrtHints(args.base_url) if args.hints else None
    for task in TASKS[: args.tasks]:
        config = None
        if hints is not None:
            session = f"langgraph-{uuid.uuid4().hex[:12]}"
            graph = build_graph(args.base_url, args.model, max_tokens=args.max_tokens, stream=args.stream,
                                headers=agentrt_hints().headers_for(session))
            config = {"callbacks": [agentrt_hints().AgentrtCallback(hints, session)]}  # the one line of setup
        result = graph.invoke({"task": task}, config=config)
        print(f"TASK    {task}\nPLAN    {result['plan']!r}\nPATCH   {result['patch']!r}\nREVIEW  {result['review']!r}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
