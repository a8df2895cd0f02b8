#!/usr/bin/env bash
# Installs the OpenTelemetry protocol's own definitions (PyPI `opentelemetry-proto`, with the
# `protobuf` runtime it pins) into a virtual environment, for the OTLP receiver the test
# `cli/tests/serve_otlp.rs` runs (receiver.py beside this file).
#
#   bash cli/tests/otlp/setup-venv.sh            # into ~/.cache/agentrt/venv-otlp
#   AGENTRT_OTLP_VENV=/path bash cli/tests/otlp/setup-venv.sh
#
# Two small wheels; installs in seconds. Idempotent: a marker file records the recipe; a current
# venv is only checked (the receiver's imports load).
set -euo pipefail

PROTO_VERSION=1.45.2
TAG=otlp
VENV="${AGENTRT_OTLP_VENV:-$HOME/.cache/agentrt/venv-otlp}"
WANT="recipe=1 opentelemetry-proto=$PROTO_VERSION" # bump the recipe when the steps change
PACKAGES=("opentelemetry-proto==$PROTO_VERSION")
PYTHON_VAR=AGENTRT_OTLP_PYTHON
check() {
    "$VENV/bin/python" -c 'from opentelemetry.proto.collector.trace.v1 import trace_service_pb2' >/dev/null 2>&1
}

source "$(dirname "$0")/../../../adapters/lib/pip-venv.sh"
pip_venv
