#!/usr/bin/env bash
# Boots deploy/vm/shardwire-relay.service under a real systemd and checks that
# the relay works from it (tests/slow/test_vm_relay.c runs it):
#
#  - a "VM" is a podman container with systemd as PID 1 (`podman run
#    --systemd=always ... /sbin/init`) from the Debian base image of
#    scripts/deploy/containers.sh, set up as deploy/vm/cloud-init.yaml sets up a VM:
#    the shardwire system user, /etc/shardwire (root:shardwire 0750),
#    relay.env, the unit enabled, relay.nft, the built relay in
#    /usr/local/bin; the relay's keys come from `shardwire cluster init` and
#    are put in place as docs/deploy.md section 4 says (install -o shardwire
#    -m 600, then systemctl start);
#  - the relay starts from the unit, as the shardwire user, with its
#    hardening in force (no capabilities, no new privileges, a seccomp
#    filter, its own mount namespace with / read-only, private /tmp);
#  - it answers nodes: a head and a tail of SmolLM2 on this machine dial it
#    (through the container's published port) and a client generates;
#  - SIGKILL: systemd restarts it (Restart=always), the nodes reconnect and
#    the client generates again;
#  - SIGHUP (`systemctl reload`): it re-reads the unchanged allow-list (a
#    file change alone would not), and a client key added the documented way
#    (a new file moved into place, then reload) is let in;
#  - relay.nft loads with nft in the VM's network namespace, and its
#    per-address limit holds: of 24 connections from one address at once,
#    16 get through.
#
#   bash scripts/deploy/vm_systemd.sh [BIN_DIR [MODEL]]   # default build/bin, models/SmolLM2-...
#
# Each check prints "vm_systemd: ...: ok"; the first failure prints what was
# seen and exits 1. The container and the processes started here are removed
# at the end, also on failure. Needs root (podman with systemd; CAP_SYS_ADMIN,
# CAP_NET_ADMIN and CAP_SYS_PTRACE in the container, which a VM's root has).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$here/build/bin}
[ -d "$bin" ] || { echo "vm_systemd: no folder $bin: build first (bash scripts/build.sh) or name the programs' folder" >&2; exit 1; }
bin=$(cd "$bin" && pwd)
model=${2:-${SW_MODELS_DIR:-$here/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -x "$bin/shardwire-relay" ] || { echo "vm_systemd: no $bin/shardwire-relay: build first" >&2; exit 1; }
[ -f "$model" ] || { echo "vm_systemd: no model $model (bash scripts/fetch_model.sh)" >&2; exit 1; }
eval "$(bash "$here/scripts/deploy/containers.sh")"

image=localhost/shardwire-vm-systemd:test
name=sw-vm-$$
work=$(mktemp -d /tmp/sw_vm_systemd.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    podman rm -f "$name" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "vm_systemd: FAILED: $*" >&2
    podman exec "$name" journalctl -u shardwire-relay --no-pager -n 40 >&2 2>/dev/null || true
    for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -5 "$f" >&2; }; done
    exit 1
}
ok() { echo "vm_systemd: $*: ok"; }
in_vm() { podman exec "$name" "$@"; }
# waits up to $1 s for the command after it to succeed
wait_for() {
    local t=$1
    shift
    for _ in $(seq "$((t * 5))"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    return 1
}

# 1. the image: a Debian system with systemd, set up as cloud-init sets up the VM
ctx=$work/image
mkdir -p "$ctx"
cp "$bin/shardwire-relay" "$here/deploy/vm/shardwire-relay.service" "$here/deploy/vm/relay.nft" "$ctx/"
# relay.env as cloud-init.yaml writes it
sed -n '/path: \/etc\/shardwire\/relay.env/,/^  - path\|^runcmd/p' "$here/deploy/vm/cloud-init.yaml" |
    sed -n '/content: |/,$p' | sed '1d;/^runcmd/d;s/^      //' >"$ctx/relay.env"
grep -q '^SHARDWIRE_LISTEN=' "$ctx/relay.env" || fail "no SHARDWIRE_LISTEN in cloud-init.yaml's relay.env"
cat >"$ctx/Containerfile" <<'EOF'
FROM docker.io/library/debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      systemd systemd-sysv dbus nftables procps libzmq5 libprotobuf-c1 libsodium23 \
 && rm -rf /var/lib/apt/lists/*
# deploy/vm/cloud-init.yaml: users, write_files and runcmd (but the build, done outside)
RUN useradd --system --shell /usr/sbin/nologin --home-dir /var/lib/shardwire --no-create-home \
      --user-group shardwire \
 && mkdir -p /etc/shardwire
COPY relay.env /etc/shardwire/relay.env
COPY shardwire-relay /usr/local/bin/
COPY shardwire-relay.service /etc/systemd/system/
COPY relay.nft /etc/shardwire/relay.nft
RUN chmod 644 /etc/shardwire/relay.env /etc/shardwire/relay.nft /etc/systemd/system/shardwire-relay.service \
 && chmod 755 /usr/local/bin/shardwire-relay \
 && chown root:shardwire /etc/shardwire && chmod 750 /etc/shardwire \
 && systemctl enable shardwire-relay
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
EOF
podman build -q --pull=never -t "$image" "$ctx" >"$work/build.log" 2>&1 ||
    fail "podman build of the systemd image: $(tail -3 "$work/build.log")"
ok "image with systemd $(podman run --rm "$image" dpkg-query -W -f '${Version}' systemd)"

# 2. boot it: systemd as PID 1; the relay's port published on this machine. Root on a VM
# holds every capability; podman's default set lacks three that systemd and nft use
# there: SYS_ADMIN (the unit's mount namespace), NET_ADMIN (nft) and SYS_PTRACE (with
# ProtectProc=invisible, PrivateUsers' helper must see its parent in /proc: without
# it the unit fails with "Failed to set up user namespacing: No such file or
# directory", status 217/USER; systemd issue 29656).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
podman run -d --name "$name" --systemd=always --cap-add SYS_ADMIN --cap-add NET_ADMIN \
    --cap-add SYS_PTRACE \
    -p "127.0.0.1:$port:5555" "$image" >/dev/null || fail "podman run --systemd=always"
wait_for 60 in_vm sh -c 'systemctl is-system-running | grep -qE "running|degraded"' ||
    fail "systemd did not boot ($(in_vm systemctl is-system-running 2>&1))"
[ "$(in_vm cat /proc/1/comm)" = systemd ] || fail "PID 1 is $(in_vm cat /proc/1/comm)"
# without keys the unit's conditions keep it from starting (cloud-init leaves this to you)
[ "$(in_vm systemctl show -p ConditionResult --value shardwire-relay)" = no ] ||
    fail "the relay was started without keys"
ok "systemd booted as PID 1 ($(in_vm systemctl is-system-running 2>/dev/null || true)); the unit waits for its keys"

# 3. keys as a user makes them, put in place as docs/deploy.md section 4 says
keys=$work/keys
"$bin/shardwire" cluster init --relay "127.0.0.1:$port" --nodes head,tail --out "$keys" \
    --model "$model" >/dev/null
podman cp "$keys/relay" "$name:/root/relay-keys"
in_vm sh -c 'install -o shardwire -g shardwire -m 600 /root/relay-keys/relay.key \
    /root/relay-keys/allow.txt /etc/shardwire/ && rm -r /root/relay-keys && systemctl start shardwire-relay'
wait_for 20 in_vm systemctl is-active --quiet shardwire-relay || fail "the unit did not start"
pid=$(in_vm systemctl show -p MainPID --value shardwire-relay)
[ "$pid" -gt 0 ] || fail "no MainPID"
ok "the relay started from the unit (pid $pid in the VM)"

# 4. its hardening, as the kernel sees the process
st=$(in_vm cat "/proc/$pid/status")
uid=$(in_vm id -u shardwire)
echo "$st" | grep -qE "^Uid:\s+$uid\s" || fail "not the shardwire user: $(echo "$st" | grep ^Uid)"
echo "$st" | grep -qE '^NoNewPrivs:\s+1' || fail "NoNewPrivs is off"
echo "$st" | grep -qE '^Seccomp:\s+2' || fail "no seccomp filter"
echo "$st" | grep -qE '^CapEff:\s+0+$' || fail "effective capabilities: $(echo "$st" | grep ^CapEff)"
echo "$st" | grep -qE '^CapBnd:\s+0+$' || fail "bounding set: $(echo "$st" | grep ^CapBnd)"
[ "$(in_vm readlink "/proc/$pid/ns/mnt")" != "$(in_vm readlink /proc/1/ns/mnt)" ] ||
    fail "the relay shares PID 1's mount namespace (ProtectSystem, PrivateTmp off)"
in_vm awk '$5 == "/" { for (i = 6; i <= NF; i++) if ($i ~ /^ro(,|$)/) ro = 1 } END { exit !ro }' \
    "/proc/$pid/mountinfo" || fail "/ is writable for the relay (ProtectSystem=strict)"
in_vm awk '$5 == "/tmp" { t = 1 } END { exit !t }' "/proc/$pid/mountinfo" || fail "no private /tmp"
in_vm awk '$5 == "/home" || $5 == "/root" { h = 1 } END { exit !h }' "/proc/$pid/mountinfo" ||
    fail "home folders not hidden (ProtectHome)"
exposure=$(in_vm systemd-analyze security shardwire-relay 2>/dev/null | grep -o 'Overall exposure level.*' || true)
ok "hardening in force: uid $uid (shardwire), NoNewPrivs, seccomp, no capabilities, / read-only, private /tmp, no /home; $exposure"

# 5. it answers nodes: a head and a tail here dial it, a client generates
export SHARDWIRE_BIN=$bin
SW_MODEL="$model" SW_LAYERS=0:15 sh "$keys/head/start.sh" --threads 1 >"$work/head.log" 2>&1 &
pids+=($!)
SW_MODEL="$model" SW_LAYERS=15:30 sh "$keys/tail/start.sh" --threads 1 >"$work/tail.log" 2>&1 &
pids+=($!)
client() { sh "$keys/client/shardwire.sh" "$@"; }
client status --expect head,tail --connect-timeout-s 120 >"$work/status.txt" 2>&1 ||
    fail "the nodes did not join the relay: $(tail -2 "$work/status.txt")"
gen() { client run --greedy -p "Hello" -n 8 --json --connect-timeout-s 60 2>>"$work/run.log"; }
first=$(gen) || fail "no generation through the relay"
toks=$(echo "$first" | grep -o '"tokens":\[[0-9,]*\]')
[ -n "$toks" ] || fail "no tokens: $first"
ok "the relay answers nodes: head and tail joined, a client generated $toks"

# 6. SIGKILL: systemd restarts it; the nodes come back, the output is the same
in_vm systemctl kill -s KILL shardwire-relay
wait_for 30 sh -c "[ \"\$(podman exec $name systemctl show -p NRestarts --value shardwire-relay)\" = 1 ] &&
    podman exec $name systemctl is-active --quiet shardwire-relay" || fail "no restart after SIGKILL"
pid2=$(in_vm systemctl show -p MainPID --value shardwire-relay)
[ "$pid2" != "$pid" ] || fail "the same MainPID after SIGKILL"
client status --expect head,tail --connect-timeout-s 120 >"$work/status.txt" 2>&1 ||
    fail "the nodes did not come back: $(tail -2 "$work/status.txt")"
again=$(gen) || fail "no generation after the restart"
[ "$(echo "$again" | grep -o '"tokens":\[[0-9,]*\]')" = "$toks" ] || fail "other tokens after the restart: $again"
ok "SIGKILL: systemd restarted it (NRestarts 1, pid $pid -> $pid2); the nodes rejoined, the same tokens"

# 7. SIGHUP: systemctl reload re-reads the allow-list
count_reloads() { in_vm journalctl -u shardwire-relay --no-pager -o cat | grep -c 'allow-list .* (reloaded)' || true; }
r0=$(count_reloads)
in_vm systemctl reload shardwire-relay
wait_for 10 sh -c "[ \$(podman exec $name journalctl -u shardwire-relay --no-pager -o cat | grep -c 'allow-list .* (reloaded)') -gt $r0 ]" ||
    fail "systemctl reload did not re-read the unchanged allow-list"
[ "$(in_vm systemctl show -p MainPID --value shardwire-relay)" = "$pid2" ] || fail "reload restarted the relay"
ok "SIGHUP (systemctl reload): the unchanged allow-list was re-read, same process"
"$bin/shardwire" keygen --out "$work/laptop" >/dev/null
laptop() {
    "$bin/shardwire" status --relay "tcp://127.0.0.1:$port" --key "$work/laptop.key" \
        --relay-key "$keys/relay.pub" --access-key "$keys/client/access.key" --connect-timeout-s 5 "$@"
}
laptop >"$work/laptop.txt" 2>&1 && fail "a key not on the allow-list was let in"
cp "$keys/allow.txt" "$work/allow.txt"
echo "$(cat "$work/laptop.pub") client" >>"$work/allow.txt"
podman cp "$work/allow.txt" "$name:/root/allow.txt"
in_vm sh -c 'install -o shardwire -g shardwire -m 600 /root/allow.txt /etc/shardwire/allow.txt.new \
    && mv /etc/shardwire/allow.txt.new /etc/shardwire/allow.txt && systemctl reload shardwire-relay'
wait_for 10 laptop || fail "the new client key is still refused after the reload: $(tail -1 "$work/laptop.txt")"
ok "a client key added to allow.txt (new file, mv, reload) is let in"

# 8. the firewall: relay.nft loads in the VM's namespace, and its limit holds
in_vm nft -f /etc/shardwire/relay.nft || fail "nft -f relay.nft"
# the listing is read whole before grep looks at it: `| grep -q` under pipefail
# fails when grep stops reading before podman exec has written everything
# (podman then dies of SIGPIPE): 75 of 300 such checks failed on a 2-core machine,
# and CI once saw a loaded table as missing
listing=$(in_vm nft list table inet shardwire_relay) || fail "nft list: the table did not load"
grep -q 'ct count over 16' <<<"$listing" || fail "the table has no per-address limit: $listing"
# 24 connections at once from one address (127.0.0.1 inside the VM); each is held open
opened=$(in_vm bash -c 'n=0; for i in $(seq 24); do
    if exec {fd}<>/dev/tcp/127.0.0.1/5555 2>/dev/null; then n=$((n + 1)); fds+=($fd); fi; done
    sleep 1; echo $n')
[ "$opened" = 16 ] || fail "of 24 connections from one address $opened got through (want 16)"
chain=$(in_vm nft list chain inet shardwire_relay input) || fail "nft list chain: $chain"
rejects=$(sed -n 's/.*counter packets \([0-9]*\).*/\1/p' <<<"$chain" | sed -n 1p)
ok "relay.nft loaded with nft in the VM; 16 of 24 connections from one address got through ($rejects refused by its rule)"
in_vm nft delete table inet shardwire_relay
echo "vm_systemd: all checks passed"
