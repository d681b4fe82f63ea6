"""Greedy fixtures of llama.cpp with a q8_0 KV cache (issue 33: --kv-type q8_0).

The cases and the method of make_greedy_fixtures.py (prompt as one batch, then
one token per llama_decode, argmax of the raw logits, lowest id on ties), with
llama.cpp's KV cache in q8_0 for keys and values (`-ctk q8_0 -ctv q8_0`, which
needs its flash attention: on, as llama.cpp requires for a quantized V). Every
generated step's whole logits row is recorded as the sha256 of its
little-endian float32 bytes (logits_sha256), and the first position's top-5 at
full precision, so tests/slow/test_kv_q8.c compares shardwire's q8_0 cache
with llama.cpp's bit for bit.

llama.cpp 0.3.36 by default rotates queries, keys and values with a Hadamard
matrix when its cache is quantized (llama-kv-cache.cpp, attn_rot_k/attn_rot_v:
f32 matmuls before the cache and after the attention, to spread outliers
before quantizing). shardwire's q8_0 cache does not rotate, so the fixture is
made with that off (LLAMA_ATTN_ROT_DISABLE=1, set below and recorded in the
fixture's settings): it is llama.cpp's plain q8_0 cache and flash attention.

Usage (the AVX2 build of scripts/ref/README.md, e.g. ~/.cache/shardwire/ref-avx2):

    LLAMA_CPP_LIB_PATH=$LCBUILD/bin $VENV/bin/python scripts/ref/make_kvq8_fixtures.py --set smollm2

The script runs each set twice and refuses to write a fixture when the two
runs differ.
"""

import argparse
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
os.environ["LLAMA_ATTN_ROT_DISABLE"] = "1"  # no Hadamard rotation (see above)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_arch_fixtures import make_set  # noqa: E402  (the same method, logits hashed)
from make_greedy_fixtures import SETS  # noqa: E402

GGML_TYPE_Q8_0 = 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=sorted(SETS), default="smollm2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--out-dir", default="tests/fixtures")
    args = ap.parse_args()
    args.real_dir = "."  # the set's model path is relative to the repository root
    base = SETS[args.set]
    cfg = {
        "model": base["model"], "cases": base["cases"], "n_gen": args.n_gen,
        "llama_kwargs": dict(flash_attn=True, type_k=GGML_TYPE_Q8_0, type_v=GGML_TYPE_Q8_0),
        "settings": {"attn_rot": "disabled (LLAMA_ATTN_ROT_DISABLE=1: no Hadamard rotation of "
                                 "Q, K, V)"},
        "generator": "scripts/ref/make_kvq8_fixtures.py --set " + args.set,
        "out": f"kvq8_{args.set}.json",
    }
    make_set(args.set, cfg, args)


if __name__ == "__main__":
    main()
