#!/usr/bin/env python3
"""The two-tier table of docs/hierarchy.md, from the JSON files `sim/eval/hierarchy.sh` writes.

    python3 sim/scripts/hierarchy_md.py target/hierarchy > table.md

One row per (trace, cache, GPU policy, host tier): GPU, host and all hits, prompt tokens
recomputed, loads, warm-ups served by a load and the tokens they loaded, blocks declined, TTFT.
Then, per trace, CacheSage over both tiers against vLLM's host `lru` and `arc` and the share of
the gap to two-tier Bélády it closes.
"""
import json
import sys
from pathlib import Path

HOST_TIERS = ["none", "lru", "arc", "policy"]
SHORT = {"belady": "Bélády"}


def units(folder: Path):
    """{(trace, cache): {host tier: json}} in file-name order."""
    out = {}
    for path in sorted(folder.glob("*.json")):
        stem, host = path.stem.rsplit("-", 1)
        trace, cache = stem.split("-", 1) if not stem.startswith("mc-conv") else ("mc-conv", stem[len("mc-conv-"):])
        out.setdefault((trace, cache), {})[host] = json.loads(path.read_text())
    return out


def all_hits(s):
    h = s.get("host")
    return 100 * (s["hit_rate"] + (h["host_hit_rate"] if h else 0.0))


def row(trace, cache, name, host, s):
    h = s.get("host")
    cells = [trace, cache, SHORT.get(name, name), host if h else "none", f"{100 * s['hit_rate']:.1f}",
             f"{100 * h['host_hit_rate']:.1f}" if h else "–", f"{all_hits(s):.1f}"]
    recomputed = h["recomputed_tokens"] if h else s["prompt_tokens"] - s["hit_tokens"]
    cells.append(f"{recomputed / 1e6:.2f}")
    if h:
        cells += [f"{h['loads']:,}", f"{h['warmup_loads']:,} / {s['warmups']:,}",
                  f"{h['warmup_loaded_tokens'] / 1e3:,.0f} k", f"{h['declined_blocks']:,}"]
    else:
        cells += ["–", "–", "–", "–"]
    cells.append(f"{s['ttft_ms_mean']:,.1f}")
    failures = s.get("failed_calls", 0)
    cells.append(f"{failures}" if failures else "")
    return "| " + " | ".join(cells) + " |"


def main():
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "target/hierarchy")
    data = units(folder)
    print("| trace | GPU cache | policy | host tier | GPU hit % | host hit % | all hit % | recomputed M tok | loads "
          "| warm-ups loaded / all | warm-up tok loaded | declined | TTFT mean ms | failed calls |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary = []
    for (trace, cache), by_host in data.items():
        for host in HOST_TIERS:
            d = by_host.get(host)
            if not d:
                continue
            for name, s in d["policies"].items():
                if (host == "none" and name == "belady") or name not in ("lru", "cachesage", "belady"):
                    continue
                print(row(trace, cache, name, host, s))
        p = by_host.get("policy", {}).get("policies", {})
        if "belady" not in p:
            continue
        for best in [n for n in p if n == "cachesage"]:
            cs, ceiling = all_hits(p[best]), all_hits(p["belady"])
            for vllm in ("lru", "arc"):
                base = by_host.get(vllm, {}).get("policies", {}).get("lru")
                if base is None:
                    continue
                b = all_hits(base)
                gap = ceiling - b
                closed = f"{100 * (cs - b) / gap:.0f} %" if gap >= 0.1 else "–"
                summary.append(f"| {trace} | {cache} | vLLM host `{vllm}` | {b:.1f} | {SHORT.get(best, best)} "
                               f"| {cs:.1f} | {cs - b:+.1f} | {ceiling:.1f} | {gap:.1f} | {closed} "
                               f"| {base['ttft_ms_mean']:,.1f} / {p[best]['ttft_ms_mean']:,.1f} |")
    if summary:
        print()
        print("| trace | GPU cache | baseline (GPU lru) | all hit % | CacheSage over both tiers | all hit % | Δ pp | two-tier Bélády "
              "| gap pp | gap closed | TTFT ms baseline / CacheSage |")
        print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
        print("\n".join(summary))


if __name__ == "__main__":
    main()
