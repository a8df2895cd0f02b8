#!/usr/bin/env bash
# README's operator quickstart, run as written: the commands are read from README.md itself (the
# ```sh block after the line `<!-- operator quickstart: … -->`), so README and this test cannot
# drift, and run in order by bash in the repository root, nothing added. Then it checks what the
# quickstart promises, from what its commands printed:
#
#   - the vLLM plugin connected to `agentrt serve` (`agentrt_engine_plugin_connected` ≥ 1);
#   - vLLM asked for eviction rankings and the policy answered them (`agentrt_engine_rank_
#     requests_total` > 0, none of them `rank_fallbacks_total`);
#   - the hot swap answered 200 with the new policy (`"policy":"lru"`);
#   - the block ran to its end (its last line stops both servers);
#   - the checkout is as clean as before: packaging (`cargo xtask dist`) wrote nothing into it
#     (no build/, no *.egg-info).
#
# Needs what the block needs: the Rust toolchain, python3, openssl, curl, ports 8000 and 8080 free,
# and /run writable (root; as another user, README says to pick a folder of your own). .ci/run
# calls it after the tests, when vLLM's venv (AGENTRT_VLLM_VENV) is current, so its setup-venv.sh
# line only checks the venv. Everything the block starts runs in a process group of its own, which
# is stopped when this script exits, whatever happened. Bounded: 40 minutes, room for the release
# build and the vLLM venv of a checkout that has neither (in CI both exist: about 3 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

LIMIT_S=2400
say() { printf '[quickstart %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() {
    say "FAILED: $*" >&2
    [[ -f "${log:-}" ]] && { echo "--- what the quickstart printed ---" >&2; cat "$log" >&2; }
    exit 1
}

block="$(awk '/^<!-- operator quickstart:/ { marker = 1; next }
              marker && /^```sh$/ { inside = 1; next }
              inside && /^```$/ { exit }
              inside { print }' README.md)"
[[ -n "$block" ]] || fail "README.md has no \`\`\`sh block after '<!-- operator quickstart:'"

work="$(mktemp -d)"
log="$work/quickstart.log"
printf '%s\n' "$block" >"$work/quickstart.sh"
# What the checkout holds besides its files: the same after the block, but for what running vLLM
# from it makes by design (bytecode, the venv's link, the editable plugin's metadata).
checkout_state() {
    git status --porcelain --ignored |
        grep -Ev '__pycache__/$|^!! \.venv-vllm$|^!! adapters/vllm/[^/]*\.egg-info/$' || true
}
checkout_state >"$work/status-before"

say "running README's operator quickstart ($(wc -l <"$work/quickstart.sh") lines)"
started=$SECONDS
# A session of its own: its process group holds every server the block starts.
setsid bash -c 'echo $$ >"$1/group"; exec bash -euo pipefail "$1/quickstart.sh"' _ "$work" >"$log" 2>&1 &
runner=$!
stop_group() {
    local group
    group="$(cat "$work/group" 2>/dev/null || true)"
    [[ -n "$group" ]] || return 0
    kill -TERM -- "-$group" 2>/dev/null || return 0
    for _ in $(seq 30); do
        kill -0 -- "-$group" 2>/dev/null || return 0
        sleep 1
    done
    kill -KILL -- "-$group" 2>/dev/null || true
}
trap 'stop_group; rm -rf "$work"' EXIT

while kill -0 "$runner" 2>/dev/null; do
    ((SECONDS - started < LIMIT_S)) || fail "still running after ${LIMIT_S} s"
    sleep 2
done
rc=0
wait "$runner" || rc=$?
elapsed=$((SECONDS - started))
((rc == 0)) || fail "the quickstart exited with $rc after ${elapsed} s"

connected="$(sed -n 's/^agentrt_engine_plugin_connected \([0-9]*\)$/\1/p' "$log" | head -n 1)"
((${connected:-0} >= 1)) || fail "agentrt_engine_plugin_connected is ${connected:-missing}, not ≥ 1"
ranked="$(sed -n 's/^agentrt_engine_rank_requests_total \([0-9]*\)$/\1/p' "$log" | tail -n 1)"
fallbacks="$(sed -n 's/^agentrt_engine_rank_fallbacks_total \([0-9]*\)$/\1/p' "$log" | tail -n 1)"
((${ranked:-0} > 0)) || fail "no eviction was ranked (agentrt_engine_rank_requests_total ${ranked:-missing})"
[[ "${fallbacks:-}" == 0 ]] || fail "the policy failed rankings (agentrt_engine_rank_fallbacks_total ${fallbacks:-missing})"
grep -q '"policy":"lru"' "$log" || fail "the hot swap did not answer with the new policy"

checkout_state >"$work/status-after"
if ! diff -u "$work/status-before" "$work/status-after" >"$work/status-diff"; then
    cat "$work/status-diff" >&2
    fail "the quickstart left files in the checkout (above)"
fi

echo "--- what the quickstart's checks printed ---"
grep -E '^agentrt_engine_|"policy":' "$log"
say "passed in ${elapsed} s: plugin connected ($connected), $ranked rankings by the policy, hot swap to lru"
echo "1 passed, 0 failed"
