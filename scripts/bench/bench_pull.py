#!/usr/bin/env python3
"""Bytes a partial pull saves: `shardwire pull --layers A:B` of each range of a
split against the hub stand-in (tests/hub_standin.py), bytes counted by the
server (the sum of the CDN response bodies it sent), as a markdown table.

  python3 scripts/bench/bench_pull.py --bin build/bin/shardwire \\
      --model models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf --split 0:14,14:28

Each range is pulled into a fresh cache; the whole file is the reference.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the shardwire program")
    ap.add_argument("--model", required=True, help="a GGUF the stand-in serves")
    ap.add_argument("--split", required=True, help="layer ranges, e.g. 0:14,14:28")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    standin = os.path.join(here, "..", "..", "tests", "hub_standin.py")
    whole = os.path.getsize(args.model)
    name = os.path.basename(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "hub.json")
        with open(cfg, "w") as f:
            json.dump({"repos": {"bench/model": {"files": {name: os.path.abspath(args.model)}}}},
                      f)
        port_file, log = os.path.join(tmp, "port"), os.path.join(tmp, "log")
        hub = subprocess.Popen([sys.executable, standin, "--config", cfg, "--port-file",
                                port_file, "--log", log])
        try:
            for _ in range(300):
                if os.path.exists(port_file):
                    break
                time.sleep(0.1)
            with open(port_file) as f:
                port = f.read().strip()
            print("| model | layers | fetched MiB | whole file MiB | share | partial file MiB "
                  "| seconds |")
            print("|---|---|---|---|---|---|---|")
            for i, rng in enumerate(args.split.split(",")):
                env = dict(os.environ, HF_ENDPOINT="http://127.0.0.1:" + port,
                           HF_HOME=os.path.join(tmp, "home%d" % i))
                for k in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE"):
                    env.pop(k, None)
                lines_before = sum(1 for _ in open(log)) if os.path.exists(log) else 0
                t0 = time.time()
                out = subprocess.run([args.bin, "pull", "bench/model:" + name, "--layers", rng,
                                      "--quiet"], env=env, capture_output=True, text=True)
                dt = time.time() - t0
                if out.returncode != 0:
                    sys.exit("pull --layers %s failed: %s" % (rng, out.stderr.strip()))
                sent = 0
                with open(log) as f:
                    for j, line in enumerate(f):
                        entry = json.loads(line)
                        if j >= lines_before and "sent" in entry:
                            sent += entry["sent"]
                part = os.path.getsize(out.stdout.strip())
                print("| %s | %s | %.1f | %.1f | %.0f%% | %.1f | %.1f |" % (
                    name, rng, sent / 2**20, whole / 2**20, 100.0 * sent / whole, part / 2**20,
                    dt))
        finally:
            hub.terminate()
            hub.wait()


if __name__ == "__main__":
    main()
