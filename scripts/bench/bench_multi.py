#!/usr/bin/env python3
"""bench_multi.py - many users at once over an emulated WAN, from one command.

The cluster of bench_wan.py (a relay with real keys, two shardwire-wanem
proxies, a head node and a tail node; 4 x --delay-ms per round trip, 172 ms
by default), then for each number of concurrent clients N in --clients
(1, 2, 4, 8, 16) and each mode (plain decoding, drafts): N clients run
--requests requests each, back to back, each request the next of 16 prompts
(a step of 16 clients sends each twice) and --n tokens, all `shardwire run --json` processes dialing the head's proxy.
It prints one table: aggregate tokens/s (every generated token of the step
over the time some request was in flight: the union of each request's span
from sent to last token received, so that a client process's own start-up,
joining the relay and finding the head, is not counted), the
speed-up over one client, p50 / p95 time to first token (as each client
measured it: request sent to first token) next to the goal of two round
trips plus the prefill's compute (measured alone before the steps: one
round trip carries the request to the head and the first token back, one is
the prefill round), tokens per round, the mean compute per round at the
head and the tail as a session saw it, and the rounds the tail ran per
batch (how much the stages batched).

  python3 scripts/bench/bench_multi.py                 # SmolLM2-135M, 172 ms, plain + n-gram drafts
  python3 scripts/bench/bench_multi.py --target models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf \\
          --draft models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf --modes plain,model

Every process it starts is stopped at the end, also on failure or Ctrl-C.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_wan  # noqa: E402  (the cluster: relay, proxies, keys, nodes)

HERE = bench_wan.HERE
MODES = {
    "plain": ("plain decoding", ["--draft", "none"]),
    "ngram": ("n-gram drafts, adaptive K", ["--draft", "ngram"]),
    "model": ("draft model, adaptive K", ["--draft", "model"]),
}
# Short prompts of different kinds, one per request (raw, no chat template).
PROMPTS = [
    "def is_palindrome(s: str) -> bool:\n",
    "/* Reverse a singly linked list in place. */\nstruct node *reverse(struct node *head)\n{\n",
    "The capital of France is",
    "Once upon a time, in a land far away,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "List three colors of the rainbow:\n1.",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "In 1492, Columbus",
    "Water boils at a temperature of",
    "int main(void)\n{\n    printf(\"hello",
    "SELECT name, age FROM users WHERE",
    "The three laws of robotics are",
    "import numpy as np\n\ndef softmax(x):\n",
    "My favourite recipe for pancakes:",
    "class Stack:\n    def __init__(self):\n",
    "A haiku about the sea:\n",
]


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return 0.0
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def tail_batches(logdir):
    """(forwards, batches) the tail has run so far, from its log."""
    try:
        text = open(os.path.join(logdir, "tail.log")).read()
    except OSError:
        return 0, 0
    m = re.findall(r"(\d+) forwards run in (\d+) batches", text)
    return (int(m[-1][0]), int(m[-1][1])) if m else (0, 0)


def busy_time(results):
    """Seconds during which at least one request was in flight: the union of
    every request's [sent, last token] (its own timing.total_ms, ending when
    its process returned). Each `shardwire run` first joins the relay and
    finds the head (a few WAN round trips) before it sends its request; with
    one client those start-ups lie between its requests, with many they
    overlap others' requests, so counting them would favour many clients."""
    spans = sorted((r["_end"] - r["timing"]["total_ms"] / 1e3, r["_end"]) for r in results)
    busy, cur_lo, cur_hi = 0.0, None, None
    for lo, hi in spans:
        if cur_hi is None or lo > cur_hi:
            if cur_hi is not None:
                busy += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    if cur_hi is not None:
        busy += cur_hi - cur_lo
    return busy


def step(cl, n_clients, flags, args, logdir):
    """N clients x requests, back to back; returns the step's results."""
    results, errors, lock = [], [], threading.Lock()
    t_first = [None]

    def client(ci):
        for r in range(args.requests):
            prompt = PROMPTS[(ci * args.requests + r) % len(PROMPTS)]
            t0 = time.time()
            with lock:
                if t_first[0] is None or t0 < t_first[0]:
                    t_first[0] = t0
            try:
                res = cl.run(prompt, flags, n=args.n)
            except SystemExit as e:
                with lock:
                    errors.append(str(e))
                return
            res["_end"] = time.time()
            with lock:
                results.append(res)

    f0, b0 = tail_batches(logdir)
    # daemon: an interrupted benchmark does not wait for its clients (Cluster.stop ends them)
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n_clients)]
    start = time.time()
    for i, t in enumerate(threads):
        t.start()
        time.sleep(args.stagger_ms / 1e3)
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"bench_multi: {len(errors)} request(s) failed: {errors[0]}")
    f1, b1 = tail_batches(logdir)
    t_step = t_first[0] or start
    step_wall = max(r["_end"] for r in results) - t_step
    wall = busy_time(results)
    n_gen = sum(r["n_gen"] for r in results)
    rounds = sum(r["rounds"] for r in results)
    head = sum(r["timing"]["head_compute_ms"] for r in results)
    tail = sum(sum(r["timing"]["stage_compute_ms"].values()) for r in results)
    return {
        "n": n_clients,
        "requests": len(results),
        "tokens": n_gen,
        "wall_s": wall,
        "step_s": step_wall,
        "agg": n_gen / wall if wall > 0 else 0,
        "ttft": [r["ttft_ms"] for r in results],
        "tpr": n_gen / rounds if rounds else 0,
        "head_ms": head / max(rounds + len(results), 1),
        "tail_ms": tail / max(rounds + len(results), 1),
        "per_batch": (f1 - f0) / (b1 - b0) if b1 > b0 else 0,
        # per round: drafts sent, drafting on the critical path, drafting ahead (ms)
        "drafted": sum(r["drafted"] for r in results) / max(rounds, 1),
        "draft_ms": sum(r["timing"]["draft_ms"] for r in results) / max(rounds, 1),
        "ahead_ms": sum(r["timing"]["draft_ahead_ms"] for r in results) / max(rounds, 1),
        # each request: [sent, ended] in s from the step's first start, and its tokens
        "spans": sorted([round(r["_end"] - r["timing"]["total_ms"] / 1e3 - t_step, 3),
                         round(r["_end"] - t_step, 3), r["n_gen"]] for r in results),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=os.path.join(bench_wan.MODELS,
                                                     "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--draft", default=None, help="draft model GGUF (mode 'model')")
    ap.add_argument("--clients", default="1,2,4,8,16")
    ap.add_argument("--modes", default="plain,ngram", help="plain, ngram, model")
    ap.add_argument("--n", type=int, default=64, help="tokens per request (default 64)")
    ap.add_argument("--requests", type=int, default=2, help="requests per client (default 2)")
    ap.add_argument("--stagger-ms", type=float, default=50,
                    help="between client starts (default 50)")
    ap.add_argument("--delay-ms", type=float, default=43, help="one-way delay per link "
                    "(default 43: 172 ms per round trip)")
    ap.add_argument("--threads", type=int, default=1, help="threads per node (default 1)")
    ap.add_argument("--draft-threads", type=int, default=1)
    ap.add_argument("--k-max", type=int, default=8, help="adaptive K ceiling (default 8)")
    ap.add_argument("--split", type=int, default=0)
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--max-sessions", type=int, default=16)
    ap.add_argument("--node-flags", default="",
                    help="more flags for both nodes, one string (e.g. '--draft-load off')")
    ap.add_argument("--build", default="build")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json-out", help="write the result file here: commit, machine, date, "
                    "command, load (bench_wan.run_info), the settings and every step's result "
                    "(scripts/docs/render_bench.py renders its table)")
    ap.add_argument("--note", default="", help="recorded in the result file, e.g. 'shared machine'")
    ap.add_argument("--keep-logs", metavar="DIR",
                    help="write the relay's, proxies' and nodes' logs to DIR and keep them")
    info = bench_wan.run_info()  # commit, machine, date, command, load at the start
    args = ap.parse_args()
    args.chat = False
    # Every client of the benchmark holds the same client key. The head's
    # default per-key quota binds only while another key's request waits, so a
    # single key could take every session anyway; the explicit hard quota keeps
    # the run the same if that default changes (many users with their own keys).
    args.node_extra = ["--max-sessions", str(args.max_sessions), "--max-sessions-per-client",
                       str(args.max_sessions), *args.node_flags.split()]
    bad = [m for m in args.modes.split(",") if m not in MODES]
    if bad:
        raise SystemExit(f"bench_multi: unknown mode '{bad[0]}' (--modes takes "
                         f"{', '.join(MODES)}, comma-separated)")
    if "model" in args.modes.split(",") and not args.draft:
        raise SystemExit("bench_multi: mode 'model' needs --draft MODEL.gguf")
    for path in (args.target, args.draft):
        if path and not os.path.exists(path):
            raise SystemExit(f"bench_multi: {path} is missing (bash scripts/fetch_model.sh ...)")
    try:
        ns = [int(x) for x in args.clients.split(",")]
    except ValueError:
        raise SystemExit(f"bench_multi: --clients takes client counts, comma-separated "
                         f"(1,2,4), not '{args.clients}'") from None
    if any(n < 1 for n in ns):
        raise SystemExit("bench_multi: every client count in --clients must be at least 1")
    if args.keep_logs:
        os.makedirs(args.keep_logs, exist_ok=True)
    logdir = args.keep_logs or tempfile.mkdtemp(prefix="bench_multi.")
    cl = bench_wan.Cluster(args, logdir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    raw = {}
    try:
        n_layers, split = cl.start()
        rtt = 4 * args.delay_ms
        print(f"# target {os.path.basename(args.target)} ({n_layers} layers, head [0,{split}) "
              f"tail [{split},{n_layers})), {rtt:g} ms per round trip, {args.threads} thread(s) "
              f"per node, {args.n} tokens x {args.requests} requests per client, "
              f"--max-sessions {args.max_sessions} {args.node_flags}", file=sys.stderr)
        for p in PROMPTS[:2]:  # warm up (page cache, first touch)
            cl.run(p, ["--draft", "none"], n=2)
        # The prefill's compute, one request alone at a time: the head's own
        # time to its first token minus the round trip, median over prompts.
        probe = [cl.run(p, ["--draft", "none"], n=1)["timing"]["head_ttft_ms"] - rtt
                 for p in PROMPTS[:8]]
        prefill = max(0.0, pct(probe, 50))
        goal = 2 * rtt + prefill
        print(f"# prefill alone: {prefill:.0f} ms (median of {len(probe)} prompts); goal for "
              f"p95 TTFT: 2 x {rtt:g} + {prefill:.0f} = {goal:.0f} ms", file=sys.stderr)
        for mode in args.modes.split(","):
            label, flags = MODES[mode]
            for n in ns:
                r = step(cl, n, flags, args, logdir)
                raw.setdefault(mode, []).append(r)
                print(f"  {label}, {n:2d} client(s): {r['tokens']} tokens in {r['wall_s']:.1f} s "
                      f"in flight ({r['step_s']:.1f} s with client start-ups) "
                      f"= {r['agg']:.1f} tok/s, TTFT p50 {pct(r['ttft'], 50):.0f} ms p95 "
                      f"{pct(r['ttft'], 95):.0f} ms; per round {r['drafted']:.1f} drafts, "
                      f"drafting {r['draft_ms']:.0f} ms (+{r['ahead_ms']:.0f} ahead)",
                      file=sys.stderr)
    finally:
        cl.stop()
        if not args.keep_logs:  # a failed run says what failed; --keep-logs DIR keeps the logs
            shutil.rmtree(logdir, ignore_errors=True)
    hdr, rows = table(raw, ns, goal)
    bench_wan.print_table(hdr, rows, args.markdown)
    if args.json_out:
        info.update({"note": args.note, "load_end": os.getloadavg(), "target": args.target,
                     "draft": args.draft, "n": args.n, "requests": args.requests,
                     "delay_ms": args.delay_ms, "threads": args.threads,
                     "max_sessions": args.max_sessions, "node_flags": args.node_flags,
                     "clients": ns, "prefill_ms": prefill, "goal_ms": goal, "raw": raw})
        bench_wan.write_result(args.json_out, info, "bench_multi")


def table(raw, ns, goal):
    """The table's header and rows from step()'s results per mode (raw[mode][i]: ns[i]
    clients) and the TTFT goal (ms)."""
    hdr = ["mode", "clients", "agg tok/s", "vs 1 client", "TTFT p50 ms", "TTFT p95 ms",
           "2 RTT + prefill ms", "tok/round", "head ms/round", "tail ms/round",
           "rounds per tail batch"]
    rows = []
    for mode, steps in raw.items():
        base = steps[0]["agg"] if steps else 0
        for n, r in zip(ns, steps):
            rows.append([MODES[mode][0], str(n), f"{r['agg']:.1f}",
                         f"{r['agg'] / base:.2f}x" if base else "-",
                         f"{pct(r['ttft'], 50):.0f}", f"{pct(r['ttft'], 95):.0f}",
                         f"{goal:.0f}", f"{r['tpr']:.2f}", f"{r['head_ms']:.1f}",
                         f"{r['tail_ms']:.1f}", f"{r['per_batch']:.1f}"])
    return hdr, rows


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the cluster was stopped on the way out
        sys.exit("bench_multi: interrupted; the relay, proxies and nodes were stopped")
