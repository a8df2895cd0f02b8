#!/usr/bin/env bash
# Install docker-compose from Debian's packages, for the compose files' schema check
# (cli/tests/deploy_compose.rs runs `docker-compose config`, which needs no Docker engine).
# Idempotent: does nothing when it is installed; the check skips, saying why, without it (unless
# AGENTRT_REQUIRE_COMPOSE=1).
set -euo pipefail
bash "$(dirname "$0")/apt-install.sh" setup-compose.sh docker-compose docker-compose
if command -v docker-compose >/dev/null; then
    echo "setup-compose.sh: $(docker-compose --version)"
fi
