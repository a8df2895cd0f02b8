"""AgentrtRunHooks in real OpenAI Agents SDK runs (Runner.run), against the stand-in for `agentrt
serve` (tests/standin.py). The model is the SDK's own test double (agents.testing.ScriptedModel,
a `Model` the Agent takes in place of a provider's) where the run needs a handoff and a tool call,
and the SDK's real chat-completions model aimed at the stand-in where it needs none."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents", reason="openai-agents is not installed here: its venv is examples/setup-venv.sh's")

from agents import (  # noqa: E402
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
    handoff,
    set_tracing_disabled,
)
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from agentrt_hints import AgentrtHints, headers_for  # noqa: E402
from agentrt_hints.openai_agents import AgentrtRunHooks  # noqa: E402

set_tracing_disabled(True)  # the SDK would otherwise try to upload traces


def triage_and_coder(agentrt, tool_calls: list):
    """A triage agent that hands off to a coder, which runs `run_tests` once, then answers."""

    @function_tool
    def run_tests(path: str) -> str:
        """Run the tests under `path`."""
        # What the stand-in had heard when the tool started: the wait must come first.
        tool_calls.append(list(agentrt.hints()))
        return f"3 passed in {path}"

    coder = Agent(
        name="coder",
        instructions="You write and test code.",
        tools=[run_tests],
        model=ScriptedModel([[function_call("run_tests", {"path": "tests/"}, call_id="t1")], [assistant_message("done")]]),
    )
    triage = Agent(
        name="triage",
        instructions="You route the task.",
        handoffs=[handoff(coder)],
        model=ScriptedModel([[function_call("transfer_to_coder", {}, call_id="h1")]]),
    )
    return triage, coder


def test_a_run_with_a_handoff_and_a_tool_sends_handoff_wait_and_close(agentrt):
    hints = AgentrtHints(agentrt.root + "/v1")
    tool_calls: list = []
    triage, _ = triage_and_coder(agentrt, tool_calls)
    result = asyncio.run(Runner.run(triage, "fix the flaky test", hooks=AgentrtRunHooks(hints, "run-1")))
    assert result.final_output == "done"
    assert result.last_agent.name == "coder"
    assert agentrt.hints() == [
        {"type": "handoff", "session": "run-1", "from_agent": "triage", "to_agent": "coder"},
        {"type": "wait", "session": "run-1", "kind": "tool", "tool": "run_tests", "agent": "coder"},
        {"type": "session_closed", "session": "run-1"},
    ]
    # The wait reached the proxy before the tool ran, after the handoff.
    assert tool_calls == [agentrt.hints()[:2]]


def test_a_tools_expected_duration_travels_with_its_wait(agentrt):
    hints = AgentrtHints(agentrt.root)
    triage, _ = triage_and_coder(agentrt, [])
    hooks = AgentrtRunHooks(hints, "run-2", tool_expected_s={"run_tests": 1.5})
    asyncio.run(Runner.run(triage, "t", hooks=hooks))
    assert agentrt.hints()[1] == {
        "type": "wait", "session": "run-2", "kind": "tool", "tool": "run_tests", "agent": "coder", "expected_ms": 1500,
    }


def test_close_false_leaves_the_session_open_for_the_next_run(agentrt):
    hints = AgentrtHints(agentrt.root)
    triage, _ = triage_and_coder(agentrt, [])
    asyncio.run(Runner.run(triage, "t", hooks=AgentrtRunHooks(hints, "run-3", close=False)))
    assert [h["type"] for h in agentrt.hints()] == ["handoff", "wait"]


def test_a_run_through_the_sdks_chat_model_names_its_session_and_closes_it_after_its_last_call(agentrt):
    # The SDK's real OpenAIChatCompletionsModel over HTTP: the session travels on every request
    # (headers_for, per run through RunConfig), and the close follows the run's last model call.
    client = AsyncOpenAI(base_url=agentrt.root + "/v1", api_key="k", max_retries=0)
    writer = Agent(name="writer", instructions="You write.", model=OpenAIChatCompletionsModel("stand-in", client))
    hints = AgentrtHints(agentrt.root + "/v1")
    run_config = RunConfig(model_settings=ModelSettings(extra_headers=headers_for("run-4")))
    result = asyncio.run(Runner.run(writer, "say ok", hooks=AgentrtRunHooks(hints, "run-4"), run_config=run_config))
    assert result.final_output == "ok"
    assert agentrt.kinds() == ["chat", "hints"]
    assert agentrt.chats()[0][0]["x-session-id"] == "run-4"
    assert agentrt.hints() == [{"type": "session_closed", "session": "run-4"}]


def test_an_agent_name_the_proxy_would_refuse_is_left_out_not_raised_into_the_run(agentrt):
    @function_tool
    def grep(pattern: str) -> str:
        """Search the code."""
        return "no match"

    long_name = "a" * 300  # the SDK allows it; the proxy takes agent names of at most 256 bytes
    script = [[function_call("grep", {"pattern": "x"}, call_id="g1")], [assistant_message("fine")]]
    agent = Agent(name=long_name, instructions="i", tools=[grep], model=ScriptedModel(script))
    result = asyncio.run(Runner.run(agent, "t", hooks=AgentrtRunHooks(AgentrtHints(agentrt.root), "run-5")))
    assert result.final_output == "fine"
    # The tool wait goes without the agent's name; the run neither fails nor loses the hint.
    assert agentrt.hints() == [
        {"type": "wait", "session": "run-5", "kind": "tool", "tool": "grep"},
        {"type": "session_closed", "session": "run-5"},
    ]


def test_bad_setup_fails_at_once(agentrt):
    with pytest.raises(ValueError, match="session: must not be empty"):
        AgentrtRunHooks(AgentrtHints(agentrt.root), "")
    with pytest.raises(ValueError, match="expected_s: -2 is outside"):
        AgentrtRunHooks(AgentrtHints(agentrt.root), "s", tool_expected_s={"t": -2})
