#!/usr/bin/env bash
# Installs SGLang's Python code (not its server: see below) into a virtual environment, with a CPU
# torch and the agentrt SGLang plugin, for the adapter's tests against SGLang's real RadixCache.
#
#   bash adapters/sglang/setup-venv.sh          # into ~/.cache/agentrt/venv-sglang
#   AGENTRT_SGLANG_VENV=/path bash adapters/sglang/setup-venv.sh
#   AGENTRT_SGLANG_PYTHON=python3.12 ...        # the interpreter to build the venv from
#
# Why the detour: the `sglang` 0.5.23 wheel requires CUDA-only packages (flashinfer-python[cu13],
# cuda-python, nvidia-cutlass-dsl, sglang-kernel, flash-attn-4, deep-ep, …), and PyPI has no CPU
# build of its kernels, so neither `pip install sglang` nor its server works on a machine without
# an NVIDIA GPU. The radix cache is plain Python over torch tensors: the wheel goes in with
# --no-deps, next to PyPI's torch at SGLang's own pin (it runs on CPU) and the modules that
# `sglang.srt.mem_cache.radix_cache` imports on its way in, each at the version SGLang's metadata
# pins when it pins one (a constraints file made from the wheel's Requires-Dist).
#
# Idempotent: a marker file records the recipe and the plugin's pyproject hash; when they match,
# the script only checks that the radix cache and the plugin import and exits (seconds). ~6 GB,
# ~3-5 minutes from a cold pip cache.
set -euo pipefail

RECIPE=2 # bump when the steps below change
here="$(cd "$(dirname "$0")" && pwd)"
TAG=sglang
VENV="${AGENTRT_SGLANG_VENV:-$HOME/.cache/agentrt/venv-sglang}"
PYTHON_VAR=AGENTRT_SGLANG_PYTHON
PY_MIN="3, 10" PY_BELOW="3, 14"
SGLANG_VERSION=0.5.23
TORCH_VERSION=2.14.1 # sglang 0.5.23's pin
# What `import sglang.srt.mem_cache.radix_cache` (and the plugin's registry hook) imports, found
# by importing it until nothing was missing; versions come from SGLang's pins where it has them.
IMPORTED=(numpy orjson psutil pybase64 requests pillow starlette msgspec pydantic pyzmq tqdm IPython
    aiohttp transformers torchvision dill apache-tvm-ffi sentencepiece compressed-tensors gguf
    tokenizers zstandard xxhash)

source "$here/../lib/pip-venv.sh"
trap 'die "command failed at line $LINENO (see output above)"' ERR

# The plugin's pyproject: its packages (agentrt_engine mapped from adapters/lib/python included).
plugin_hash() { sha256sum "$here/pyproject.toml" | cut -c1-16; }
WANT="recipe=$RECIPE torch=$TORCH_VERSION sglang=$SGLANG_VERSION plugin=$(plugin_hash)"

check_imports() {
    "$VENV/bin/python" -W ignore - <<'PY'
import importlib.metadata as md
import sglang.srt.mem_cache.radix_cache  # noqa: F401  (the class the plugin patches)
import agentrt_sglang, agentrt_engine  # noqa: E401,F401
eps = [ep.name for ep in md.entry_points(group="sglang.srt.plugins")]
assert "agentrt" in eps, f"agentrt plugin entry point missing: {eps}"
print("sglang", md.version("sglang"), "| torch", md.version("torch"), "| plugins", eps)
PY
}

if venv_current; then
    repoint_editable agentrt_sglang "$here"
    step "venv at $VENV is current ($WANT); checking imports"
    check_imports || die "venv is marked complete but SGLang's radix cache does not import; delete $VENV and re-run"
    exit 0
fi

start=$SECONDS
start_venv

engine_wheel_without_deps "$TORCH_VERSION" "runs on CPU; its CUDA libraries come along and stay unused" \
    sglang "$SGLANG_VERSION" sglang

step "what the radix cache imports, at SGLang's pins"
# SGLang's exact pins (==) as constraints, so the imported modules are the versions it runs with.
wheel_requirements pins "$meta" > "$work/constraints.txt"
"${pip[@]}" install --progress-bar off -c "$work/constraints.txt" "${IMPORTED[@]}"

step "test tools and the agentrt plugin (editable; it carries agentrt_engine from adapters/lib/python)"
"${pip[@]}" install --progress-bar off pytest msgpack
"${pip[@]}" install --progress-bar off --no-deps --no-build-isolation -e "$here"

step "checking: SGLang's radix cache, the plugin entry point"
check_imports
finish_venv
step "done in $((SECONDS - start)) s; venv size $(du -sh "$VENV" | cut -f1)"
