#!/usr/bin/env python3
"""The "With hints" table of docs/results.md, from the JSON files `sim/eval/hints.sh` writes.

    python3 sim/scripts/hints_md.py target/hints > table.md
    python3 sim/scripts/hints_md.py target/hints --json > docs/data/results/hints.json   # docs/results.md's table
    python3 sim/scripts/hints_md.py target/hints --seeds target/hints-s2 target/hints-s3 --json \
        > docs/data/results/hints-cc100-seeds.json      # cc100's rows over three import seeds

`--seeds`: the folders where hints.sh replayed cc100 imported with `sim import … --seed N`; the
table gives, per cc100 row, LRU's and Bélády's hit %, every other policy's share of the gap, and
CacheSage's hit % minus closed-first's (LRU's without hints), seed by seed (the first folder is
seed 1).

One row per (trace, capacity, load, hints told, coverage): LRU and Bélády from the same (trace,
capacity, load)'s `none` row (they hear no hints), closed-first's (LRU itself in a `none` row),
session-retain's and CacheSage's hit rates with those hints, each one's share of the LRU→Bélády
gap, and LRU's utilisation.
"""
import json
import sys
from pathlib import Path

from page_table import emit

TRACES = ["cc100", "mc-conv-chained"]
LOADS = {"users8": "8 users", "util50": "LRU util 50 %", "arrivals4": "arrivals ×4"}
HINTS = {"none": "none", "closed": "closed", "all": "closed + waits"}


def rows(folder: Path):
    for path in sorted(folder.glob("*.json")):
        d = json.loads(path.read_text())
        stem = path.stem
        trace = next(t for t in sorted(TRACES, key=len, reverse=True) if stem.startswith(t + "-"))
        frac, load, hints, coverage = stem[len(trace) + 1:].split("-")
        yield (trace, float(frac), load), hints, float(coverage), d


def share(x, lru, bel):
    gap = bel - lru
    return f"{(x - lru) / gap * 100:.0f} %" if gap > 0.001 else "–"


def seeds_table(folders):
    """cc100's rows, seed by seed: LRU's and Bélády's hit %, the others' share of the gap, and
    CacheSage against closed-first (LRU in a `none` row) in percentage points."""
    runs = [{(unit[1], hints, coverage): d["policies"] for unit, hints, coverage, d in rows(f) if unit[0] == "cc100"}
            for f in folders]
    out = []
    for frac, hints, coverage in sorted(runs[0], key=lambda k: (k[0], list(HINTS).index(k[1]), -k[2])):
        if not all((frac, hints, coverage) in r and (frac, "none", 1.0) in r for r in runs):
            continue
        cells = {"LRU": [], "Bélády": [], "closed-first": [], "session": [], "CacheSage": [], "vs": []}
        for r in runs:
            p, base = r[(frac, hints, coverage)], r[(frac, "none", 1.0)]
            lru, bel = base["lru"]["hit_rate"], base["belady"]["hit_rate"]
            cells["LRU"].append(f"{lru * 100:.1f}")
            cells["Bélády"].append(f"{bel * 100:.1f}")
            # Without hints closed-first is LRU exactly, so a `none` row does not run it.
            closed = p.get("closed-first", base["lru"])["hit_rate"]
            cells["closed-first"].append(share(closed, lru, bel))
            cells["session"].append(share(p["session-retain"]["hit_rate"], lru, bel))
            cells["CacheSage"].append(share(p["cachesage"]["hit_rate"], lru, bel))
            cells["vs"].append(f"{(p['cachesage']['hit_rate'] - closed) * 100:+.2f}")
        shares = ("closed-first", "session", "CacheSage")
        joined = {k: " / ".join(x.removesuffix(" %") if k in shares else x for x in v) + (" %" if k in shares else "")
                  for k, v in cells.items()}
        joined = {k: v.replace("-", "−") for k, v in joined.items()}
        if hints == "none":
            joined["closed-first"] = "(= LRU)"
        else:
            joined["LRU"] = joined["Bélády"] = ""
        out.append([f"{frac * 100:g} %", HINTS[hints], "–" if hints == "none" else f"{coverage * 100:.0f} %"]
                   + [joined[k] for k in cells])
    emit(["cc100", "hints", "coverage", "LRU", "Bélády", "closed-first", "session", "CacheSage",
          "CacheSage − closed-first, pp"], 3, out,
         "HINTS_UNITS=\"cc100 …\" bash sim/eval/hints.sh KV_CACHE_TESTER/traces MOONCAKE/FAST25-release/traces "
         "target/hints-sN, cc100.jsonl there imported with `sim import … --seed N`; python3 sim/scripts/hints_md.py "
         "target/hints --seeds target/hints-s2 target/hints-s3 --json > docs/data/results/hints-cc100-seeds.json",
         "cc100 as imported, 8 users, seeds 1 / 2 / 3")


def main():
    if "--seeds" in sys.argv:
        at = sys.argv.index("--seeds")
        seeds = [a for a in sys.argv[at + 1:] if not a.startswith("--")]
        return seeds_table([Path(sys.argv[1])] + [Path(f) for f in seeds])
    folder = Path(sys.argv[1])
    all_rows = list(rows(folder))
    base = {unit: d["policies"] for unit, hints, _, d in all_rows if hints == "none"}
    head = ["trace", "cache", "load", "util", "hints", "coverage", "LRU", "closed-first", "session", "CacheSage",
            "Bélády", "closed-first gap", "session gap", "CacheSage gap", "CacheSage Δ pp"]
    out = []
    key = lambda r: (TRACES.index(r[0][0]), list(LOADS).index(r[0][2]), r[0][1], list(HINTS).index(r[1]), -r[2])
    for unit, hints, coverage, d in sorted(all_rows, key=key):
        trace, frac, load = unit
        p, b = d["policies"], base.get(unit, {})
        if "lru" not in b or "belady" not in b:
            continue
        lru, bel = b["lru"]["hit_rate"], b["belady"]["hit_rate"]
        sess, sage = p["session-retain"]["hit_rate"], p["cachesage"]["hit_rate"]
        # Without hints closed-first is LRU exactly, so a `none` row does not run it.
        closed = p["closed-first"]["hit_rate"] if "closed-first" in p else lru
        cells = [trace, f"{frac * 100:g} % ({d['capacity_blocks']:,})", LOADS.get(load, load),
                 f"{b['lru']['utilisation'] * 100:.0f} %", HINTS[hints], f"{coverage * 100:.0f} %",
                 f"{lru * 100:.1f}", "(= LRU)" if hints == "none" else f"{closed * 100:.1f}",
                 f"{sess * 100:.1f}", f"{sage * 100:.1f}",
                 f"{bel * 100:.1f}", "–" if hints == "none" else share(closed, lru, bel), share(sess, lru, bel),
                 share(sage, lru, bel),
                 f"{(sage - lru) * 100:+.1f}"]
        out.append(cells)
    emit(head, 6, out, "bash sim/eval/hints.sh KV_CACHE_TESTER/traces MOONCAKE/FAST25-release/traces target/hints; "
         "python3 sim/scripts/hints_md.py target/hints --json > docs/data/results/hints.json",
         "each row's: its load and LRU's engine utilisation columns")


if __name__ == "__main__":
    main()
