#!/bin/sh
# The split GGUF sets the split-set tests use (tests/CMakeLists.txt, fixture
# split_models), made by shardwire-mksplit into OUT_DIR once, from the
# default model (SmolLM2-135M Q4_1, 272 tensors):
#   smol-0000N-of-00003     llama.cpp gguf-split's defaults (128 tensors a part)
#   smolnf-0000N-of-00004   --split-max-size 40M --no-tensor-first-split: the
#                           first part has the metadata and no tensor
#   smol100-0000N-of-00003  --split-max-tensors 100: as many parts as smol, other
#                           tensors in each (a part of another set of the same count)
#
#   sh scripts/ci/split_models.sh MKSPLIT SMOLLM2.gguf OUT_DIR
#
# shardwire-mksplit writes what llama.cpp's gguf-split writes, byte for byte:
# where llama.cpp's tool is built (LLAMA_GGUF_SPLIT, else the one
# scripts/bench/llama_peer.py builds into ~/.cache/shardwire/peer with
# `cmake --build <cache>/build-rpc --target llama-gguf-split`), every part is
# also written by it and compared (cmp), and a difference fails the fixture.
#
# Without SmolLM2 (bash scripts/fetch_model.sh) it skips (exit 77, recorded
# in $SW_TEST_SKIP_LOG), or fails when SW_TEST_STRICT=1.
set -eu
mk=$1
smol=$2
out=$3
sh "$(dirname "$0")/need_model.sh" split_models "$smol" || exit $?
mkdir -p "$out"
make_set() { # name, count, flags...
    name=$1
    count=$2
    shift 2
    [ -f "$out/$name-$count-of-$count.gguf" ] || "$mk" "$@" "$smol" "$out/$name" >/dev/null
}
make_set smol 00003
make_set smolnf 00004 --split-max-size 40M --no-tensor-first-split
make_set smol100 00003 --split-max-tensors 100

peer=${LLAMA_GGUF_SPLIT:-${SW_LLAMA_CACHE:-$HOME/.cache/shardwire/peer}/build-rpc/bin/llama-gguf-split}
if [ -x "$peer" ]; then
    chk=$(mktemp -d "${TMPDIR:-/tmp}/sw-split-check.XXXXXX")
    trap 'rm -rf "$chk"' EXIT
    peer_split() { # prefix, flags...
        p=$1
        shift
        "$peer" --split "$@" "$smol" "$chk/$p" >"$chk/log" 2>&1 || {
            cat "$chk/log" >&2
            exit 1
        }
    }
    peer_split smol
    peer_split smolnf --split-max-size 40M --no-tensor-first-split
    peer_split smol100 --split-max-tensors 100
    n=0
    for f in "$chk"/*.gguf; do
        cmp "$f" "$out/$(basename "$f")"
        n=$((n + 1))
    done
    echo "split_models: the $n parts equal llama.cpp's gguf-split output ($peer)"
else
    echo "split_models: llama.cpp's gguf-split is not built here: not compared"
fi
ls -l "$out"
