#!/usr/bin/env python3
"""A real vLLM (CPU, the tiny model) past its knee, three ways: agent programs
(``tests/agent_programs.py``) sent straight to vLLM, through ``agentrt serve`` as it is by default,
and through ``agentrt serve --session-admission working-set`` — at each concurrency of the sweep,
one vLLM for all of them, its prefix cache reset before every run (vLLM's dev endpoint).

    .venv-vllm/bin/python adapters/vllm/eval/admission_sweep.py \\
        --programs 4,8,16,32 --out docs/data/results-vllm/admission-tiny.json

Writes a table for docs/results-vllm.md (``python3 sim/scripts/results_md.py results-vllm``):
calls per minute, hit rate and latency p50 / p99 of each arm, and the calls/min ratio to vLLM
direct. The tiny model's prefill is nearly free: working-set admission must stay out of the way
here (it holds nothing when holding cannot pay). Progress goes to stderr, a line per run.
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
from conftest import REPO, TARGET, AgentrtServe, VllmServer, component  # noqa: E402

LOAD = dict(turns=6, pause=(0.5, 2.0), system_words=100, turn_words=50, max_tokens=8)


def say(text: str) -> None:
    print(f"[admission-sweep {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def reset_prefix_cache(base: str) -> None:
    urllib.request.urlopen(urllib.request.Request(base + "/reset_prefix_cache", method="POST"), timeout=60).read()


def series(text: str, name: str) -> float:
    return next((float(l.split()[-1]) for l in text.splitlines() if l.startswith(name + " ")), 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="4,8,16,32", help="concurrencies, comma-separated")
    parser.add_argument("--blocks", type=int, default=80, help="vLLM's KV cache in blocks of 32 tokens")
    parser.add_argument("--out", type=Path, required=True, help="the table's JSON")
    args = parser.parse_args()
    concurrencies = [int(p) for p in args.programs.split(",")]

    binary = TARGET / "release" / "agentrt"
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "agentrt"], cwd=REPO, check=True)
    work = Path(tempfile.mkdtemp(prefix="admission-sweep-"))
    model = work / "tiny"
    subprocess.run([sys.executable, str(REPO / "adapters/vllm/make_tiny_model.py"), str(model)], check=True,
                   capture_output=True)
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # /reset_prefix_cache between runs
    vllm = VllmServer(model, work / "vllm.log", blocks=args.blocks, extra_args=("--enable-prompt-tokens-details",))
    servers = []
    try:
        say(f"vLLM up in {vllm.wait_ready():.0f} s ({args.blocks} blocks of 32 tokens)")
        plain = AgentrtServe(binary, vllm.base, work / "serve-plain.log", policy=component("lru"))
        admitted = AgentrtServe(binary, vllm.base, work / "serve-admission.log", policy=component("lru"),
                                extra_args=("--session-admission", "working-set",
                                            "--slot", f"admission={component('working-set')}"))
        servers = [plain, admitted]
        arms = [("vLLM direct", vllm.base), ("agentrt", plain.base), ("agentrt, working-set admission", admitted.base)]
        rows = []
        for n in concurrencies:
            direct_rate = None
            for name, base in arms:
                reset_prefix_cache(vllm.base)
                s = agent_programs.run(base, n, seed=n, **LOAD).summary()
                say(f"{n} programs, {name}: {s['calls_per_min']} calls/min, hit {s['hit_rate']}, "
                    f"p99 {s['latency_p99_s']} s, {s['failed']} failed")
                direct_rate = direct_rate or s["calls_per_min"]
                rows.append([str(n), name, f"{s['calls_per_min']:.0f}", f"{s['calls_per_min'] / direct_rate:.2f}×",
                             f"{s['hit_rate']:.2f}", f"{s['latency_p50_s']:.2f}", f"{s['latency_p99_s']:.2f}",
                             f"{s['failed']}/{s['calls']}"])
        page = urllib.request.urlopen(admitted.base + "/metrics", timeout=30).read().decode()
        holds = int(series(page, "agentrt_admission_holds_total"))
        prefill = series(page, "agentrt_admission_prefill_us_per_ktoken")
        capacity = int(series(page, "agentrt_admission_capacity_tokens"))
    finally:
        for s in servers:
            s.stop()
        vllm.stop()
    doc = {
        "command": f".venv-vllm/bin/python adapters/vllm/eval/admission_sweep.py --programs {args.programs} "
                   f"--blocks {args.blocks} --out {args.out}",
        "load": (f"closed-loop agent programs of {LOAD['turns']} streamed calls, contexts growing to ~1.5 k tokens, "
                 f"tool pauses {LOAD['pause'][0]}–{LOAD['pause'][1]} s, four agent types; CPU vLLM 0.32, the tiny "
                 f"model, {args.blocks} blocks of 32 tokens ({capacity} tokens as agentrt read them from vLLM's "
                 f"/metrics); working-set admission measured prefill at {prefill / 1000:.2f} ms per 1,000 tokens "
                 f"and held {holds} sessions"),
        "columns": ["programs", "arm", "calls/min", "× direct", "hit rate", "latency p50 (s)", "p99 (s)", "failed"],
        "align": ["r", "l", "r", "r", "r", "r", "r", "r"],
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    say(f"wrote {args.out}")


if __name__ == "__main__":
    main()
