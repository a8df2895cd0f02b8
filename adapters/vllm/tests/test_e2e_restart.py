"""End to end: ``agentrt serve`` restarted under load beside a real vLLM (CPU, the tiny model), the
way a rolling deploy restarts it — SIGTERM, then a new process on the same eviction socket, KV-event
endpoints and state folder (``--state-dir``).

One test walks the whole path:

- four clients keep sending the planner → coder → tester workload of test_e2e_serve.py, each
  request given 120 s; no request may hang: every one ends, answered or refused at once while no
  proxy listens (a client then tries the current proxy again after 0.2 s);
- the old process drains (``--drain-timeout-ms``) and exits within the drain time and a second,
  saving its tenant's state;
- the vLLM plugin connects to the new process on its own — no eviction needed to prompt it — and
  ``agentrt_engine_plugin_connected`` reads 1 within a couple of seconds (the target: 2 s); the
  new process then ranks vLLM's evictions;
- the policy's state comes back from the snapshot: CacheSage's forecasts from the new process,
  before it has heard a single new request, name the same agents under the same handles as the
  old process's last forecasts (a fresh CacheSage forecasts nothing).

Slow (one vLLM start, 40–60 s on two cores, and about a minute of traffic): AGENTRT_SKIP_VLLM_SERVE=1
skips it, and it skips, saying why, without the vLLM venv.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import pytest

from conftest import SKIP_SERVE_REASON, AgentrtServe, component, http_json
from test_e2e_serve import BLOCKS, stream_call, workload

pytestmark = pytest.mark.skipif(os.environ.get("AGENTRT_SKIP_VLLM_SERVE") == "1", reason=SKIP_SERVE_REASON)

ADMIN = "restart-admin"
DRAIN_MS = 20_000
CLIENTS = 4


class Load:
    """``CLIENTS`` threads sending the workload's calls in turn to the proxy ``base()`` names now,
    until stopped; every request's outcome kept."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.calls = workload(sessions=400)
        self.next = 0
        self.lock = threading.Lock()
        self.running = threading.Event()
        self.stopped = threading.Event()
        self.outcomes: list[tuple[float, float, int, str | None]] = []  # (started, took, status, error)
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(CLIENTS)]
        self.running.set()
        for t in self.threads:
            t.start()

    def _client(self) -> None:
        while not self.stopped.is_set():
            if not self.running.wait(0.1):
                continue
            with self.lock:
                call = self.calls[self.next % len(self.calls)]
                self.next += 1
                base = self.base
            started = time.monotonic()
            try:
                outcome = stream_call(base, call.body, {"x-session-id": call.session, "x-agent-id": call.agent})
                status, error = outcome.status, outcome.error
            except OSError as e:  # refused: no proxy listens at `base` (any more)
                status, error = 0, str(e)
            took = time.monotonic() - started
            with self.lock:
                self.outcomes.append((started, took, status, error))
            if status != 200:
                time.sleep(0.2)  # refused while no proxy listens: try the current one again

    def pause(self) -> None:
        """Stop sending and wait until no request is in flight."""
        self.running.clear()
        time.sleep(0.5)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            with self.lock:
                sent = self.next
                done = len(self.outcomes)
            if done >= sent:
                return
            time.sleep(0.1)
        raise AssertionError("requests still in flight 150 s after the load paused")

    def stop(self) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=150)
        assert not any(t.is_alive() for t in self.threads), "a client's request never ended"


def forecasts(base: str) -> list[dict]:
    status, body = http_json(base + "/admin/tenants/default/predict?horizon=8",
                             headers={"authorization": f"Bearer {ADMIN}"})
    assert status == 200, body
    return body["forecasts"]


def agents_named(found: list[dict]) -> dict[str, int]:
    return {f["agent_name"]: f["agent"] for f in found if f.get("agent_name")}


def wait_for(condition, seconds: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < seconds, f"{what}: not within {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - started


def test_serve_restarted_under_load_drains_reconnects_and_keeps_its_policy_state(start_stack, agentrt_binary,
                                                                                  tmp_path):
    state = tmp_path / "state"
    serve_args = ("--state-dir", str(state), "--drain-timeout-ms", str(DRAIN_MS), "--session-idle-ms", "600000")
    stack = start_stack("cachesage", blocks=BLOCKS, admin_token=ADMIN, serve_args=serve_args, log_level="info")
    old = stack.serve
    wait_for(lambda: old.metrics().get("agentrt_engine_plugin_connected", 0) == 1, 60, "the plugin connected")
    load = Load(old.base)
    try:
        # Warm: the policy learns the workflow, vLLM evicts and asks the proxy which blocks.
        wait_for(lambda: old.metrics().get("agentrt_engine_rank_requests_total", 0) > 0 and len(load.outcomes) >= 60,
                 240, "rankings and 60 requests before the restart")
        load.pause()
        before = forecasts(old.base)
        assert before, "CacheSage forecasts something after 60 requests"
        # Under load again, then the rolling deploy's SIGTERM.
        load.running.set()
        time.sleep(2)
        terminated = time.monotonic()
        old.proc.send_signal(signal.SIGTERM)
        old.proc.wait(timeout=DRAIN_MS / 1000 + 30)
        exited = time.monotonic() - terminated
        old_log = old.log(20_000)
        assert exited <= DRAIN_MS / 1000 + 1, f"exited {exited:.1f} s after SIGTERM\n{old_log}"
        assert "tenant state saved" in old_log, old_log
        assert (state / "tenant-default" / "kv.snapshot").is_file()

        new = AgentrtServe(agentrt_binary, f"http://127.0.0.1:{stack.vllm.port}", stack.workdir / "agentrt-serve-2.log",
                           policy=component("cachesage"), admin_token=ADMIN, eviction_socket=stack.socket,
                           kv_events=stack.kv_endpoint, kv_replay=stack.kv_replay, extra_args=serve_args,
                           log_level="info")
        stack.serve = new  # stopped with the stack
        listening = time.monotonic()
        # The state, before the new process has heard one request: the same agents, same handles.
        after = forecasts(new.base)
        assert after, f"the new process forecasts nothing: its state did not come back\n{new.log()}"
        assert agents_named(after) and agents_named(after).items() <= agents_named(before).items(), (
            f"before: {agents_named(before)}, after: {agents_named(after)}")
        assert "tenant state restored" in new.log(), new.log()
        with load.lock:
            load.base = new.base
            switched = time.monotonic()
        wait_for(lambda: new.metrics().get("agentrt_engine_plugin_connected", 0) == 1, 30, "the plugin reconnected")
        reconnected_after = time.monotonic() - listening
        ranked = wait_for(lambda: new.metrics().get("agentrt_engine_rank_requests_total", 0) > 0, 120,
                          "the new process ranked an eviction")
        wait_for(lambda: sum(1 for o in load.outcomes if o[0] > listening and o[2] == 200) >= 20, 240,
                 "20 requests through the new process")
    finally:
        load.stop()
    outcomes = load.outcomes
    hung = [o for o in outcomes if o[1] >= 120]
    assert not hung, f"{len(hung)} requests hung"
    # Refused (or cut) only while the old process drained or none listened: a request that ended
    # after the SIGTERM and began before the clients were sent to the new process.
    failed_while_up = [o for o in outcomes if o[2] != 200 and not (terminated <= o[0] + o[1] and o[0] <= switched)]
    assert not failed_while_up, f"requests failed while a proxy listened: {failed_while_up[:5]}"
    print(f"\nrestart: old exited {exited:.1f} s after SIGTERM (drain {DRAIN_MS / 1000:.0f} s); plugin connected "
          f"to the new process {reconnected_after:.2f} s after it listened; first ranking {ranked:.1f} s later; "
          f"{len(outcomes)} requests, {sum(1 for o in outcomes if o[2] == 200)} answered, "
          f"{sum(1 for o in outcomes if o[2] != 200)} refused while no proxy listened; "
          f"forecasts before {len(before)}, after {len(after)}")
    assert reconnected_after <= 5.0, f"the plugin reconnected {reconnected_after:.1f} s after the new process listened"
