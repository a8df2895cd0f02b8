#!/usr/bin/env bash
# Install podman and runc from Debian's packages, for deploy/build-image.sh and the image's test
# (cli/tests/deploy_image.rs). Idempotent: does nothing when both are installed. Needs root
# (or sudo) and a Debian or Ubuntu package source; elsewhere it says so and exits 0, and the
# test skips, saying why (unless AGENTRT_REQUIRE_PODMAN=1).
set -euo pipefail
# crun is podman's default runtime where installed; runc is the one the test asks for by name.
bash "$(dirname "$0")/apt-install.sh" setup-podman.sh "podman runc" podman runc
if command -v podman >/dev/null && command -v runc >/dev/null; then
    echo "setup-podman.sh: $(podman --version), $(runc --version | head -n 1)"
fi
