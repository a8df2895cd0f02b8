#!/usr/bin/env bash
# The agent frameworks of the CrewAI and MetaGPT hint hooks (sdk/hints/agentrt_hints/crewai.py,
# metagpt.py), each in a venv of its own — their pins contradict each other (openai 2 against 1,
# pydantic 2.11 against 2.7) — with pytest for sdk/hints/tests, which `cargo xtask test` runs in
# each: ~/.cache/agentrt/venv-crewai ($AGENTRT_CREWAI_VENV) and ~/.cache/agentrt/venv-metagpt
# ($AGENTRT_METAGPT_VENV), ~1 GB each. Idempotent: a venv made by this recipe is left alone.
# Needs Python 3.10 or 3.11 (CrewAI wants ≥ 3.10, MetaGPT < 3.12): python3.11, python3.10 or
# python3, or $AGENTRT_HINTS_PYTHON.
set -euo pipefail
cd "$(dirname "$0")"
CREWAI_VERSION=1.15.30
PYTEST_VERSION=8.3.5
METAGPT_LOCK=tests/metagpt-requirements.txt

python_for_frameworks() {
    local candidates=("${AGENTRT_HINTS_PYTHON:-}" python3.11 python3.10 python3)
    for python in "${candidates[@]}"; do
        [[ -n "$python" ]] && command -v "$python" > /dev/null || continue
        if "$python" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 11))'; then
            echo "$python"
            return
        fi
    done
    echo "[sdk/hints/setup-venv] no Python 3.10 or 3.11 (tried ${candidates[*]}): set AGENTRT_HINTS_PYTHON" >&2
    exit 1
}

# venv_current VENV RECIPE: the venv exists and was made by RECIPE.
venv_current() {
    [[ -f "$1/.agentrt-hints-recipe" && "$(cat "$1/.agentrt-hints-recipe")" == "$2" && -x "$1/bin/python" ]]
}

python=""
crewai_venv="${AGENTRT_CREWAI_VENV:-$HOME/.cache/agentrt/venv-crewai}"
crewai_recipe="crewai=$CREWAI_VERSION pytest=$PYTEST_VERSION"
if venv_current "$crewai_venv" "$crewai_recipe"; then
    echo "[sdk/hints/setup-venv] $crewai_venv is current ($crewai_recipe)"
else
    python="${python:-$(python_for_frameworks)}"
    echo "[sdk/hints/setup-venv] building $crewai_venv ($crewai_recipe, with $python)"
    rm -rf "$crewai_venv"
    "$python" -m venv "$crewai_venv"
    "$crewai_venv/bin/pip" install --quiet --progress-bar off "crewai==$CREWAI_VERSION" "pytest==$PYTEST_VERSION"
    "$crewai_venv/bin/python" -c "import crewai, crewai.events, pytest"
    echo "$crewai_recipe" > "$crewai_venv/.agentrt-hints-recipe"
fi

metagpt_venv="${AGENTRT_METAGPT_VENV:-$HOME/.cache/agentrt/venv-metagpt}"
metagpt_recipe="metagpt lock $(sha256sum "$METAGPT_LOCK" | cut -c1-16) pytest=$PYTEST_VERSION"
if venv_current "$metagpt_venv" "$metagpt_recipe"; then
    echo "[sdk/hints/setup-venv] $metagpt_venv is current ($metagpt_recipe)"
else
    python="${python:-$(python_for_frameworks)}"
    echo "[sdk/hints/setup-venv] building $metagpt_venv ($metagpt_recipe, with $python)"
    rm -rf "$metagpt_venv"
    "$python" -m venv "$metagpt_venv"
    "$metagpt_venv/bin/pip" install --quiet --progress-bar off --no-deps -r "$METAGPT_LOCK"
    "$metagpt_venv/bin/pip" install --quiet --progress-bar off "pytest==$PYTEST_VERSION"
    # MetaGPT reads a model configuration when imported: any will do for the check.
    check_root="$(mktemp -d)"
    mkdir "$check_root/config"
    printf 'llm:\n  api_type: openai\n  base_url: http://127.0.0.1:9/v1\n  api_key: k\n' > "$check_root/config/config2.yaml"
    METAGPT_PROJECT_ROOT="$check_root" "$metagpt_venv/bin/python" -W ignore -c \
        "import metagpt.team, metagpt.roles, metagpt.provider.openai_api, pytest" > /dev/null
    rm -rf "$check_root"
    echo "$metagpt_recipe" > "$metagpt_venv/.agentrt-hints-recipe"
fi
echo "[sdk/hints/setup-venv] done"
