#!/usr/bin/env bash
# Install podman and runc from Debian's packages, for deploy/build-image.sh and the image's test
# (host/cli/tests/deploy_image.rs). Idempotent: does nothing when both are installed. Needs root
# (or sudo) and a Debian or Ubuntu package source; elsewhere it says so and exits 0, and the
# test skips, saying why (unless AGENTRT_REQUIRE_PODMAN=1).
set -euo pipefail

if command -v podman >/dev/null && command -v runc >/dev/null; then
    echo "setup-podman.sh: $(podman --version), $(runc --version | head -n 1): already installed"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "setup-podman.sh: no apt-get here; install podman and runc by hand" >&2
    exit 0
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup-podman.sh: not root and no sudo; install podman and runc by hand" >&2; exit 0; }
    sudo=(sudo)
fi
# crun is podman's default runtime where installed; runc is the one the test asks for by name.
"${sudo[@]}" apt-get install -y --no-install-recommends podman runc ||
    { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y --no-install-recommends podman runc; }
echo "setup-podman.sh: $(podman --version), $(runc --version | head -n 1)"
