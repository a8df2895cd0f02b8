#!/usr/bin/env bash
# A policy author's path, outside any checkout, timed step by step: `agentrt policy new` in a
# temporary folder, `agentrt policy build --test` (the component, the project's own tests, the
# conformance kit), then the full `agentrt sim table --quick` with the new policy beside LRU,
# CacheSage and Bélády. Prints each step's seconds and, from the table's results.json, the new
# policy's share of the replay time, its per-event and per-item costs.
#
# usage: sdk/scripts/standalone-walk.sh [AGENTRT] [LANGUAGE]
#   AGENTRT: the binary (default: `agentrt` on PATH; a release build — a debug one compiles the
#            component's machine code tens of times slower); LANGUAGE: rust, python (default), js,
#            c, go. Each step is bounded by $WALK_STEP_TIMEOUT seconds (default 1800).
set -euo pipefail
agentrt="$(realpath "${1:-$(command -v agentrt)}")"
language="${2:-python}"
limit="${WALK_STEP_TIMEOUT:-1800}"
work="$(mktemp -d "${TMPDIR:-/tmp}/agentrt-walk-XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

declare -a timings
step() {
    local name="$1"
    shift
    local start=$SECONDS
    echo "[walk] $name …" >&2
    timeout "$limit" "$@"
    timings+=("$name: $((SECONDS - start)) s")
}

step "policy new" "$agentrt" policy new mine --lang "$language" > /dev/null
cd mine
step "policy build --test" "$agentrt" policy build --test > build.log 2>&1 || { cat build.log; exit 1; }
grep -E "^(built|tested) |compiled in|properties:" build.log >&2
step "sim table --quick" "$agentrt" sim table --quick --policies lru,cachesage,belady,target/mine.wasm \
    --out table > table.log 2>&1 || { tail -40 table.log; exit 1; }

echo "[walk] $language, in $work (outside any checkout); agentrt: $agentrt"
printf '  %s\n' "${timings[@]}"
python3 - table/results.json <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))
replays = [
    (name, replay)
    for workload in results["workloads"].values()
    for cell in [workload["headline"], *workload.get("sweep", [])]
    for name, replay in cell["policies"].items()
]
walls = {}
for name, replay in replays:
    walls[name] = walls.get(name, 0.0) + replay["wall_s"]
total = sum(walls.values()) or 1.0
print(f"  the table: {results['wall_s']:.0f} s of wall time; replay seconds by policy, summed:")
for name, wall in sorted(walls.items(), key=lambda kv: -kv[1]):
    print(f"    {name:<12} {wall:8.1f} s  {100 * wall / total:5.1f} %")
mine = [replay for name, replay in replays if name == "mine"]
observed = sum(r["observe_us_per_event"] * r["events"] for r in mine) / 1e6
rankings = sum(r["score_calls"] for r in mine)
per_item = sum(r["score_us_per_item"] for r in mine) / max(len(mine), 1)
print(f"  mine: {len(mine)} replays; {sum(r['events'] for r in mine)} events, {observed:.1f} s observing them; "
      f"{rankings} rankings at {per_item:.2f} µs per item scored (mean of the replays)")
PY
