#!/usr/bin/env bash
# Fetches vLLM's own tests/v1/core from PyPI's vLLM sdist (the version the CPU venv runs) and
# unpacks them under ~/.cache/agentrt, for tests/test_vllm_core_suite.py. Called by setup-venv.sh.
#
#   bash adapters/vllm/fetch-core-tests.sh VENV      # VENV: the vLLM venv (its pip does the download)
#   AGENTRT_VLLM_CORE_TESTS=/path ...                # where to unpack (default ~/.cache/agentrt/vllm-0.32.0-core-tests)
#
# Why the detour: `pip download` of an sdist prepares its metadata, and vLLM's setup.py needs
# setuptools-rust and setuptools-scm for that and names a device build; with VLLM_TARGET_DEVICE=empty
# and VLLM_VERSION_OVERRIDE it prepares metadata without compiling anything (seconds). The build
# tools go into a folder of their own (pip --target), not into the venv.
#
# Idempotent: a marker records the version and the sdist's sha256; a current copy is not fetched
# again. The unpacked vllm/v1/core must be byte-identical to the venv's: the suite tests the
# installed code, so a mismatch stops the script.
set -euo pipefail

VLLM_VERSION=0.32.0
SDIST_SHA256=d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad
SETUPTOOLS_RUST_VERSION=1.13.0
SETUPTOOLS_SCM_VERSION=10.3.4
venv="${1:?usage: fetch-core-tests.sh VENV}"
dest="${AGENTRT_VLLM_CORE_TESTS:-$HOME/.cache/agentrt/vllm-$VLLM_VERSION-core-tests}"
marker="$dest/.agentrt-core-tests"
want="vllm=$VLLM_VERSION sha256=$SDIST_SHA256"

TAG=vllm-core-tests
source "$(cd "$(dirname "$0")" && pwd)/../lib/pip-venv.sh" # step, die
trap 'die "command failed at line $LINENO (see output above)"' ERR

# test_kv_cache_utils.py::test_is_kv_cache_spec_uniform imports vLLM in a `python -O` child under a
# 60 s timeout. Without optimized bytecode (.opt-1.pyc: pip writes none, and nothing does under
# PYTHONDONTWRITEBYTECODE=1) that child compiles torch's and vLLM's modules first: 50-70 s on two
# busy cores. Write them once, for the modules it imports.
warm_optimized_bytecode() {
    local probe
    probe="$("$venv/bin/python" -c 'import sys, sysconfig; print(sysconfig.get_paths()["purelib"] + "/vllm/v1/core/__pycache__/kv_cache_utils." + sys.implementation.cache_tag + ".opt-1.pyc")')"
    [[ -f "$probe" ]] && return 0
    step "optimized bytecode for what vLLM's test_is_kv_cache_spec_uniform imports under python -O (once)"
    env -u PYTHONDONTWRITEBYTECODE "$venv/bin/python" -O -c 'import vllm.v1.core.kv_cache_utils, vllm.v1.kv_cache_interface'
}

if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]]; then
    warm_optimized_bytecode
    step "vLLM $VLLM_VERSION's tests/v1/core are at $dest"
    exit 0
fi

start=$SECONDS
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
step "build tools for the sdist's metadata (setuptools-rust $SETUPTOOLS_RUST_VERSION, setuptools-scm $SETUPTOOLS_SCM_VERSION) into a scratch folder"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-warn-conflicts -q --progress-bar off --target "$work/tools" \
    "setuptools-rust==$SETUPTOOLS_RUST_VERSION" "setuptools-scm==$SETUPTOOLS_SCM_VERSION"
step "pip download vllm==$VLLM_VERSION (sdist, ~45 MB)"
VLLM_TARGET_DEVICE=empty VLLM_VERSION_OVERRIDE=$VLLM_VERSION PYTHONPATH="$work/tools" \
    "$venv/bin/python" -m pip download --disable-pip-version-check --progress-bar off --no-deps \
    --no-build-isolation --no-binary :all: "vllm==$VLLM_VERSION" -d "$work/sdist"
sdist="$work/sdist/vllm-$VLLM_VERSION.tar.gz"
[[ -f "$sdist" ]] || die "pip download left no $sdist"
got="$(sha256sum "$sdist" | cut -d' ' -f1)"
[[ "$got" == "$SDIST_SHA256" ]] || die "vllm-$VLLM_VERSION.tar.gz has sha256 $got, expected $SDIST_SHA256"

step "unpacking tests/ and vllm/v1/core"
tar -xzf "$sdist" -C "$work" "vllm-$VLLM_VERSION/tests" "vllm-$VLLM_VERSION/vllm/v1/core" "vllm-$VLLM_VERSION/pyproject.toml"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
diff -r -x __pycache__ "$work/vllm-$VLLM_VERSION/vllm/v1/core" "$site/vllm/v1/core" >/dev/null ||
    die "the sdist's vllm/v1/core differs from the venv's ($site/vllm/v1/core): its tests would not test the installed code"
rm -rf "$work/vllm-$VLLM_VERSION/vllm"
rm -rf "$dest"
mkdir -p "$dest"
mv "$work/vllm-$VLLM_VERSION" "$dest/"
echo "$want" > "$marker"
warm_optimized_bytecode
step "done in $((SECONDS - start)) s: $dest/vllm-$VLLM_VERSION/tests ($(du -sh "$dest" | cut -f1))"
