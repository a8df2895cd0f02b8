#!/usr/bin/env python3
"""What agentrt's engine side costs vLLM: the same agent programs (``tests/agent_programs.py``) sent
straight to a plain vLLM, then straight to a vLLM with agentrt's plugin ranking its evictions over
the eviction socket and its KV events published to ``agentrt serve`` — the proxy beside the
engine, not in front of it, so that only the engine side is measured. The policy is ``lru``, whose
order is vLLM's own: any difference in calls/min is the plugin's and the events' cost, not a
different cache. A third arm is the second with the plugin asking for every ranking but not
waiting for it (deadline 0): it separates the rankings' wait inside vLLM's scheduler step from the
rest (the hooks, the events, and the CPU ``agentrt serve`` takes beside vLLM).

    .venv-vllm/bin/python adapters/vllm/eval/plugin_overhead.py \\
        --programs 4,8,16,32,64 --blocks 300 --repeats 5 --out docs/data/results-vllm/plugin-overhead.json

Each arm runs on a fresh vLLM (one after the other: two at once would share the cores), its
prefix cache reset before every run. Writes a table for docs/results-vllm.md (``python3
sim/scripts/results_md.py results-vllm``); progress goes to stderr, a line per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
import agent_programs  # noqa: E402
from conftest import REPO, TARGET, Stack, VllmServer, reset_prefix_cache  # noqa: E402

# The tiny model's load of admission_sweep.py, so that the two tables read together.
LOAD = agent_programs.LOADS["tiny"]

VLLM_ARGS = ("--enable-prompt-tokens-details",)


def say(text: str) -> None:
    print(f"[plugin-overhead {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def sweep(name: str, base: str, concurrencies: list[int], repeats: int) -> dict[int, dict]:
    """Every concurrency's runs against ``base`` (its cache reset before each): the run of median
    calls/min of ``repeats``, with the lowest and highest calls/min."""
    out = {}
    for n in concurrencies:
        runs = []
        for r in range(repeats):
            reset_prefix_cache(base)
            s = agent_programs.run(base, n, seed=n, **LOAD).summary()
            say(f"{n} programs, {name}, run {r + 1}/{repeats}: {s['calls_per_min']} calls/min, hit {s['hit_rate']}, "
                f"p99 {s['latency_p99_s']} s, {agent_programs.failures_said(s)}")
            runs.append(s)
        runs.sort(key=lambda s: s["calls_per_min"])
        out[n] = dict(runs[len(runs) // 2], low=runs[0]["calls_per_min"], high=runs[-1]["calls_per_min"])
    return out


def plugged_sweep(binary: Path, model: Path, work: Path, args, concurrencies: list[int], deadline_ms: float | None,
                  name: str) -> tuple[dict[int, dict], float]:
    """The sweep against a vLLM with agentrt's plugin and KV events (``deadline_ms``: how long the
    plugin waits for a ranking, ``None`` its default), and the rankings agentrt was asked for."""
    stack = Stack(binary, model, work, policy="lru", blocks=args.blocks, admin_token=None,
                  deadline_ms=deadline_ms, serve_args=(), vllm_args=VLLM_ARGS, log_level=None)
    try:
        say(f"{name}: up")
        runs = sweep(name, stack.vllm.base, concurrencies, args.repeats)
        page = urllib.request.urlopen(stack.serve.base + "/metrics", timeout=30).read().decode()
    finally:
        stack.stop()
    rankings = sum(float(l.split()[-1]) for l in page.splitlines()
                   if l.startswith("agentrt_engine_rank_requests_total"))
    return runs, rankings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="4,8,16,32,64", help="concurrencies, comma-separated")
    parser.add_argument("--blocks", type=int, default=300, help="vLLM's KV cache in blocks of 32 tokens")
    parser.add_argument("--repeats", type=int, default=5, help="runs per point; the median's figures are kept")
    parser.add_argument("--out", type=Path, required=True, help="the table's JSON")
    args = parser.parse_args()
    concurrencies = [int(p) for p in args.programs.split(",")]

    binary = TARGET / "release" / "agentrt"
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "agentrt"], cwd=REPO, check=True)
    work = Path(tempfile.mkdtemp(prefix="plugin-overhead-"))
    model = work / "tiny"
    subprocess.run([sys.executable, str(REPO / "adapters/vllm/make_tiny_model.py"), str(model)], check=True,
                   capture_output=True)
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # /reset_prefix_cache between runs

    plain = VllmServer(model, work / "vllm-plain.log", blocks=args.blocks, extra_args=VLLM_ARGS)
    try:
        say(f"plain vLLM up in {plain.wait_ready():.0f} s ({args.blocks} blocks of 32 tokens)")
        direct = sweep("plain vLLM", plain.base, concurrencies, args.repeats)
    finally:
        plain.stop()

    plugged, rankings = plugged_sweep(binary, model, work / "plugged", args, concurrencies, deadline_ms=None,
                                      name="vLLM + agentrt plugin")
    # The same, but the plugin asks for every ranking without waiting for it (deadline 0: vLLM's own
    # order every time): what is left of the cost is the hooks', the events' and the CPU `agentrt
    # serve` takes beside vLLM; what the full arm costs beyond it is the ranking's wait inside
    # vLLM's scheduler step.
    unawaited, _ = plugged_sweep(binary, model, work / "unawaited", args, concurrencies, deadline_ms=0,
                                 name="vLLM + plugin, rankings not awaited")
    rows = []
    for n in concurrencies:
        arms = (("plain vLLM", direct[n]), ("vLLM + agentrt plugin, KV events", plugged[n]),
                ("the same, rankings not awaited", unawaited[n]))
        for name, s in arms:
            rows.append([str(n), name, f"{s['calls_per_min']:.0f}", f"{s['low']:.0f}–{s['high']:.0f}",
                         f"{s['calls_per_min'] / direct[n]['calls_per_min']:.3f}×", f"{s['hit_rate']:.2f}",
                         f"{s['latency_p50_s']:.2f}", f"{s['latency_p99_s']:.2f}", f"{s['failed']}/{s['calls']}"])
    doc = {
        "command": f".venv-vllm/bin/python adapters/vllm/eval/plugin_overhead.py --programs {args.programs} "
                   f"--blocks {args.blocks} --repeats {args.repeats} --out {args.out}",
        "load": (f"closed-loop agent programs of {LOAD['turns']} streamed calls, tool pauses "
                 f"{LOAD['pause'][0]}–{LOAD['pause'][1]} s, sent straight to vLLM; CPU vLLM 0.32, the tiny model, "
                 f"{args.blocks} blocks of 32 tokens; the plugged arm's policy lru, {rankings:.0f} rankings asked "
                 f"of agentrt over the eviction socket; the third arm asks for them without waiting (deadline 0, "
                 f"vLLM's own order), so the second's cost beyond the third's is the rankings' wait inside vLLM's "
                 f"scheduler step; each point the median of {args.repeats} runs by calls/min, "
                 f"the three arms one after the other on two shared cores"),
        "columns": ["programs", "arm", "calls/min", "runs' range", "× plain", "hit rate", "latency p50 (s)", "p99 (s)", "failed"],
        "align": ["r", "l", "r", "r", "r", "r", "r", "r", "r"],
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    say(f"wrote {args.out}")


if __name__ == "__main__":
    main()
