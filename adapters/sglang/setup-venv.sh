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
venv="${AGENTRT_SGLANG_VENV:-$HOME/.cache/agentrt/venv-sglang}"
marker="$venv/.agentrt-sglang-recipe"
SGLANG_VERSION=0.5.23
TORCH_VERSION=2.14.1 # sglang 0.5.23's pin
# What `import sglang.srt.mem_cache.radix_cache` (and the plugin's registry hook) imports, found
# by importing it until nothing was missing; versions come from SGLang's pins where it has them.
IMPORTED=(numpy orjson psutil pybase64 requests pillow starlette msgspec pydantic pyzmq tqdm IPython
    aiohttp transformers torchvision dill apache-tvm-ffi sentencepiece compressed-tensors gguf
    tokenizers zstandard xxhash)

step() { printf '[setup-sglang %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup-sglang] FAILED: %s\n' "$*" >&2; exit 1; }
trap 'die "command failed at line $LINENO (see output above)"' ERR

plugin_hash() { sha256sum "$here/pyproject.toml" | cut -c1-16; }
want="recipe=$RECIPE torch=$TORCH_VERSION sglang=$SGLANG_VERSION plugin=$(plugin_hash)"

check_imports() {
    "$venv/bin/python" -W ignore - <<'PY'
import importlib.metadata as md
import sglang.srt.mem_cache.radix_cache  # noqa: F401  (the class the plugin patches)
import agentrt_sglang, agentrt_engine  # noqa: E401,F401
eps = [ep.name for ep in md.entry_points(group="sglang.srt.plugins")]
assert "agentrt" in eps, f"agentrt plugin entry point missing: {eps}"
print("sglang", md.version("sglang"), "| torch", md.version("torch"), "| plugins", eps)
PY
}

editable_from() {
    "$venv/bin/python" -c "import $1, os; print(os.path.dirname(os.path.dirname(os.path.realpath($1.__file__))))" 2>/dev/null || true
}

if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -x "$venv/bin/python" ]]; then
    # A venv kept between checkouts must load *this* checkout's plugin: re-point the editable
    # install when it points elsewhere (seconds, no downloads).
    if [[ "$(editable_from agentrt_sglang)" != "$(realpath "$here")" ]]; then
        step "re-pointing the editable agentrt_sglang install at $here"
        "$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e "$here"
    fi
    step "venv at $venv is current ($want); checking imports"
    check_imports || die "venv is marked complete but SGLang's radix cache does not import; delete $venv and re-run"
    exit 0
fi

pick_python() {
    local c
    for c in "${AGENTRT_SGLANG_PYTHON:-}" python3.12 /root/.pyenv/versions/3.12*/bin/python3 python3.11 python3; do
        [[ -n "$c" ]] || continue
        command -v "$c" >/dev/null 2>&1 || [[ -x "$c" ]] || continue
        if "$c" -c 'import sys, venv; sys.exit(0 if (3, 10) <= sys.version_info[:2] < (3, 14) else 1)' >/dev/null 2>&1; then
            echo "$c"; return 0
        fi
    done
    return 1
}
py="$(pick_python)" || die "no Python 3.10-3.13 with the venv module found (set AGENTRT_SGLANG_PYTHON)"
step "building venv at $venv with $py ($("$py" --version 2>&1))"
start=$SECONDS
rm -f "$marker"
mkdir -p "$(dirname "$venv")"
[[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip packaging

step "torch==$TORCH_VERSION from PyPI (runs on CPU; its CUDA libraries come along and stay unused)"
"${pip[@]}" install --progress-bar off "torch==$TORCH_VERSION"

step "sglang==$SGLANG_VERSION --no-deps"
"${pip[@]}" install --progress-bar off --no-deps "sglang==$SGLANG_VERSION"

step "what the radix cache imports, at SGLang's pins"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
meta="$site/sglang-$SGLANG_VERSION.dist-info/METADATA"
[[ -f "$meta" ]] || die "no $meta after installing sglang"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# SGLang's exact pins (==) as constraints, so the imported modules are the versions it runs with.
"$venv/bin/python" - "$meta" > "$work/constraints.txt" <<'PY'
import sys
from email.parser import Parser
from packaging.requirements import Requirement

meta = Parser().parse(open(sys.argv[1], encoding="utf-8"))
for line in meta.get_all("Requires-Dist") or []:
    req = Requirement(line)
    if any(spec.operator == "==" for spec in req.specifier):
        print(f"{req.name}{req.specifier}")
PY
"${pip[@]}" install --progress-bar off -c "$work/constraints.txt" "${IMPORTED[@]}"

step "test tools and the agentrt plugin (editable; it carries agentrt_engine from adapters/lib/python)"
"${pip[@]}" install --progress-bar off pytest msgpack
"${pip[@]}" install --progress-bar off --no-deps --no-build-isolation -e "$here"

step "checking: SGLang's radix cache, the plugin entry point"
check_imports
echo "$want" > "$marker"
step "done in $((SECONDS - start)) s; venv size $(du -sh "$venv" | cut -f1)"
