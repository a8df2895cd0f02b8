"""Two real vLLM CPU replicas behind `agentrt serve --replica … --router …` and NVIDIA Dynamo's
real selection service (docs/replicas.md): an agent's later call lands on the replica holding its
anchor, and hits it. Each replica runs the agentrt plugin on an eviction socket of its own
(`--replica-eviction-socket`), into one policy view.

Skips, saying why, without the vLLM venv, the selection service's venv
(`adapters/dynamo/setup-venv.sh`), or with AGENTRT_SKIP_VLLM_SERVE=1. About 3-4 minutes here:
two vLLM replicas start together in ~3 min on 2 cores.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import SKIP_SERVE_REASON, AgentrtServe, VllmServer, component, free_port, http_json, stop_process

DYNAMO_VENV = Path(os.environ.get("AGENTRT_DYNAMO_VENV", Path.home() / ".cache/agentrt/venv-dynamo"))
BLOCK = 32

pytestmark = pytest.mark.skipif(os.environ.get("AGENTRT_SKIP_VLLM_SERVE") == "1", reason=SKIP_SERVE_REASON)


@pytest.fixture
def selection_service(tmp_path):
    """`python -m dynamo.select_service` on a free port (it binds every interface; used on loopback)."""
    python = DYNAMO_VENV / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"the selection service is not installed ({python} missing): run adapters/dynamo/setup-venv.sh")
    port = free_port()
    log = open(tmp_path / "select-service.log", "w")
    proc = subprocess.Popen([str(python), "-m", "dynamo.select_service", "--port", str(port), "--threads", "1"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not _up(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            pytest.fail(f"the selection service did not start: {(tmp_path / 'select-service.log').read_text()[-2000:]}")
        time.sleep(0.2)
    yield url
    stop_process(proc, timeout=10)
    log.close()


def _up(url: str) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(url + "/health", timeout=2)
        return True
    except OSError:
        return False


AGENTS = {
    name: (f"You are the {name} of a research team. " + f"The {name} follows these rules closely. " * 12).strip()
    for name in ("planner", "coder", "reviewer", "writer")
}


def chat(base: str, agent: str, session: str, task: str) -> dict:
    status, body = http_json(base + "/v1/chat/completions", {
        "model": "tiny", "max_tokens": 2, "temperature": 0,
        "messages": [{"role": "system", "content": AGENTS[agent]}, {"role": "user", "content": task}],
    }, headers={"x-agent-id": agent, "x-session-id": session})
    assert status == 200, body
    return body


def anchor_tokens(base: str, agent: str) -> int:
    status, body = http_json(base + "/tokenize", {
        "model": "tiny", "messages": [{"role": "system", "content": AGENTS[agent]}], "add_generation_prompt": False})
    assert status == 200, body
    return body["count"]


def served_prompt_tokens(replicas: dict[str, VllmServer]) -> dict[str, float]:
    return {name: r.metrics().get("vllm:prompt_tokens_total", 0.0) for name, r in replicas.items()}


def test_an_agents_next_call_lands_on_the_replica_holding_its_anchor(agentrt_binary, tiny_model, tmp_path,
                                                                      selection_service, plugin_site):
    replicas: dict[str, VllmServer] = {}
    serve = None
    try:
        for i, name in enumerate(("a", "b")):
            replicas[name] = VllmServer(
                tiny_model, tmp_path / f"vllm-{name}.log", blocks=80, kv_endpoint=f"ipc://{tmp_path}/kv-{name}",
                eviction_socket=tmp_path / f"evict-{name}.sock",
                extra_args=("--enable-prompt-tokens-details",),
                env_extra={"VLLM_CPU_OMP_THREADS_BIND": str(i)}, plugin_site=plugin_site)
        for r in replicas.values():
            r.wait_ready(timeout=600)
        args = ["--router", selection_service, "--router-model", "tiny", "--router-block-size", str(BLOCK),
                "--router-deadline-ms", "5000"]
        for name, r in replicas.items():
            args += ["--replica", f"{name}={r.base}", "--replica-kv-events", f"{name}=ipc://{tmp_path}/kv-{name}",
                     "--replica-eviction-socket", f"{name}={tmp_path}/evict-{name}.sock"]
        serve = AgentrtServe(agentrt_binary, replicas["a"].base, tmp_path / "agentrt-serve.log",
                             policy=component("lru"), extra_args=tuple(args))
        deadline = time.monotonic() + 60
        while http_json(selection_service + "/ready")[1].get("schedulable_workers") != 2:
            assert time.monotonic() < deadline, f"the replicas were never registered:\n{serve.log()}"
            time.sleep(0.5)

        # A → B → A in one session, then the same for two more agents: every agent's second call
        # must land where its first one left its anchor, and hit it.
        where: dict[str, list[str]] = {}
        cached: dict[str, int] = {}
        for agent, task in [("planner", "t1"), ("coder", "t2"), ("planner", "t3"),
                            ("reviewer", "t4"), ("writer", "t5"), ("reviewer", "t6"), ("writer", "t7")]:
            before = served_prompt_tokens(replicas)
            body = chat(serve.base, agent, "task-42", f"{task}: go on with the plan")
            after = served_prompt_tokens(replicas)
            served = [name for name in replicas if after[name] > before[name]]
            assert len(served) == 1, (agent, before, after)
            where.setdefault(agent, []).append(served[0])
            cached[agent] = body["usage"]["prompt_tokens_details"]["cached_tokens"]
            time.sleep(0.3)  # the call's KV events reach the router
        print("placement:", where, "cached tokens of each agent's last call:", cached)
        for agent, placed in where.items():
            if len(placed) < 2:
                continue  # coder: one call, nothing to hit
            assert len(set(placed)) == 1, f"{agent}'s calls went to {placed}:\n{serve.log()}"
            anchor = anchor_tokens(replicas["a"].base, agent)
            assert cached[agent] >= (anchor // BLOCK) * BLOCK, (agent, cached[agent], anchor)

        # The plugin of each replica that served calls reached its own socket (a plugin connects
        # when it first has something to report, retrying once a second) and reported its blocks.
        text = serve.metrics_text()
        per_replica = {(line.split("{", 1)[0], line.split('"')[1]): float(line.rsplit(" ", 1)[1])
                       for line in text.splitlines() if line.startswith("agentrt_replica_") and "{replica=" in line}
        served = {name for placed in where.values() for name in placed}
        print("per-replica plugin counters:", {k: v for k, v in per_replica.items() if "plugin" in k[0] or "block" in k[0]})
        for name in served:
            assert per_replica[("agentrt_replica_plugin_connections_total", name)] >= 1, text
            assert per_replica[("agentrt_replica_block_events_total", name)] > 0, text
        metrics = serve.metrics()
        assert metrics["agentrt_router_routed_total"] >= 7, metrics
        assert metrics.get("agentrt_router_fallback_total", 0) == 0, serve.log()
        # Every booking was completed and released: the router counts nothing in flight.
        time.sleep(0.5)
        loads = http_json(selection_service + "/loads")[1]
        assert sum(l["active_requests"] for l in loads[0]["loads"]) == 0, loads
    finally:
        if serve is not None:
            serve.stop()
        for r in replicas.values():
            r.stop()
