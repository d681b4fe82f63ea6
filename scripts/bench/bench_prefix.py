#!/usr/bin/env python3
"""bench_prefix.py - time to first token with a shared system prompt, from one command.

The cluster of bench_wan.py (a relay with real keys, two shardwire-wanem
proxies, a head node and a tail node; 4 x --delay-ms per round trip, 172 ms
by default) with the prefix cache on, then requests whose prompts share a
long system prompt (about --system-tokens tokens) and differ in a short
question at the end:

  - cold: the first request, nothing cached (every stage computes the whole
    prompt);
  - warm: the next ones, whose system prompt every stage takes from its
    prefix cache ("prefix_reused" in their stats).

Each request asks for one token. For each it prints the client's time to
first token, the positions reused and the compute of the prefill round (the
head's layers plus the stages', from the request's `timing`: the new tokens'
prefill), next to the issue's goal for a warm request: 2 round trips plus
that prefill. With --compare the same requests then run on a cluster
started with --prefix-cache off (every request cold).

  python3 scripts/bench/bench_prefix.py                  # SmolLM2-135M, 172 ms
  python3 scripts/bench/bench_prefix.py --target models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf

Every process it starts is stopped at the end, also on failure or Ctrl-C.
"""
import argparse
import os
import shutil
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_wan  # noqa: E402

QUESTIONS = [
    "Which file holds the relay's limits?",
    "How do I measure the time to the first token?",
    "What does the tail verify?",
    "Why are prompts evaluated in windows?",
    "Where does the head keep its sessions?",
    "What happens when a stage restarts?",
]


def system_prompt(n_tokens):
    """About n_tokens tokens of rules (SmolLM2 / Qwen: ~22 tokens a rule)."""
    rules = ["You are a careful assistant for a team of engineers."]
    i = 0
    while len(" ".join(rules)) < n_tokens * 4.4:
        i += 1
        rules.append(f"Rule {i}: answer in plain words, cite the file you read, and never guess "
                     f"a number you did not measure.")
    return " ".join(rules) + "\n"


def prefill_compute(r):
    """The compute of a 1-token request's one round, the prefill: head + stages (ms)."""
    t = r.get("timing", {})
    return float(t.get("head_compute_ms", 0)) + sum(
        float(v) for v in (t.get("stage_compute_ms") or {}).values())


def measure(cl, args, label, rows):
    sysp = system_prompt(args.system_tokens)
    rtt = 4 * args.delay_ms
    for qi, q in enumerate(QUESTIONS[:args.requests]):
        prompt = f"{sysp}Question: {q}\nAnswer:"
        r = cl.run(prompt, ["--draft", "none"], n=1)  # the first token: the prefill round
        comp = prefill_compute(r)
        reused, ttft = int(r.get("prefix_reused", 0)), float(r.get("ttft_ms", 0))
        print(f"  {label} request {qi}: {r.get('n_prompt', '?')} prompt tokens, reused "
              f"{reused}, TTFT {ttft:.0f} ms, prefill compute {comp:.0f} ms", file=sys.stderr)
        rows.append([label, str(qi), str(r.get("n_prompt", "?")), str(reused), f"{ttft:.0f}",
                     f"{comp:.0f}", f"{2 * rtt + comp:.0f}",
                     "yes" if ttft <= 2 * rtt + comp else "no"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=os.path.join(bench_wan.MODELS,
                                                     "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--system-tokens", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=4, help="requests (the first is cold)")
    ap.add_argument("--delay-ms", type=float, default=43, help="one-way delay per link "
                    "(default 43: 172 ms per round trip)")
    ap.add_argument("--threads", type=int, default=1, help="threads per node (default 1)")
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--split", type=int, default=0)
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--compare", action="store_true",
                    help="the same requests on a cluster with --prefix-cache off")
    ap.add_argument("--build", default="build")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    args.chat, args.draft, args.n = False, None, 1
    if not os.path.exists(args.target):
        raise SystemExit(f"bench_prefix: {args.target} is missing (bash scripts/fetch_model.sh ...)")
    rows = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    for label, cache in (("prefix cache on", "on"), ("prefix cache off", "off")):
        if cache == "off" and not args.compare:
            break
        args.node_extra = ["--ctx", "2048", "--prefix-cache", cache]
        logdir = tempfile.mkdtemp(prefix="bench_prefix.")
        cl = bench_wan.Cluster(args, logdir)
        try:
            n_layers, split = cl.start()
            print(f"# target {os.path.basename(args.target)} ({n_layers} layers, head [0,{split})"
                  f" tail [{split},{n_layers})), {4 * args.delay_ms:g} ms per round trip, "
                  f"{args.threads} thread(s) per node, --prefix-cache {cache}", file=sys.stderr)
            cl.run("def is_palindrome(s):\n", ["--draft", "none"], n=2)  # warm up
            measure(cl, args, label, rows)
        finally:
            cl.stop()
            shutil.rmtree(logdir, ignore_errors=True)
    hdr = ["cluster", "request", "prompt tokens", "reused", "TTFT ms", "prefill compute ms",
           "2 RTT + prefill ms", "within"]
    bench_wan.print_table(hdr, rows, args.markdown)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("bench_prefix: interrupted; the relay, proxies and nodes were stopped")
