#!/usr/bin/env bash
# The agent frameworks of examples/openai-agents and examples/autogen, in a venv of their own
# (they pin an `openai` client newer than vLLM's venv wants): ~/.cache/agentrt/venv-agents, or
# $AGENTRT_AGENTS_VENV. Idempotent: a venv with these exact versions is left alone. pytest is there
# for sdk/hints' tests of the hint hooks against these frameworks (`cargo xtask test` runs them).
set -euo pipefail
OPENAI_AGENTS_VERSION=0.24.0
AUTOGEN_VERSION=0.7.5
PYTEST_VERSION=8.3.5
venv="${AGENTRT_AGENTS_VENV:-$HOME/.cache/agentrt/venv-agents}"
marker="$venv/.agentrt-agents-recipe"
want="openai-agents=$OPENAI_AGENTS_VERSION autogen=$AUTOGEN_VERSION pytest=$PYTEST_VERSION"
if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -x "$venv/bin/python" ]]; then
    echo "[examples/setup-venv] $venv is current ($want)"
    exit 0
fi
echo "[examples/setup-venv] building $venv ($want)"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --progress-bar off \
    "openai-agents==$OPENAI_AGENTS_VERSION" \
    "autogen-agentchat==$AUTOGEN_VERSION" "autogen-ext[openai]==$AUTOGEN_VERSION" "pytest==$PYTEST_VERSION"
"$venv/bin/python" -c "import agents, autogen_agentchat, autogen_ext.models.openai, pytest"
echo "$want" > "$marker"
echo "[examples/setup-venv] done"
