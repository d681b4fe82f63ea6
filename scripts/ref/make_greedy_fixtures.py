#!/usr/bin/env python3
"""Greedy-decoding reference fixtures made with llama.cpp (llama-cpp-python).

This is an independent reference for the shardwire engine: for a set of varied
prompts it records llama.cpp's prompt token ids, the next N greedy token ids
(pure argmax over the raw logits of the last position: no temperature, no
penalties, no sampler chain) and the top-5 logits of the first generated
position, and writes them to a JSON fixture that the C tests compare against.

Usage (from the repository root, with a venv holding llama-cpp-python, numpy):

    bash scripts/fetch_model.sh
    $VENV/bin/python scripts/ref/make_greedy_fixtures.py            # SmolLM2 set
    bash scripts/fetch_model.sh qwen-coder-1.5b
    $VENV/bin/python scripts/ref/make_greedy_fixtures.py --set qwen15
    bash scripts/fetch_model.sh qwen-coder-0.5b
    $VENV/bin/python scripts/ref/make_greedy_fixtures.py --set qwen05

On CPUs that report AMX (Sapphire Rapids and later) inside a VM that does not
let threads use the AMX tiles, a -march=native llama.cpp build dies with
SIGILL in ggml_backend_amx_mul_mat; build llama-cpp-python without AMX:
    CMAKE_ARGS="-DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' \
      -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'" pip install llama-cpp-python==0.3.36

Each generated token is fed back one at a time (batch of 1), exactly like an
engine's decode loop; the prompt is evaluated as one batch. Generation stops
after N tokens, or after an EOS/EOG token, which is then recorded as the last
token and noted in "stopped_at_eog". Every case also records "margins": the
gap between the best and second-best logit at each generated step, so a test
can tell a real divergence from a near-tie that a different (still correct)
summation order may legitimately flip. The script runs the whole set twice and
refuses to write the fixture if the two runs differ.
"""

import argparse
import ctypes
import hashlib
import json
import os
import sys
import time

# Sleeping (not spinning) OpenMP waits: on a shared, oversubscribed machine a
# spinning barrier makes llama.cpp 5-10x slower; the results are unaffected.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
import llama_cpp  # noqa: E402

# Each case: name, prompt text, and whether special-token text (<|im_start|>...)
# is parsed into special token ids (only chat-formatted prompts need it).
SMOLLM2_CASES = [
    ("plain_english",
     "The old lighthouse keeper climbed the spiral stairs every evening, and on the night of the storm he saw",
     False),
    ("code_python",
     "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
     False),
    ("list",
     "Things to pack for a weekend camping trip:\n1. A tent\n2. A sleeping bag\n3.",
     False),
    ("numbers",
     "The first prime numbers are 2, 3, 5, 7, 11, 13, 17,",
     False),
    ("chatml",
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
     "<|im_start|>user\nExplain step by step how a bicycle converts pedalling into forward motion.<|im_end|>\n"
     "<|im_start|>assistant\n",
     True),
    ("question",
     "How many legs does a spider have, and why do spiders not get caught in their own webs?\n",
     False),
    # deliberately answered by an end-of-generation token at once (<|im_end|>, id 2)
    ("question_eog_at_once",
     "Question: Why is the sky blue during the day but red at sunset?\nAnswer:",
     False),
    ("non_ascii",
     "Café, naïve, Straße, Москва, 東京 and emoji 🙂🚀: the word for 'thank you' in Japanese is",
     False),
    ("long_paragraph",
     "In the early years of the twentieth century, the small harbour town had depended almost entirely on "
     "fishing. Every morning before dawn, dozens of wooden boats left the quay, their crews hoping for a good "
     "catch of herring and mackerel. The women of the town mended nets, salted fish and sold what they could "
     "at the weekly market, while the children gathered mussels among the rocks at low tide. When the railway "
     "finally reached the town in 1908, everything began to change. Visitors from the cities arrived in "
     "growing numbers, attracted by the clean air and the long sandy beach, and within a decade",
     False),
    ("whitespace_mix",
     "  Indented line\n\tTabbed line\n\n\nAfter three newlines:   spaces   inside   and",
     False),
]

SMOLLM2_BY_NAME = {c[0]: c for c in SMOLLM2_CASES}

QWEN_CASES = [
    ("code_python",
     "def quicksort(arr):\n    \"\"\"Sort a list of integers in ascending order.\"\"\"\n",
     False),
    ("chatml",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\nWrite a C function that returns the length of a NUL-terminated string.<|im_end|>\n"
     "<|im_start|>assistant\n",
     True),
    SMOLLM2_BY_NAME["plain_english"],
    ("non_ascii",
     "// Größe und Länge: 東京 Москва 🙂\nconst greeting = \"",
     False),
    ("short_prompt",  # fewer than 8 prompt tokens: llama.cpp's untiled prompt path
     "Hello, my name is",
     False),
    SMOLLM2_BY_NAME["list"],
    SMOLLM2_BY_NAME["numbers"],
    ("code_c",
     "#include <stdio.h>\n\n/* Prints the first n squares, one per line. */\nint main(void)\n{\n",
     False),
    ("json",
     "{\"name\": \"shardwire\", \"layers\": [0, 15], \"dtype\": \"f32\", \"peers\": [",
     False),
    ("chatml_explain",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\nIn two sentences, what is the difference between TCP and UDP?<|im_end|>\n"
     "<|im_start|>assistant\n",
     True),
    SMOLLM2_BY_NAME["whitespace_mix"],
    SMOLLM2_BY_NAME["long_paragraph"],  # more than 64 prompt tokens: several engine chunks
]

SETS = {
    "smollm2": dict(model="models/SmolLM2-135M-Instruct.Q4_1.gguf",
                    out="tests/fixtures/greedy_smollm2.json", n_gen=64, cases=SMOLLM2_CASES),
    "qwen15": dict(model="models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
                   out="tests/fixtures/greedy_qwen15.json", n_gen=32, cases=QWEN_CASES),
    "qwen05": dict(model="models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
                   out="tests/fixtures/greedy_qwen05.json", n_gen=32, cases=QWEN_CASES),
}

GGML_TYPE_NAMES = {0: "f32", 1: "f16", 8: "q8_0", 2: "q4_0", 3: "q4_1", 30: "bf16"}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def meta_str(llm, key):
    """One GGUF metadata value as a string, or None when the model lacks it."""
    buf = ctypes.create_string_buffer(4096)
    n = llama_cpp.llama_model_meta_val_str(llm.model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else None


def last_logits(llm):
    """Logits of the last evaluated position, copied out as float32 (n_vocab,)."""
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    if not ptr:
        raise RuntimeError("llama_get_logits_ith returned NULL")
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32).copy()


def run_case(llm, prompt, special, add_bos, n_gen, eog_ids):
    llm.reset()
    llm._ctx.kv_cache_clear()
    prompt_tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=special)
    llm.eval(prompt_tokens)
    gen, margins, first_top5, stopped = [], [], None, None
    while len(gen) < n_gen:
        logits = last_logits(llm)
        if not np.all(np.isfinite(logits)):
            raise RuntimeError("non-finite logits")
        order = np.argsort(-logits, kind="stable")  # ties: lowest id first
        tok = int(order[0])
        margins.append(round(float(logits[order[0]] - logits[order[1]]), 5))
        if first_top5 is None:
            first_top5 = [{"id": int(i), "logit": round(float(logits[i]), 5)} for i in order[:5]]
        gen.append(tok)
        if tok in eog_ids:
            stopped = len(gen) - 1
            break
        if len(gen) < n_gen:
            llm.eval([tok])
    return prompt_tokens, gen, margins, first_top5, stopped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=sorted(SETS), default="smollm2")
    ap.add_argument("--model", help="override the GGUF path of the set")
    ap.add_argument("--out", help="override the output JSON path of the set")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-gen", type=int, help="override the generated-token count")
    args = ap.parse_args()
    cfg = SETS[args.set]
    model = args.model or cfg["model"]
    out = args.out or cfg["out"]
    n_gen = args.n_gen or cfg["n_gen"]
    if not os.path.isfile(model):
        sys.exit(f"make_greedy_fixtures: no model at {model} (run scripts/fetch_model.sh first)")

    llm = llama_cpp.Llama(model_path=model, n_ctx=512, n_threads=args.threads,
                          n_threads_batch=args.threads, seed=0, logits_all=False, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    n_vocab = llm.n_vocab()
    eog_ids = {i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)}
    cp = llm.context_params

    runs = []
    for rep in range(2):
        t0 = time.perf_counter()
        runs.append([run_case(llm, p, s, add_bos, n_gen, eog_ids) for _, p, s in cfg["cases"]])
        print(f"run {rep}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if runs[0] != runs[1]:
        sys.exit("make_greedy_fixtures: two runs gave different tokens: llama.cpp is not deterministic here")

    cases = []
    for (name, prompt, special), (ptoks, gen, margins, top5, stopped) in zip(cfg["cases"], runs[0]):
        cases.append({
            "name": name,
            "prompt": prompt,
            "parse_special": special,
            "add_bos": add_bos,
            "prompt_tokens": ptoks,
            "gen_tokens": gen,
            "gen_text": llm.detokenize(gen, prev_tokens=ptoks, special=True).decode("utf-8", "replace"),
            "stopped_at_eog": stopped,
            "first_top5": top5,
            "margins": margins,
        })
        flag = f" (EOG at step {stopped})" if stopped is not None else ""
        print(f"{name}: {len(ptoks)} prompt tokens, {len(gen)} generated, min margin {min(margins):.4f}{flag}",
              file=sys.stderr)

    doc = {
        "generator": "scripts/ref/make_greedy_fixtures.py --set " + args.set,
        "llama_cpp_python_version": llama_cpp.__version__,
        "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "model_file": os.path.basename(model),
        "model_sha256": sha256_file(model),
        "model": {
            "architecture": meta_str(llm, "general.architecture"),
            "n_vocab": n_vocab,
            "tokenizer_pre": meta_str(llm, "tokenizer.ggml.pre"),
            "add_bos_token": add_bos,
            "bos_id": llama_cpp.llama_vocab_bos(vocab),
            "eos_id": llama_cpp.llama_vocab_eos(vocab),
            "eog_ids": sorted(eog_ids),
        },
        "settings": {
            "n_ctx": 512,
            "n_threads": args.threads,
            "n_batch": cp.n_batch,
            "n_ubatch": cp.n_ubatch,
            "seed": 0,
            "logits_all": False,
            "flash_attn": {-1: "auto", 0: "disabled", 1: "enabled"}.get(cp.flash_attn_type, cp.flash_attn_type),
            "kv_type_k": GGML_TYPE_NAMES.get(cp.type_k, cp.type_k),
            "kv_type_v": GGML_TYPE_NAMES.get(cp.type_v, cp.type_v),
            "prompt_eval": "whole prompt in one llama_decode batch, then one token per llama_decode",
            "selection": "argmax of the raw last-position logits (lowest id on ties); no temperature, "
                         "no penalties; stop after n_gen tokens or after (and including) an EOG token",
        },
        "n_gen": n_gen,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
