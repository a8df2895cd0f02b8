#!/usr/bin/env bash
# Installs NVIDIA Dynamo's standalone KV-aware selection service (`python -m dynamo.select_service`)
# into a virtual environment, for the multi-replica tests (host/router, adapters/vllm/tests).
#
#   bash adapters/dynamo/setup-venv.sh                 # into ~/.cache/agentrt/venv-dynamo
#   AGENTRT_DYNAMO_VENV=/path bash adapters/dynamo/setup-venv.sh
#
# The wheel carries the service as Rust in a native module (~75 MB); its only Python requirements
# are pydantic and uvloop. Idempotent: a marker file records the recipe; a current venv is only
# checked (the service prints its help) and the script exits.
set -euo pipefail

RECIPE=1 # bump when the steps below change
DYNAMO_VERSION=1.6.1
venv="${AGENTRT_DYNAMO_VENV:-$HOME/.cache/agentrt/venv-dynamo}"
marker="$venv/.agentrt-dynamo-recipe"
want="recipe=$RECIPE ai-dynamo-runtime=$DYNAMO_VERSION"

step() { printf '[setup-dynamo %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup-dynamo] FAILED: %s\n' "$*" >&2; exit 1; }
trap 'die "command failed at line $LINENO (see output above)"' ERR

check() {
    "$venv/bin/python" -m dynamo.select_service --help >/dev/null 2>&1 \
        || die "the selection service in $venv does not start (delete $venv and re-run)"
}

if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -x "$venv/bin/python" ]]; then
    check
    step "venv at $venv is current ($want)"
    exit 0
fi

pick_python() {
    local c
    for c in "${AGENTRT_DYNAMO_PYTHON:-}" python3.12 /root/.pyenv/versions/3.12*/bin/python3 python3.11 python3; do
        [[ -n "$c" ]] || continue
        command -v "$c" >/dev/null 2>&1 || [[ -x "$c" ]] || continue
        if "$c" -c 'import sys, venv; sys.exit(0 if sys.version_info[:2] >= (3, 10) else 1)' >/dev/null 2>&1; then
            echo "$c"; return 0
        fi
    done
    return 1
}
py="$(pick_python)" || die "no Python >= 3.10 with the venv module found (set AGENTRT_DYNAMO_PYTHON)"
step "building venv at $venv with $py ($("$py" --version 2>&1))"
rm -f "$marker"
mkdir -p "$(dirname "$venv")"
[[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check -q --progress-bar off "ai-dynamo-runtime==$DYNAMO_VERSION"
check
echo "$want" >"$marker"
step "done: $venv"
