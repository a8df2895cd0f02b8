#!/usr/bin/env bash
# Install docker-compose from Debian's packages, for the compose files' schema check
# (host/cli/tests/deploy_compose.rs runs `docker-compose config`, which needs no Docker engine).
# Idempotent: does nothing when it is installed. Needs root (or sudo) and a Debian or Ubuntu
# package source; elsewhere it says so and exits 0, and the check skips, saying why (unless
# AGENTRT_REQUIRE_COMPOSE=1).
set -euo pipefail

if command -v docker-compose >/dev/null; then
    echo "setup-compose.sh: $(docker-compose version --short 2>/dev/null || docker-compose --version): already installed"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "setup-compose.sh: no apt-get here; install docker-compose by hand" >&2
    exit 0
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup-compose.sh: not root and no sudo; install docker-compose by hand" >&2; exit 0; }
    sudo=(sudo)
fi
"${sudo[@]}" apt-get install -y --no-install-recommends docker-compose ||
    { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y --no-install-recommends docker-compose; }
echo "setup-compose.sh: $(docker-compose --version)"
