#!/usr/bin/env bash
# docs/admission.md: stock vLLM's knee on each workload and every admission arm past it — the
# loads below were fixed from the workloads' sources (docs/workloads.md) before any arm ran:
#
#   bash sim/eval/knee.sh [KV_CACHE_TESTER_TRACES_DIR] [OUT_DIR]
#
# - swe: SWE-agent-shaped closed-loop programs, --axis programs 4 → 64;
# - fleet: the generator's concurrency 18 → 144;
# - cc100: the kv-cache-tester import of sim/eval/real_traces.sh, --users 8 → 96 (only with the
#   traces' folder, or OUT_DIR/cc100.jsonl already imported);
# - cpu: the tiny CPU model's regime (`--latency prefill-free`, sim/eval/cpu_programs.py), where
#   recomputing is nearly free and admission must stay out of the way;
# - two tenants on one engine (sim/eval/two_tenants.py): a steady tenant alone, then beside one
#   flooding sessions.
#
# Every replay runs on the headline cache (28,323 blocks of 16 tokens, an H100 serving
# Llama-3.1-8B) with the H100 latency model unless said; LRU ranks the cache; no lifecycle hints
# (`--hints none`): the clients' release calls are the only closings. One folder per workload in
# OUT_DIR (default target/knee): results.json, table.md, knee.svg/.png; a progress line per replay
# on stderr. Needs a release build and `cargo xtask build-policies` (the working-set component).
# About 17 minutes on two cores (swe 5, half-wrong hints 1, fleet 2, cc100 3, cpu 1, tenants 5).
set -euo pipefail
cd "$(dirname "$0")/../.."
cc_dir="${1:-}"
out="${2:-target/knee}"
bin="${AGENTRT_BIN:-${CARGO_TARGET_DIR:-target}/release/agentrt}"
# The components just built, never copies embedded in an older binary.
export AGENTRT_COMPONENTS_DIR="${AGENTRT_COMPONENTS_DIR:-${CARGO_TARGET_DIR:-target}/components}"
mkdir -p "$out"
arms=vllm,cap,thunderagent,thunderagent-decay,continuum,working-set

"$bin" sim knee --workload swe --axis programs --points 4,8,12,16,24,32,48,64 --arms "$arms" --out "$out/swe"
# How the closings reach working-set admission: no release calls (closings from the idle rule
# only, what `serve` sees without hints), and the frameworks' closing hints instead.
"$bin" sim knee --workload swe --axis programs --points 12,24,48 --arms working-set:releases=false \
    --out "$out/swe-norelease"
"$bin" sim knee --workload swe --axis programs --points 12,24,48 --hints closed \
    --arms working-set:releases=false --out "$out/swe-hints-closed"
# Half of the closings wrong: the same programs (the trace the swe sweep generates), every closing
# session also closing at a random earlier call and calling again (sim/eval/adversarial.py --lie 1:
# one closing in two is a lie), heard as the frameworks' closing hints — against the request cap,
# which hears none.
"$bin" sim gen --workload swe --sessions 256 --concurrency 64 --out "$out/swe256.jsonl"
python3 sim/eval/adversarial.py "$out/swe256.jsonl" "$out/swe256-half-wrong.jsonl" --lie 1
"$bin" sim knee --trace "$out/swe256-half-wrong.jsonl" --axis programs --points 4,8,12,16,24,32,48,64 \
    --hints closed --arms cap,working-set:releases=false --out "$out/swe-half-wrong"
"$bin" sim knee --workload fleet --axis concurrency --points 18,36,72,108,144 --arms "$arms" --out "$out/fleet"

if [[ ! -f "$out/cc100.jsonl" && -n "$cc_dir" ]]; then
    "$bin" sim import kv-cache-tester "$cc_dir" --max-context 128000 --conversations 100 --out "$out/cc100.jsonl"
fi
if [[ -f "$out/cc100.jsonl" ]]; then
    "$bin" sim knee --trace "$out/cc100.jsonl" --axis users --base-users 8 --points 8,16,32,48,64,96 \
        --arms "$arms" --out "$out/cc100"
else
    echo "knee.sh: no kv-cache-tester traces given: cc100 skipped" >&2
fi

# The tiny CPU model's regime: the real-vLLM check's cache (300 blocks of 32 tokens).
python3 sim/eval/cpu_programs.py > "$out/cpu-programs.jsonl"
"$bin" sim knee --trace "$out/cpu-programs.jsonl" --axis programs --points 8,16,32,64 \
    --capacity-blocks 600 --latency prefill-free --arms vllm,cap,thunderagent,working-set --out "$out/cpu"

# Two tenants: the steady one alone, then beside the flood (starts fixed by the script).
"$bin" sim gen --workload swe --sessions 400 --out "$out/swe400.jsonl"
python3 sim/eval/two_tenants.py "$out/swe400.jsonl" "$out/alone.jsonl" "$out/together.jsonl"
"$bin" sim knee --trace "$out/alone.jsonl" --axis users --base-users 1 --points 1 \
    --arms vllm,cap,thunderagent,working-set --out "$out/tenants-alone"
"$bin" sim knee --trace "$out/together.jsonl" --axis users --base-users 1 --points 1 \
    --arms vllm,cap,thunderagent,working-set --out "$out/tenants-together"
