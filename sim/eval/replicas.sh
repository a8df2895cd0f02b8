#!/usr/bin/env bash
# Two replicas behind each router model — round-robin, session, Dynamo's kv, agentrt, and vLLM's
# router's cache_aware and kv_aware (without and with session affinity) — on the six workloads
# (docs/replicas.md, "Simulator"; table: python3 sim/scripts/replicas_md.py OUT_DIR).
# Each replica has the quick table's cache (headline / 8 = 3,540 blocks of 16) and together they
# carry twice the quick table's traffic (sessions and concurrency = headline / 4).
#
#   bash sim/eval/replicas.sh [OUT_DIR]      # default docs/img/replicas; needs a release build
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-docs/img/replicas}"
bin="${AGENTRT_BIN:-${CARGO_TARGET_DIR:-target}/release/agentrt}"
mkdir -p "$out"
blocks=$((28323 / 8))
declare -A sessions=([mmlu]=1500 [mtbench]=2000 [gaia]=240 [gsm8k]=1600 [humaneval]=900 [fleet]=1200)
declare -A concurrency=([mmlu]=400 [mtbench]=600 [gaia]=60 [gsm8k]=400 [humaneval]=200 [fleet]=36)
for w in mmlu mtbench gaia gsm8k humaneval fleet; do
    trace="$out/$w.jsonl"
    "$bin" sim gen --workload "$w" --sessions $((sessions[$w] / 4)) \
        --concurrency "$(echo "${concurrency[$w]} / 4" | bc -l)" --out "$trace"
    # vLLM router's kv_aware with session affinity at serve's own session idle time (60 s),
    # chosen before the first run.
    for router in round-robin session kv agentrt cache-aware kv-aware kv-aware-affinity; do
        flags=(--router "$router")
        [[ "$router" == kv-aware-affinity ]] && flags=(--router kv-aware --kv-aware-session-affinity-ttl-secs 60)
        "$bin" sim run --trace "$trace" --replicas 2 "${flags[@]}" --capacity-blocks "$blocks" \
            --policies lru,cachesage --json "$out/$w-$router.json" >/dev/null
        echo "$w $router done"
    done
    rm -f "$trace"
done
