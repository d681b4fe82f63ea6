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
  2. even: the same nodes started again next to them (a second relay) with
     those even ranges as fixed --layers.

Nodes start one after another, each probed before the next starts (probes
taken at once on one machine compete for its cores). Then greedy requests
without drafts (one token a round, so a round's time is 1000 / decode
tok/s) of --tokens tokens go to the auto and the even cluster in turn,
--runs times each after one warm-up, the median counted: both meet the
same load, and only one computes at a time. The table prints per
configuration the ranges, the predicted and measured round time and their
ratio, then a round trip's split, measured (the head's statistics: each
stage's compute, and the rest, "network") against the plan's (probes and
round trips).

With --cpu-quota FAST,SLOW (fractions of one core, e.g. 1.0,0.3; needs root
and a writable cgroup v1 cpu controller at /sys/fs/cgroup/cpu) each auto node
runs in its own cgroup capped at that share (cpu.cfs_period_us 10000,
cpu.cfs_quota_us FRACTION x 10000), in both configurations: a really uneven
cluster on one machine, whose probes measure the cap. The head runs without a
cap. The groups are removed at the end. Without the controller it says so in
one line and exits 1. --repeat R runs the whole comparison R times.

  python3 scripts/bench/bench_place.py                       # SmolLM2-135M
  python3 scripts/bench/bench_place.py --cpu-quota 1.0,0.3 --repeat 3
  python3 scripts/bench/bench_place.py --model models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf \
      --head-layers 4 --fast-mib 250 --slow-mib 400

Every process it starts is stopped at the end, also on failure or Ctrl-C.
"""
import argparse
import json
import os
import platform
import signal
import socket
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = "Once upon a time, in a land far away,"
CGROUP_CPU = "/sys/fs/cgroup/cpu"
CFS_PERIOD_US = 10000


class CpuCaps:
    """One cgroup v1 cpu group per auto node, capped at a fraction of one core."""

    def __init__(self, fast, slow):
        self.quota = {"fast": fast, "slow": slow}
        self.dirs = {}

    @staticmethod
    def unusable():
        """Why the cgroups cannot be used here, or None."""
        if os.geteuid() != 0:
            return "not root"
        for f in ("cgroup.procs", "cpu.cfs_quota_us", "cpu.cfs_period_us"):
            if not os.path.exists(os.path.join(CGROUP_CPU, f)):
                return "no cgroup v1 cpu controller at %s (%s missing)" % (CGROUP_CPU, f)
        if not os.access(CGROUP_CPU, os.W_OK):
            return "%s is not writable" % CGROUP_CPU
        return None

    def wrap(self, tag, name, argv):
        """argv run inside a new group for node name of cluster tag, capped at name's share
        (the shell joins it, then execs: every thread of the node is in it). Others (the
        head) run without a cap."""
        if name not in self.quota:
            return argv
        d = os.path.join(CGROUP_CPU, "sw-bench-place-%d-%s-%s" % (os.getpid(), tag, name))
        os.mkdir(d)
        self.dirs[(tag, name)] = d
        with open(os.path.join(d, "cpu.cfs_period_us"), "w") as f:
            f.write(str(CFS_PERIOD_US))
        with open(os.path.join(d, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(max(1000, int(round(self.quota[name] * CFS_PERIOD_US)))))
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', d] + argv

    def throttled(self, name):
        """(periods throttled, total periods) of name's groups so far."""
        thr = per = 0
        for (_, n), d in self.dirs.items():
            if n != name:
                continue
            with open(os.path.join(d, "cpu.stat")) as f:
                st = dict((k, int(v)) for k, v in (line.split() for line in f))
            thr += st.get("nr_throttled", 0)
            per += st.get("nr_periods", 0)
        return thr, per

    def remove(self):
        for d in self.dirs.values():
            for _ in range(50):  # the group empties once its processes have exited
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                print("could not remove the cgroup %s" % d, file=sys.stderr)
        self.dirs = {}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Cluster:
    def __init__(self, a, tmp, tag, caps=None):
        self.a, self.tmp, self.tag, self.procs, self.caps = a, tmp, tag, [], caps
        self.ep = "127.0.0.1:%d" % free_port()

    def spawn(self, name, argv):
        log = open(os.path.join(self.tmp, "%s-%s.log" % (self.tag, name)), "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def node(self, name, layers, extra, nice=0):
        a = self.a
        argv = (["nice", "-n", str(nice)] if nice else []) + [
            os.path.join(a.bin, "shardwire-node"), "-m", a.model, "--layers", layers,
            "--relay", self.ep, "--name", name, "--insecure-loopback",
            "--ctx", str(a.ctx), "--max-sessions", "2"] + extra
        self.spawn(name, self.caps.wrap(self.tag, name, argv) if self.caps else argv)

    def start(self, layers):
        """layers: {name: "A:B" or "auto"} for fast and slow."""
        a = self.a
        self.spawn("relay", [os.path.join(a.bin, "shardwire-relay"), "--listen", self.ep,
                             "--insecure-loopback"])
        time.sleep(0.5)
        auto = layers["fast"] == "auto"
        # one after the other, each announced (so probed) before the next starts: on one
        # machine probes taken at the same time compete for its cores (nodes on separate
        # machines would not), and a round of one session runs its stages one at a time
        self.node("head", "0:%d" % a.head_layers,
                  ["--threads", "1"] + (["--auto-nodes", "2"] if auto else []))
        self.wait_for("head")
        self.node("fast", layers["fast"], ["--threads", str(a.fast_threads), "--mem-mib",
                                           str(a.fast_mib)])
        self.wait_for("fast")
        self.node("slow", layers["slow"], ["--threads", "1", "--mem-mib", str(a.slow_mib)],
                  nice=0 if self.caps else a.slow_nice)

    def wait_for(self, name):
        self.cli("status", "--expect", name, "--connect-timeout-s", "120", timeout=180)

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

    def one(self):
        """One greedy request without drafts: its round time (ms) and the split of a round
        trip (ms): each stage's compute (the head's under "head") and the rest ("network":
        relay hops, waits to be scheduled), the prefill's trip included."""
        j = json.loads(self.cli("run", "--greedy", "--draft", "none", "-p", PROMPT, "-n",
                                str(self.a.tokens), "--json", timeout=600))
        tm, trips = j.get("timing", {}), j["rounds"] + 1.0
        split = {}
        if "network_ms" in tm:
            split = dict(tm.get("stage_compute_ms", {}))
            split["head"] = tm["head_compute_ms"]
            split["network"] = tm["network_ms"]
        return 1000.0 / j["decode_tok_s"], {k: v / trips for k, v in split.items()}

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


def predicted_split(plan, ranges_):
    """The plan's round trip split like round_ms's (ms): compute per stage, round trips."""
    nodes = {p["name"]: p for p in plan["nodes"]}
    out = {"head": plan["head_us_layer"] * plan["head_layers"] / 1e3,
           "network": plan["head_rtt_us"] / 1e3}
    for n, (b, e) in ranges_.items():
        p = nodes[n]
        out[n] = ((e - b) * p["us_layer"] + (p["us_out"] if e == plan["n_layers"] else 0)) / 1e3
        out["network"] += p["rtt_us"] / 1e3
    return out


def compare(a, tmp, caps, rep):
    """One comparison: the auto cluster placed, the even cluster (the same nodes with the even
    split of the same layers, fixed) started next to it, then requests to one and the other
    in turn, so that both meet the same load (only one computes at a time). Returns (rows,
    probe)."""
    ca = Cluster(a, tmp, "auto%d" % rep, caps)
    ce = Cluster(a, tmp, "even%d" % rep, caps)
    try:
        ca.start({"fast": "auto", "slow": "auto"})
        peers = ca.wait_placed()
        plan = json.loads(ca.cli("plan", "--model", a.model, "--json"))
        probe = {p["name"]: p for p in plan["nodes"]}
        even = {n: "%d:%d" % (probe[n]["even_begin"], probe[n]["even_end"])
                for n in ("fast", "slow")}
        ce.start(even)
        ce.cli("status", "--expect", "head,fast,slow", "--connect-timeout-s", "120", timeout=180)
        time.sleep(1)
        got = {"auto": ([], {}), "even": ([], {})}
        for i in range(a.runs + 1):  # the first of each is a warm-up
            for tag, c in (("auto", ca), ("even", ce)):
                ms, split = c.one()
                if i > 0:
                    got[tag][0].append(ms)
                    for k, v in split.items():
                        got[tag][1].setdefault(k, []).append(v)
    finally:
        ca.stop()
        ce.stop()
    if not plan["even_fits"]:
        print("(the even split is over a node's --mem-mib: it ran here because mmap'd weights "
              "are not held to the limit)")
    cur = {n: (peers[n]["layer_begin"], peers[n]["layer_end"]) for n in ("fast", "slow")
           if not peers[n].get("standby")}
    ev = {n: tuple(int(x) for x in even[n].split(":")) for n in ("fast", "slow")}
    rows = []
    for name, lay, pred, tag, rng in (
            ("auto (head's plan)", ranges(peers), plan["current_us"] / 1e3, "auto", cur),
            ("even split", "fast %s, slow %s" % (even["fast"], even["slow"]),
             plan["even_us"] / 1e3, "even", ev)):
        runs, split = got[tag]
        rows.append((name, lay, pred, statistics.median(runs), runs,
                     {k: statistics.median(v) for k, v in split.items()},
                     predicted_split(plan, rng)))
    return rows, probe


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
    ap.add_argument("--repeat", type=int, default=1,
                    help="comparisons (auto, then even) one after the other")
    ap.add_argument("--cpu-quota", metavar="FAST,SLOW",
                    help="cap each auto node in its own cgroup at these fractions of one core "
                         "(e.g. 1.0,0.3); replaces --slow-nice")
    ap.add_argument("--keep-logs", action="store_true",
                    help="keep the relay's and nodes' logs (their folder is printed at the end)")
    a = ap.parse_args()
    caps = None
    if a.cpu_quota:
        try:
            fast, slow = (float(x) for x in a.cpu_quota.split(","))
            if not (0.1 <= fast <= 64 and 0.1 <= slow <= 64):
                raise ValueError
        except ValueError:
            print("bench_place.py: --cpu-quota takes FAST,SLOW, two fractions of one core "
                  "between 0.1 and 64 (e.g. 1.0,0.3)", file=sys.stderr)
            sys.exit(2)
        why = CpuCaps.unusable()
        if why:
            print("bench_place.py: --cpu-quota needs a writable cgroup v1 cpu controller as "
                  "root: %s" % why, file=sys.stderr)
            sys.exit(1)
        caps = CpuCaps(fast, slow)
    tmp = tempfile.mkdtemp(prefix="sw-bench-place-")
    results = []
    done = False
    try:
        for rep in range(a.repeat):
            rows, probe = compare(a, tmp, caps, rep)
            results.append((rows, probe))
            if caps:
                thr = {n: caps.throttled(n) for n in ("fast", "slow")}
            if a.repeat > 1:
                print("comparison %d of %d done (load average %.2f)" %
                      (rep + 1, a.repeat, os.getloadavg()[0]), flush=True)
        done = True
    finally:
        if caps:
            caps.remove()
        if done and not a.keep_logs:  # a failure's message names the logs: they stay
            shutil.rmtree(tmp, ignore_errors=True)
    probe = results[-1][1]
    speed = ("cgroup cap %.2f core" % caps.quota["fast"]) if caps else \
        "%d thread(s)" % a.fast_threads
    slow_speed = ("cgroup cap %.2f core" % caps.quota["slow"]) if caps else \
        "nice %d" % a.slow_nice
    print("model %s; head [0, %d) 1 thread, no cap; fast: 1 thread, %s, --mem-mib %d, probed "
          "%.0f us a layer; slow: 1 thread, %s, --mem-mib %d, probed %.0f us a layer" %
          (os.path.basename(a.model), a.head_layers, speed, a.fast_mib,
           probe["fast"]["us_layer"], slow_speed, a.slow_mib, probe["slow"]["us_layer"]))
    if caps:
        print("cgroup periods throttled over the whole bench: fast %d of %d, slow %d of %d "
              "(period %d us)" % (thr["fast"][0], thr["fast"][1], thr["slow"][0],
                                  thr["slow"][1], CFS_PERIOD_US))
    print("machine: %s, %d cores, load average %.2f at the end; %d greedy tokens a request, "
          "no drafts, median of %d requests" %
          (platform.processor() or platform.machine(), os.cpu_count(), os.getloadavg()[0],
           a.tokens, a.runs))
    print("%-4s %-20s %-26s %12s %12s %8s  %s" % ("REP", "CONFIG", "LAYERS", "PREDICTED MS",
                                                 "MEASURED MS", "RATIO", "RUNS MS"))
    for rep, (rows, _) in enumerate(results):
        for name, lay, pred, meas, all_, _, _ in rows:
            print("%-4d %-20s %-26s %12.2f %12.2f %8.2f  %s" %
                  (rep + 1, name, lay, pred, meas, meas / pred,
                   " ".join("%.2f" % x for x in all_)))
    print("a round trip split, measured (the head's stats, per trip, prefill's included) / "
          "predicted (probes), ms:")
    for rep, (rows, _) in enumerate(results):
        for name, _, _, _, _, got, want in rows:
            print("%-4d %-20s %s" % (rep + 1, name, "  ".join(
                "%s %.2f/%.2f" % (k, got.get(k, float("nan")), want[k])
                for k in ("head", "fast", "slow", "network") if k in want)))
    ratios = [rows[0][3] / rows[1][3] for rows, _ in results]
    mp = [r[3] / r[2] for rows, _ in results for r in rows]
    print("auto vs even: %s (x the even split's round time; median %.2f)" %
          (" ".join("%.2f" % x for x in ratios), statistics.median(ratios)))
    print("measured / predicted: min %.2f, median %.2f, max %.2f over %d configurations" %
          (min(mp), statistics.median(mp), max(mp), len(mp)))
    if a.keep_logs:
        print("logs: %s" % tmp)


if __name__ == "__main__":
    main()
