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
attention shardwire reproduces) and --llama-repack (default 0: no weight
repacking, the plain K-quant path; 1 = llama.cpp's repacked buffers); the
prompt text of exactly N tokens comes from llama-tokenize.

    python3 scripts/bench/bench_engine.py --llama-bin auto --threads 2 --reps 3 --pp 128,512 \
        --n-gen 32 --model models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf OpenMP waits
are passive by default (--omp-wait-policy). shardwire is run as
    <bin> generate --greedy --model M -p PROMPT -n N --threads T --json
which must print one JSON object {"text","tokens","n_prompt","n_gen","ttft_ms",
"prefill_tok_s","decode_tok_s"} as the last line of its stdout. When the binary
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


def med(rows, key):
    vals = [r[key] for r in rows if r is not None and r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt(v):
    return "n/a" if v is None else f"{v:9.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--bin", default="build/bin/shardwire")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pp", default="128,512", help="comma-separated prompt lengths in tokens")
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--only", choices=["both", "llama", "shardwire"], default="both")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per shardwire run")
    ap.add_argument("--json", help="also write all samples and medians to this file")
    ap.add_argument("--omp-wait-policy", choices=["passive", "active", "unset"], default="passive",
                    help="OMP_WAIT_POLICY for llama.cpp's OpenMP threads (default passive: on a shared, "
                         "oversubscribed machine spinning waits make llama.cpp several times slower)")
    ap.add_argument("--llama-bin", help="llama.cpp's programs instead of llama-cpp-python: a bin "
                    "folder, or 'auto' (scripts/bench/llama_peer.py builds or finds them); also used when "
                    "llama_cpp cannot be imported")
    ap.add_argument("--llama-fa", default="off", help="llama-bench -fa (default off)")
    ap.add_argument("--llama-repack", default="0", help="llama-bench --repack (default 0)")
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        sys.exit(f"bench_engine: no model at {args.model} (run scripts/fetch_model.sh first)")
    pps = [int(x) for x in args.pp.split(",") if x.strip()]
    if not pps or min(pps) < 1 or args.n_gen < 2 or args.reps < 1:
        sys.exit("bench_engine: --pp values must be >= 1, --n-gen >= 2, --reps >= 1")

    if args.omp_wait_policy != "unset":
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()  # read when libgomp loads
    if args.llama_bin is None:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            args.llama_bin = "auto"
    if args.llama_bin == "auto":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import llama_peer
        args.llama_bin = llama_peer.ensure()
    if args.llama_bin is not None:
        lb = LlamaBinBench(args.llama_bin, args.model, args.threads, args.llama_fa, args.llama_repack)
    else:  # llama.cpp is always loaded: it also makes the prompts (exact token counts)
        lb = LlamaBench(args.model, args.threads, n_ctx=max(pps) + args.n_gen + 16,
                        n_batch=max(pps) + 8)
    use_llama = args.only in ("both", "llama")
    use_sw = args.only in ("both", "shardwire") and os.access(args.bin, os.X_OK)
    if args.only in ("both", "shardwire") and not use_sw:
        print(f"bench_engine: {args.bin} not found or not executable: shardwire column is n/a", file=sys.stderr)

    prompts = {n: lb.prompt_text(n) for n in pps}
    results = {n: {"llama": [], "shardwire": []} for n in pps}
    load0 = os.getloadavg()
    # one untimed warm-up of each engine (page in the mmap, spin up threads)
    if use_llama:
        lb.warm_up(pps[0])
    if use_sw:
        try:
            run_shardwire(args.bin, args.model, prompts[pps[0]][:64], 4, args.threads, args.timeout)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            print(f"bench_engine: shardwire warm-up failed ({e}): shardwire column is n/a", file=sys.stderr)
            use_sw = False
    for rep in range(args.reps):
        if use_llama:
            res = lb.run_all(pps, args.n_gen)
            for n in pps:
                results[n]["llama"].append(res[n])
        for n in pps:
            if use_sw:
                try:
                    results[n]["shardwire"].append(
                        run_shardwire(args.bin, args.model, prompts[n], args.n_gen, args.threads,
                                      args.timeout))
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                    print(f"bench_engine: shardwire run failed: {e}", file=sys.stderr)
                    results[n]["shardwire"].append(None)
        print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)

    load = os.getloadavg()
    print(f"model {os.path.basename(args.model)}, threads {args.threads}, reps {args.reps} (median), "
          f"{lb.describe()}, tg = {args.n_gen} tokens after the prompt, load average "
          f"{load0[0]:.2f} at the start, {load[0]:.2f} {load[1]:.2f} at the end, on {os.cpu_count()} "
          f"CPUs, OMP_WAIT_POLICY {args.omp_wait_policy}")
    print(f"{'test':<16}{'llama.cpp':>12}{'shardwire':>12}{'sw/llama':>10}   llama perf-ctr  sw n_prompt")
    summary = {}
    for n in pps:
        L, S = results[n]["llama"], results[n]["shardwire"]
        for label, key, pkey in ((f"pp{n}", "prefill_tok_s", "perf_pp_tok_s"),
                                 (f"tg{args.n_gen}@{n}", "decode_tok_s", "perf_tg_tok_s")):
            lv, sv = med(L, key), med(S, key)
            ratio = f"{sv / lv:10.2f}" if lv and sv else f"{'n/a':>10}"
            snp = med(S, "n_prompt")
            print(f"{label:<16}{fmt(lv):>12}{fmt(sv):>12}{ratio}   {fmt(med(L, pkey))}      "
                  f"{'n/a' if snp is None else int(snp)}")
            summary[label] = {"llama_tok_s": lv, "shardwire_tok_s": sv}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": args.threads, "reps": args.reps, "n_gen": args.n_gen,
                       "loadavg": load, "n_cpus": os.cpu_count(), "omp_wait_policy": args.omp_wait_policy,
                       "llama": lb.describe(), "summary": summary,
                       "samples": {str(n): results[n] for n in pps}}, f, indent=1)

if __name__ == "__main__":
    main()
