#!/usr/bin/env python3
"""demo_wan.py - the main job's cluster (scripts/demo.sh runs it): one model
split over two nodes that talk across the project's WAN emulator, plain
decoding next to speculative decoding.

It starts what scripts/bench/bench_wan.py starts (a relay with real keys, two
shardwire-wanem proxies, one per node<->relay link, each DELAY ms one way, so
that a round head -> relay -> tail -> relay -> head crosses 4 x DELAY; a head
node with the draft model and a tail node; the client dials the head's proxy)
and sends the same greedy request once per mode:

  plain     no speculation: one token per round trip
  ngram     prompt lookup (drafts copied from the text so far; no model)
  model     the head's draft model proposes up to K tokens per round (adaptive K)

It prints the reply (the same text in every mode: speculation is lossless,
and the demo checks it) and one table: decode tokens per second, tokens per
round trip, the speed-up over plain decoding, drafts accepted, time to the
first token and the wall time of the request. Every process is stopped at the
end, also on failure and Ctrl-C.

  python3 scripts/bench/demo_wan.py --target M.gguf --draft D.gguf --draft-label "..." -p "..."

--json-out FILE writes a result file: the commit, the machine, the date, the command and
the load average (bench_wan.run_info), --note (e.g. "shared machine"), the settings and
every request's raw result; scripts/docs/render_bench.py renders the table from it with
table() below into the README and docs/benchmarks.md.
"""
import argparse
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_wan  # noqa: E402  (the cluster behind the WAN emulator)

MODES = [
    ("plain", "plain decoding", ["--draft", "none"]),
    ("ngram", "n-gram drafts (prompt lookup)", ["--draft", "ngram", "--draft-ahead", "off"]),
    ("model", "draft model", ["--draft", "model"]),
]


def table(rows, delay_ms, n, repeat_penalty=1.0):
    """The demo's table from (label, the request's --json result, wall seconds) per mode, plain
    first: its lines (a fixed-width table and the line under it) and whether every mode gave the
    same tokens."""
    base = rows[0][1]["decode_tok_s"]
    hdr = ["mode", "tok/s", "tokens per round trip", "speed-up", "drafts accepted",
           "first token", "request"]
    cells = []
    for label, r, wall in rows:
        tpr = (r["n_gen"] - 1) / r["rounds"] if r["rounds"] else 0
        acc = f"{r['accepted']} / {r['drafted']}" if r["drafted"] else "-"
        cells.append([label, f"{r['decode_tok_s']:.1f}", f"{tpr:.2f}",
                      f"{r['decode_tok_s'] / base:.2f}x" if base else "-", acc,
                      f"{r['ttft_ms']:.0f} ms", f"{wall:.1f} s"])
    w = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(hdr)]
    lines = ["  ".join(h.ljust(w[i]) if i == 0 else h.rjust(w[i]) for i, h in enumerate(hdr))]
    lines += ["  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(row))
              for row in cells]
    same = all(r["tokens"] == rows[0][1]["tokens"] for _, r, _ in rows)
    decoding = ("greedy decoding" if repeat_penalty == 1 else
                f"greedy decoding with repetition penalty {repeat_penalty:g}")
    lines += ["", f"{4 * delay_ms:g} ms per round trip (shardwire-wanem between each node and the "
              f"relay); {decoding}, {n} tokens; every mode gave the same tokens: "
              f"{'yes' if same else 'NO'}"]
    return lines, same


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True, help="the model the two nodes split (GGUF)")
    ap.add_argument("--draft", required=True, help="the head's draft model (GGUF)")
    ap.add_argument("--draft-label", default="", help="how the table names the draft model")
    ap.add_argument("-p", "--prompt", required=True)
    ap.add_argument("-n", type=int, default=64, help="tokens per request (default 64)")
    ap.add_argument("--delay-ms", type=float, default=21.5,
                    help="one way per node<->relay link (default 21.5: 86 ms per round trip)")
    ap.add_argument("--modes", default="plain,ngram,model")
    ap.add_argument("--threads", type=int, default=1, help="threads per node (default 1)")
    ap.add_argument("--repeat-penalty", type=float, default=1.0,
                    help="the repetition penalty of the greedy requests (default 1: off)")
    ap.add_argument("--build", default="build", help="build folder (default build)")
    ap.add_argument("--json-out", help="write the result file here (commit, machine, date, "
                    "command, load, every request's result)")
    ap.add_argument("--note", default="", help="recorded in the result file, e.g. 'shared machine'")
    info = bench_wan.run_info()  # commit, machine, date, command, load at the start
    args = ap.parse_args()
    keys = args.modes.split(",")
    unknown = [k for k in keys if k not in [m[0] for m in MODES]]
    if unknown or keys[0] != "plain":
        raise SystemExit(f"demo_wan: --modes is plain followed by any of ngram, model (got {args.modes})")
    # what bench_wan.Cluster reads
    args.draft_threads = args.threads
    args.dtype = "f32"
    args.split = 0
    args.k_max = 16
    args.chat = True
    args.n = max(2, args.n)
    logdir = tempfile.mkdtemp(prefix="shardwire-demo-wan.")
    cl = bench_wan.Cluster(args, logdir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows, text = [], None
    t_start = time.time()
    ok = False  # the logs are kept only when the demo failed, not when it was stopped
    try:
        n_layers, split = cl.start()
        rtt = 4 * args.delay_ms
        print(f"demo: {os.path.basename(args.target)} split over two nodes: head = layers "
              f"0:{split} + the draft model, tail = layers {split}:{n_layers}; every message "
              f"crosses shardwire-wanem, {args.delay_ms:g} ms one way per link, {rtt:g} ms per "
              f"round trip (started in {time.time() - t_start:.1f} s)", file=sys.stderr)
        cl.run(args.prompt, ["--draft", "none"], n=1)  # warm-up: page cache, first touch
        for key in keys:
            label, flags = next((m[1], m[2]) for m in MODES if m[0] == key)
            if key == "model" and args.draft_label:
                label = f"draft model: {args.draft_label}"
            print(f"demo: {label} ...", end="", file=sys.stderr, flush=True)
            t0 = time.time()
            r = cl.run(args.prompt, flags + ["--repeat-penalty", f"{args.repeat_penalty:g}"])
            wall = time.time() - t0
            print(f" {r['n_gen']} tokens in {wall:.1f} s", file=sys.stderr)
            rows.append((key, label, r, wall))
            if text is None:
                text = r["text"]
        ok = True
    except KeyboardInterrupt:
        ok = True  # Ctrl-C: the user stopped it; nothing to keep
        raise
    except SystemExit as e:
        # SIGTERM (exit 143, above) is the user's stop too; any other exit is bench_wan's
        # failure (a node that died, did not join, a run that failed): its logs are kept
        ok = e.code == 143
        raise
    finally:
        cl.stop()
        if ok:
            import shutil
            shutil.rmtree(logdir, ignore_errors=True)
        else:
            print(f"demo: the cluster's logs are kept in {logdir}", file=sys.stderr)

    print()
    print(text.strip())
    print()
    lines, same = table([(label, r, wall) for _, label, r, wall in rows], args.delay_ms, args.n,
                        args.repeat_penalty)
    print("\n".join(lines))
    if args.json_out:
        info.update({"note": args.note, "load_end": os.getloadavg(), "target": args.target,
                     "draft": args.draft, "prompt": args.prompt, "n": args.n,
                     "delay_ms": args.delay_ms, "threads": args.threads,
                     "repeat_penalty": args.repeat_penalty,
                     "rows": [{"mode": k, "label": label, "wall_s": wall, "result": r}
                              for k, label, r, wall in rows]})
        bench_wan.write_result(args.json_out, info, "demo")
    if not same:
        sys.exit("demo: speculation changed the text: this is a bug, please report it")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the cluster was stopped on the way out
        print("\ndemo: interrupted; the relay, proxies and nodes were stopped", file=sys.stderr)
        sys.exit(130)
