#!/usr/bin/env bash
# Installs NVIDIA Dynamo's standalone KV-aware selection service (`python -m dynamo.select_service`)
# into a virtual environment, for the multi-replica tests (host/router, adapters/vllm/tests).
#
#   bash adapters/dynamo/setup-venv.sh                 # into ~/.cache/agentrt/venv-dynamo
#   AGENTRT_DYNAMO_VENV=/path bash adapters/dynamo/setup-venv.sh
#
# The wheel carries the service as Rust in a native module (~75 MB); its only Python requirements
# are pydantic and uvloop. Idempotent: a marker file records the recipe; a current venv is only
# checked (the service prints its help) and the script exits.
set -euo pipefail

DYNAMO_VERSION=1.6.1
TAG=dynamo
VENV="${AGENTRT_DYNAMO_VENV:-$HOME/.cache/agentrt/venv-dynamo}"
WANT="recipe=1 ai-dynamo-runtime=$DYNAMO_VERSION" # bump the recipe when the steps change
PACKAGES=("ai-dynamo-runtime==$DYNAMO_VERSION")
PYTHON_VAR=AGENTRT_DYNAMO_PYTHON
check() { "$VENV/bin/python" -m dynamo.select_service --help >/dev/null 2>&1; }

source "$(dirname "$0")/../lib/pip-venv.sh"
pip_venv
