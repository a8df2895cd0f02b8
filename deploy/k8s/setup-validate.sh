#!/usr/bin/env bash
# Installs kubernetes-validate (PyPI; it ships the Kubernetes API's JSON schemas for every release
# it knows, so it validates offline) into a virtual environment, for the manifests' check
# (cli/tests/deploy_k8s.rs validates deploy/k8s/*.yaml with it).
#
#   bash deploy/k8s/setup-validate.sh            # into ~/.cache/agentrt/venv-k8s
#   AGENTRT_K8S_VENV=/path bash deploy/k8s/setup-validate.sh
#
# Idempotent: a marker file records the recipe; a current venv is only checked (the validator
# prints its version). The check skips, saying why, without it (unless AGENTRT_REQUIRE_K8S=1).
set -euo pipefail

VALIDATE_VERSION=1.37.0
TAG=k8s
VENV="${AGENTRT_K8S_VENV:-$HOME/.cache/agentrt/venv-k8s}"
WANT="recipe=1 kubernetes-validate=$VALIDATE_VERSION" # bump the recipe when the steps change
PACKAGES=("kubernetes-validate==$VALIDATE_VERSION")
PYTHON_VAR=AGENTRT_K8S_PYTHON
check() { "$VENV/bin/kubernetes-validate" --version >/dev/null 2>&1; }

source "$(dirname "$0")/../../adapters/lib/pip-venv.sh"
pip_venv
