#!/usr/bin/env python3
"""bench_spot.py - what spot checks cost the main route, from one command.

A cluster on loopback with real keys (CURVE to the relay, sealed payloads):
a relay, a head holding layers 0:split, and two tails holding split:end, so
that a checked session's shadow route (the other tail) exists: a 2-stage
cluster plus one checker (docs/security.md). For each share in --shares
(0, 0.1, 1 by default) the head is started again with --spot-check SHARE
(plus one warm-up request, checked or not, not timed) and runs requests one
after the other (greedy, --n tokens each, a different prompt each); the
shares take turns in --passes passes, so that a drifting machine load hits
them alike. Then it prints one table: the share, the sessions the head
checked (read from its log; the share is a probability per session), the
rounds it compared, the nodes it reported, the decode tokens/s on the head's clock
("decode_tok_s" of each request's stats, the mean over a pass's requests; the median and range over
the passes), the wall-clock tokens/s of a pass (first request sent to the
last one's end; median), and the change of both against share 0. Every run's tokens must equal those of share 0
(checks never change what is committed): the script fails otherwise.

  python3 scripts/bench/bench_spot.py                   # SmolLM2-135M, 30 requests of 48 tokens
  python3 scripts/bench/bench_spot.py --shares 0,0.1,0.5,1 --requests 50 --markdown

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
import bench_wan  # noqa: E402  (gguf_block_count, free_port, print_table)

HERE = bench_wan.HERE
MODELS = os.environ.get("SW_MODELS_DIR") or os.path.join(HERE, "models")
PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a land far away,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "List three colors of the rainbow:\n1.",
    "In 1492, Columbus",
    "Water boils at a temperature of",
    "SELECT name, age FROM users WHERE",
    "The three laws of robotics are",
    "My favourite recipe for pancakes:",
    "A haiku about the sea:\n",
]


class Cluster:
    def __init__(self, args, logdir):
        self.a, self.logdir, self.procs = args, logdir, {}
        self.bin = os.path.join(HERE, args.build, "bin")

    def spawn(self, name, argv):
        log = open(os.path.join(self.logdir, name + ".log"), "a")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def kill(self, name):
        p = self.procs.pop(name, None)
        if p and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop(self):
        for name in list(reversed(list(self.procs))):
            self.kill(name)

    def keys(self):
        b, kd = self.bin, os.path.join(self.logdir, "keys")
        os.makedirs(kd, mode=0o700, exist_ok=True)
        self.names = ("relay", "head", "tail-a", "tail-b", "client")
        for k in self.names:
            subprocess.run([f"{b}/shardwire", "keygen", "--out", f"{kd}/{k}"], check=True,
                           capture_output=True)
        for kind in ("cluster", "access"):
            subprocess.run([f"{b}/shardwire", "keygen", f"--{kind}-key", f"{kd}/{kind}.key"],
                           check=True, capture_output=True)
        with open(f"{kd}/allow.txt", "w") as f:
            for k in self.names[1:]:
                role = "client" if k == "client" else f"node {k}"
                f.write(open(f"{kd}/{k}.pub").read().strip() + " " + role + "\n")
        ck, ak = ["--cluster-key", f"{kd}/cluster.key"], ["--access-key", f"{kd}/access.key"]
        self.kd = kd
        self.sec = {k: ["--key", f"{kd}/{k}.key", "--relay-key", f"{kd}/relay.pub",
                        *(ak if k == "client" else ck + ak if k == "head" else ck)]
                    for k in self.names[1:]}

    def node(self, name, layers, extra=()):
        self.spawn(name, [f"{self.bin}/shardwire-node", "--model", self.a.target, "--layers",
                          layers, "--relay", self.relay, "--name", name, "--threads",
                          str(self.a.threads), "--ctx", "1024", *self.sec[name], *extra])

    def wait_peers(self, names):
        deadline = time.time() + 300
        while time.time() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise SystemExit(f"bench_spot: {name} exited ({p.returncode}); see "
                                     f"{self.logdir}/{name}.log")
            st = subprocess.run([f"{self.bin}/shardwire", "status", "--relay", self.relay,
                                 "--json", *self.sec["client"]], capture_output=True, text=True)
            if all(f'"name":"{n}"' in st.stdout for n in names):
                return
            time.sleep(0.5)
        raise SystemExit("bench_spot: the nodes did not join the relay within 300 s")

    def start(self):
        self.keys()
        self.relay = f"tcp://127.0.0.1:{bench_wan.free_port()}"
        self.spawn("relay", [f"{self.bin}/shardwire-relay", "--listen", self.relay, "--key",
                             f"{self.kd}/relay.key", "--allow", f"{self.kd}/allow.txt"])
        time.sleep(0.3)
        n_layers = bench_wan.gguf_block_count(self.a.target)
        self.split = self.a.split or n_layers // 2
        for t in ("tail-a", "tail-b"):
            self.node(t, f"{self.split}:end")
        self.wait_peers(["tail-a", "tail-b"])

    def run(self, prompt):
        argv = [f"{self.bin}/shardwire", "run", "--greedy", "--relay", self.relay, "--head",
                "head", "-p", prompt, "-n", str(self.a.n), "--json", "--timeout-s", "600",
                "--draft", self.a.draft, *self.sec["client"]]
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"bench_spot: shardwire run failed: {r.stderr.strip()}")
        return json.loads(r.stdout.strip().splitlines()[-1])


def measure(cl, share, n_req):
    """One share: a fresh head, n_req requests, and what its log says it checked."""
    cl.kill("head")
    log = os.path.join(cl.logdir, "head.log")
    open(log, "w").close()
    cl.node("head", f"0:{cl.split}", ["--spot-check", str(share)])
    cl.wait_peers(["head", "tail-a", "tail-b"])
    cl.run(PROMPTS[0])  # warm-up (page cache, first route), not counted
    runs, t0 = [], time.time()
    for i in range(n_req):
        runs.append(cl.run(PROMPTS[i % len(PROMPTS)]))
    wall = time.time() - t0
    time.sleep(0.5)  # the last shadow verdicts
    text = open(log, errors="replace").read()
    checked = len(re.findall(r"spot check: session \w+ checked against", text))
    compared = sum(int(m) for m in re.findall(r"spot check: session \w+: (\d+) round\(s\) compared",
                                              text))
    bad = len(re.findall(r"convicted|is disputed", text))
    n_gen = sum(r["n_gen"] for r in runs)
    dec = [r["decode_tok_s"] for r in runs if r["decode_tok_s"] > 0]
    return {"share": share, "checked": checked, "compared": compared, "bad": bad,
            "decode": sum(dec) / len(dec) if dec else 0.0, "wall": n_gen / wall,
            "tokens": [r["tokens"] for r in runs]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--shares", default="0,0.1,1", help="spot-check shares (default 0,0.1,1)")
    ap.add_argument("--requests", type=int, default=30, help="requests per share (default 30)")
    ap.add_argument("--passes", type=int, default=3,
                    help="passes over the shares, each with requests / passes requests per "
                         "share (default 3); the table shows medians over the passes")
    ap.add_argument("--n", type=int, default=48, help="tokens per request (default 48)")
    ap.add_argument("--draft", default="ngram", help="drafting of the requests (default ngram)")
    ap.add_argument("--threads", type=int, default=1, help="threads per node (default 1)")
    ap.add_argument("--split", type=int, default=0, help="first layer of the tails (default half)")
    ap.add_argument("--build", default="build", help="build folder (default build)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--keep-logs", action="store_true")
    a = ap.parse_args()
    logdir = tempfile.mkdtemp(prefix="bench_spot.")
    cl = Cluster(a, logdir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    rows, ok = [], True
    load0 = os.getloadavg()[0]
    try:
        cl.start()
        shares = [float(x) for x in a.shares.split(",")]
        per = max(1, a.requests // a.passes)
        res = {sh: [] for sh in shares}
        for p in range(a.passes):  # the shares interleaved: a machine's load drifts
            for sh in shares:
                res[sh].append(measure(cl, sh, per))
        med = statistics.median  # (an even count: the mean of the middle two)
        base = None
        for sh in shares:
            rs = res[sh]
            dec, wall = [r["decode"] for r in rs], [r["wall"] for r in rs]
            r = {"share": sh, "checked": sum(x["checked"] for x in rs),
                 "compared": sum(x["compared"] for x in rs), "bad": sum(x["bad"] for x in rs),
                 "decode": med(dec), "wall": med(wall), "dec_rng": (min(dec), max(dec)),
                 "tokens": [t for x in rs for t in x["tokens"]]}
            base = base or r
            if r["tokens"] != base["tokens"]:
                ok = False
                print(f"bench_spot: share {sh} changed the output", file=sys.stderr)
            rows.append([f"{sh:g}", f"{r['checked']}/{(per + 1) * a.passes}", str(r["compared"]),
                         str(r["bad"]), f"{r['decode']:.1f}",
                         f"{r['dec_rng'][0]:.1f}-{r['dec_rng'][1]:.1f}",
                         f"{(r['decode'] / base['decode'] - 1) * 100:+.1f}%" if base["decode"]
                         else "-",
                         f"{r['wall']:.1f}",
                         f"{(r['wall'] / base['wall'] - 1) * 100:+.1f}%" if base["wall"] else "-"])
    finally:
        cl.stop()
        if not a.keep_logs and ok:
            shutil.rmtree(logdir, ignore_errors=True)
        else:
            print(f"logs: {logdir}", file=sys.stderr)
    print(f"# {os.path.basename(a.target)}, head 0:{cl.split} + 2 tails {cl.split}:end on "
          f"loopback, {a.passes} passes x {max(1, a.requests // a.passes)} requests x {a.n} "
          f"tokens per share, --draft {a.draft}, "
          f"--threads {a.threads} per node; {os.cpu_count()} CPUs, load average {load0:.1f} at "
          f"the start, {os.getloadavg()[0]:.1f} at the end")
    bench_wan.print_table(["share", "sessions checked", "rounds compared", "reports",
                           "decode tok/s (median)", "range", "vs 0", "wall tok/s (median)",
                           "vs 0"], rows, a.markdown)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
