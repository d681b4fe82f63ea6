#!/usr/bin/env python3
"""demo_result.py - the result file of one whole `scripts/demo.sh` run (demo.sh calls it at
its end): the commit, the machine, the date and the load (bench_wan.run_info), the demo's
command, its seconds until ready (dependencies, models, build) and in all, and the result
file of each demo_wan.py part it ran, copied in. scripts/docs/render_bench.py renders it.

  python3 scripts/bench/demo_result.py OUT.json --command "demo.sh --qwen" --ready-s 12 \\
          --total-s 140 --note "..." PART.json [PART.json ...]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_wan  # noqa: E402  (run_info)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="the result file to write")
    ap.add_argument("parts", nargs="+", help="demo_wan.py's result files, in the demo's order")
    ap.add_argument("--command", required=True, help="the demo's command line")
    ap.add_argument("--ready-s", type=float, required=True,
                    help="seconds until ready (dependencies, models, build)")
    ap.add_argument("--total-s", type=float, required=True, help="seconds in all")
    ap.add_argument("--note", default="", help="recorded in the file, e.g. 'shared machine'")
    ap.add_argument("--started", help="the UTC date the demo started (default: now)")
    ap.add_argument("--load", help="/proc/loadavg's first three fields when it started "
                    "(default: now)")
    a = ap.parse_args()
    parts = []
    for p in a.parts:
        try:
            with open(p) as f:
                parts.append(json.load(f))
        except (OSError, ValueError) as e:
            raise SystemExit(f"demo_result: {p}: {e} (demo_wan.py --json-out writes it)") from None
    info = bench_wan.run_info()
    if a.started:
        info["date"] = a.started
    if a.load:
        try:
            info["loadavg"] = [float(x) for x in a.load.split()[:3]]
        except ValueError:
            raise SystemExit(f"demo_result: --load takes three numbers, not '{a.load}'") from None
    info.update({"load_end": os.getloadavg(), "command": a.command, "note": a.note,
                 "ready_s": a.ready_s, "total_s": a.total_s, "parts": parts})
    bench_wan.write_result(a.out, info, "demo")


if __name__ == "__main__":
    main()
