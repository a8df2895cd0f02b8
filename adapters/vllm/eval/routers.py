"""Two real vLLM CPU replicas (the tiny model) under every router: vLLM's router (`vllm-router`
0.1.17: round_robin, cache_aware, kv_aware from the replicas' KV events, with and without session
affinity, and with program scheduling behind agentrt) and agentrt's own (`--replica`, Dynamo's
selection service, agentrt's hints, LRU or CacheSage ranking each replica's evictions). The same
agents, the same calls, in the same order under each; docs/replicas.md, "Real run: every router".

    .venv-vllm/bin/python adapters/vllm/eval/routers.py [--out DIR] [--concurrent]   # default target/routers-real

Two loads: one call at a time (the default; a router sees no load and places by cache alone), or
each group's six sessions at once (`--concurrent`), as the simulated twin runs them.

Needs the vLLM venv (adapters/vllm/setup-venv.sh), vLLM's router's (adapters/vllm-router/
setup-venv.sh), Dynamo's (adapters/dynamo/setup-venv.sh), a release build and the components
(`cargo xtask build-policies`). The replicas start once (~3 min on 2 cores); between routers both
prefix caches are reset (`/reset_prefix_cache`, vLLM's dev mode), so every router starts cold.

The workload was fixed before the first router's run: six agents, each with an anchor (system
prompt) of ~510 tokens (16 blocks of 32), in two teams of three; 18 sessions, each of one team,
four calls (the team's three agents in a rotated order, then the first again), every call carrying
the session's history so far; sessions run six at a time, their calls interleaved so that each
round calls all six agents. One replica's cache (80 blocks) holds one team's anchors (48 blocks)
with room for sessions, not both teams' (96): a router that keeps each team on one replica can hit
every anchor, one that mixes them cannot. (A first draft ran four sessions at a time, in which each
round called only two agents and every router hit alike; it was changed after its simulated twin
showed that, before any real router ran.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent / "tests"))

from conftest import AgentrtServe, VllmServer, free_port, http_json, stop_process  # noqa: E402

BLOCK = 32
BLOCKS = 80
HOME = Path.home() / ".cache/agentrt"
ROUTER_BIN = Path(os.environ.get("AGENTRT_VLLM_ROUTER_VENV", HOME / "venv-vllm-router")) / "bin/vllm-router"
DYNAMO_PY = Path(os.environ.get("AGENTRT_DYNAMO_VENV", HOME / "venv-dynamo")) / "bin/python"
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
COMPONENTS = Path(os.environ.get("AGENTRT_COMPONENTS_DIR", TARGET / "components"))
AGENTRT = Path(os.environ.get("AGENTRT_BIN", TARGET / "release/agentrt"))

TEAMS = [["planner", "coder", "tester"], ["analyst", "writer", "editor"]]
ANCHORS = {
    name: (f"You are the {name} of a product team. " + f"The {name} keeps to these working rules. " * 20).strip()
    for team in TEAMS for name in team
}
SESSIONS = 18
AT_ONCE = 6


def workload() -> list[list[tuple[str, str]]]:
    """Per session, its calls: (agent, task). Seeded: the same for every router."""
    rng = random.Random(7)
    sessions = []
    for s in range(SESSIONS):
        team = TEAMS[s % 2]
        rotation = (s // 2) % 3
        first, second, third = team[rotation:] + team[:rotation]
        topic = rng.randrange(10_000)
        sessions.append([(first, f"Session {s}: plan item {topic}."), (second, f"Do item {topic}."),
                         (third, f"Review item {topic}."), (first, f"Close item {topic}.")])
    return sessions


def stream_call(base: str, messages: list[dict], agent: str, session: str) -> dict:
    """One streamed chat call: TTFT (first content chunk), usage, or the failure."""
    body = {"model": "tiny", "max_tokens": 4, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "messages": messages}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), headers={
        "content-type": "application/json", "x-agent-id": agent, "x-session-id": session})
    start = time.monotonic()
    ttft, usage, text = None, None, ""
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                if ttft is None and chunk.get("choices"):
                    ttft = time.monotonic() - start
                if chunk.get("choices"):
                    text += chunk["choices"][0].get("delta", {}).get("content") or ""
                if chunk.get("usage"):
                    usage = chunk["usage"]
    except Exception as e:  # noqa: BLE001 - a failed call is a result of the row
        return {"failed": f"{type(e).__name__}: {e}"}
    if usage is None:
        return {"failed": "no usage in the stream"}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {"ttft_s": ttft or 0.0, "prompt": usage["prompt_tokens"], "cached": cached, "text": text}


def run_workload(base: str, concurrent: bool) -> list[dict]:
    """The sessions, AT_ONCE at a time: one call at a time, the group's calls interleaved round by
    round (`concurrent` False), or each session of the group on a thread of its own, calling as
    soon as its previous call answered."""
    from concurrent.futures import ThreadPoolExecutor

    sessions = workload()

    def one_session(s: int, turns: range) -> list[dict]:
        history: list[dict] = []
        done = []
        for turn in turns:
            agent, task = sessions[s][turn]
            messages = [{"role": "system", "content": ANCHORS[agent]}, *history, {"role": "user", "content": task}]
            r = stream_call(base, messages, agent, f"session-{s}")
            r.update(session=s, turn=turn, agent=agent)
            done.append(r)
            history += [{"role": "user", "content": task}, {"role": "assistant", "content": r.get("text") or "ok"}]
        return done

    results = []
    for group in range(0, SESSIONS, AT_ONCE):
        members = range(group, group + AT_ONCE)
        if concurrent:
            with ThreadPoolExecutor(AT_ONCE) as pool:
                for done in pool.map(lambda s: one_session(s, range(4)), members):
                    results += done
            continue
        histories = {s: [] for s in members}
        for turn in range(4):
            for s in members:
                agent, task = sessions[s][turn]
                messages = [{"role": "system", "content": ANCHORS[agent]}, *histories[s],
                            {"role": "user", "content": task}]
                r = stream_call(base, messages, agent, f"session-{s}")
                r.update(session=s, turn=turn, agent=agent)
                results.append(r)
                histories[s] += [{"role": "user", "content": task},
                                 {"role": "assistant", "content": r.get("text") or "ok"}]
    return results


class Proc:
    """A helper process (a router), stopped with its group."""

    def __init__(self, args: list[str], log: Path, ready_url: str, env: dict | None = None) -> None:
        self.log_path = log
        self._log = open(log, "w")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(ready_url, timeout=2)
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{args[0]} did not start:\n{log.read_text(errors='replace')[-3000:]}")
                time.sleep(0.3)

    def stop(self) -> None:
        stop_process(self.proc, timeout=10)
        self._log.close()


def vllm_router(out: Path, name: str, replicas: dict, extra: list[str]) -> Proc:
    port = free_port()
    args = [str(ROUTER_BIN), "--host", "127.0.0.1", "--port", str(port), "--worker-urls",
            *[r.base for r in replicas.values()], "--prometheus-port", str(free_port()), "--log-level", "warning",
            *extra]
    proc = Proc(args, out / f"router-{name}.log", f"http://127.0.0.1:{port}/health")
    proc.base = f"http://127.0.0.1:{port}"
    return proc


def kv_sources(replicas: dict, endpoints: dict) -> list[str]:
    args = ["--kv-event-block-size", str(BLOCK), "--kv-event-model", "tiny"]
    for name, r in replicas.items():
        args += ["--kv-event-source", f"{r.base}={endpoints[name]}"]
    return args


def summarize(name: str, results: list[dict], replica_hits: float, replica_queries: float, warmups: float) -> dict:
    ok = [r for r in results if "failed" not in r]
    prompt = sum(r["prompt"] for r in ok)
    cached = sum(r["cached"] for r in ok)
    ttft = sorted(r["ttft_s"] for r in ok)
    return {
        "router": name,
        "calls": len(results),
        "failed": len(results) - len(ok),
        "hit_rate": cached / prompt if prompt else 0.0,
        "engine_hit_rate": replica_hits / replica_queries if replica_queries else 0.0,
        "ttft_ms_mean": 1000 * sum(ttft) / len(ttft) if ttft else None,
        "ttft_ms_p90": 1000 * ttft[int(0.9 * (len(ttft) - 1))] if ttft else None,
        "warmups": warmups,
        "failures": [r["failed"] for r in results if "failed" in r][:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=TARGET / "routers-real")
    parser.add_argument("--only", help="comma-separated row names to run")
    parser.add_argument("--concurrent", action="store_true",
                        help="each group's six sessions at once, a thread each (default: one call at a time)")
    a = parser.parse_args()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    for need, how in [(ROUTER_BIN, "adapters/vllm-router/setup-venv.sh"), (DYNAMO_PY, "adapters/dynamo/setup-venv.sh"),
                      (AGENTRT, "cargo build --release -p agentrt"), (COMPONENTS / "cachesage.wasm", "cargo xtask build-policies")]:
        if not need.exists():
            sys.exit(f"{need} is missing: {how}")
    model = out / "tiny-model"
    if not (model / "config.json").is_file():
        subprocess.run([sys.executable, str(REPO / "adapters/vllm/make_tiny_model.py"), str(model)], check=True)

    endpoints = {name: f"tcp://127.0.0.1:{free_port()}" for name in ("a", "b")}
    replicas: dict[str, VllmServer] = {}
    rows = []
    try:
        for i, name in enumerate(("a", "b")):
            replicas[name] = VllmServer(
                model, out / f"vllm-{name}.log", blocks=BLOCKS, kv_endpoint=endpoints[name],
                eviction_socket=out / f"evict-{name}.sock",
                extra_args=("--enable-prompt-tokens-details", "--prefix-caching-hash-algo", "sha256_cbor"),
                env_extra={"VLLM_CPU_OMP_THREADS_BIND": str(i), "VLLM_SERVER_DEV_MODE": "1", "PYTHONHASHSEED": "0",
                           "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": "0"})
        for r in replicas.values():
            print(f"replica up in {r.wait_ready(timeout=900):.0f} s", flush=True)

        def agentrt_front(name: str, upstream: str, policy: str, extra: list[str]) -> AgentrtServe:
            return AgentrtServe(AGENTRT, upstream, out / f"agentrt-{name}.log", policy=COMPONENTS / f"{policy}.wasm",
                                extra_args=tuple(extra))

        def agentrt_own(policy: str):
            def start(name: str):
                port = free_port()
                select = Proc([str(DYNAMO_PY), "-m", "dynamo.select_service", "--port", str(port), "--threads", "1"],
                              out / f"select-{name}.log", f"http://127.0.0.1:{port}/health")
                args = ["--router", f"http://127.0.0.1:{port}", "--router-model", "tiny",
                        "--router-block-size", str(BLOCK), "--router-deadline-ms", "5000"]
                for rn, r in replicas.items():
                    args += ["--replica", f"{rn}={r.base}", "--replica-kv-events", f"{rn}={endpoints[rn]}",
                             "--replica-eviction-socket", f"{rn}={out}/evict-{rn}.sock"]
                serve = agentrt_front(name, replicas["a"].base, policy, args)
                deadline = time.monotonic() + 60
                while http_json(f"http://127.0.0.1:{port}/ready")[1].get("schedulable_workers") != 2:
                    if time.monotonic() > deadline:
                        raise RuntimeError("Dynamo's selection service never registered both replicas")
                    time.sleep(0.5)
                return serve.base, [serve, select], serve
            return start

        def router_only(extra_fn):
            def start(name: str):
                router = vllm_router(out, name, replicas, extra_fn())
                return router.base, [router], None
            return start

        def agentrt_before_router(extra_fn):
            def start(name: str):
                router = vllm_router(out, name, replicas, extra_fn())
                serve = agentrt_front(name, router.base, "lru", ["--upstream-router", "vllm-router"])
                return serve.base, [serve, router], serve
            return start

        affinity = ["--kv-aware-session-affinity-ttl-secs", "60"]
        rows_spec = [
            ("round_robin", router_only(lambda: ["--policy", "round_robin"])),
            ("cache_aware", router_only(lambda: ["--policy", "cache_aware"])),
            ("kv_aware", router_only(lambda: ["--policy", "kv_aware", *kv_sources(replicas, endpoints)])),
            ("kv_aware + affinity", router_only(lambda: ["--policy", "kv_aware", *affinity, *kv_sources(replicas, endpoints)])),
            ("agentrt → kv_aware + affinity + programs", agentrt_before_router(
                lambda: ["--policy", "kv_aware", *affinity, "--enable-program-scheduling", *kv_sources(replicas, endpoints)])),
            ("agentrt router, lru", agentrt_own("lru")),
            ("agentrt router, cachesage", agentrt_own("cachesage")),
        ]
        only = set(a.only.split(",")) if a.only else None
        for name, start in rows_spec:
            if only and name not in only:
                continue
            for r in replicas.values():
                status, body = http_json(r.base + "/reset_prefix_cache", {})
                assert status == 200, f"resetting {r.base}'s prefix cache: {status} {body}"
            before = {n: r.metrics() for n, r in replicas.items()}
            started = time.monotonic()
            base, procs, serve = start(name.replace(" ", "_").replace("→", "to").replace("+", "and"))
            try:
                results = run_workload(base, a.concurrent)
                time.sleep(1)
                warmups = serve.metrics().get("agentrt_proxy_warmups_sent_total", 0.0) if serve is not None else 0.0
            finally:
                for p in procs:
                    p.stop()
            after = {n: r.metrics() for n, r in replicas.items()}
            delta = lambda key: sum(after[n].get(key, 0.0) - before[n].get(key, 0.0) for n in replicas)  # noqa: E731
            row = summarize(name, results, delta("vllm:prefix_cache_hits_total"), delta("vllm:prefix_cache_queries_total"),
                            warmups)
            row["served_by"] = {n: after[n].get("vllm:prompt_tokens_total", 0) - before[n].get("vllm:prompt_tokens_total", 0)
                                for n in replicas}
            row["wall_s"] = time.monotonic() - started
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for r in replicas.values():
            r.stop()
    (out / ("routers-concurrent.json" if a.concurrent else "routers-sequential.json")).write_text(json.dumps(rows, indent=2))
    print("\n| router | hit rate (calls' usage) | engine hit rate | TTFT mean / p90 ms | warm-ups | failed |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ttft = f"{r['ttft_ms_mean']:.0f} / {r['ttft_ms_p90']:.0f}" if r["ttft_ms_mean"] is not None else "–"
        print(f"| {r['router']} | {100 * r['hit_rate']:.1f} % | {100 * r['engine_hit_rate']:.1f} % | {ttft} | "
              f"{r['warmups']:.0f} | {r['failed']} of {r['calls']} |")


if __name__ == "__main__":
    main()
