#!/usr/bin/env python3
"""A real vLLM (CPU) past its knee, three ways: agent programs (``tests/agent_programs.py``) sent
straight to vLLM, through ``agentrt serve`` as it is by default, and through ``agentrt serve
--session-admission working-set`` — at each concurrency of the sweep, one vLLM for all of them,
its prefix cache reset before every run (vLLM's dev endpoint).

    .venv-vllm/bin/python adapters/vllm/eval/admission_sweep.py \\
        --programs 4,8,16,32 --out docs/data/results-vllm/admission-tiny.json
    .venv-vllm/bin/python adapters/vllm/eval/admission_sweep.py --size prefill-heavy \\
        --programs 4,8,16,32 --blocks 600 --out docs/data/results-vllm/admission-heavy.json

Writes a table for docs/results-vllm.md (``python3 sim/scripts/results_md.py results-vllm``):
calls per minute, hit rate and latency p50 / p99 of each arm, and the calls/min ratio to vLLM
direct. Two engines (``make_tiny_model.py --size``): the tiny model, whose prefill is nearly free —
working-set admission must stay out of the way, holding nothing when holding cannot pay — and the
prefill-heavy one, where recomputing the cache takes longer than a program's pause and holding
sessions back must pay. Progress goes to stderr, a line per run.
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
from agent_programs import LOADS  # noqa: E402
from conftest import REPO, TARGET, AgentrtServe, Stack, VllmServer, component, reset_prefix_cache  # noqa: E402


def say(text: str) -> None:
    print(f"[admission-sweep {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def rounds_text(rounds: int) -> str:
    if rounds == 1:
        return ""
    return (f"{rounds} programs one after the other in each of the concurrency's slots, calls per minute over the "
            f"steady window (until the first slot has none left to start); ")


def series(text: str, name: str) -> float:
    return next((float(l.split()[-1]) for l in text.splitlines() if l.startswith(name + " ")), 0.0)


def holds_so_far(serve_base: str) -> int:
    page = urllib.request.urlopen(serve_base + "/metrics", timeout=30).read().decode()
    return int(series(page, "agentrt_admission_holds_total"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="4,8,16,32", help="concurrencies, comma-separated")
    parser.add_argument("--blocks", type=int, default=80, help="vLLM's KV cache in blocks of 32 tokens")
    parser.add_argument("--size", choices=sorted(LOADS), default="tiny", help="make_tiny_model.py's --size")
    parser.add_argument("--rounds", type=int, default=1,
                        help="programs each slot runs one after the other (1: all start together and drain; "
                             "more: the load stays at the concurrency, counted over the steady window)")
    parser.add_argument("--whole-stack", action="store_true",
                        help="vLLM with agentrt's plugin and KV events, admission in the serve that ranks its "
                             "evictions (held sessions' blocks first): two arms, vLLM direct and that serve")
    parser.add_argument("--out", type=Path, required=True, help="the table's JSON")
    args = parser.parse_args()
    concurrencies = [int(p) for p in args.programs.split(",")]

    binary = TARGET / "release" / "agentrt"
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "agentrt"], cwd=REPO, check=True)
    work = Path(tempfile.mkdtemp(prefix="admission-sweep-"))
    load = LOADS[args.size]
    model = work / args.size
    subprocess.run([sys.executable, str(REPO / "adapters/vllm/make_tiny_model.py"), "--size", args.size, str(model)],
                   check=True, capture_output=True)
    context = json.loads((model / "config.json").read_text())["max_position_embeddings"]
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # /reset_prefix_cache between runs
    vllm_args = ("--enable-prompt-tokens-details", "--max-model-len", str(context))
    admission = ("--session-admission", "working-set", "--slot", f"admission={component('working-set')}")
    servers = []
    try:
        if args.whole_stack:
            stack = Stack(binary, model, work / "stack", policy="lru", blocks=args.blocks, admin_token=None,
                          deadline_ms=None, serve_args=admission, vllm_args=vllm_args, log_level=None)
            servers, vllm, admitted = [stack], stack.vllm, stack.serve
            arms = [("vLLM direct (plugin, KV events)", vllm.base),
                    ("agentrt, working-set admission, held sessions' blocks evicted first", admitted.base)]
        else:
            vllm = VllmServer(model, work / "vllm.log", blocks=args.blocks, extra_args=vllm_args)
            servers = [vllm]
            vllm.wait_ready()
            plain = AgentrtServe(binary, vllm.base, work / "serve-plain.log", policy=component("lru"))
            admitted = AgentrtServe(binary, vllm.base, work / "serve-admission.log", policy=component("lru"),
                                    extra_args=admission)
            servers += [plain, admitted]
            arms = [("vLLM direct", vllm.base), ("agentrt", plain.base),
                    ("agentrt, working-set admission", admitted.base)]
        say(f"vLLM up in {vllm.ready_s:.0f} s ({args.blocks} blocks of 32 tokens)")
        rows, longest = [], 0
        for n in concurrencies:
            direct_rate = None
            for name, base in arms:
                reset_prefix_cache(vllm.base)
                counts_holds = base == admitted.base
                holds_before = holds_so_far(admitted.base) if counts_holds else 0
                result = agent_programs.run(base, n, seed=n, total=n * args.rounds, **load)
                held = f"{holds_so_far(admitted.base) - holds_before}" if counts_holds else "–"
                longest = max([longest, *(c.prompt_tokens for c in result.calls)])
                s = result.summary()
                say(f"{n} programs, {name}: {s['calls_per_min']} calls/min, hit {s['hit_rate']}, "
                    f"p99 {s['latency_p99_s']} s, {agent_programs.failures_said(s)}, holds {held}")
                direct_rate = direct_rate or s["calls_per_min"]
                rows.append([str(n), name, f"{s['calls_per_min']:.0f}", f"{s['calls_per_min'] / direct_rate:.2f}×",
                             f"{s['hit_rate']:.2f}", f"{s['latency_p50_s']:.2f}", f"{s['latency_p99_s']:.2f}",
                             held, f"{s['failed']}/{s['calls']}"])
        page = urllib.request.urlopen(admitted.base + "/metrics", timeout=30).read().decode()
        holds = int(series(page, "agentrt_admission_holds_total"))
        prefill = series(page, "agentrt_admission_prefill_us_per_ktoken")
        capacity = int(series(page, "agentrt_admission_capacity_tokens"))
    finally:
        for s in reversed(servers):
            s.stop()
    plugged = (" with agentrt's plugin ranking its evictions (policy lru, held sessions' blocks first) and its KV "
               "events published to agentrt serve") if args.whole_stack else ""
    doc = {
        "command": f".venv-vllm/bin/python adapters/vllm/eval/admission_sweep.py --size {args.size} "
                   f"--programs {args.programs} --blocks {args.blocks} --rounds {args.rounds}"
                   f"{' --whole-stack' if args.whole_stack else ''} --out {args.out}",
        "load": (f"{rounds_text(args.rounds)}closed-loop agent programs of {load['turns']} streamed calls of {load['max_tokens']} answer tokens, "
                 f"contexts growing to {longest} tokens, tool pauses {load['pause'][0]}–{load['pause'][1]} s, four "
                 f"agent types; CPU vLLM 0.32{plugged}, the {args.size} model, {args.blocks} blocks of 32 tokens "
                 f"({capacity} tokens as agentrt read them from vLLM's "
                 f"/metrics); working-set admission measured prefill at {prefill / 1000:.2f} ms per 1,000 tokens "
                 f"and held {holds} sessions"),
        "columns": ["programs", "arm", "calls/min", "× direct", "hit rate", "latency p50 (s)", "p99 (s)",
                    "sessions held", "failed"],
        "align": ["r", "l", "r", "r", "r", "r", "r", "r", "r"],
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    say(f"wrote {args.out}")


if __name__ == "__main__":
    main()
