"""Greedy fixtures of llama.cpp with a q8_0 KV cache (issue 33: --kv-type q8_0).

The cases and the method of make_greedy_fixtures.py (prompt as one batch, then
one token per llama_decode, argmax of the raw logits, lowest id on ties), with
llama.cpp's KV cache in q8_0 for keys and values (`-ctk q8_0 -ctv q8_0`, which
needs its flash attention: on, as llama.cpp requires for a quantized V). Every
generated step's whole logits row is recorded as the sha256 of its
little-endian float32 bytes (logits_sha256), and the first position's top-5 at
full precision, so tests/e2e/test_kv_q8.c compares shardwire's q8_0 cache
with llama.cpp's bit for bit.

llama.cpp 0.3.36 by default rotates queries, keys and values with a Hadamard
matrix when its cache is quantized (llama-kv-cache.cpp, attn_rot_k/attn_rot_v:
f32 matmuls before the cache and after the attention, to spread outliers
before quantizing). shardwire's q8_0 cache does not rotate, so the fixture is
made with that off (LLAMA_ATTN_ROT_DISABLE=1, set below and recorded in the
fixture's settings): it is llama.cpp's plain q8_0 cache and flash attention.

Usage (the AVX2 build of scripts/ref/README.md, e.g. ~/.cache/shardwire/ref-avx2):

    LLAMA_CPP_LIB_PATH=$LCBUILD/bin $VENV/bin/python scripts/ref/make_kvq8_fixtures.py --set smollm2
    LLAMA_CPP_LIB_PATH=$LCBUILD/bin $VENV/bin/python scripts/ref/make_kvq8_fixtures.py --set qwen05

The script runs each set twice and refuses to write a fixture when the two
runs differ.
"""

import argparse
import hashlib
import json
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
os.environ["LLAMA_ATTN_ROT_DISABLE"] = "1"  # no Hadamard rotation (see above)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import llama_cpp  # noqa: E402

from make_greedy_fixtures import GGML_TYPE_NAMES, SETS, meta_str, sha256_file  # noqa: E402

GGML_TYPE_Q8_0 = 8


def logits_of(llm):
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    if not ptr:
        raise RuntimeError("llama_get_logits_ith returned NULL")
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32).copy()


def run_case(llm, prompt, special, add_bos, n_gen, eog_ids):
    llm.reset()
    llm._ctx.kv_cache_clear()
    ptoks = llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=special)
    llm.eval(ptoks)
    gen, margins, hashes, top5, stopped = [], [], [], None, None
    while len(gen) < n_gen:
        lg = logits_of(llm)
        if not np.all(np.isfinite(lg)):
            raise RuntimeError("non-finite logits")
        order = np.argsort(-lg, kind="stable")
        tok = int(order[0])
        margins.append(round(float(lg[order[0]] - lg[order[1]]), 5))
        hashes.append(hashlib.sha256(lg.astype("<f4").tobytes()).hexdigest())
        if top5 is None:
            top5 = [{"id": int(i), "logit": float(lg[i])} for i in order[:5]]
        gen.append(tok)
        if tok in eog_ids:
            stopped = len(gen) - 1
            break
        if len(gen) < n_gen:
            llm.eval([tok])
    return ptoks, gen, margins, hashes, top5, stopped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=sorted(SETS), default="smollm2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--out-dir", default="tests/fixtures")
    args = ap.parse_args()
    cfg = SETS[args.set]
    model = cfg["model"]
    if not os.path.isfile(model):
        sys.exit(f"make_kvq8_fixtures: no model at {model} (run scripts/fetch_model.sh first)")
    llm = llama_cpp.Llama(model_path=model, n_ctx=512, n_threads=args.threads,
                          n_threads_batch=args.threads, seed=0, logits_all=False, verbose=False,
                          flash_attn=True, type_k=GGML_TYPE_Q8_0, type_v=GGML_TYPE_Q8_0)
    vocab_h = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab_h))
    n_vocab = llm.n_vocab()
    eog_ids = {i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab_h, i)}
    cp = llm.context_params
    runs = []
    for rep in range(2):
        t0 = time.perf_counter()
        runs.append([run_case(llm, p, s, add_bos, args.n_gen, eog_ids) for _, p, s in cfg["cases"]])
        print(f"{args.set} run {rep}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if runs[0] != runs[1]:
        sys.exit("make_kvq8_fixtures: two runs differ: llama.cpp is not deterministic here")
    cases = []
    for (cname, prompt, special), (ptoks, gen, margins, hashes, top5, stopped) in zip(cfg["cases"], runs[0]):
        cases.append({
            "name": cname, "prompt": prompt, "parse_special": special, "add_bos": add_bos,
            "prompt_tokens": ptoks, "gen_tokens": gen,
            "gen_text": llm.detokenize(gen, prev_tokens=ptoks, special=True).decode("utf-8", "replace"),
            "stopped_at_eog": stopped, "first_top5": top5, "margins": margins,
            "logits_sha256": hashes,
        })
        print(f"{args.set}/{cname}: {len(ptoks)} prompt tokens, {len(gen)} generated, "
              f"min margin {min(margins):.4f}", file=sys.stderr)
    doc = {
        "generator": "scripts/ref/make_kvq8_fixtures.py --set " + args.set,
        "llama_cpp_python_version": llama_cpp.__version__,
        "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "model_file": os.path.basename(model),
        "model_sha256": sha256_file(model),
        "model": {
            "architecture": meta_str(llm, "general.architecture"),
            "n_vocab": n_vocab,
            "add_bos_token": add_bos,
            "eog_ids": sorted(eog_ids),
        },
        "settings": {
            "n_ctx": 512, "n_threads": args.threads, "n_batch": cp.n_batch, "n_ubatch": cp.n_ubatch,
            "seed": 0, "logits_all": False,
            "flash_attn": {-1: "auto", 0: "disabled", 1: "enabled"}.get(cp.flash_attn_type, cp.flash_attn_type),
            "kv_type_k": GGML_TYPE_NAMES.get(cp.type_k, cp.type_k),
            "kv_type_v": GGML_TYPE_NAMES.get(cp.type_v, cp.type_v),
            "attn_rot": "disabled (LLAMA_ATTN_ROT_DISABLE=1: no Hadamard rotation of Q, K, V)",
            "prompt_eval": "whole prompt in one llama_decode batch, then one token per llama_decode",
            "selection": "argmax of the raw last-position logits (lowest id on ties); stop after "
                         "n_gen tokens or after (and including) an EOG token",
            "logits_sha256": "sha256 of the logits row of each generated step as little-endian float32",
        },
        "n_gen": args.n_gen,
        "cases": cases,
    }
    out = os.path.join(args.out_dir, f"kvq8_{args.set}.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
