#!/usr/bin/env python3
"""bench_place.py - placement (--layers auto) against the even split, and the
plan's predicted round time against the measured one, from one command.

On this machine: a relay without keys (loopback), a head holding layers
[0, HEAD) and two uneven auto nodes: "fast" (--threads FAST_THREADS,
--mem-mib FAST_MIB) and "slow" (--threads 1, --mem-mib SLOW_MIB, run under
`nice -n SLOW_NICE`: on a machine whose cores are shared with other work the
scheduler gives it less of them, which is what makes it slow; a second thread
does not make a node faster on 2 busy cores).

  1. auto: the head (--auto-nodes 2) plans the layers after its own over the
     two nodes from their probes and assigns them; `shardwire plan --json`
     gives the plan's predicted round time (1 row a round), the head's
     assignment and the even split of the same layers over the same nodes
     (with its predicted time from the same probes).
  2. even: the same nodes started with those even ranges as fixed --layers.

In each, greedy requests without drafts (one token a round, so a round's
time is 1000 / decode tok/s) of --tokens tokens, --runs times after one
warm-up, the median counted. The table prints per configuration the
ranges, the predicted and measured round time and their ratio.

  python3 scripts/bench_place.py                       # SmolLM2-135M
  python3 scripts/bench_place.py --model models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf \
      --head-layers 4 --fast-mib 250 --slow-mib 400

Every process it starts is stopped at the end, also on failure or Ctrl-C.
"""
import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "Once upon a time, in a land far away,"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Cluster:
    def __init__(self, a, tmp, tag):
        self.a, self.tmp, self.tag, self.procs = a, tmp, tag, []
        self.ep = "127.0.0.1:%d" % free_port()

    def spawn(self, name, argv):
        log = open(os.path.join(self.tmp, "%s-%s.log" % (self.tag, name)), "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def node(self, name, layers, extra, nice=0):
        a = self.a
        self.spawn(name, (["nice", "-n", str(nice)] if nice else []) + [
                          os.path.join(a.bin, "shardwire-node"), "-m", a.model, "--layers", layers,
                          "--relay", self.ep, "--name", name, "--insecure-loopback",
                          "--ctx", str(a.ctx), "--max-sessions", "2"] + extra)

    def start(self, layers):
        """layers: {name: "A:B" or "auto"} for fast and slow."""
        a = self.a
        self.spawn("relay", [os.path.join(a.bin, "shardwire-relay"), "--listen", self.ep,
                             "--insecure-loopback"])
        time.sleep(0.5)
        auto = layers["fast"] == "auto"
        self.node("head", "0:%d" % a.head_layers,
                  ["--threads", "1"] + (["--auto-nodes", "2"] if auto else []))
        self.node("fast", layers["fast"], ["--threads", str(a.fast_threads), "--mem-mib",
                                           str(a.fast_mib)])
        self.node("slow", layers["slow"], ["--threads", "1", "--mem-mib", str(a.slow_mib)],
                  nice=a.slow_nice)

    def cli(self, *args, timeout=60):
        r = subprocess.run([os.path.join(self.a.bin, "shardwire")] + list(args) +
                           ["--relay", self.ep, "--insecure-loopback"],
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("shardwire %s: %s" % (args[0], r.stderr.strip()[-400:]))
        return r.stdout

    def wait_placed(self, timeout=180):
        t0 = time.time()
        while time.time() - t0 < timeout:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError("a process of the cluster exited (logs in %s)" % self.tmp)
            try:
                st = json.loads(self.cli("status", "--json"))
                peers = {p["name"]: p for p in st["peers"]}
                # placed: a whole route (the plan may leave a node as a standby)
                at, L = self.a.head_layers, None
                for p in peers.values():
                    L = p.get("n_layers") or L
                moved = True
                while moved and L and at < L:
                    moved = False
                    for n in ("fast", "slow"):
                        p = peers.get(n)
                        if p and not p.get("standby") and p["layer_begin"] == at and \
                                p["layer_end"] > at:
                            at, moved = p["layer_end"], True
                if L and at == L and all(n in peers for n in ("fast", "slow")):
                    return peers
            except (RuntimeError, ValueError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.5)
        raise RuntimeError("the nodes were not placed within %d s (logs in %s)" %
                           (timeout, self.tmp))

    def round_ms(self):
        """Median round time (ms) of --runs greedy requests without drafts, after a warm-up."""
        out = []
        for i in range(self.a.runs + 1):
            j = json.loads(self.cli("run", "--greedy", "--draft", "none", "-p", PROMPT, "-n",
                                    str(self.a.tokens), "--json", timeout=600))
            if i > 0:
                out.append(1000.0 / j["decode_tok_s"])
        return statistics.median(out), out

    def stop(self):
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        self.procs = []


def ranges(peers):
    def one(n):
        p = peers[n]
        if p.get("standby"):
            return "%s standby" % n
        return "%s %d:%d" % (n, p["layer_begin"], p["layer_end"])
    return one("fast") + ", " + one("slow")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(
        os.environ.get("SW_MODELS_DIR", os.path.join(ROOT, "models")),
        "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--head-layers", type=int, default=6)
    ap.add_argument("--fast-threads", type=int, default=1)
    ap.add_argument("--slow-nice", type=int, default=19)
    ap.add_argument("--fast-mib", type=int, default=40)
    ap.add_argument("--slow-mib", type=int, default=70)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sw-bench-place-")
    rows = []
    c = Cluster(a, tmp, "auto")
    try:
        c.start({"fast": "auto", "slow": "auto"})
        peers = c.wait_placed()
        plan = json.loads(c.cli("plan", "--model", a.model, "--json"))
        probe = {p["name"]: p for p in plan["nodes"]}
        auto_ms, auto_all = c.round_ms()
        rows.append(("auto (head's plan)", ranges(peers), plan["current_us"] / 1e3, auto_ms,
                     auto_all))
        even = {n: "%d:%d" % (probe[n]["even_begin"], probe[n]["even_end"])
                for n in ("fast", "slow")}
        even_pred = plan["even_us"] / 1e3
        even_fits = plan["even_fits"]
    finally:
        c.stop()
    c = Cluster(a, tmp, "even")
    try:
        c.start(even)
        c.cli("status", "--expect", "head,fast,slow", "--connect-timeout-s", "120", timeout=180)
        time.sleep(1)
        even_ms, even_all = c.round_ms()
        rows.append(("even split", "fast %s, slow %s" % (even["fast"], even["slow"]), even_pred,
                     even_ms, even_all))
    finally:
        c.stop()
    print("model %s; head [0, %d) 1 thread; fast: %d thread(s), --mem-mib %d, probed %.0f us a "
          "layer; slow: 1 thread, nice %d, --mem-mib %d, probed %.0f us a layer" %
          (os.path.basename(a.model), a.head_layers, a.fast_threads, a.fast_mib,
           probe["fast"]["us_layer"], a.slow_nice, a.slow_mib, probe["slow"]["us_layer"]))
    print("machine: %s, %d cores, load average %.2f at the end; %d greedy tokens a request, "
          "no drafts, median of %d requests" %
          (platform.processor() or platform.machine(), os.cpu_count(), os.getloadavg()[0],
           a.tokens, a.runs))
    print("%-20s %-26s %12s %12s %8s  %s" % ("CONFIG", "LAYERS", "PREDICTED MS", "MEASURED MS",
                                            "RATIO", "RUNS MS"))
    for name, lay, pred, meas, all_ in rows:
        print("%-20s %-26s %12.2f %12.2f %8.2f  %s" % (name, lay, pred, meas, meas / pred,
                                                     " ".join("%.2f" % x for x in all_)))
    if not even_fits:
        print("(the even split is over a node's --mem-mib: it ran here because mmap'd weights "
              "are not held to the limit)")
    print("auto vs even: %.2fx the even split's round time" % (rows[0][3] / rows[1][3]))
    print("logs: %s" % tmp)


if __name__ == "__main__":
    main()
