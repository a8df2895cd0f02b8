"""hint_team in real MetaGPT team runs (a Team of two roles, each with its own action, the second
watching the first's; MetaGPT's OpenAI provider aimed at the stand-in for `agentrt serve`,
tests/standin.py): the requests name the session and the role, the idea and each action's result
hand over to the role that acts on it, and the run's end closes the session.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# MetaGPT reads a model configuration when it is imported; the tests give each team its own
# (Context(config=…)), so this one only has to exist.
_ROOT = Path(tempfile.mkdtemp(prefix="agentrt-metagpt-"))
atexit.register(shutil.rmtree, _ROOT, True)
(_ROOT / "config").mkdir()
(_ROOT / "config/config2.yaml").write_text("llm:\n  api_type: openai\n  base_url: http://127.0.0.1:9/v1\n  api_key: k\n")
os.environ.setdefault("METAGPT_PROJECT_ROOT", str(_ROOT))

pytest.importorskip("metagpt.team", reason="metagpt is not installed here: its venv is sdk/hints/setup-venv.sh's")

from metagpt.actions import Action, UserRequirement  # noqa: E402
from metagpt.config2 import Config  # noqa: E402
from metagpt.context import Context  # noqa: E402
from metagpt.roles import Role  # noqa: E402
from metagpt.team import Team  # noqa: E402

from agentrt_hints import AgentrtHints  # noqa: E402
from agentrt_hints.metagpt import hint_team  # noqa: E402


class Plan(Action):
    name: str = "Plan"

    async def run(self, context):
        return await self._aask(f"plan: {context}")


class Write(Action):
    name: str = "Write"

    async def run(self, context):
        return await self._aask(f"write: {context}")


class Planner(Role):
    name: str = "planner"
    profile: str = "Planner"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.set_actions([Plan])
        self._watch([UserRequirement])


class Writer(Role):
    name: str = "writer"
    profile: str = "Writer"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.set_actions([Write])
        self._watch([Plan])


def team_of(base_url: str) -> Team:
    config = Config.from_llm_config({"api_type": "openai", "base_url": base_url, "api_key": "k", "model": "gpt-4",
                                     "stream": False})
    context = Context(config=config)
    team = Team(context=context)
    team.hire([Planner(context=context), Writer(context=context)])
    return team


def test_a_team_run_names_its_calls_hands_over_and_closes_at_the_end(agentrt):
    team = hint_team(team_of(agentrt.root + "/v1"), AgentrtHints(agentrt.root + "/v1"), "mg-1")
    asyncio.run(team.run(n_round=3, idea="a poem"))
    assert agentrt.hints() == [
        {"type": "handoff", "session": "mg-1", "to_agent": "planner"},
        {"type": "handoff", "session": "mg-1", "from_agent": "planner", "to_agent": "writer"},
        {"type": "session_closed", "session": "mg-1"},
    ]
    assert agentrt.kinds() == ["hints", "chat", "hints", "chat", "hints"], "each hint when the framework knows it"
    chats = agentrt.chats()
    assert [(h["x-session-id"], h["x-agent-id"]) for h, _ in chats] == [("mg-1", "planner"), ("mg-1", "writer")]


def test_a_team_run_again_names_and_closes_the_same_session(agentrt):
    team = hint_team(team_of(agentrt.root + "/v1"), AgentrtHints(agentrt.root + "/v1"), "mg-2")
    asyncio.run(team.run(n_round=3, idea="a poem"))
    asyncio.run(team.run(n_round=3, idea="another"))
    closes = [h for h in agentrt.hints() if h["type"] == "session_closed"]
    assert len(closes) == 2
    assert {h["x-session-id"] for h, _ in agentrt.chats()} == {"mg-2"}


def test_a_failed_run_is_not_closed(agentrt):
    team = hint_team(team_of(agentrt.root + "/v1"), AgentrtHints(agentrt.root + "/v1"), "mg-3")
    team.invest(0.0)  # past its budget, the run fails before any round: MetaGPT saves the team
    assert asyncio.run(team.run(n_round=3, idea="a poem")) is None
    assert [h["type"] for h in agentrt.hints()] == ["handoff"], "the idea was handed over, nothing closed"
    assert agentrt.chats() == []


def test_bad_setup_fails_at_once(agentrt):
    team = team_of(agentrt.root + "/v1")
    with pytest.raises(ValueError, match="hints: expected an AgentrtHints"):
        hint_team(team, agentrt.root, "mg-4")
    with pytest.raises(ValueError, match="session: must not be empty"):
        hint_team(team, AgentrtHints(agentrt.root + "/v1"), "")
    with pytest.raises(ValueError, match="expected a metagpt Team"):
        hint_team(object(), AgentrtHints(agentrt.root + "/v1"), "mg-4")
    hint_team(team, AgentrtHints(agentrt.root + "/v1"), "mg-4")
    with pytest.raises(ValueError, match="already hooked to session 'mg-4'"):
        hint_team(team, AgentrtHints(agentrt.root + "/v1"), "mg-5")
