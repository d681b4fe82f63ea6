#!/usr/bin/env python3
"""bench_peer.py - shardwire against llama.cpp's RPC backend over the same emulated WAN, one run.

Both systems get the same model split the same way, the same WAN, the same
threads and the same prompts, in one invocation, interleaved prompt by prompt:

  shardwire  relay (real keys) + two shardwire-wanem proxies (one per
             node<->relay link, RTT/4 one way each: a round head -> relay ->
             tail -> relay -> head crosses RTT) + head node (layers [0, split)
             and the draft model) + tail node (layers [split, end), norm, LM
             head), the cluster of scripts/bench/bench_wan.py; configurations
             none (plain), auto (draft model, adaptive K: the chain), ahead
             (drafting ahead), tree (token trees), both.
  llama.cpp  its main process computes layers [0, split), the output norm and
             the LM head (-ngl <layers after split + 1> moves the rest and the
             output layer to the RPC device, -ot '^output=CPU' keeps the output
             layer home) and one ggml-rpc-server the layers [split, end); the
             main process dials the server through two shardwire-wanem
             proxies in a chain, RTT/4 one way each: every request/response
             pair crosses RTT. Plain decoding is llama-completion (the classic
             llama-cli: prompt and generation timings of its own), speculative
             decoding its speculative example (llama-speculative) with the
             same 0.5B draft model on the main process's CPU (-ngld 0).

llama.cpp is built by scripts/bench/llama_peer.py from the llama-cpp-python sdist's
vendored source (GGML_RPC=ON, native instruction set) into a cache folder
(~/.cache/shardwire/peer); on CPUs with AMX it runs with --no-repack.

Columns: tok/s decode tokens per second after the first token (shardwire: the
client's count; llama-completion: its "eval time" runs; llama-speculative:
its "decoded" tokens minus the first over its decode time); RT/token network
round trips per generated token (shardwire: rounds / tokens; llama.cpp: the
requests that wait for a reply per token, counted from ggml-rpc-server's
GGML_RPC_DEBUG log in a separate, untimed run); TTFT ms at the process that
holds the first layers (shardwire: the head's request-to-first-token; the
client adds its own link to the head, shown as "client TTFT"; llama.cpp: the
prompt evaluation of llama-completion, llama-speculative's "encoded" time for
the target and draft prompts); per-round ms of shardwire's head, tail and
network as its JSON reports them.

    python3 scripts/bench/bench_peer.py --markdown                      # 0, 86 and 172 ms, 1 pass
    python3 scripts/bench/bench_peer.py --rtt-ms 172 --reps 2 --markdown

Every process it starts is stopped at the end, also on failure or Ctrl-C.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_wan  # noqa: E402  (the shardwire cluster)
import llama_peer  # noqa: E402  (the llama.cpp build)

HERE = bench_wan.HERE
MODELS = bench_wan.MODELS
PROMPTS = [
    "def is_palindrome(s: str) -> bool:\n",
    "/* Reverse a singly linked list in place. */\nstruct node *reverse(struct node *head)\n{\n",
    "# Parse a CSV file and return the sum of the second column\nimport csv\n\ndef column_sum(path):\n",
]
SW_CONFIGS = {k: bench_wan.CONFIGS[k] for k in ("none", "auto", "ahead", "tree", "both")}
LABELS = {"none": "plain", "auto": "chain (draft model, adaptive K)",
          "ahead": "drafting ahead", "tree": "token trees", "both": "trees + drafting ahead",
          "lplain": "plain (llama-completion)", "lspec": "speculative (llama-speculative)"}
# ggml-rpc-server's debug lines of the commands whose client waits for a reply
REPLY_CMDS = ("hello", "device_count", "alloc_buffer", "get_alloc_size", "get_alignment",
              "get_max_size", "buffer_get_base", "set_tensor_hash", "get_tensor", "copy_tensor",
              "get_device_memory")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        la = os.getloadavg()
        return f"load average: {la[0]:.2f}, {la[1]:.2f}, {la[2]:.2f}"


class LlamaSide:
    """ggml-rpc-server behind two wanem proxies, and the runs of the main process."""

    def __init__(self, args, bindir, swbin, logdir):
        self.a, self.bin, self.swbin, self.logdir = args, bindir, swbin, logdir
        self.procs = []

    def spawn(self, name, argv, env=None):
        lf = open(os.path.join(self.logdir, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, env=env)
        self.procs.append((name, p, lf))
        return p

    def start(self, delay_ms, debug=False):
        self.stop()
        pr, pb, pa = (bench_wan.free_port() for _ in range(3))
        env = dict(os.environ)
        if debug:
            env["GGML_RPC_DEBUG"] = "1"
        self.rpc_log = os.path.join(self.logdir, "rpc-server.log")
        self.spawn("rpc-server", [os.path.join(self.bin, "ggml-rpc-server"), "-H", "127.0.0.1",
                                  "-p", str(pr), "-t", str(self.a.threads), "-c"], env)
        self.spawn("wanem-b", [self.swbin + "-wanem", "--listen", f"127.0.0.1:{pb}", "--connect",
                               f"127.0.0.1:{pr}", "--delay-ms", str(delay_ms)])
        self.spawn("wanem-a", [self.swbin + "-wanem", "--listen", f"127.0.0.1:{pa}", "--connect",
                               f"127.0.0.1:{pb}", "--delay-ms", str(delay_ms)])
        self.endpoint = f"127.0.0.1:{pa}"
        time.sleep(1.0)
        for name, p, _ in self.procs:
            if p.poll() is not None:
                raise SystemExit(f"bench_peer: {name} exited ({p.returncode}), see "
                                 f"{self.logdir}/{name}.log")

    def stop(self):
        for _name, p, _lf in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for _name, p, lf in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            lf.close()
        self.procs = []

    def _split_flags(self, n_layers):
        # -ngl counts the output layer: n_layers + 1 - split layers from the top go to the
        # RPC device, and -ot keeps the output layer (output_norm, output) on the CPU
        return ["-ngl", str(n_layers + 1 - self.a.split), "-ot", "^output=CPU",
                "--rpc", self.endpoint]

    def _common(self):
        return ["-t", str(self.a.threads), "-tb", str(self.a.threads), "-c", "1024",
                "--temp", "0", "--seed", "0", *llama_peer.repack_flags("llama-completion")]

    def _run(self, argv):
        """Runs one llama.cpp program; its stdout and all its output."""
        r = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                           timeout=self.a.timeout)  # a random model prints any bytes
        out = r.stdout + r.stderr
        if r.returncode != 0:
            raise SystemExit(f"bench_peer: {os.path.basename(argv[0])} failed ({r.returncode}): "
                             f"{out.strip()[-800:]}")
        return r, out

    def run_plain(self, prompt, n, n_layers):
        argv = [os.path.join(self.bin, "llama-completion"), "-m", self.a.target, "-p", prompt,
                "-n", str(n), "-no-cnv", "--no-display-prompt", *self._common(),
                *self._split_flags(n_layers)]
        r, out = self._run(argv)
        pe = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", out)
        ev = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs", out)
        if not pe or not ev:
            raise SystemExit(f"bench_peer: no timings in llama-completion's output: "
                             f"{out.strip()[-800:]}")
        ms, runs = float(ev.group(1)), int(ev.group(2))
        return {"tok_s": runs / ms * 1e3 if ms > 0 else 0.0, "n_gen": runs + 1,
                "ttft": float(pe.group(1)), "n_prompt": int(pe.group(2)), "text": r.stdout}

    def run_spec(self, prompt, n, n_layers):
        argv = [os.path.join(self.bin, "llama-speculative"), "-m", self.a.target, "-md",
                self.a.draft, "-p", prompt, "-n", str(n), *self._common(),
                *self._split_flags(n_layers), "-ngld", "0", "-td", str(self.a.threads),
                "-tbd", str(self.a.threads), *self.a.llama_spec_args]
        r, out = self._run(argv)
        enc = re.search(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds", out)
        dec = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", out)
        nd = re.search(r"n_drafted\s*=\s*(\d+)", out)
        na = re.search(r"n_accept\s*=\s*(\d+)", out)
        if not enc or not dec:
            raise SystemExit(f"bench_peer: no timings in llama-speculative's output: "
                             f"{out.strip()[-800:]}")
        n_dec, s_dec = int(dec.group(1)), float(dec.group(2))
        drafted, accepted = int(nd.group(1)) if nd else 0, int(na.group(1)) if na else 0
        # rounds: each target verification commits the accepted drafts + 1
        rounds = max(1, n_dec - accepted)
        return {"tok_s": (n_dec - 1) / s_dec if s_dec > 0 else 0.0, "n_gen": n_dec,
                "ttft": float(enc.group(2)) * 1e3, "drafted": drafted, "accepted": accepted,
                "rounds": rounds}

    def count_replies(self):
        """Requests that waited for a reply, from the rpc-server's debug log so far."""
        n = 0
        with open(self.rpc_log, errors="replace") as f:
            for line in f:
                m = re.match(r"\[(\w+)\]", line)
                if m and m.group(1) in REPLY_CMDS:
                    n += 1
        return n


RUN_INFO = bench_wan.run_info()  # commit, machine, date, command, load at the start


def s_dump(path, counts, raw, settings):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({**RUN_INFO, "loadavg_end": os.getloadavg(), **settings, "counts": counts,
                   "runs": {f"{k[0]:g}/{k[1]}": v for k, v in raw.items()}}, f, indent=1)


def table(raw, counts, rtts, keys):
    """The table's header and rows: raw[(rtt, key)] the per-prompt results of shardwire's
    configuration key or llama.cpp's ("lplain", "lspec"), counts its round trips per token."""
    hdr = ["RTT ms", "system", "config", "tok/s", "vs llama.cpp", "RT/token", "TTFT ms",
           "client TTFT ms", "tok/round", "head ms", "net ms", "tail ms"]
    rows = []
    for rtt in rtts:
        lp = med([r["tok_s"] for r in raw.get((rtt, "lplain"), [])])
        ls = med([r["tok_s"] for r in raw.get((rtt, "lspec"), [])])
        for key in ["lplain", "lspec"] + keys:
            rs = raw.get((rtt, key))
            if not rs:
                continue
            tok = med([r["tok_s"] for r in rs])
            sw = not key.startswith("l")
            ref = lp if key in ("none", "lplain") else ls
            rt = med([r["rt_tok"] for r in rs]) if sw else counts.get(key)
            tpr = med([r.get("tpr") for r in rs])
            rows.append([f"{rtt:g}", "shardwire" if sw else "llama.cpp RPC", LABELS[key],
                         f"{tok:.2f}",
                         f"{tok / ref:.2f}x" if ref else "-",
                         "-" if rt is None else f"{rt:.2f}",
                         f"{med([r['ttft'] for r in rs]):.0f}",
                         f"{med([r['client_ttft'] for r in rs]):.0f}" if sw else "-",
                         "-" if tpr is None else f"{tpr:.2f}",
                         f"{med([r['head_ms'] for r in rs]):.0f}" if sw else "-",
                         f"{med([r['net_ms'] for r in rs]):.0f}" if sw else "-",
                         f"{med([r['tail_ms'] for r in rs]):.0f}" if sw else "-"])
    return hdr, rows


def from_file(r):
    """table()'s arguments from a result file (scripts/docs/render_bench.py)."""
    raw = {}
    for k, v in r["runs"].items():
        rtt, key = k.split("/", 1)
        raw[(float(rtt), key)] = v
    return raw, r["counts"], r["rtts"], r["configs"]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=os.path.join(MODELS,
                                                     "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"))
    ap.add_argument("--draft", default=os.path.join(MODELS,
                                                    "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"))
    ap.add_argument("--split", type=int, default=14, help="first layer of the second half "
                    "(default 14: 0:14 | 14:28)")
    ap.add_argument("--rtt-ms", default="0,86,172", help="round trips to emulate (default "
                    "0,86,172)")
    ap.add_argument("--n", type=int, default=48, help="tokens per request (default 48)")
    ap.add_argument("--threads", type=int, default=2, help="threads of every process that "
                    "computes (default 2)")
    ap.add_argument("--reps", type=int, default=1, help="passes (default 1)")
    ap.add_argument("--configs", default="none,auto,ahead,tree",
                    help="shardwire configurations (default none,auto,ahead,tree; also both)")
    ap.add_argument("--llama", default="plain,spec", help="llama.cpp runs (default plain,spec)")
    ap.add_argument("--llama-spec-args", default="",
                    help="extra flags for llama-speculative (e.g. '--draft-max 8')")
    ap.add_argument("--llama-version", default=llama_peer.VERSION)
    ap.add_argument("--omp-wait-policy", choices=["passive", "active", "unset"], default="unset",
                    help="OMP_WAIT_POLICY for llama.cpp (default unset: its own default)")
    ap.add_argument("--build", default="build", help="shardwire's build folder (default build)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per llama.cpp run")
    ap.add_argument("--no-count", action="store_true", help="skip the untimed run that counts "
                    "llama.cpp's round trips")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json-out", help="write the result file here: commit, machine, date, "
                    "command, load (bench_wan.run_info), the settings and every raw result "
                    "(scripts/docs/render_bench.py renders its table)")
    ap.add_argument("--note", default="", help="recorded in the result file, e.g. 'shared machine'")
    args = ap.parse_args()
    args.llama_spec_args = args.llama_spec_args.split()
    rtts = [float(x) for x in args.rtt_ms.split(",") if x.strip()]
    keys = [k for k in args.configs.split(",") if k]
    lkeys = [k for k in args.llama.split(",") if k]
    bad = [k for k in keys if k not in SW_CONFIGS] + [k for k in lkeys if k not in ("plain",
                                                                                     "spec")]
    if bad:
        raise SystemExit(f"bench_peer: unknown configuration(s) {', '.join(bad)}")
    for path in (args.target, args.draft):
        if not os.path.exists(path):
            raise SystemExit(f"bench_peer: {path} is missing (bash scripts/fetch_model.sh ...)")
    swbin = os.path.join(HERE, args.build, "bin", "shardwire")
    if not os.access(swbin, os.X_OK):
        raise SystemExit(f"bench_peer: {swbin} is missing (bash scripts/build.sh)")
    if args.omp_wait_policy != "unset":
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()

    settings = {"note": args.note, "target": args.target, "draft": args.draft,
                "split": args.split, "n": args.n, "threads": args.threads, "reps": args.reps,
                "rtts": rtts, "configs": keys, "llama": lkeys,
                "llama_version": args.llama_version, "omp_wait_policy": args.omp_wait_policy}
    t_start = time.time()
    log(f"bench_peer: start {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; {uptime()}")
    bindir = llama_peer.ensure(args.llama_version) if lkeys else None
    n_layers = bench_wan.gguf_block_count(args.target)
    log(f"bench_peer: {llama_peer.amx_note()}")

    # bench_wan's cluster reads these
    cargs = argparse.Namespace(target=args.target, draft=args.draft, split=args.split,
                               threads=args.threads, draft_threads=args.threads, dtype="f32",
                               k_max=16, build=args.build, n=args.n, chat=False, pin_cpus=None,
                               delay_ms=0.0)
    logdir = tempfile.mkdtemp(prefix="bench_peer.")
    raw = {}  # (rtt, system key) -> list of per-prompt results
    counts = {}
    cl = None
    ll = LlamaSide(args, bindir, swbin, logdir) if lkeys else None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        if ll and not args.no_count:
            # untimed: requests that wait for a reply, per generated token (0 ms delay)
            ll.start(0.0, debug=True)
            for lk in lkeys:
                fn = ll.run_plain if lk == "plain" else ll.run_spec
                c0 = ll.count_replies()
                one = fn(PROMPTS[0], 1, n_layers)
                c1 = ll.count_replies()
                full = fn(PROMPTS[0], args.n, n_layers)
                c2 = ll.count_replies()
                extra = full["n_gen"] - one["n_gen"]
                counts["l" + lk] = ((c2 - c1) - (c1 - c0)) / extra if extra > 0 else None
                log(f"  llama.cpp {lk}: {c1 - c0} replies for 1 token, {c2 - c1} for "
                    f"{full['n_gen']}")
            ll.stop()
        for rep in range(args.reps):
            for rtt in rtts:
                d = rtt / 4.0
                cargs.delay_ms = d
                # a folder per cluster: its keys are made fresh (keygen never overwrites)
                cdir = os.path.join(logdir, f"cluster-{rep}-{rtt:g}")
                os.makedirs(cdir)
                cl = bench_wan.Cluster(cargs, cdir)
                cl.start()
                if ll:
                    ll.start(d)
                # warm-up, untimed: page cache, first touch, the rpc-server's tensor cache
                cl.run(PROMPTS[0], ["--draft", "none"], n=2)
                if ll:
                    ll.run_plain(PROMPTS[0], 2, n_layers)
                log(f"pass {rep + 1}, {rtt:g} ms round trip; {uptime()}")
                for p in PROMPTS:
                    order = [("s", k) for k in keys[:1]] + [("l", k) for k in lkeys[:1]] + \
                            [("s", k) for k in keys[1:]] + [("l", k) for k in lkeys[1:]]
                    for kind, k in order:
                        t0 = time.time()
                        if kind == "s":
                            flags = [str(16) if f == "TREE" else f for f in SW_CONFIGS[k][1]]
                            r = cl.run(p, flags)
                            tm = r.get("timing", {})
                            rounds = max(1, r["rounds"])
                            res = {"tok_s": r["decode_tok_s"], "n_gen": r["n_gen"],
                                   "ttft": tm.get("head_ttft_ms"), "client_ttft": r["ttft_ms"],
                                   "rt_tok": r["rounds"] / max(1, r["n_gen"]),
                                   "tpr": r["n_gen"] / rounds,
                                   "round_ms": tm.get("per_round_ms"),
                                   "head_ms": tm.get("head_compute_ms", 0) / rounds,
                                   "net_ms": tm.get("network_ms", 0) / rounds,
                                   "tail_ms": sum(tm.get("stage_compute_ms", {}).values()) / rounds,
                                   "draft_ms": tm.get("draft_ms", 0) / rounds,
                                   "tokens": r["tokens"]}
                            key = k
                        else:
                            res = (ll.run_plain if k == "plain" else ll.run_spec)(p, args.n,
                                                                                  n_layers)
                            if "rounds" in res:
                                res["tpr"] = res["n_gen"] / res["rounds"]
                            key = "l" + k
                        raw.setdefault((rtt, key), []).append(res)
                        log(f"  {LABELS[key]}: {res['n_gen']} tokens, {res['tok_s']:.2f} tok/s "
                            f"({time.time() - t0:.1f} s)")
                cl.stop()
                cl = None
                if ll:
                    ll.stop()
                if args.json_out:  # what is done so far, in case a later pass fails
                    s_dump(args.json_out, counts, raw, settings)
    finally:
        if cl:
            cl.stop()
        if ll:
            ll.stop()
    end_load = uptime()

    hdr, rows = table(raw, counts, rtts, keys)
    print(f"# {os.path.basename(args.target)} split 0:{args.split} | {args.split}:{n_layers}, "
          f"draft {os.path.basename(args.draft)}, {args.threads} threads per process, "
          f"{args.n} tokens x {len(PROMPTS)} prompts, {args.reps} pass(es), medians over "
          f"prompts and passes; llama.cpp {args.llama_version} (llama-cpp-python sdist), "
          f"{llama_peer.amx_note()}; OMP_WAIT_POLICY {args.omp_wait_policy}")
    print(f"# started {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t_start))}, took "
          f"{(time.time() - t_start) / 60:.0f} min; at the end: {end_load}")
    bench_wan.print_table(hdr, rows, args.markdown)
    # shardwire's speculative runs must give the plain run's tokens
    for rtt in rtts:
        base = raw.get((rtt, "none"))
        for key in keys[1:]:
            rs = raw.get((rtt, key))
            if base and rs and [r["tokens"] for r in rs] != [r["tokens"] for r in base[:len(rs)]]:
                print(f"warning: {rtt:g} ms, {key}: tokens differ from shardwire's plain run",
                      file=sys.stderr)
    if args.json_out:
        s_dump(args.json_out, counts, raw, settings)
    shutil.rmtree(logdir, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("bench_peer: interrupted; every process it started was stopped")
