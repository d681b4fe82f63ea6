#!/usr/bin/env bash
# Checks deploy/vm/ with the real tools (tests/slow/test_vm_relay.c runs it):
#  - systemd-analyze verify on shardwire-relay.service, in a scratch root that
#    holds the built relay at the unit's path (/usr/local/bin) and systemd's
#    own units, so nothing is installed on this machine;
#  - systemd-analyze security on it: the exposure must stay at or under
#    SW_VM_EXPOSURE_MAX (default 20, i.e. 2.0 "OK" on systemd's 0-10 scale);
#  - cloud-init's schema check on cloud-init.yaml, with cloud-init's own code
#    from its Debian package unpacked into a scratch folder (installing
#    cloud-init would reconfigure this machine at its next boot);
#  - nft -c (check only) on relay.nft.
#
#   bash scripts/deploy/vm_check.sh [BIN_DIR]     # default build/bin
#
# Installs what is missing (systemd, nftables, cloud-init's Python libraries).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$here/build/bin}
vm=$here/deploy/vm
SW_DEPS_EXTRA="systemd procps nftables python3-yaml python3-jsonschema python3-jinja2 python3-configobj
    python3-jsonpatch python3-requests python3-netifaces" bash "$here/scripts/deps.sh" >&2
[ -x "$bin/shardwire-relay" ] || { echo "vm_check: no $bin/shardwire-relay: build first (scripts/build.sh)" >&2; exit 1; }

work=$(mktemp -d /tmp/sw_vm_check.XXXXXX)
trap 'rm -rf "$work"' EXIT

# 1. the unit, in a root of its own
root=$work/root
mkdir -p "$root/usr/local/bin" "$root/usr/bin" "$root/usr/lib/systemd" "$root/etc/systemd/system"
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
ln -s usr/bin "$root/bin"
ln -s usr/lib "$root/lib"
cp /usr/bin/kill "$root/usr/bin/kill"
cp "$bin/shardwire-relay" "$root/usr/local/bin/"
cp "$vm/shardwire-relay.service" "$root/etc/systemd/system/"
systemd-analyze verify --root="$root" "$root/etc/systemd/system/shardwire-relay.service"
echo "vm_check: systemd-analyze verify shardwire-relay.service: ok"
sec=$(systemd-analyze security --offline=yes --root="$root" \
    --threshold="${SW_VM_EXPOSURE_MAX:-20}" shardwire-relay.service 2>&1) || {
    echo "$sec" >&2
    echo "vm_check: the unit's exposure is over ${SW_VM_EXPOSURE_MAX:-20}" >&2
    exit 1
}
echo "vm_check: $(echo "$sec" | grep -o 'Overall exposure level.*' | sed 's/ [^ ]*$//')"

# 2. cloud-init's schema, with cloud-init's code (not installed)
(cd "$work" && apt-get download cloud-init >/dev/null 2>&1) ||
    { apt-get update -qq && (cd "$work" && apt-get download cloud-init >/dev/null); }
dpkg -x "$work"/cloud-init_*.deb "$work/ci"
PYTHONPATH=$work/ci/usr/lib/python3/dist-packages /usr/bin/python3 -c \
    'import sys; from cloudinit.cmd.main import main; sys.exit(main())' \
    schema --config-file "$vm/cloud-init.yaml"
head -1 "$vm/cloud-init.yaml" | grep -qx '#cloud-config' ||
    { echo "vm_check: cloud-init.yaml must start with #cloud-config" >&2; exit 1; }

# 3. the firewall rules (checked, not loaded)
nft -c -f "$vm/relay.nft"
echo "vm_check: nft -c relay.nft: ok"
