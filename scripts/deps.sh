#!/usr/bin/env bash
# Installs the Debian packages shardwire needs to build and test, skipping
# those already present. Idempotent; needs root (or sudo) only when something
# is missing.
set -euo pipefail

PKGS=(build-essential cmake pkg-config git python3 python3-venv python3-pip unzip ca-certificates
      libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libsodium-dev libjansson-dev
      libcurl4-openssl-dev libmicrohttpd-dev curl
      clang clang-format cppcheck)
# SW_DEPS_EXTRA: more packages, separated by spaces or newlines (all lines are read)
if [ "${SW_DEPS_EXTRA:-}" ]; then
    read -r -d '' -a extra <<<"$SW_DEPS_EXTRA" || true
    PKGS+=("${extra[@]}")
fi

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "deps: missing packages ${missing[*]} and not root: install them with apt-get" >&2; exit 1; }
    SUDO=sudo
fi
echo "deps: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
