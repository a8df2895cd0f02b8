"""The examples' `--hints` flag (examples/langgraph, openai-agents, autogen), each run as a program
in the venv that has its framework, against the stand-in for `agentrt serve` (tests/standin.py):
off, they send what they always sent (no hint, no session header); on, each task is one named
session, closed once after its last model call."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

CASES = [
    # example, the module its framework needs, extra args, model calls per task
    ("langgraph/graph.py", "langgraph.graph", (), 3),
    ("openai-agents/research.py", "agents", ("--api", "chat"), 2),
    ("autogen/team.py", "autogen_agentchat", ("--turns", "2"), 2),
]


def run_example(agentrt, example: str, module: str, args: tuple, hints: bool) -> None:
    if importlib.util.find_spec(module.split(".")[0]) is None:
        pytest.skip(f"{module} is not installed here: {example} runs in another venv")
    command = [sys.executable, str(EXAMPLES / example), "--base-url", agentrt.root + "/v1", "--tasks", "2", *args]
    done = subprocess.run(command + (["--hints"] if hints else []), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("example, module, args, calls", CASES)
def test_without_hints_an_example_sends_what_it_always_sent(agentrt, example, module, args, calls):
    run_example(agentrt, example, module, args, hints=False)
    assert agentrt.kinds() == ["chat"] * calls * 2
    assert all("x-session-id" not in headers for headers, _ in agentrt.chats())


@pytest.mark.parametrize("example, module, args, calls", CASES)
def test_with_hints_each_task_is_a_session_closed_after_its_last_call(agentrt, example, module, args, calls):
    run_example(agentrt, example, module, args, hints=True)
    assert agentrt.kinds() == (["chat"] * calls + ["hints"]) * 2
    sessions = [headers["x-session-id"] for headers, _ in agentrt.chats()]
    first, second = sessions[0], sessions[calls]
    assert first != second and sessions == [first] * calls + [second] * calls
    assert agentrt.hints() == [{"type": "session_closed", "session": s} for s in (first, second)]
