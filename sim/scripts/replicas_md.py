#!/usr/bin/env python3
"""The simulator's replica table in docs/replicas.md from sim/eval/replicas.sh's JSON.

    python3 sim/scripts/replicas_md.py [DIR]      # default docs/img/replicas

One row per (workload, policy), one column per router: hit rate % / mean TTFT ms; a router whose
run is missing shows "–".
"""
import json
import sys
from pathlib import Path

WORKLOADS = ["mmlu", "mtbench", "gaia", "gsm8k", "humaneval", "fleet"]
ROUTERS = [
    ("round-robin", "round-robin"),
    ("session", "session"),
    ("kv", "kv (Dynamo)"),
    ("agentrt", "agentrt"),
    ("cache-aware", "cache_aware"),
    ("kv-aware", "kv_aware"),
    ("kv-aware-affinity", "kv_aware + affinity 60 s"),
]
POLICIES = ["lru", "cachesage"]


def cell(path: Path, policy: str) -> str:
    if not path.is_file():
        return "–"
    p = json.loads(path.read_text())["policies"].get(policy)
    if p is None:
        return "–"
    return f"{100 * p['hit_rate']:.1f} / {p['ttft_ms_mean']:.0f}"


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img/replicas")
    print("| workload | policy | " + " | ".join(title for _, title in ROUTERS) + " |")
    print("|---|---|" + "---:|" * len(ROUTERS))
    for w in WORKLOADS:
        for policy in POLICIES:
            cells = [cell(root / f"{w}-{r}.json", policy) for r, _ in ROUTERS]
            print(f"| {w} | {policy} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
