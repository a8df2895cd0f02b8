#!/usr/bin/env bash
# The KV hierarchy's figures (docs/hierarchy.md): each trace with a host tier of 4× its GPU cache,
# under vLLM's host policies (lru, arc) and ranked by the replayed policy (`policy`: CacheSage over
# both tiers, the lru component, and two-tier Bélády), beside the same cache without a host tier.
#
#   bash sim/eval/hierarchy.sh KV_CACHE_TESTER_TRACES_DIR MOONCAKE_TRACES_DIR [OUT_DIR]
#
# Imports the traces it needs (unless OUT_DIR has them); one JSON + text per (trace, host policy)
# in OUT_DIR (default target/hierarchy). Needs a release build and `cargo xtask build-policies`.
# Loads and capacities are the public-trace protocol's (docs/results.md), chosen before this ran.
set -euo pipefail
cd "$(dirname "$0")/../.."
cc_dir="$1"
mc_dir="$2"
out="${3:-target/hierarchy}"
bin="${AGENTRT_BIN:-${CARGO_TARGET_DIR:-target}/release/agentrt}"
components="${AGENTRT_COMPONENTS_DIR:-${CARGO_TARGET_DIR:-target}/components}"
mkdir -p "$out"

[[ -f "$out/fleet.jsonl" ]] || "$bin" sim gen --workload fleet --out "$out/fleet.jsonl"
# `--cc-waits recorded`: the tables of docs/hierarchy.md were measured before the import bounded
# waits by the calls' timestamps; this keeps them reproducible.
[[ -f "$out/cc100.jsonl" ]] || "$bin" sim import kv-cache-tester "$cc_dir" --max-context 128000 --conversations 100 --cc-waits recorded --out "$out/cc100.jsonl"
[[ -f "$out/mc-conv.jsonl" ]] || "$bin" sim import mooncake "$mc_dir/conversation_trace.jsonl" --out "$out/mc-conv.jsonl"

# (trace, GPU cache flags, host blocks = 4 × the GPU cache, load flags).
units=(
    "fleet|--capacity-blocks 28323|113292|"
    "cc100|--capacity-fraction 0.025|67268|"
    "cc100|--capacity-fraction 0.05|134540|"
    "mc-conv|--capacity-fraction 0.05|1132584|--target-utilisation 0.5"
)
# UNITS="fleet cc100" picks units by trace name, in that order.
if [[ -n "${UNITS:-}" ]]; then
    picked=()
    for name in $UNITS; do
        for u in "${units[@]}"; do [[ "${u%%|*}" == "$name" ]] && picked+=("$u"); done
    done
    units=("${picked[@]}")
fi

# One replay, unless its JSON exists or another run of this script has claimed it: the script
# resumes where it stopped, and several copies may share the work.
replay() {
    local name="$1"
    shift
    [[ -f "$out/$name.json" ]] && return 0
    mkdir "$out/$name.claimed" 2>/dev/null || return 0
    "$bin" "$@" --json "$out/$name.json" >"$out/$name.txt" 2>&1 || echo "$name failed: see $out/$name.txt"
    rmdir "$out/$name.claimed"
}
run_unit() {
    IFS='|' read -r trace cache host load <<<"$1"
    local tag="$trace-${cache##* }"
    local common=(sim run --trace "$out/$trace.jsonl" $cache $load --components "$components")
    replay "$tag-none" "${common[@]}" --policies lru,cachesage,belady
    for hp in lru arc; do
        replay "$tag-$hp" "${common[@]}" --policies lru,cachesage --host-blocks "$host" --host-policy "$hp"
    done
    replay "$tag-policy" "${common[@]}" --policies lru,cachesage,belady \
        --host-blocks "$host" --host-policy policy
    echo "$tag done"
}
export -f run_unit replay
export bin out components
printf '%s\n' "${units[@]}" | xargs -P "${JOBS:-1}" -I{} bash -c 'run_unit "$0"' {}
