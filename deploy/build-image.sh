#!/usr/bin/env bash
# Build the `agentrt` image without a registry: the release binary and the policy components are
# built on this machine, the binary's shared libraries (as `ldd` lists them) and the dynamic loader
# are copied beside them into a root file system, and `podman build -f deploy/Dockerfile.prebuilt`
# puts that tree in an image FROM scratch. The result runs like deploy/Dockerfile's default stage
# (same entry point, command, user, component folder); docs/deploy.md says which recipe is tested
# how.
#
#   bash deploy/build-image.sh [--tag NAME] [--skip-build]
#
# --tag NAME     the image's name (default localhost/agentrt:latest)
# --skip-build   use the binary and components already in the target folder (no cargo)
#
# Needs podman (`apt-get install -y podman runc`; deploy/setup-podman.sh) and, unless
# --skip-build, the Rust toolchain. The target folder is CARGO_TARGET_DIR (relative to the
# repository root), `target` by default. Prints the image's size and the time each step took.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

tag=localhost/agentrt:latest
build=1
while (($#)); do
    case "$1" in
        --tag) tag=$2; shift 2 ;;
        --skip-build) build=0; shift ;;
        *) echo "usage: bash deploy/build-image.sh [--tag NAME] [--skip-build]" >&2; exit 2 ;;
    esac
done

# The components the image ships, in /usr/local/share/agentrt/components/: the ones
# deploy/Dockerfile copies (cli/tests/deploy_recipe.rs keeps the two lists equal).
components=(lru ttl cachesage frequency guard fair-share tool-memo working-set)

command -v podman >/dev/null || {
    echo "build-image.sh: podman is not installed (bash deploy/setup-podman.sh)" >&2
    exit 1
}

target=${CARGO_TARGET_DIR:-target}
case "$target" in /*) ;; *) target="$repo/$target" ;; esac
cargo=${CARGO:-cargo}

started=$SECONDS
if ((build)); then
    # Components before the binary: its build embeds the built-in ones (docs/deploy.md).
    "$cargo" xtask build-policies
    "$cargo" build --release --locked -p agentrt
fi
built=$SECONDS

binary="$target/release/agentrt"
[ -x "$binary" ] || { echo "build-image.sh: no $binary (run without --skip-build)" >&2; exit 1; }
for name in "${components[@]}"; do
    [ -f "$target/components/$name.wasm" ] || {
        echo "build-image.sh: no $target/components/$name.wasm (run \`cargo xtask build-policies\`)" >&2
        exit 1
    }
done

# The build context: rootfs/ is copied as root-owned, owned/ as agentrt's (uid 10001).
context="$target/image-context"
rm -rf "$context"
mkdir -p "$context/rootfs/usr/local/bin" "$context/rootfs/usr/local/share/agentrt/components" \
    "$context/owned/var/lib/agentrt/artifacts" "$context/owned/run/agentrt" "$context/rootfs/tmp"
chmod 1777 "$context/rootfs/tmp"
install -m 755 "$binary" "$context/rootfs/usr/local/bin/agentrt"
for name in "${components[@]}"; do
    install -m 644 "$target/components/$name.wasm" "$context/rootfs/usr/local/share/agentrt/components/"
done

# Every library the binary loads, at the path the loader looks for it, and the loader itself
# (the line without `=>`). vdso is the kernel's, not a file. glibc 2.34+ has the `files` and
# `dns` name services inside libc.so.6, so host names resolve with the /etc/hosts and
# /etc/resolv.conf that podman mounts.
ldd "$binary" | while read -r first arrow path _; do
    if [ "$arrow" = "=>" ]; then
        library=$path
    else
        library=$first
    fi
    case "$library" in
        /*) ;;
        *) continue ;; # linux-vdso.so.1
    esac
    mkdir -p "$context/rootfs$(dirname "$library")"
    cp -L "$library" "$context/rootfs$library"
done
# A user database naming uid 10001, for tools that look the user up; agentrt itself does not.
mkdir -p "$context/rootfs/etc"
printf 'root:x:0:0:root:/root:/nonexistent\nagentrt:x:10001:10001:agentrt:/var/lib/agentrt:/nonexistent\n' \
    >"$context/rootfs/etc/passwd"
printf 'root:x:0:\nagentrt:x:10001:\n' >"$context/rootfs/etc/group"

podman build --quiet -f "$repo/deploy/Dockerfile.prebuilt" -t "$tag" "$context" >/dev/null
done_at=$SECONDS

size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "build-image.sh: built $tag: $((size / 1024 / 1024)) MiB ($size bytes);" \
    "cargo $((built - started)) s, image $((done_at - built)) s"
