#!/usr/bin/env python3
"""bench_fair.py - compute shared fairly: long prompts against short requests,
one key against another, one key alone, API keys behind the gateway.

Each part starts its own keyed cluster of real processes (a relay, a head
node with layers [0, split), a tail node with the rest, one thread each;
the clients are `shardwire run --json` processes, each with the client key
its part names) and prints one row of the table:

  short      a short request's time to first token (a 6-token prompt, 4
             tokens) alone (median of --reps) and while another client's
             prompt of about 2,000 tokens is prefilled (median of the short
             requests sent one after another during it); the ratio is issue
             33's "short-request ratio". Also the long prompt's own time to
             first token alone (the cost of prefilling in pieces).
  keys       alice's 64-token request alone and while mallory's 6 prompts of
             about 2,000 tokens (1 token each) are prefilled (issue 35,
             finding 1).
  one-key    one client key sending 8 requests of --n tokens at once against
             one request, plain decoding over --delay-ms x 4 of emulated WAN
             per round trip (shardwire-wanem on both nodes' links and the
             client's): aggregate tokens/s ratio, and the latest first token
             (issue 35, "Also measured": 4.01x before, 7.24x with
             --max-sessions-per-client 0).
  gateway    API key 1's 64-token completion alone and while API key 2 keeps
             4 completions of 450-token prompts in flight through one
             `shardwire serve` (issue 35, finding 1 through the gateway).

  python3 scripts/bench/bench_fair.py                         # SmolLM2-135M, every part
  python3 scripts/bench/bench_fair.py --parts short,keys --node-flags '--prefill-pieces 0'
  python3 scripts/bench/bench_fair.py --build /path/to/other/build    # another commit's programs
  python3 scripts/bench/bench_fair.py --build /path/to/old/build --reps 3 --cap-s 120
                                     # before: requests that starve count as 120 s ('>=')
  python3 scripts/bench/bench_fair.py --target models/synth/qwen2.5-7b.gguf --parts short \\
          --long-words 650                                   # the 7B shape of issue 33

Every process it starts is stopped at the end, also on failure or Ctrl-C.
"""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_wan  # noqa: E402  (free_port, gguf_block_count, print_table)

HERE = bench_wan.HERE
WORDS = ("apple river stone cloud music paper light ocean forest garden house silver "
         "yellow dragon").split()
SHORT = "The capital of France is"
ALICE = "Once upon a time"


def long_prompt(seed, words):
    """About 2.9 tokens a word on SmolLM2's and Qwen2.5's vocabularies."""
    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) + str(rnd.randint(0, 99)) for _ in range(words))


class Cluster(bench_wan.Cluster):
    """A relay with real keys (one client key per name in names), a head and a tail; with
    delay_ms > 0 each node and the clients reach the relay through a shardwire-wanem proxy.
    bench_wan.Cluster's spawn and stop (every process it started, clients in flight too)."""

    def __init__(self, args, logdir, names, delay_ms=0):
        super().__init__(args, logdir)
        self.names, self.delay = names, delay_ms
        self.bin = os.path.join(HERE, args.build, "bin")

    def start(self):
        a, b = self.args, self.bin
        for prog in ("shardwire", "shardwire-relay", "shardwire-node", "shardwire-wanem"):
            if not os.access(os.path.join(b, prog), os.X_OK):
                raise SystemExit(f"bench_fair: no {prog} in {b}: build first "
                                 f"(bash scripts/build.sh) or pass --build DIR")
        kd = os.path.join(self.logdir, "keys")
        bench_wan.keygen(b, kd, ("relay", "head", "tail", *self.names))
        with open(f"{kd}/allow.txt", "w") as f:
            for k, role in (("head", "head head"), ("tail", "stage tail"),
                            *((c, "client") for c in self.names)):
                f.write(open(f"{kd}/{k}.pub").read().strip() + " " + role + "\n")
        rk = ["--relay-key", f"{kd}/relay.pub"]
        self.sec = {c: ["--key", f"{kd}/{c}.key", *rk, "--access-key", f"{kd}/access.key"]
                    for c in self.names}
        self.kd = kd
        pr = bench_wan.free_port()
        self.relay = f"tcp://127.0.0.1:{pr}"
        self.spawn("relay", [f"{b}/shardwire-relay", "--listen", self.relay, "--key",
                             f"{kd}/relay.key", "--allow", f"{kd}/allow.txt"])
        time.sleep(0.3)
        eps = {}
        for side in ("head", "tail"):
            if self.delay > 0:
                port = bench_wan.free_port()
                self.spawn(f"wanem-{side}", [f"{b}/shardwire-wanem", "--listen",
                                             f"127.0.0.1:{port}", "--connect",
                                             f"127.0.0.1:{pr}", "--delay-ms", str(self.delay)])
                eps[side] = f"tcp://127.0.0.1:{port}"
            else:
                eps[side] = self.relay
        time.sleep(0.3)
        self.client_ep = eps["head"]  # the clients sit in the head's region
        n_layers = bench_wan.gguf_block_count(a.target)
        split = n_layers // 2
        common = ["--threads", "1", "--ctx", str(a.ctx), "--cluster-key", f"{kd}/cluster.key",
                  *rk, *a.node_flags.split()]
        self.spawn("head", [f"{b}/shardwire-node", "--model", a.target, "--layers", f"0:{split}",
                            "--relay", eps["head"], "--name", "head", "--key", f"{kd}/head.key",
                            "--access-key", f"{kd}/access.key", *common])
        self.spawn("tail", [f"{b}/shardwire-node", "--model", a.target, "--layers",
                            f"{split}:end", "--relay", eps["tail"], "--name", "tail", "--key",
                            f"{kd}/tail.key", *common])
        deadline = time.time() + 900
        while time.time() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise SystemExit(f"bench_fair: {name} exited ({p.returncode}); its log: "
                                     f"{self.logdir}/{name}.log")
            st = subprocess.run([f"{b}/shardwire", "status", "--relay", self.relay, "--json",
                                 *self.sec[self.names[0]]], capture_output=True, text=True)
            if '"name":"head"' in st.stdout and '"name":"tail"' in st.stdout:
                return
            time.sleep(1)
        raise SystemExit("bench_fair: the nodes did not join the relay within 900 s")

    def run(self, who, prompt, n, timeout_s=None):
        """One greedy request of client `who`, plain decoding: its JSON result."""
        argv = [f"{self.bin}/shardwire", "run", "--greedy", "--draft", "none", "--relay",
                self.client_ep, "-p", prompt, "-n", str(n), "--json", "--timeout-s",
                str(int(timeout_s or self.args.timeout_s)), *self.sec[who]]
        with self.lock:
            if self.stopped:
                raise RuntimeError("the cluster was stopped")
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.clients.add(p)
        try:
            out, err = p.communicate()
        finally:
            with self.lock:
                self.clients.discard(p)
        if p.returncode != 0:
            raise RuntimeError(f"shardwire run failed: {err.strip()[-300:]}")
        return json.loads(out.strip().splitlines()[-1])

    def run_capped(self, who, prompt, n, cap_s):
        """run() with a deadline of cap_s: a request that gets no answer by then counts as
        cap_s (ttft_ms and timing.total_ms), marked "capped" (a lower bound)."""
        t0 = time.time()
        try:
            return self.run(who, prompt, n, cap_s)
        except RuntimeError:
            if time.time() - t0 < cap_s - 1:
                raise
            return {"ttft_ms": cap_s * 1e3, "timing": {"total_ms": cap_s * 1e3}, "capped": 1}

    def background(self, who, prompt, n):
        """Starts run(who, prompt, n) on a thread; returns (thread, results list)."""
        res = []

        def go():
            try:
                res.append(self.run(who, prompt, n))
            except RuntimeError as e:
                res.append({"error": str(e)})
        t = threading.Thread(target=go, daemon=True)
        t.start()
        return t, res


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def capped(rs):
    """How many of results rs hit --cap-s (their times are lower bounds)."""
    return sum(1 for r in rs if r.get("capped"))


def part_short(args, logdir):
    cl = Cluster(args, logdir, ["alice", "bob"])
    try:
        cl.start()
        cl.run("alice", "Hello", 2)
        alone = [cl.run("alice", SHORT, 4)["ttft_ms"] for _ in range(args.reps)]
        prompt = long_prompt(1, args.long_words)
        long_alone = cl.run("bob", prompt, 1)
        t, res = cl.background("bob", long_prompt(2, args.long_words), 1)
        time.sleep(1.0)
        during, rs = [], []
        while t.is_alive():  # every short request sent while the long prompt runs
            r = cl.run_capped("alice", SHORT, 4, args.cap_s)
            during.append(r["ttft_ms"])
            rs.append(r)
        t.join()
        if not res or "error" in res[0]:
            raise SystemExit(f"bench_fair: the long prompt failed: {res}")
        return {"alone_ms": med(alone), "during_ms": med(during), "n_during": len(during),
                "capped": capped(rs),
                "ratio": med(during) / med(alone), "long_tokens": long_alone["n_prompt"],
                "long_ttft_s": long_alone["ttft_ms"] / 1e3,
                "long_during_ttft_s": res[0]["ttft_ms"] / 1e3}
    finally:
        cl.stop()


def part_keys(args, logdir):
    cl = Cluster(args, logdir, ["alice", "mallory"])
    try:
        cl.start()
        cl.run("alice", "Hello", 2)
        alone = [cl.run("alice", ALICE, 64)["timing"]["total_ms"] for _ in range(args.reps)]
        bg = [cl.background("mallory", long_prompt(10 + i, args.long_words), 1) for i in range(6)]
        time.sleep(2.0)
        rs = [cl.run_capped("alice", ALICE, 64, args.cap_s) for _ in range(args.reps)]
        during = [r["timing"]["total_ms"] for r in rs]
        still = sum(t.is_alive() for t, _ in bg)
        cl.stop()  # mallory's requests are not waited for
        return {"alone_ms": med(alone), "during_ms": med(during), "n_during": len(during),
                "ratio": med(during) / med(alone), "still": still, "capped": capped(rs)}
    finally:
        cl.stop()


def part_one_key(args, logdir):
    cl = Cluster(args, logdir, ["client"], delay_ms=args.delay_ms)
    try:
        cl.start()
        cl.run("client", SHORT, 2)
        ones, eights, ttft8 = [], [], 0.0
        for rep in range(args.reps):
            t0 = time.time()
            cl.run("client", SHORT, args.n)
            ones.append(time.time() - t0)
            ths = [cl.background("client", SHORT, args.n) for _ in range(8)]
            t0 = time.time()
            for t, _ in ths:
                t.join()
            eights.append(time.time() - t0)
            for _, r in ths:
                if not r or "error" in r[0]:
                    raise SystemExit(f"bench_fair: a request failed: {r}")
                ttft8 = max(ttft8, r[0]["ttft_ms"])
        # each `shardwire run` joins the relay before it sends: the same for both, so the
        # wall times compare (the one-request time is the fair denominator)
        t1, t8 = med(ones), med(eights)
        return {"one_s": t1, "eight_s": t8, "ratio": 8 * t1 / t8, "ttft8_ms": ttft8}
    finally:
        cl.stop()


def part_gateway(args, logdir):
    cl = Cluster(args, logdir, ["gateway"])
    try:
        cl.start()
        keys = ["k1-0123456789abcdef0123", "k2-fedcba9876543210fedc"]
        kf = os.path.join(cl.kd, "api.keys")
        with open(kf, "w") as f:
            f.write("\n".join(keys) + "\n")
        os.chmod(kf, 0o600)
        port = bench_wan.free_port()
        cl.spawn("serve", [f"{cl.bin}/shardwire", "serve", "--relay", cl.relay,
                           *cl.sec["gateway"], "--listen", f"127.0.0.1:{port}",
                           "--api-key-file", kf])
        model = os.path.basename(args.target).removesuffix(".gguf")
        url = f"http://127.0.0.1:{port}/v1/completions"

        def post(key, prompt, n, cap_s=1800):
            body = json.dumps({"model": model, "prompt": prompt, "max_tokens": n,
                               "temperature": 0})
            t0 = time.time()
            r = subprocess.run(["curl", "-s", "--max-time", str(int(cap_s)), "-H",
                                f"Authorization: Bearer {key}", "-H",
                                "Content-Type: application/json", "--data-binary", body, url],
                               capture_output=True, text=True)
            if '"text"' not in r.stdout and time.time() - t0 >= cap_s - 1 and cap_s < 1800:
                return -float(cap_s)  # no answer within the cap: a lower bound
            if '"text"' not in r.stdout:
                raise RuntimeError(f"completion failed: {r.stdout[:200]} {r.stderr[:200]}")
            return time.time() - t0
        for _ in range(60):
            try:
                post(keys[0], "Hello", 2)
                break
            except RuntimeError:
                time.sleep(1)
        alone = [post(keys[0], ALICE, 64) for _ in range(args.reps)]
        flood_prompt = " ".join(f"river{(i * 37) % 1000} stone" for i in range(160))
        stop = threading.Event()

        def flood():
            while not stop.is_set():
                try:
                    post(keys[1], flood_prompt, 16)
                except RuntimeError:
                    time.sleep(0.1)
        ths = [threading.Thread(target=flood, daemon=True) for _ in range(4)]
        for t in ths:
            t.start()
        time.sleep(2.0)
        during = [post(keys[0], ALICE, 64, args.cap_s) for _ in range(args.reps)]
        stop.set()
        cl.stop()
        n_capped = sum(1 for d in during if d < 0)
        during = [abs(d) for d in during]
        return {"alone_ms": med(alone) * 1e3, "during_ms": med(during) * 1e3,
                "ratio": med(during) / med(alone), "capped": n_capped}
    finally:
        cl.stop()


PARTS = {"short": part_short, "keys": part_keys, "one-key": part_one_key,
         "gateway": part_gateway}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=os.path.join(bench_wan.MODELS,
                                                     "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--parts", default=",".join(PARTS), help=", ".join(PARTS))
    ap.add_argument("--reps", type=int, default=5, help="requests per median (default 5)")
    ap.add_argument("--n", type=int, default=32, help="tokens per request, one-key (default 32)")
    ap.add_argument("--long-words", type=int, default=700,
                    help="words of a long prompt (default 700: about 2,000 tokens)")
    ap.add_argument("--delay-ms", type=float, default=43,
                    help="one-way delay per link in one-key (default 43: 172 ms a round trip)")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--node-flags", default="", help="more flags for both nodes, one string")
    ap.add_argument("--build", default="build")
    ap.add_argument("--cap-s", type=float, default=300,
                    help="a request measured against contention that has no answer after this "
                         "long counts as this long, shown as '>=' (default 300)")
    ap.add_argument("--timeout-s", type=float, default=1800,
                    help="each request's deadline (default 1800; the long prompt of a 14B "
                    "shape among short requests takes longer on 2 cores)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json-out", help="write the result file here: commit, machine, date, "
                    "command, load (bench_wan.run_info), the settings and each part's result "
                    "(scripts/docs/render_bench.py renders its table)")
    ap.add_argument("--note", default="", help="recorded in the result file, e.g. 'shared machine'")
    ap.add_argument("--keep-logs", metavar="DIR", help="keep the processes' logs in DIR")
    info = bench_wan.run_info()  # commit, machine, date, command, load at the start
    args = ap.parse_args()
    parts = args.parts.split(",")
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise SystemExit(f"bench_fair: unknown part '{bad[0]}' (--parts takes "
                         f"{', '.join(PARTS)}, comma-separated)")
    if not os.path.exists(args.target):
        raise SystemExit(f"bench_fair: {args.target} is missing (bash scripts/fetch_model.sh)")
    if "gateway" in parts and not shutil.which("curl"):
        raise SystemExit("bench_fair: the gateway part needs curl")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    root = args.keep_logs or tempfile.mkdtemp(prefix="bench_fair.")
    os.makedirs(root, exist_ok=True)
    print(f"# target {os.path.basename(args.target)}, head and tail one thread each, "
          f"{args.reps} requests per median, node flags '{args.node_flags}'", file=sys.stderr)
    raw = {}
    try:
        for p in parts:
            d = os.path.join(root, p)
            os.makedirs(d, exist_ok=True)
            r = PARTS[p](args, d)
            raw[p] = r
            print(f"  {p}: {r}", file=sys.stderr)
        if args.json_out:
            info.update({"note": args.note, "load_end": os.getloadavg(), "target": args.target,
                         "reps": args.reps, "n": args.n, "long_words": args.long_words,
                         "delay_ms": args.delay_ms, "ctx": args.ctx,
                         "node_flags": args.node_flags, "cap_s": args.cap_s, "parts": parts,
                         "raw": raw})
            bench_wan.write_result(args.json_out, info, "bench_fair")
    finally:
        if not args.keep_logs:
            shutil.rmtree(root, ignore_errors=True)
    bench_wan.print_table(*table(raw, args.reps, args.n, args.delay_ms), args.markdown)


def table(raw, reps, n, delay_ms):
    """The table's header and rows from each part's result (raw[part]) and the settings."""
    rows = []
    for p, r in raw.items():
        ge = ">= " if r.get("capped", 0) * 2 > r.get("n_during", reps) else ""
        if p == "short":
            rows.append(["short request, TTFT", "another client's "
                         f"{r['long_tokens']}-token prompt prefilled",
                         f"{r['alone_ms']:.0f} ms", f"{ge}{r['during_ms']:.0f} ms "
                         f"(n={r['n_during']})", f"{ge}{r['ratio']:.2f}x"])
            rows.append(["long prompt alone, TTFT", f"{r['long_tokens']} tokens",
                         f"{r['long_ttft_s']:.1f} s", f"{r['long_during_ttft_s']:.1f} s "
                         "(with the short ones)", ""])
        elif p == "keys":
            rows.append(["alice, 64 tokens", "mallory: 6 prompts of ~2,000 tokens",
                         f"{r['alone_ms']:.0f} ms", f"{ge}{r['during_ms']:.0f} ms",
                         f"{ge}{r['ratio']:.2f}x"])
        elif p == "one-key":
            rows.append([f"one key, 8 requests of {n} tokens",
                         f"{4 * delay_ms:g} ms round trip",
                         f"{r['one_s']:.2f} s (1 request)",
                         f"{r['eight_s']:.2f} s (8; first token by {r['ttft8_ms']:.0f} ms)",
                         f"{r['ratio']:.2f}x tok/s"])
        elif p == "gateway":
            rows.append(["API key 1, 64 tokens", "API key 2: 4 x 450-token prompts",
                         f"{r['alone_ms']:.0f} ms", f"{ge}{r['during_ms']:.0f} ms",
                         f"{ge}{r['ratio']:.2f}x"])
    return ["measure", "against", "alone", "during", "ratio"], rows


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # every part stops its processes on the way out
        sys.exit("bench_fair: interrupted; every process it started was stopped")
