"""close_on_termination / run_and_close in real AutoGen AgentChat team runs (RoundRobinGroupChat
with a termination condition), against the stand-in for `agentrt serve` (tests/standin.py). The
model is AutoGen's own replay client (autogen_ext's ReplayChatCompletionClient), or its real
OpenAI client aimed at the stand-in."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("autogen_agentchat", reason="autogen-agentchat is not installed here: its venv is examples/setup-venv.sh's")
pytest.importorskip("autogen_ext.models.replay", reason="autogen-ext is not installed here: run examples/setup-venv.sh")

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.base import TaskResult  # noqa: E402
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat  # noqa: E402
from autogen_ext.models.openai import OpenAIChatCompletionClient  # noqa: E402
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402

from agentrt_hints import AgentrtHints, headers_for  # noqa: E402
from agentrt_hints.autogen import close_on_termination, run_and_close  # noqa: E402

MODEL_INFO = {"vision": False, "function_calling": False, "json_output": False, "family": "unknown",
              "structured_output": False}


def replay(agentrt, answers: list) -> ReplayChatCompletionClient:
    """AutoGen's replay client, noting each model call in the stand-in's log (so that the order of
    model calls and hints can be checked)."""

    class Recording(ReplayChatCompletionClient):
        async def create(self, *args, **kwargs):
            with agentrt.lock:
                agentrt.events.append(("model", {}, None))
            return await super().create(*args, **kwargs)

    return Recording(answers)


def team_of(client, termination) -> RoundRobinGroupChat:
    planner = AssistantAgent("planner", model_client=client, system_message="You plan.")
    critic = AssistantAgent("critic", model_client=client, system_message="You criticise.")
    return RoundRobinGroupChat([planner, critic], termination_condition=termination)


def test_a_run_that_terminates_closes_its_session_once_after_its_last_model_call(agentrt):
    hints = AgentrtHints(agentrt.root + "/v1")
    team = close_on_termination(team_of(replay(agentrt, ["p1", "c1", "p2"]), MaxMessageTermination(4)), hints, "run-1")
    result = asyncio.run(team.run(task="plan the migration"))
    assert [m.source for m in result.messages] == ["user", "planner", "critic", "planner"]
    assert agentrt.kinds() == ["model", "model", "model", "hints"]
    assert agentrt.hints() == [{"type": "session_closed", "session": "run-1"}]


def test_a_text_mention_termination_closes_too(agentrt):
    hints = AgentrtHints(agentrt.root)
    termination = TextMentionTermination("APPROVE")
    team = close_on_termination(team_of(replay(agentrt, ["plan", "APPROVE"]), termination), hints, "run-2")
    result = asyncio.run(team.run(task="t"))
    assert "APPROVE" in result.stop_reason
    assert agentrt.kinds() == ["model", "model", "hints"]


def test_run_stream_closes_before_handing_on_the_result(agentrt):
    hints = AgentrtHints(agentrt.root)
    team = close_on_termination(team_of(replay(agentrt, ["a", "b"]), MaxMessageTermination(3)), hints, "run-3")

    async def until_result() -> None:
        async for item in team.run_stream(task="t"):
            if isinstance(item, TaskResult):
                # A caller that stops at the result has the close already sent.
                assert agentrt.hints() == [{"type": "session_closed", "session": "run-3"}]
                return

    asyncio.run(until_result())
    assert agentrt.kinds() == ["model", "model", "hints"]


def test_a_team_run_again_continues_its_session_and_closes_it_again(agentrt):
    hints = AgentrtHints(agentrt.root)
    team = close_on_termination(team_of(replay(agentrt, ["a", "b", "c", "d"]), MaxMessageTermination(2)), hints, "run-4")

    async def twice() -> None:
        await team.run(task="t")
        await team.run()  # continue the conversation: two more messages, no task this time
    asyncio.run(twice())
    assert agentrt.kinds() == ["model", "hints", "model", "model", "hints"]


def test_the_real_openai_client_names_its_session_and_the_end_closes_it(agentrt):
    # AutoGen's real OpenAIChatCompletionClient over HTTP: the session travels on every request
    # (headers_for), and the close follows the team's last model call.
    client = OpenAIChatCompletionClient(model="stand-in", base_url=agentrt.root + "/v1", api_key="k", max_retries=0,
                                        model_info=MODEL_INFO, default_headers=headers_for("run-5"))
    team = close_on_termination(team_of(client, MaxMessageTermination(3)), AgentrtHints(agentrt.root + "/v1"), "run-5")
    asyncio.run(team.run(task="plan the rollout"))
    assert agentrt.kinds() == ["chat", "chat", "hints"]
    assert [headers["x-session-id"] for headers, _ in agentrt.chats()] == ["run-5", "run-5"]
    assert agentrt.hints() == [{"type": "session_closed", "session": "run-5"}]


def test_run_and_close_closes_after_the_run_without_touching_the_team(agentrt):
    hints = AgentrtHints(agentrt.root)
    team = team_of(replay(agentrt, ["a", "b"]), MaxMessageTermination(3))
    result = asyncio.run(run_and_close(team, hints, "run-6", task="t"))
    assert len(result.messages) == 3
    assert agentrt.kinds() == ["model", "model", "hints"]
    assert "run_stream" not in vars(team)


def test_a_failed_run_is_not_closed(agentrt):
    hints = AgentrtHints(agentrt.root)
    # One answer for a run that needs three: the replay client raises on the second call.
    team = close_on_termination(team_of(replay(agentrt, ["a"]), MaxMessageTermination(4)), hints, "run-7")
    with pytest.raises(Exception):
        asyncio.run(team.run(task="t"))
    assert agentrt.hint_calls() == []


def test_bad_setup_fails_at_once(agentrt):
    hints = AgentrtHints(agentrt.root)
    team = team_of(replay(agentrt, []), MaxMessageTermination(2))
    with pytest.raises(ValueError, match="session: 257 bytes"):
        close_on_termination(team, hints, "x" * 257)
    close_on_termination(team, hints, "s")
    with pytest.raises(ValueError, match="already closes session 's'"):
        close_on_termination(team, hints, "t")
    with pytest.raises(ValueError, match="expected an AgentChat team"):
        close_on_termination(object(), hints, "s")
