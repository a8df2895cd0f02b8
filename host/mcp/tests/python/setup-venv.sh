#!/usr/bin/env bash
# Installs the official Python MCP SDK (PyPI `mcp`, pinned) into a virtual environment for the MCP
# gateway's tests: their upstream servers (lookup_server.py) and clients are built with it.
#
#   bash host/mcp/tests/python/setup-venv.sh          # into ~/.cache/agentrt/venv-mcp
#   AGENTRT_MCP_VENV=/path bash host/mcp/tests/python/setup-venv.sh
#
# Idempotent: a marker file records the pinned version; when it matches and `mcp` imports, the
# script exits at once. Tests that need the venv skip with a reason naming this script when it is
# missing.
set -euo pipefail

MCP_VERSION=2.3.0
venv="${AGENTRT_MCP_VENV:-$HOME/.cache/agentrt/venv-mcp}"
python="${AGENTRT_MCP_PYTHON:-python3}"
marker="$venv/.agentrt-mcp"
want="mcp=$MCP_VERSION"

step() { printf '[setup-mcp-venv %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup-mcp-venv] FAILED: %s\n' "$*" >&2; exit 1; }
trap 'die "command failed at line $LINENO (see output above)"' ERR

if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]] && "$venv/bin/python" -c 'import mcp' 2>/dev/null; then
    step "$venv is current ($want)"
    exit 0
fi

step "creating $venv with $($python --version)"
"$python" -m venv "$venv" || die "could not create a venv with $python (set AGENTRT_MCP_PYTHON to a Python ≥ 3.10)"
"$venv/bin/python" -m pip install --quiet --upgrade pip
step "installing mcp==$MCP_VERSION"
"$venv/bin/python" -m pip install --quiet "mcp==$MCP_VERSION"
"$venv/bin/python" -c 'import mcp' || die "mcp does not import after installing it"
echo "$want" > "$marker"
step "ready: $venv"
