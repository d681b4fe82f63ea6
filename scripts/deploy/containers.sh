#!/usr/bin/env bash
# Makes this machine able to build and run the deploy/docker images without a
# Docker engine or an image registry (what CI and tests/slow/test_compose.c
# use; a user with Docker needs none of this):
#
#  1. installs podman, podman-compose, runc, debootstrap, uidmap, slirp4netns,
#     the CNI dnsname plugin (containers find each other by service name; apt
#     leaves it out as a mere recommendation of podman) and docker-compose (v1,
#     only to validate compose files with `config`);
#  2. writes a containers.conf with runc and open-file / process limits the VM
#     allows (no CAP_SYS_RESOURCE here) and prints `export CONTAINERS_CONF=...`;
#  3. makes the base image the Dockerfiles start from, from the Debian archive
#     (debootstrap --variant=minbase bookworm), with the suites the official
#     image has (bookworm, bookworm-updates, bookworm-security) in its
#     sources.list and every package upgraded from them, and imports it under
#     the name the Dockerfiles use, docker.io/library/debian:bookworm-slim, so
#     that `podman build --pull=never` resolves it locally (and as
#     debian:bookworm, the build stage's name). Done once; later calls only
#     check that the image is there and has the three suites (an image made
#     by an older version of this script, with bookworm alone, is made again).
#
#   eval "$(bash scripts/deploy/containers.sh)"     # then podman / podman-compose work
#
# The export it prints holds for the shell that evals it: in a new shell,
# podman without it fails with "error setting rlimit type 7" (this VM may not
# raise limits); eval it again there (it is quick once everything is made), or
# put the export line into ~/.profile (the file lives outside /tmp).
#
# Idempotent. Needs root (or sudo) when something is missing. Environment:
# SW_CONTAINERS_CONF (default ~/.config/shardwire/containers.conf),
# SW_BASE_IMAGE (default docker.io/library/debian:bookworm-slim),
# SW_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# SW_DEBIAN_SECURITY_MIRROR (default http://deb.debian.org/debian-security).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
conf=${SW_CONTAINERS_CONF:-${XDG_CONFIG_HOME:-$HOME/.config}/shardwire/containers.conf}
base=${SW_BASE_IMAGE:-docker.io/library/debian:bookworm-slim}
mirror=${SW_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${SW_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# The label that says the base image has the three suites (see 3. above).
suites_label=org.shardwire.debian-suites
suites="bookworm bookworm-updates bookworm-security"

SW_DEPS_EXTRA="podman podman-compose runc debootstrap uidmap slirp4netns docker-compose golang-github-containernetworking-plugin-dnsname" \
    bash "$here/scripts/deps.sh" >&2

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo

if [ ! -s "$conf" ]; then
    mkdir -p "$(dirname "$conf")"
    cat >"$conf" <<'EOF'
# shardwire: podman on a VM that may not raise resource limits (scripts/deploy/containers.sh)
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
EOF
fi
export CONTAINERS_CONF=$conf

have=""
podman image exists "$base" &&
    have=$(podman image inspect -f "{{index .Labels \"$suites_label\"}}" "$base" 2>/dev/null || true)
if [ "$have" != "$suites" ]; then
    [ -n "$have" ] || ! podman image exists "$base" ||
        echo "containers: $base lacks bookworm-updates and bookworm-security: making it again" >&2
    root=$(mktemp -d /tmp/shardwire-rootfs.XXXXXX)
    chmod 755 "$root" # apt drops to its _apt user inside
    trap '$SUDO rm -rf "$root"' EXIT
    echo "containers: debootstrap bookworm (minbase) from $mirror for $base (about a minute)" >&2
    $SUDO debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null ||
        { echo "containers: debootstrap failed: is $mirror reachable?" >&2; exit 1; }
    # The suites of the official image: security fixes and stable updates too.
    printf '%s\n' "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
        "deb $security bookworm-security main" | $SUDO tee "$root/etc/apt/sources.list" >/dev/null
    echo "containers: upgrading the base image from bookworm-updates and bookworm-security" >&2
    $SUDO chroot "$root" sh -c 'apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive \
        apt-get -y -qq -o Dpkg::Options::=--force-confold upgrade >/dev/null' ||
        { echo "containers: apt-get upgrade in the base image failed: are $mirror and $security reachable?" >&2; exit 1; }
    # What the official slim image has and a debootstrap'ed tree lacks:
    # no package caches, no documentation.
    $SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    $SUDO tar -C "$root" -c . | podman import -q --change "LABEL $suites_label=\"$suites\"" \
        - "$base" >/dev/null
    echo "containers: imported $base ($(podman image inspect -f '{{.Size}}' "$base") bytes)" >&2
    full=${base%-slim}
    if [ "$full" != "$base" ]; then podman tag "$base" "$full"; fi
fi
# The Dockerfiles build on debian:bookworm and run on debian:bookworm-slim; the
# minbase tree stands in for both (the build stage installs what it needs).
full=${base%-slim}
[ "$full" != "$base" ] && ! podman image exists "$full" && podman tag "$base" "$full"
podman --version >&2
echo "export CONTAINERS_CONF=$conf"
