#!/usr/bin/env bash
# Install Debian packages for a test's tools unless its commands are there already:
#
#   bash deploy/apt-install.sh NAME "COMMAND…" PACKAGE…
#
# NAME labels the messages; every COMMAND on the path means nothing to do. Needs root (or sudo)
# and a Debian or Ubuntu package source; elsewhere it says so and exits 0, and the test that needs
# the tools skips, saying why (unless its AGENTRT_REQUIRE_* variable is set). Used by
# setup-podman.sh and setup-compose.sh.
set -euo pipefail

name="$1" commands="$2"
shift 2
present=1
for c in $commands; do command -v "$c" >/dev/null || present=0; done
if ((present)); then
    echo "$name: $commands already installed"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "$name: no apt-get here; install $* by hand" >&2
    exit 0
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "$name: not root and no sudo; install $* by hand" >&2; exit 0; }
    sudo=(sudo)
fi
"${sudo[@]}" apt-get install -y --no-install-recommends "$@" ||
    { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y --no-install-recommends "$@"; }
echo "$name: installed $*"
