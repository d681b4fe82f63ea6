#!/usr/bin/env python3
"""bench_direct.py - the round trip through the relay vs over a direct path (issue 39), on the
namespaced hosts of tests/slow/test_netns_direct.c (the same bed: it runs that test, which needs
root): a head and a tail with public addresses, the relay RELAY_MS (one way) from both, the
tail's listener DIRECT_MS from the head (shardwire-wanem). Through the relay a message from the
head to the tail takes 2 x RELAY_MS one way, over the direct path DIRECT_MS. SmolLM2-135M
(the test's model), head 0:15 + tail 15:30, greedy, N tokens a request, --reps requests a path.

Per token and per round: the client's whole request time (from the client host, which reaches
the head through the relay, the same for both paths) divided by the tokens and by the head's
rounds ("N tokens in R rounds").

    sudo python3 scripts/bench/bench_direct.py --build build --reps 3 \\
        --json-out docs/results/bench_direct-smollm2-DATE.json
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_wan  # noqa: E402  (run_info, write_result)

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
MEASURE = re.compile(r"measure: what=(\w+) tokens=(\d+) rounds=(\d+) ms=([\d.]+) "
                     r"relay_in=(-?\d+) relay_out=(-?\d+)")
WAN = re.compile(r"WAN: the relay (\d+) ms one way .* the tail's listener (\d+) ms from the head")


def table(r):
    """The header and rows of the table from a result (raw: one entry per request)."""
    hdr = ["path", "emulated one way head -> tail", "requests", "tokens", "rounds",
           "ms a token (median)", "ms a round (median)", "relay msgs from/to the tail",
           "vs relay"]
    rows, base = [], None
    for path, lat in (("relay", f"{2 * r['relay_ms']} ms (2 x {r['relay_ms']} ms via the relay)"),
                      ("direct", f"{r['direct_ms']} ms")):
        xs = [x for x in r["raw"] if x["what"] == path]
        if not xs:
            continue
        tok = statistics.median(x["ms"] / x["tokens"] for x in xs)
        rnd = statistics.median(x["ms"] / x["rounds"] for x in xs)
        base = base or rnd
        rows.append([path, lat, str(len(xs)), str(xs[0]["tokens"]),
                     "/".join(str(x["rounds"]) for x in xs), f"{tok:.1f}", f"{rnd:.1f}",
                     f"{sum(x['relay_in'] for x in xs)}/{sum(x['relay_out'] for x in xs)}",
                     f"{rnd / base:.2f}x"])
    return hdr, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(SRC, "build"),
                    help="the build folder with test_netns_direct (default build/)")
    ap.add_argument("--reps", type=int, default=3, help="requests per path (default 3)")
    ap.add_argument("--json-out", help="write the result file here: commit, machine, date, "
                    "command, load (bench_wan.run_info), the emulated latencies and every "
                    "request (scripts/docs/render_bench.py renders its table)")
    ap.add_argument("--note", default="", help="recorded in the result file")
    info = bench_wan.run_info()
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_direct: needs root (the test bed makes network namespaces)")
    if args.reps < 1:
        raise SystemExit("bench_direct: --reps must be at least 1")
    env = dict(os.environ, SW_DIRECT_BENCH_REPS=str(args.reps))
    p = subprocess.run(["ctest", "--test-dir", args.build, "-R", "^test_netns_direct$", "-V",
                        "--timeout", "1200"], env=env, capture_output=True, text=True)
    out = p.stdout + p.stderr
    raw = [{"what": m[0], "tokens": int(m[1]), "rounds": int(m[2]), "ms": float(m[3]),
            "relay_in": int(m[4]), "relay_out": int(m[5])} for m in MEASURE.findall(out)]
    wan = WAN.search(out)
    if p.returncode != 0 or not wan or not raw:
        sys.stderr.write(out[-4000:])
        raise SystemExit(f"bench_direct: test_netns_direct failed (exit {p.returncode}): no "
                         "result")
    info.update(relay_ms=int(wan[1]), direct_ms=int(wan[2]), reps=args.reps, raw=raw,
                note=args.note)
    hdr, rows = table(info)
    print(f"bench_direct: {info['machine']}, load {info['loadavg'][0]:.1f}; relay "
          f"{info['relay_ms']} ms one way from head and tail, direct {info['direct_ms']} ms")
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
    for line in [hdr, *rows]:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(line)))
    if args.json_out:
        bench_wan.write_result(args.json_out, info, "bench_direct")


if __name__ == "__main__":
    main()
