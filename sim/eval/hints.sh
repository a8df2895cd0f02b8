#!/usr/bin/env bash
# docs/results.md "With hints": what a framework's lifecycle hints are worth on the public traces,
# at the loads and capacities of sim/eval/real_traces.sh (never changed for these rows):
#
#   bash sim/eval/hints.sh KV_CACHE_TESTER_TRACES_DIR MOONCAKE_TRACES_DIR [OUT_DIR]
#
# Imports the traces with their hints (unless OUT_DIR has them), then replays each row: `--hints
# none|closed|all` and `--hint-coverage`. LRU and Bélády hear no hints, so they run once per
# (trace, capacity, load), in the `none` row; session-retain and CacheSage run in every row, and
# closed-first (LRU with closed sessions' blocks first, the hints' baseline) in every hinted one. One
# JSON per row in OUT_DIR (default target/hints); `python3 sim/scripts/hints_md.py OUT_DIR` prints
# the table. Needs a release build and `cargo xtask build-policies`.
set -euo pipefail
cd "$(dirname "$0")/../.."
cc_dir="$1"
mc_dir="$2"
out="${3:-target/hints}"
bin="${AGENTRT_BIN:-${CARGO_TARGET_DIR:-target}/release/agentrt}"
components="${AGENTRT_COMPONENTS_DIR:-${CARGO_TARGET_DIR:-target}/components}"
mkdir -p "$out"

[[ -f "$out/cc100.jsonl" ]] || "$bin" sim import kv-cache-tester "$cc_dir" --max-context 128000 --conversations 100 --out "$out/cc100.jsonl"
[[ -f "$out/mc-conv-chained.jsonl" ]] || "$bin" sim import mooncake "$mc_dir/conversation_trace.jsonl" --sessions chained --out "$out/mc-conv-chained.jsonl"

# (trace, capacity fraction, load, hints, coverage). The `none` rows re-measure docs/results.md's
# public-trace rows; cc100's hints are closings + waits (tool or user, from each call's stop
# reason), chained Mooncake's closings only (the source says nothing of waits).
units=(
    "cc100 0.025 users8 none 1"
    "cc100 0.025 users8 closed 1"
    "cc100 0.025 users8 all 1"
    "cc100 0.025 users8 all 0.5"
    "cc100 0.05 users8 none 1"
    "cc100 0.05 users8 all 1"
    "cc100 0.05 users8 all 0.5"
    "mc-conv-chained 0.05 util50 none 1"
    "mc-conv-chained 0.05 util50 closed 1"
    "mc-conv-chained 0.05 util50 closed 0.5"
    "mc-conv-chained 0.15 util50 none 1"
    "mc-conv-chained 0.15 util50 closed 1"
    "mc-conv-chained 0.15 util50 closed 0.5"
    "mc-conv-chained 0.05 arrivals4 none 1"
    "mc-conv-chained 0.05 arrivals4 closed 1"
)
# HINTS_UNITS="cc100 0.025 users8 all 1;…" replays only those rows.
if [[ -n "${HINTS_UNITS:-}" ]]; then
    IFS=';' read -r -a units <<<"$HINTS_UNITS"
fi

run_unit() {
    local trace="$1" f="$2" load="$3" hints="$4" coverage="$5"
    local flags=()
    case "$load" in
        util50) flags=(--target-utilisation 0.5) ;;
        users8) flags=() ;;
        arrivals4) flags=(--arrival-scale 4) ;;
    esac
    # closed-first is LRU exactly without hints: it runs where hints are told.
    local list=closed-first,session-retain,cachesage
    [[ "$hints" == none ]] && list=lru,session-retain,cachesage,belady
    local name="$trace-$f-$load-$hints-$coverage"
    "$bin" sim run --trace "$out/$trace.jsonl" --capacity-fraction "$f" "${flags[@]}" --components "$components" \
        --hints "$hints" --hint-coverage "$coverage" --policies "$list" --json "$out/$name.json" >"$out/$name.txt" 2>&1
    echo "$name done"
}
export -f run_unit
export bin out components
printf '%s\n' "${units[@]}" | xargs -P "${HINTS_JOBS:-2}" -L 1 bash -c 'run_unit $0 $1 $2 $3 $4'
