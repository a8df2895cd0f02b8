#!/usr/bin/env python3
"""What a prefill costs against a decode step on this machine's CPU vLLM, for a model size of
``make_tiny_model.py`` — the figure that says whether recomputing an evicted context is cheap (the
tiny model) or costs what it does on a GPU serving an 8B model (``--size prefill-heavy``).

    .venv-vllm/bin/python adapters/vllm/eval/prefill_ratio.py --sizes tiny,prefill-heavy \\
        --out docs/data/results-vllm/prefill-ratio.json

For each size a vLLM of its own, one request at a time, nothing cached (random token ids, the prefix cache reset):
  * the prefill: time to the first token of a ``--prompt``-token prompt (2,560 by default, less
    where the model's window is shorter), the median of ``--repeats`` prompts;
  * the decode step: a 256-token answer to a short prompt, from its first piece to its last, over
    its 255 later tokens (vLLM may send several tokens in one streamed piece), the median;
  * the prefill cost per 1,000 tokens: the long prompt's time to first token less a 32-token one's.
Prints a JSON line per size, and writes them as a table for docs/results-vllm.md with ``--out``.
For comparison, the simulator's latency model of Llama-3.1-8B on an H100
(``sim/src/latency.rs``) prefills 2,560 tokens in ~73 ms against a ~7.1 ms decode step: ~10 steps.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from conftest import REPO, VllmServer, reset_prefix_cache  # noqa: E402


def say(text: str) -> None:
    print(f"[prefill-ratio {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def stream_times(base: str, prompt: list[int], max_tokens: int) -> list[float]:
    """Arrival times (from the request's start) of each streamed piece of one completion."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "min_tokens": max_tokens,
            "ignore_eos": True, "stream": True, "temperature": 0}
    request = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    started = time.monotonic()
    times = []
    with urllib.request.urlopen(request, timeout=300) as reply:
        for raw in reply:
            line = raw.decode(errors="replace").strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                times.append(time.monotonic() - started)
    return times


def measure(base: str, prompt_tokens: int, repeats: int, rng: random.Random) -> dict:
    def prompt(n: int) -> list[int]:
        return [rng.randrange(100, 4000) for _ in range(n)]

    stream_times(base, prompt(64), 8)  # warm-up: the first request compiles and allocates
    long_ttft, short_ttft, steps = [], [], []
    for _ in range(repeats):
        reset_prefix_cache(base)
        long_ttft.append(stream_times(base, prompt(prompt_tokens), 1)[0])
        short_ttft.append(stream_times(base, prompt(32), 1)[0])
        times = stream_times(base, prompt(32), 256)
        steps.append((times[-1] - times[0]) / 255)
    prefill, short, step = statistics.median(long_ttft), statistics.median(short_ttft), statistics.median(steps)
    return {
        "prompt_tokens": prompt_tokens,
        "prefill_ms": round(1000 * prefill, 2),
        "short_prompt_ttft_ms": round(1000 * short, 2),
        "decode_step_ms": round(1000 * step, 2),
        "prefill_over_step": round(prefill / step, 2),
        "prefill_ms_per_1000_tokens": round(1000 * (prefill - short) / (prompt_tokens - 32) * 1000, 2),
    }


def measure_size(size: str, prompt_tokens: int, repeats: int, work: Path) -> dict:
    model = work / size
    subprocess.run([sys.executable, str(REPO / "adapters/vllm/make_tiny_model.py"), "--size", size, str(model)],
                   check=True, capture_output=True)
    context = json.loads((model / "config.json").read_text())["max_position_embeddings"]
    vllm = VllmServer(model, work / f"vllm-{size}.log", blocks=2 * context // 32 + 8,
                      extra_args=("--max-model-len", str(context)))
    try:
        say(f"vLLM up in {vllm.wait_ready():.0f} s ({size})")
        return {"size": size, **measure(vllm.base, min(prompt_tokens, context - 64), repeats, random.Random(1))}
    finally:
        vllm.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny,prefill-heavy", help="make_tiny_model.py's sizes, comma-separated")
    parser.add_argument("--prompt", type=int, default=2560, help="the long prompt's tokens")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="the table's JSON for docs/results-vllm.md")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="prefill-ratio-"))
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # /reset_prefix_cache
    results = []
    for size in args.sizes.split(","):
        results.append(measure_size(size, args.prompt, args.repeats, work))
        print(json.dumps(results[-1]), flush=True)
    if args.out:
        doc = {
            "command": f".venv-vllm/bin/python adapters/vllm/eval/prefill_ratio.py --sizes {args.sizes} "
                       f"--prompt {args.prompt} --repeats {args.repeats} --out {args.out}",
            "load": (f"one request at a time, nothing cached, each figure the median of {args.repeats}; "
                     "CPU vLLM 0.32, float32, two cores"),
            "columns": ["model", "prompt (tokens)", "prefill (ms)", "decode step (ms)", "prefill ÷ step",
                        "prefill per 1,000 tokens (ms)"],
            "align": ["l", "r", "r", "r", "r", "r"],
            "rows": [[r["size"], str(r["prompt_tokens"]), f"{r['prefill_ms']:.0f}", f"{r['decode_step_ms']:.1f}",
                      f"{r['prefill_over_step']:.0f}", f"{r['prefill_ms_per_1000_tokens']:.0f}"] for r in results],
        }
        args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        say(f"wrote {args.out}")


if __name__ == "__main__":
    main()
