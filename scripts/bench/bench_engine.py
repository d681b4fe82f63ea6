#!/usr/bin/env python3
"""Side-by-side CPU speed benchmark: shardwire's engine against llama.cpp.

Both engines run in one invocation on the same GGUF, with the same thread
count and the same prompts, interleaved rep by rep so that load from other
processes on a shared machine hits both alike. Reported numbers are medians.

  pp<N>  prompt processing: tokens/s over the whole N-token prompt evaluation
         (one batch), for N = 128 and 512 by default
  tg<M>@<N>  generation after the N-token prompt: tokens/s over the M-1
         single-token decode steps that produce tokens 2..M (token 1 comes
         from the prompt pass), each step including the argmax over the logits

Usage (from the repository root):

    bash scripts/fetch_model.sh
    $VENV/bin/python scripts/bench/bench_engine.py                 # SmolLM2, 2 threads, 5 reps
    $VENV/bin/python scripts/bench/bench_engine.py --threads 2 --reps 3 --pp 128,512 --n-gen 128 \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf --bin build/bin/shardwire --json out.json

Needs a venv with llama-cpp-python and numpy (on AMX-reporting CPUs in a VM,
build it without AMX: see scripts/ref/make_greedy_fixtures.py), or, with
--llama-bin (and when llama_cpp cannot be imported), llama.cpp's own programs
as scripts/bench/llama_peer.py builds them from the same sdist's vendored source:
llama-bench times the prompt (-p N) and the generation after N tokens
(-n M -d N), with --llama-fa (default off, llama-cpp-python's default and the
attention shardwire reproduces) and --llama-repack (default 0,1: both, 0 = no weight
repacking, the plain K-quant path; 1 = llama.cpp's repacked buffers; 0 alone
on CPUs with AMX, where the repacked buffers crash: llama_peer.py); the
prompt text of exactly N tokens comes from llama-tokenize.

    python3 scripts/bench/bench_engine.py --llama-bin auto --threads 2 --reps 3 --pp 128,512 \
        --n-gen 32 --model models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf

OpenMP waits are passive by default (--omp-wait-policy). shardwire is run as
    <bin> generate --greedy --model M -p PROMPT -n N --threads T --json
which must print one JSON object {"text","tokens","n_prompt","n_gen","ttft_ms",
"prefill_tok_s","decode_tok_s"} as the last line of its stdout.

Where each number stands (issue 37): the header names the CPU (model, family,
and the SIMD flags the kernels choose by) and the kernel level shardwire runs;
for every thread count the machine's read bandwidth is measured in the same run
at that thread count (build/bin/bench_membw, the best of its passes over 1 GiB,
at the start and the end of that thread count's block: the larger counts);
each model's bytes read per generated token come from its GGUF tensor table
(every weight a decode step reads: all layer weights and the output matrix,
the whole token embedding when it is also the output, else its one looked-up
row; plus the f16 KV cache rows
read at the average position of the generation), so every tg row prints the
bandwidth bound (bandwidth / bytes per token) and each engine's fraction of it.
--model and --threads take comma-separated lists; with llama.cpp's programs
both configurations run by default (--llama-repack 0,1: its plain K-quant path
and its repacked buffers, llama-bench's default), and the ratio column compares
shardwire with the faster of them. --json writes the result file: commit,
machine, date, command, load averages, every sample. When the binary
is missing (or --only llama), its column says n/a. The llama.cpp side uses the
low-level API: llama_decode of the prompt batch timed with time.perf_counter,
then one llama_decode per generated token; llama.cpp's own perf counters are
printed alongside as a cross-check. The prompt given to shardwire is the text
of exactly the N tokens llama.cpp evaluated; shardwire's own n_prompt is shown.
"""

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError:  # only the llama-cpp-python side needs it
    np = None

PARAGRAPHS = [
    "The history of the printing press begins long before Gutenberg, with carved wooden blocks used to press "
    "ink onto cloth and paper across East Asia.",
    "Movable type made from baked clay was described in China in the eleventh century, and metal type appeared "
    "in Korea about two hundred years later.",
    "In Europe, the combination of an oil-based ink, a screw press adapted from wine making and a hand mould for "
    "casting letters allowed books to be produced at a pace that no scriptorium could match.",
    "Within fifty years of the first printed Bible, presses were operating in more than two hundred cities, and "
    "millions of volumes had been printed on subjects ranging from theology to navigation and medicine.",
    "The spread of cheap pamphlets changed how news travelled, how scholars argued with each other and how "
    "ordinary people learned to read, write and count.",
    "Printers became publishers, booksellers and sometimes censors, and the rules they developed for spelling "
    "and punctuation slowly turned regional dialects into standard written languages.",
]


def make_prompt_tokens(llm, n):
    """Exactly n llama.cpp tokens of plain English text (paragraphs repeated as needed)."""
    text, toks, i = "", [], 0
    while len(toks) < n:
        text += (" " if text else "") + PARAGRAPHS[i % len(PARAGRAPHS)]
        toks = llm.tokenize(text.encode(), add_bos=False, special=False)
        i += 1
    return toks[:n]


class LlamaBench:
    def __init__(self, model, threads, n_ctx, n_batch):
        import llama_cpp
        self.lc = llama_cpp
        self.llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                                   n_threads=threads, n_threads_batch=threads, seed=0,
                                   logits_all=False, verbose=False)
        self.n_vocab = self.llm.n_vocab()
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(self.llm.model)))

    def _argmax(self):
        ptr = self.lc.llama_get_logits_ith(self.llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))))

    def run(self, prompt_tokens, n_gen):
        llm = self.llm
        llm.reset()
        llm._ctx.kv_cache_clear()
        self.lc.llama_perf_context_reset(llm.ctx)
        toks = ([self.lc.llama_vocab_bos(self.lc.llama_model_get_vocab(llm.model))] if self.add_bos else []) \
            + list(prompt_tokens)
        t0 = time.perf_counter()
        llm.eval(toks)
        tok = self._argmax()
        t1 = time.perf_counter()
        for _ in range(n_gen - 1):
            llm.eval([tok])
            tok = self._argmax()
        t2 = time.perf_counter()
        perf = self.lc.llama_perf_context(llm.ctx)
        return {
            "n_prompt": len(toks),
            "n_gen": n_gen,
            "ttft_ms": (t1 - t0) * 1e3,
            "prefill_tok_s": len(toks) / (t1 - t0),
            # the first token comes from the prompt pass: n_gen - 1 decode steps
            "decode_tok_s": (n_gen - 1) / (t2 - t1) if n_gen > 1 else float("nan"),
            "perf_pp_tok_s": perf.n_p_eval / (perf.t_p_eval_ms / 1e3) if perf.t_p_eval_ms > 0 else float("nan"),
            "perf_tg_tok_s": perf.n_eval / (perf.t_eval_ms / 1e3) if perf.t_eval_ms > 0 else float("nan"),
        }

    def detok(self, toks):
        return self.llm.detokenize(list(toks)).decode("utf-8", "replace")

    def prompt_text(self, n):
        self.toks = getattr(self, "toks", {})
        self.toks[n] = make_prompt_tokens(self.llm, n)
        return self.detok(self.toks[n])

    def warm_up(self, n):
        self.run(self.toks[n][:16], 4)

    def run_all(self, pps, n_gen):
        return {n: self.run(self.toks[n], n_gen) for n in pps}

    def describe(self):
        import llama_cpp
        return f"llama.cpp = llama-cpp-python {llama_cpp.__version__}"


class LlamaBinBench:
    """llama.cpp's programs: llama-bench for the times, llama-tokenize for the prompts."""

    def __init__(self, bindir, model, threads, fa, repack):
        self.bin, self.model, self.threads, self.fa, self.repack = bindir, model, threads, fa, repack

    def _pieces(self, text):
        r = subprocess.run([os.path.join(self.bin, "llama-tokenize"), "-m", self.model, "-p", text,
                            "--log-disable"], capture_output=True, text=True, check=True)
        out = []
        for ln in r.stdout.splitlines():
            m = re.match(r"^\s*(\d+) -> '(.*)'$", ln)
            if m:
                out.append(m.group(2))
        return out

    def prompt_text(self, n):
        """Plain English text of exactly n llama.cpp tokens (paragraphs repeated as needed)."""
        text, i = "", 0
        while True:
            text += (" " if text else "") + PARAGRAPHS[i % len(PARAGRAPHS)]
            i += 1
            pieces = self._pieces(text)
            if len(pieces) >= n:
                return "".join(pieces[:n])

    def warm_up(self, n):
        pass  # every llama-bench run is a fresh process with its own warm-up run

    def describe(self):
        return f"llama.cpp = llama-bench (-fa {self.fa} --repack {self.repack})"

    def _bench(self, extra):
        argv = [os.path.join(self.bin, "llama-bench"), "-m", self.model, "-t", str(self.threads),
                "-r", "1", "-fa", self.fa, "--repack", self.repack, "-o", "json", *extra]
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"llama-bench exited {r.returncode}: {r.stderr.strip()[-500:]}")
        return json.loads(r.stdout)

    def run_all(self, pps, n_gen):
        """{n: {"prefill_tok_s", "decode_tok_s"}} for every prompt length, one pass."""
        res = {n: {"n_prompt": n, "n_gen": n_gen} for n in pps}
        for t in self._bench(["-p", ",".join(map(str, pps)), "-n", "0"]):
            res[t["n_prompt"]]["prefill_tok_s"] = t["avg_ts"]
        for t in self._bench(["-p", "0", "-n", str(n_gen), "-d", ",".join(map(str, pps))]):
            res[t["n_depth"]]["decode_tok_s"] = t["avg_ts"]
        return res


def run_shardwire(binary, model, prompt, n_gen, threads, timeout):
    cmd = [binary, "generate", "--greedy", "--model", model, "-p", prompt, "-n", str(n_gen), "--threads", str(threads), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"shardwire exited {r.returncode}: {r.stderr.strip()[-500:]}")
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    if not lines:
        raise RuntimeError("shardwire printed nothing on stdout")
    d = json.loads(lines[-1])
    for k in ("n_prompt", "n_gen", "prefill_tok_s", "decode_tok_s"):
        if k not in d:
            raise RuntimeError(f"shardwire JSON lacks '{k}'")
    return d


# ---- where the numbers stand: CPU, bandwidth, bytes per token -------------------------------

SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
              "avx512dq", "avx512_vnni", "avx512_bf16", "avx512vbmi", "amx_tile", "amx_int8", "amx_bf16",
              "asimd", "asimddp", "sve", "i8mm")


def cpu_info():
    """{"model", "family", "flags" (the SIMD ones), "all_flags_count", "n_cpus"} from /proc/cpuinfo."""
    info = {"model": "unknown", "family": "", "flags": [], "n_cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return info
    first = text.split("\n\n")[0]
    fields = {}
    for ln in first.splitlines():
        if ":" in ln:
            k, v = ln.split(":", 1)
            fields[k.strip()] = v.strip()
    info["model"] = fields.get("model name", fields.get("Model", "unknown"))
    info["family"] = (f"{fields.get('vendor_id', '?')} family {fields.get('cpu family', '?')} model "
                      f"{fields.get('model', '?')} stepping {fields.get('stepping', '?')}")
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    info["flags"] = [f for f in SIMD_FLAGS if f in flags]
    return info


# GGML type id -> (elements per block, bytes per block)
GGML_TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
              9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
              14: (256, 210), 15: (256, 292), 20: (32, 18), 23: (256, 136), 30: (1, 2)}


def gguf_tensors(path):
    """({key: value} of the scalar metadata, {tensor name: (type, dims)}) of a GGUF v2/v3 file."""
    import struct
    with open(path, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def rstr():
            return f.read(rd("Q")).decode("utf-8", "replace")
        scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

        def rval(t):
            if t in scal:
                return rd(scal[t])
            if t == 8:
                return rstr()
            if t == 9:
                et, n = rd("I"), rd("Q")
                if et in scal:  # skip the array's bytes
                    f.seek(n * struct.calcsize("<" + scal[et]), 1)
                    return None
                for _ in range(n):
                    rval(et)
                return None
            raise ValueError(f"{path}: unknown GGUF value type {t}")
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        if rd("I") < 2:
            raise ValueError(f"{path}: GGUF version 1 is not supported")
        n_t, n_kv = rd("Q"), rd("Q")
        meta = {}
        for _ in range(n_kv):
            k = rstr()
            meta[k] = rval(rd("I"))
        tensors = {}
        for _ in range(n_t):
            name = rstr()
            dims = [rd("Q") for _ in range(rd("I"))]
            t = rd("I")
            rd("Q")  # offset
            tensors[name] = (t, dims)
    return meta, tensors


def bytes_per_token(path, position):
    """What one decode step reads at the given position: {"weights", "kv", "total"} in bytes."""
    meta, tensors = gguf_tensors(path)
    weights = 0
    tied = "output.weight" not in tensors
    for name, (t, dims) in tensors.items():
        if t not in GGML_TYPES:
            raise ValueError(f"{path}: tensor {name} has GGML type {t}, unknown to this script")
        be, bb = GGML_TYPES[t]
        n = 1
        for d in dims:
            n *= d
        size = n // be * bb
        if name == "token_embd.weight" and not tied:
            size = dims[0] // be * bb  # only the looked-up row
        weights += size
    arch = meta.get("general.architecture", "")
    n_layer = meta.get(f"{arch}.block_count", 0)
    n_head = meta.get(f"{arch}.attention.head_count", 1) or 1
    n_kv = meta.get(f"{arch}.attention.head_count_kv", n_head) or n_head
    n_embd = meta.get(f"{arch}.embedding_length", 0)
    head_dim = meta.get(f"{arch}.attention.key_length", n_embd // n_head if n_head else 0)
    kv = 2 * n_layer * n_kv * head_dim * 2 * position  # K and V, f16, every cached position
    return {"weights": weights, "kv": kv, "total": weights + kv}


def membw(binary, threads):
    """The best read bandwidth (GB/s) of bench_membw at this thread count, or None."""
    if not os.access(binary, os.X_OK):
        return None
    r = subprocess.run([binary, str(threads), "1024", "1.0"], capture_output=True, text=True)
    m = re.search(r"best_gbs ([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        print(f"bench_engine: {binary} failed: {r.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return float(m.group(1))


def git_commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        c = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True,
                           check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip() != ""
        return c + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def med(rows, key):
    vals = [r[key] for r in rows if r is not None and r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt(v):
    return "n/a" if v is None else f"{v:9.1f}"


def kernel_level(backend):
    """A backend string without `info`'s own thread count: 'cpu (1 thread, avx2 kernels)' ->
    'cpu (avx2 kernels)' (the benchmark's thread counts are its blocks')."""
    return re.sub(r"\(\d+ threads?, ", "(", backend)


def sw_kernels(binary, model):
    """The kernel level shardwire runs here ('avx512 kernels' ...), from `shardwire info`."""
    try:
        r = subprocess.run([binary, "info", "--model", model, "--json"], capture_output=True, text=True,
                           timeout=120)
        return kernel_level(json.loads(r.stdout.strip().splitlines()[-1]).get("backend", "?"))
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return "?"


def bench_block(args, model, threads, pps):
    """Every engine on one model at one thread count, rep by rep; returns the block's record."""
    bw0 = membw(args.membw_bin, threads)
    if args.llama_bin is not None:
        llamas = [(f"llama repack {rp}", LlamaBinBench(args.llama_bin, model, threads, args.llama_fa, rp))
                  for rp in args.llama_repack.split(",") if rp.strip()]
    else:  # llama.cpp is always loaded: it also makes the prompts (exact token counts)
        llamas = [("llama", LlamaBench(model, threads, n_ctx=max(pps) + args.n_gen + 16,
                                       n_batch=max(pps) + 8))]
    use_llama = args.only in ("both", "llama")
    use_sw = args.only in ("both", "shardwire") and os.access(args.bin, os.X_OK)
    prompts = {n: llamas[0][1].prompt_text(n) for n in pps}
    cols = [name for name, _ in llamas] if use_llama else []
    sws = [("shardwire", args.bin)]
    if args.bin_base and use_sw:
        sws.insert(0, ("sw base", args.bin_base))
    results = {n: {c: [] for c in cols + [name for name, _ in sws]} for n in pps}
    load0 = os.getloadavg()
    if use_llama:
        for _, lb in llamas:
            lb.warm_up(pps[0])
    if use_sw:
        try:
            for _, binary in sws:
                run_shardwire(binary, model, prompts[pps[0]][:64], 4, threads, args.timeout)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            print(f"bench_engine: shardwire warm-up failed ({e}): shardwire column is n/a", file=sys.stderr)
            use_sw = False
    for rep in range(args.reps):
        if use_llama:
            for name, lb in llamas:
                res = lb.run_all(pps, args.n_gen)
                for n in pps:
                    results[n][name].append(res[n])
        for n in pps:
            for name, binary in sws if use_sw else []:
                try:
                    results[n][name].append(
                        run_shardwire(binary, model, prompts[n], args.n_gen, threads, args.timeout))
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                    print(f"bench_engine: {name} run failed: {e}", file=sys.stderr)
                    results[n][name].append(None)
        print(f"{os.path.basename(model)} t{threads}: rep {rep + 1}/{args.reps} done", file=sys.stderr)
    load1 = os.getloadavg()
    bw1 = membw(args.membw_bin, threads)
    bws = [b for b in (bw0, bw1) if b is not None]
    return {"model": model, "threads": threads, "columns": cols + [name for name, _ in sws],
            "shardwire_bins": dict(sws),
            "llama": [lb.describe() for _, lb in llamas], "use_sw": use_sw,
            "bandwidth_gbs": max(bws) if bws else None, "bandwidth_samples_gbs": [bw0, bw1],
            "loadavg_start": load0, "loadavg_end": load1,
            "samples": {str(n): results[n] for n in pps}}


def print_block(args, blk, pps):
    """The block's table; returns its summary (medians, bounds, ratios)."""
    model, threads, cols = blk["model"], blk["threads"], blk["columns"]
    bw = blk["bandwidth_gbs"]
    l0, l1 = blk["loadavg_start"], blk["loadavg_end"]
    print(f"\nmodel {os.path.basename(model)}, threads {threads}, reps {args.reps} (median), "
          f"tg = {args.n_gen} tokens after the prompt; read bandwidth with {threads} thread(s) "
          f"{'n/a' if bw is None else f'{bw:.1f} GB/s'} (bench_membw, best of the block's start and end); "
          f"load average {l0[0]:.2f} at the start, {l1[0]:.2f} {l1[1]:.2f} at the end")
    llama_cols = [c for c in cols if c.startswith("llama")]
    head = f"{'test':<14}" + "".join(f"{c:>16}" for c in cols) + f"{'sw/best llama':>15}"
    if "sw base" in cols:
        head += f"{'sw/base':>9}"
    head += f"{'MB/token':>10}{'bound tok/s':>13}" + "".join(f"{'% bound ' + (c if not c.startswith('llama') else 'rp' + c.split()[-1]):>16}" for c in cols)
    print(head)
    summary = {}
    for n in pps:
        S = blk["samples"][str(n)]
        bpt = bytes_per_token(model, n + args.n_gen // 2)
        for label, key in ((f"pp{n}", "prefill_tok_s"), (f"tg{args.n_gen}@{n}", "decode_tok_s")):
            vals = {c: med(S[c], key) for c in cols}
            best_l = max([vals[c] for c in llama_cols if vals[c] is not None], default=None)
            sv = vals.get("shardwire")
            ratio = f"{sv / best_l:15.2f}" if best_l and sv else f"{'n/a':>15}"
            line = f"{label:<14}" + "".join(f"{fmt(vals[c]):>16}" for c in cols) + ratio
            row = {"tok_s": vals, "shardwire_vs_best_llama": sv / best_l if best_l and sv else None}
            if "sw base" in cols:
                bv = vals["sw base"]
                row["shardwire_vs_base"] = sv / bv if bv and sv else None
                rb = row["shardwire_vs_base"]
                line += f"{'n/a' if rb is None else f'{rb:.2f}':>9}"
            if key == "decode_tok_s":
                bound = bw * 1e9 / bpt["total"] if bw else None
                line += f"{bpt['total'] / 1e6:10.1f}{fmt(bound):>13}"
                fr = {c: (vals[c] / bound if bound and vals[c] else None) for c in cols}
                line += "".join(f"{'n/a' if fr[c] is None else f'{100 * fr[c]:.1f} %':>16}" for c in cols)
                row.update({"bytes_per_token": bpt, "bound_tok_s": bound, "fraction_of_bound": fr})
            print(line)
            summary[label] = row
    return summary


def table(r):
    """A result file's summary as a markdown table (scripts/docs/render_bench.py): per file,
    thread count and test, each engine's median tok/s, shardwire over llama.cpp's faster
    configuration and, for generation, the read bound and each engine's share of it."""
    cols = []
    for blk in r["blocks"]:
        cols += [c for c in blk["columns"] if c not in cols]
    hdr = ["file", "threads", "test"] + cols + ["shardwire / best llama.cpp", "read GB/s",
                                                "MB/token", "bound tok/s"]
    hdr += [f"% of bound, {c}" for c in cols]
    rows = []
    for blk in r["blocks"]:
        name = os.path.basename(blk["model"]).replace("Qwen2.5-Coder-1.5B-Instruct.", "")
        for test, row in blk["summary"].items():
            vals = row["tok_s"]
            ratio = row.get("shardwire_vs_best_llama")
            cells = [name, str(blk["threads"]), test]
            cells += ["n/a" if vals.get(c) is None else f"{vals[c]:.1f}" for c in cols]
            cells.append("n/a" if ratio is None else f"{ratio:.2f}")
            if "bound_tok_s" in row and row["bound_tok_s"]:
                fr = row["fraction_of_bound"]
                cells += [f"{blk['bandwidth_gbs']:.1f}", f"{row['bytes_per_token']['total'] / 1e6:.0f}",
                          f"{row['bound_tok_s']:.1f}"]
                cells += ["n/a" if fr.get(c) is None else f"{100 * fr[c]:.0f} %" for c in cols]
            else:
                cells += [""] * (3 + len(cols))
            rows.append(cells)
    return hdr, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf",
                    help="a GGUF file, or several separated by commas")
    ap.add_argument("--bin", default="build/bin/shardwire")
    ap.add_argument("--bin-base", help="a second shardwire binary (the baseline: another commit's build), "
                    "run beside --bin rep by rep in its own column, 'sw base'")
    ap.add_argument("--membw-bin", default="build/bin/bench_membw",
                    help="the bandwidth probe (tests/bench/bench_membw.c); absent: no bound is printed")
    ap.add_argument("--threads", default="2", help="a thread count, or several separated by commas")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pp", default="128,512", help="comma-separated prompt lengths in tokens")
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--only", choices=["both", "llama", "shardwire"], default="both")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per shardwire run")
    ap.add_argument("--json", "--json-out", dest="json",
                    help="also write the result file (commit, machine, date, command, load, "
                    "every sample and the medians) here (render_bench.py renders it)")
    ap.add_argument("--dedicated", action="store_true",
                    help="the machine ran nothing else: the result file says so instead of 'shared machine'")
    ap.add_argument("--note", help="the result file's note instead of 'shared machine' / 'dedicated'")
    ap.add_argument("--omp-wait-policy", choices=["passive", "active", "unset"], default="passive",
                    help="OMP_WAIT_POLICY for llama.cpp's OpenMP threads (default passive: on a shared, "
                         "oversubscribed machine spinning waits make llama.cpp several times slower)")
    ap.add_argument("--llama-bin", help="llama.cpp's programs instead of llama-cpp-python: a bin "
                    "folder, or 'auto' (scripts/bench/llama_peer.py builds or finds them); also used when "
                    "llama_cpp cannot be imported")
    ap.add_argument("--llama-fa", default="off", help="llama-bench -fa (default off)")
    ap.add_argument("--llama-repack", default=None,
                    help="llama-bench --repack values, each a column (default 0,1: both "
                         "configurations; 0 alone on CPUs with AMX, where repacking crashes: "
                         "scripts/bench/llama_peer.py)")
    args = ap.parse_args()
    models = [m for m in args.model.split(",") if m.strip()]
    for m in models:
        if not os.path.isfile(m):
            sys.exit(f"bench_engine: no model at {m} (run scripts/fetch_model.sh first)")
    try:
        pps = [int(x) for x in args.pp.split(",") if x.strip()]
        threads = [int(x) for x in args.threads.split(",") if x.strip()]
    except ValueError:
        sys.exit("bench_engine: --pp and --threads take comma-separated integers")
    if not pps or min(pps) < 1 or args.n_gen < 2 or args.reps < 1 or not threads or min(threads) < 1:
        sys.exit("bench_engine: --pp values must be >= 1, --n-gen >= 2, --reps >= 1, --threads >= 1")

    if args.omp_wait_policy != "unset":
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()  # read when libgomp loads
    if args.llama_bin is None:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            args.llama_bin = "auto"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import llama_peer
    if args.llama_bin == "auto":
        args.llama_bin = llama_peer.ensure()
    if args.llama_repack is None:
        args.llama_repack = "0" if llama_peer.has_amx() else "0,1"
        if args.llama_bin is not None and llama_peer.has_amx():
            print(f"bench_engine: {llama_peer.amx_note()}", file=sys.stderr)
    if args.only in ("both", "shardwire") and not os.access(args.bin, os.X_OK):
        print(f"bench_engine: {args.bin} not found or not executable: shardwire column is n/a", file=sys.stderr)

    cpu = cpu_info()
    kernels = sw_kernels(args.bin, models[0]) if os.access(args.bin, os.X_OK) else "n/a"
    date = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    commit = git_commit()  # at the start: the tree may move while the benchmark runs
    print(f"CPU {cpu['model']} ({cpu['family']}), {cpu['n_cpus']} CPUs; SIMD flags: {' '.join(cpu['flags'])}")
    print(f"shardwire {commit} ({kernels}); OMP_WAIT_POLICY {args.omp_wait_policy}; {date}; "
          f"{'dedicated' if args.dedicated else 'shared machine'}")
    blocks = []
    for m in models:
        for t in threads:
            blk = bench_block(args, m, t, pps)
            blk["summary"] = print_block(args, blk, pps)
            blocks.append(blk)
            sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"commit": commit, "date": date, "command": shlex.join(sys.argv),
                       "machine": {"hostname": os.uname().nodename, "cpu": cpu, "shardwire_kernels": kernels,
                                   "note": args.note or ("dedicated" if args.dedicated else "shared machine")},
                       "reps": args.reps, "n_gen": args.n_gen, "pp": pps, "threads": threads,
                       "omp_wait_policy": args.omp_wait_policy, "blocks": blocks}, f, indent=1)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # subprocess.run has killed the engine it waited on
        print("bench_engine: interrupted; no result file written", file=sys.stderr)
        sys.exit(130)
