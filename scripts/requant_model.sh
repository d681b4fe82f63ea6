#!/usr/bin/env bash
# Makes a model of a low-bit quant type from a fetched one with llama.cpp's
# llama-quantize (--allow-requantize), checks its sha256 and prints its path:
# the models of the quant-type fixtures (tests/slow/test_greedy_lowbit.c,
# scripts/ref/README.md). Nothing of them is committed or downloaded: the
# source comes from scripts/fetch_model.sh, the tool is built from the
# llama-cpp-python 0.3.36 sdist the benchmarks' peer comes from
# (scripts/bench/llama_peer.py), into the same cache folder.
#
#   bash scripts/requant_model.sh qwen-coder-0.5b-iq4_nl   # 431 MB, iq4_nl (and q5_1, q5_K)
#   bash scripts/requant_model.sh qwen-coder-0.5b-iq4_xs   # 428 MB, iq4_xs ffn_down, iq4_nl
#   bash scripts/requant_model.sh qwen-coder-1.5b-q2_k     # 753 MB, q2_K, q3_K, q4_K
#   bash scripts/requant_model.sh qwen-coder-1.5b-q3_k_m   # 924 MB, q3_K, q4_K, q5_K
#
# The output is cached in the model folder (models/, or $SW_MODELS_DIR): a
# second call only re-checks the hash. llama-quantize's quantizers live in
# ggml-base, which is compiled without the host's instruction-set flags, so
# the bytes are the same on every x86-64 machine; the hash check says so
# loudly if they ever are not. The tool: the peer's (scripts/bench/llama_peer.py)
# where its build folder has it, else llama-quantize alone in a minimal
# configuration (`llama_peer.py --quantize`: about 4 CPU-minutes the first time,
# 197 s user + 28 s system on 2026-12-05, docs/testing.md "CI"; cached in
# ~/.cache/shardwire/peer/build-quantize).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${SW_MODELS_DIR:-$here/models}
mkdir -p "$dir"

name=${1:?usage: requant_model.sh NAME (qwen-coder-0.5b-iq4_nl, qwen-coder-0.5b-iq4_xs, qwen-coder-1.5b-q2_k, qwen-coder-1.5b-q3_k_m)}
case "$name" in
qwen-coder-0.5b-iq4_nl)
    src=qwen-coder-0.5b
    ftype=IQ4_NL
    out="Qwen2.5-Coder-0.5B-Instruct.IQ4_NL.from-Q4_K_M.gguf"
    out_sha="a84db702bbf621443d556427dd1d66048239591ba99e62dcafe65d1b4ce2c168"
    ;;
qwen-coder-0.5b-iq4_xs)
    src=qwen-coder-0.5b
    ftype=IQ4_XS
    out="Qwen2.5-Coder-0.5B-Instruct.IQ4_XS.from-Q4_K_M.gguf"
    out_sha="d41453d1fe843c5690aeb9fc6ec05a3145dd3a4e5a66f55244370e6358cf2a6b"
    ;;
qwen-coder-1.5b-q2_k)
    src=qwen-coder-1.5b
    ftype=Q2_K
    out="Qwen2.5-Coder-1.5B-Instruct.Q2_K.from-Q4_K_M.gguf"
    out_sha="ae78b12904a5d5e1524c261c529253e3717eeef660eba942042fae75fc767cd3"
    ;;
qwen-coder-1.5b-q3_k_m)
    src=qwen-coder-1.5b
    ftype=Q3_K_M
    out="Qwen2.5-Coder-1.5B-Instruct.Q3_K_M.from-Q4_K_M.gguf"
    out_sha="b32ae6f04ee3f6f337a7f50ba354500085ab47cca18a72bc3e16cc57e4d7739e"
    ;;
*)
    echo "requant_model: unknown model '$name' (known: qwen-coder-0.5b-iq4_nl, qwen-coder-0.5b-iq4_xs, qwen-coder-1.5b-q2_k, qwen-coder-1.5b-q3_k_m)" >&2
    exit 2
    ;;
esac

check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
if check "$dir/$out" "$out_sha"; then
    echo "$dir/$out"
    exit 0
fi

source_gguf=$(bash "$here/scripts/fetch_model.sh" "$src")

# llama-quantize: the peer's when its build folder has it, else a build of
# that one program in the cache (scripts/bench/llama_peer.py --quantize)
if ! quantize=$(python3 "$here/scripts/bench/llama_peer.py" --quantize) || [ ! -x "$quantize" ]; then
    echo "requant_model: could not build llama.cpp's llama-quantize (scripts/bench/llama_peer.py --quantize; its log: ${SW_LLAMA_CACHE:-$HOME/.cache/shardwire/peer}/build.log)" >&2
    exit 1
fi

tmp=$(mktemp "$dir/.requant.XXXXXX")
trap 'rm -f "$tmp" "$tmp.log"' EXIT
echo "requant_model: $(basename "$source_gguf") -> $ftype with llama-quantize --allow-requantize" >&2
if ! "$quantize" --allow-requantize "$source_gguf" "$tmp" "$ftype" 2 >"$tmp.log" 2>&1; then
    tail -5 "$tmp.log" >&2
    echo "requant_model: llama-quantize failed (its log's end above)" >&2
    exit 1
fi
if ! check "$tmp" "$out_sha"; then
    echo "requant_model: $out has sha256 $(sha256sum "$tmp" | cut -d' ' -f1), expected $out_sha: this llama-quantize does not make the fixtures' file; refusing it" >&2
    exit 1
fi
mv "$tmp" "$dir/$out"
echo "requant_model: $dir/$out is ready" >&2
echo "$dir/$out"
