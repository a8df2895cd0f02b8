#!/usr/bin/env bash
# Installs vLLM's own router (PyPI `vllm-router`, Rust, repository vllm-project/router) into a
# virtual environment, for the peer benchmark and the tests that put agentrt beside or in front of it.
#
#   bash adapters/vllm-router/setup-venv.sh            # into ~/.cache/agentrt/venv-vllm-router
#   AGENTRT_VLLM_ROUTER_VENV=/path bash adapters/vllm-router/setup-venv.sh
#
# One wheel with the router's binary and no other dependency; installs in seconds. Idempotent: a
# marker file records the recipe; a current venv is only checked (the router prints its help).
set -euo pipefail

ROUTER_VERSION=0.1.17
TAG=vllm-router
VENV="${AGENTRT_VLLM_ROUTER_VENV:-$HOME/.cache/agentrt/venv-vllm-router}"
WANT="recipe=1 vllm-router=$ROUTER_VERSION" # bump the recipe when the steps change
PACKAGES=("vllm-router==$ROUTER_VERSION")
PYTHON_VAR=AGENTRT_VLLM_ROUTER_PYTHON
check() { "$VENV/bin/vllm-router" --help >/dev/null 2>&1; }

source "$(dirname "$0")/../lib/pip-venv.sh"
pip_venv
