"""The package against the REAL `agentrt serve` (its hint endpoint: host/serve/src/hints), with the
stand-in (tests/standin.py) only as the model server behind it: every hint the client sends is
taken and counted at /metrics, everything the client refuses locally the proxy refuses too, and
each framework's run through the proxy has its session closed by name (outcome `applied`, not
`unknown_session`: the hint and the requests name the same session).

The binary: $AGENTRT_BIN, else the newest `agentrt` under $CARGO_TARGET_DIR (or target/), debug or
release; `cargo xtask test` has built it, and its policy components (AGENTRT_COMPONENTS_DIR), by
then. Skipped, saying why, without one, or with one older than the hint endpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agentrt_hints import AgentrtHints, headers_for
from standin import StandIn
from test_client import MALFORMED

REPO = Path(__file__).resolve().parents[3]


def agentrt_binary() -> Path:
    if os.environ.get("AGENTRT_BIN"):
        return Path(os.environ["AGENTRT_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", "target"))
    target = target if target.is_absolute() else REPO / target
    built = [p for p in (target / "debug" / "agentrt", target / "release" / "agentrt") if p.is_file()]
    if not built:
        pytest.skip(f"no agentrt binary under {target} (cargo build -p agentrt, or set AGENTRT_BIN)")
    return max(built, key=lambda p: p.stat().st_mtime)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Proxy:
    """`agentrt serve` on loopback in front of the stand-in; stopped by its own PID."""

    def __init__(self, binary: Path, upstream: StandIn):
        self.root = f"http://127.0.0.1:{free_port()}"
        # Its log in a file, not a pipe nobody reads (a full pipe would stall the proxy).
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [str(binary), "serve", "--upstream", upstream.root, "--listen", self.root[len("http://"):],
             "--policy", "lru", "--hint-rate", "1000"],
            stdout=self.log, stderr=subprocess.STDOUT, text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.log.seek(0)
                raise AssertionError(f"agentrt serve exited ({self.process.returncode}):\n{self.log.read()}")
            try:
                self.metrics()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError("agentrt serve did not answer /metrics within 60 s")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.root + "/metrics", timeout=5) as response:
            return response.read().decode()

    def hints_total(self, kind: str, source: str = "endpoint", outcome: str = "applied") -> int:
        pattern = re.compile(
            r'^agentrt_hints_total\{[^}]*kind="%s",source="%s",outcome="%s"\} (\d+)$' % (kind, source, outcome), re.M
        )
        return sum(int(n) for n in pattern.findall(self.metrics()))

    def post_raw(self, body: bytes) -> tuple:
        request = urllib.request.Request(self.root + "/v1/agentrt/hints", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@pytest.fixture
def proxy(agentrt):
    binary = agentrt_binary()
    usage = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
    if "--hint-rate" not in usage:
        pytest.skip(f"{binary} predates the hint endpoint (no --hint-rate): rebuild it")
    proxy = Proxy(binary, agentrt)
    try:
        yield proxy
    finally:
        proxy.stop()


def test_every_hint_the_client_sends_is_taken_and_counted(proxy):
    hints = AgentrtHints(proxy.root + "/v1")
    assert hints.close("s-1") == {"accepted": 1, "duplicates": 0}
    assert hints.close("s-1") == {"accepted": 1, "duplicates": 1}
    assert hints.wait_tool("s-2", "web_search", agent="researcher", expected_s=2)["accepted"] == 1
    assert hints.wait_user("s-2", agent="planner")["accepted"] == 1
    assert hints.handoff("s-2", "planner", "coder")["accepted"] == 1
    assert hints.handoff("s-2", None, "reviewer")["accepted"] == 1
    assert hints.send([{"type": "session_closed", "session": f"many-{i}"} for i in range(64)])["accepted"] == 64
    assert (hints.sent, hints.dropped) == (70, 0)
    metrics = proxy.metrics()
    for kind in ("closed", "wait_tool", "wait_user", "handoff"):
        assert re.search(r'agentrt_hints_total\{[^}]*kind="%s",source="endpoint"' % kind, metrics), metrics


@pytest.mark.parametrize("hints, message", [case for case in MALFORMED if isinstance(case[0], list)])
def test_what_the_client_refuses_the_proxy_refuses_too(proxy, hints, message):
    status, answer = proxy.post_raw(json.dumps({"hints": hints}).encode())
    assert status in (400, 413), (status, answer)
    assert answer["error"]["type"] == "invalid_hint", answer


def test_a_langgraph_run_through_the_proxy_closes_its_session_by_name(proxy, agentrt):
    test_langgraph = pytest.importorskip("test_langgraph", reason="LangGraph runs in the vLLM venv")
    from agentrt_hints.langgraph import AgentrtCallback

    graph = test_langgraph.build(proxy.root + "/v1", "lg-1")
    graph.invoke({"task": "t"}, config={"callbacks": [AgentrtCallback(AgentrtHints(proxy.root + "/v1"), "lg-1")]})
    assert len(agentrt.chats()) == 2  # both nodes' calls went through to the model server
    assert proxy.hints_total("closed") == 1


def test_an_agents_sdk_run_through_the_proxy_closes_its_session_by_name(proxy, agentrt):
    pytest.importorskip("agents", reason="the Agents SDK runs in the agents venv")
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner
    from openai import AsyncOpenAI

    from agentrt_hints.openai_agents import AgentrtRunHooks

    client = AsyncOpenAI(base_url=proxy.root + "/v1", api_key="k", max_retries=0)
    writer = Agent(name="writer", instructions="You write.", model=OpenAIChatCompletionsModel("stand-in", client))
    run_config = RunConfig(model_settings=ModelSettings(extra_headers=headers_for("oa-1")), tracing_disabled=True)
    hooks = AgentrtRunHooks(AgentrtHints(proxy.root + "/v1"), "oa-1")
    result = asyncio.run(Runner.run(writer, "say ok", hooks=hooks, run_config=run_config))
    assert result.final_output == "ok"
    assert proxy.hints_total("closed") == 1


def test_an_autogen_team_through_the_proxy_closes_its_session_by_name(proxy, agentrt):
    test_autogen = pytest.importorskip("test_autogen", reason="AutoGen runs in the agents venv")
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from agentrt_hints.autogen import close_on_termination

    client = OpenAIChatCompletionClient(model="stand-in", base_url=proxy.root + "/v1", api_key="k", max_retries=0,
                                        model_info=test_autogen.MODEL_INFO, default_headers=headers_for("ag-1"))
    team = test_autogen.team_of(client, MaxMessageTermination(3))
    close_on_termination(team, AgentrtHints(proxy.root + "/v1"), "ag-1")
    asyncio.run(team.run(task="plan it"))
    assert len(agentrt.chats()) == 2
    assert proxy.hints_total("closed") == 1


def test_a_crewai_crew_through_the_proxy_hands_over_and_closes_its_session_by_name(proxy, agentrt):
    test_crewai = pytest.importorskip("test_crewai", reason="CrewAI runs in its own venv (sdk/hints/setup-venv.sh)")
    from agentrt_hints.crewai import hint_crew

    crew = hint_crew(test_crewai.crew_of(proxy.root + "/v1", "cw-1"), AgentrtHints(proxy.root + "/v1"), "cw-1")
    test_crewai.kickoff(crew)
    assert len(agentrt.chats()) == 2
    assert proxy.hints_total("handoff") == 1
    assert proxy.hints_total("closed") == 1


def test_a_metagpt_team_through_the_proxy_names_hands_over_and_closes_its_session_by_name(proxy, agentrt):
    test_metagpt = pytest.importorskip("test_metagpt", reason="MetaGPT runs in its own venv (sdk/hints/setup-venv.sh)")
    from agentrt_hints.metagpt import hint_team

    team = hint_team(test_metagpt.team_of(proxy.root + "/v1"), AgentrtHints(proxy.root + "/v1"), "mg-1")
    asyncio.run(team.run(n_round=3, idea="a poem"))
    assert len(agentrt.chats()) == 2
    # The idea's handoff comes before the session's first request: the proxy takes it all the
    # same (a session never seen), then the planner's, once the session has called.
    assert proxy.hints_total("handoff", outcome="unknown_session") == 1
    assert proxy.hints_total("handoff") == 1
    assert proxy.hints_total("closed") == 1
