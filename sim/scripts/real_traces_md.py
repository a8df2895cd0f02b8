#!/usr/bin/env python3
"""The real-trace table of docs/results.md, from the JSON files `sim/eval/real_traces.sh` writes.

    python3 sim/scripts/real_traces_md.py target/real-traces > table.md
    python3 sim/scripts/real_traces_md.py target/real-traces --json > docs/data/results/public-traces.json

One row per (trace, capacity, load): every policy's hit rate, CacheSage's Δ and share of the
LRU→Bélády gap, LRU's utilisation, and the mean TTFT of LRU, CacheSage and the worst policy.
"""
import json
import sys
from pathlib import Path

from page_table import emit

POLICIES = ["lru", "ttl", "arc", "session-retain", "cachesage", "cachesage:guard=false", "belady"]
SHORT = {"lru": "LRU", "ttl": "TTL", "arc": "ARC", "session-retain": "session", "cachesage": "CacheSage",
         "cachesage:guard=false": "unguarded", "belady": "Bélády"}
TRACES = ["cc100", "mc-conv", "mc-conv-chained", "mc-syn"]
LOADS = {"users8": "8 users", "util50": "LRU util 50 %", "recorded": "recorded rate", "arrivals4": "arrivals ×4",
         "arrivals4-oracle": "arrivals ×4, oracle ends", "recorded-oracle": "recorded rate, oracle ends"}


def rows(folder: Path):
    for path in sorted(folder.glob("*.json")):
        d = json.loads(path.read_text())
        stem = path.stem
        trace = next(t for t in sorted(TRACES, key=len, reverse=True) if stem.startswith(t + "-"))
        frac, load = stem[len(trace) + 1:].split("-", 1)
        yield trace, float(frac), load, d


def main():
    folder = Path(sys.argv[1])
    out = []
    head = ["trace", "cache", "load", "util", *[SHORT[p] for p in POLICIES], "CacheSage Δ pp", "gap closed",
            "TTFT ms LRU / CacheSage / worst"]
    key = lambda r: (TRACES.index(r[0]), list(LOADS).index(r[2]) if r[2] in LOADS else 99, r[1])
    for trace, frac, load, d in sorted(rows(folder), key=key):
        p = d["policies"]
        lru, sage, bel = p["lru"], p["cachesage"], p["belady"]
        gap = bel["hit_rate"] - lru["hit_rate"]
        closed = f"{(sage['hit_rate'] - lru['hit_rate']) / gap * 100:.0f} %" if gap > 0.001 else "–"
        worst = max(x["ttft_ms_mean"] for x in p.values())
        cells = [trace, f"{frac * 100:g} % ({d['capacity_blocks']:,})", LOADS.get(load, load),
                 f"{lru['utilisation'] * 100:.0f} %"]
        cells += [f"{p[q]['hit_rate'] * 100:.1f}" if q in p else "–" for q in POLICIES]
        cells += [f"{(sage['hit_rate'] - lru['hit_rate']) * 100:+.1f}", closed,
                  f"{lru['ttft_ms_mean']:,.0f} / {sage['ttft_ms_mean']:,.0f} / {worst:,.0f}"]
        out.append(cells)
    emit(head, 3, out, "bash sim/eval/real_traces.sh KV_CACHE_TESTER/traces MOONCAKE/FAST25-release/traces "
         "target/real-traces; python3 sim/scripts/real_traces_md.py target/real-traces --json > "
         "docs/data/results/public-traces.json", "each row's: its load and LRU's engine utilisation columns")


if __name__ == "__main__":
    main()
