# A pinned virtual environment from PyPI, for the test peers that install with pip alone (NVIDIA
# Dynamo's selection service, vLLM's router). Sourced by their setup-venv.sh:
#
#   TAG=dynamo VENV=... WANT="recipe=1 pkg=1.2.3" PACKAGES=(pkg==1.2.3) PYTHON_VAR=AGENTRT_..._PYTHON
#   check() { ...; }   # exits non-zero when the venv's tool does not start
#   source adapters/lib/pip-venv.sh; pip_venv
#
# Idempotent: a marker file records the recipe; a current venv is only checked.

step() { printf '[setup-%s %s] %s\n' "$TAG" "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup-%s] FAILED: %s\n' "$TAG" "$*" >&2; exit 1; }

# The first Python >= 3.10 with the venv module: $PYTHON_VAR's value, then the usual names.
pick_python() {
    local c
    for c in "${!PYTHON_VAR:-}" python3.12 /root/.pyenv/versions/3.12*/bin/python3 python3.11 python3; do
        [[ -n "$c" ]] || continue
        command -v "$c" >/dev/null 2>&1 || [[ -x "$c" ]] || continue
        if "$c" -c 'import sys, venv; sys.exit(0 if sys.version_info[:2] >= (3, 10) else 1)' >/dev/null 2>&1; then
            echo "$c"; return 0
        fi
    done
    return 1
}

pip_venv() {
    local marker="$VENV/.agentrt-$TAG-recipe" py
    trap 'die "command failed at line $LINENO (see output above)"' ERR
    if [[ -f "$marker" && "$(cat "$marker")" == "$WANT" && -x "$VENV/bin/python" ]]; then
        check || die "the venv at $VENV does not start its tool (delete $VENV and re-run)"
        step "venv at $VENV is current ($WANT)"
        return 0
    fi
    py="$(pick_python)" || die "no Python >= 3.10 with the venv module found (set $PYTHON_VAR)"
    step "building venv at $VENV with $py ($("$py" --version 2>&1))"
    rm -f "$marker"
    mkdir -p "$(dirname "$VENV")"
    [[ -x "$VENV/bin/python" ]] || "$py" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q --progress-bar off "${PACKAGES[@]}"
    check || die "the venv at $VENV does not start its tool (delete $VENV and re-run)"
    echo "$WANT" >"$marker"
    step "done: $VENV"
}
