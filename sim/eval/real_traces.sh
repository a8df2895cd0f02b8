#!/usr/bin/env bash
# The public traces of docs/results.md ("Real traces"), at the load and capacities fixed before any
# CacheSage run on them (docs/workloads.md gives where the files come from):
#
#   bash sim/eval/real_traces.sh KV_CACHE_TESTER_TRACES_DIR MOONCAKE_TRACES_DIR [OUT_DIR]
#
# Imports the traces (unless OUT_DIR has them), then replays each at each capacity under every evaluation policy, two
# replays at a time; one JSON per (trace, capacity, load) in OUT_DIR (default target/real-traces).
# Needs a release build and `cargo xtask build-policies`. About 75 minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
cc_dir="$1"
mc_dir="$2"
out="${3:-target/real-traces}"
bin="${AGENTRT_BIN:-${CARGO_TARGET_DIR:-target}/release/agentrt}"
# The components just built, never copies embedded in an older binary.
components="${AGENTRT_COMPONENTS_DIR:-${CARGO_TARGET_DIR:-target}/components}"
mkdir -p "$out"
policies=lru,ttl,arc,session-retain,cachesage,belady
guard_off=cachesage:guard=false

[[ -f "$out/cc100.jsonl" ]] || "$bin" sim import kv-cache-tester "$cc_dir" --max-context 128000 --conversations 100 --out "$out/cc100.jsonl"
[[ -f "$out/mc-conv.jsonl" ]] || "$bin" sim import mooncake "$mc_dir/conversation_trace.jsonl" --out "$out/mc-conv.jsonl"
[[ -f "$out/mc-conv-chained.jsonl" ]] || "$bin" sim import mooncake "$mc_dir/conversation_trace.jsonl" --sessions chained --out "$out/mc-conv-chained.jsonl"
[[ -f "$out/mc-syn.jsonl" ]] || "$bin" sim import mooncake "$mc_dir/synthetic_trace.jsonl" --out "$out/mc-syn.jsonl"

# (trace, capacity fraction, load). Claude Code at four capacities; Mooncake at 5 % and 15 %
# (conversations at 10 % too); the guard's own effect (`cachesage:guard=false`) on cc100.
units=()
for f in 0.025 0.05 0.08 0.10; do units+=("cc100 $f users8"); done
for t in mc-conv mc-conv-chained mc-syn; do
    for f in 0.05 0.15; do units+=("$t $f util50"); done
done
units+=("mc-conv 0.10 util50")
# Saturated: the recorded rate on one engine. And the figures issue 22 reported for chained
# Mooncake turns (arrivals ×4 at 5 %, the recorded rate at 15 %), with serve's session ends and
# with the oracle's, as the simulator then told policies.
units+=("mc-conv-chained 0.15 recorded" "mc-conv-chained 0.15 recorded-oracle")
units+=("mc-conv-chained 0.05 arrivals4" "mc-conv-chained 0.05 arrivals4-oracle")
# REAL_TRACES_UNITS="cc100 0.025 users8;…" replays only those rows.
if [[ -n "${REAL_TRACES_UNITS:-}" ]]; then
    IFS=';' read -r -a units <<<"$REAL_TRACES_UNITS"
fi

run_unit() {
    local trace="$1" f="$2" load="$3"
    local flags=()
    case "$load" in
        util50) flags=(--target-utilisation 0.5) ;;
        users8 | recorded) flags=() ;;
        arrivals4) flags=(--arrival-scale 4) ;;
        arrivals4-oracle) flags=(--arrival-scale 4 --session-ends oracle) ;;
        recorded-oracle) flags=(--session-ends oracle) ;;
    esac
    local list="$policies"
    [[ "$trace" == cc100 ]] && list="$policies,$guard_off"
    "$bin" sim run --trace "$out/$trace.jsonl" --capacity-fraction "$f" "${flags[@]}" --components "$components" \
        --policies "$list" --json "$out/$trace-$f-$load.json" >"$out/$trace-$f-$load.txt" 2>&1
    echo "$trace $f $load done"
}
export -f run_unit
export bin out policies guard_off components
printf '%s\n' "${units[@]}" | xargs -P 2 -L 1 bash -c 'run_unit $0 $1 $2'
