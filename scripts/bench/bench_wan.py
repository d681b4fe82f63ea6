#!/usr/bin/env python3
"""bench_wan.py - speculative decoding over an emulated WAN, from one command.

Starts a relay, two shardwire-wanem proxies (one per node<->relay link, each
--delay-ms one way: 4 x 21.5 ms = 86 ms for head -> relay -> tail -> relay ->
head), a head node (layers [0, split) + the draft model) and a tail node
(layers [split, end)), then runs `shardwire run --json` (the client sits in
the head's region: it dials the head's proxy) for each configuration:

  none      no speculation
  ngram     prompt lookup, adaptive K
  k4 k8 k16 draft model, fixed K (no drafting ahead)
  auto      draft model, adaptive K (no drafting ahead)
  ahead     draft model, adaptive K, drafting ahead while rounds travel
  tree      draft model, adaptive K and token trees (<= --tree drafts)
  both      trees and drafting ahead
  ahead8 tree8 both8   the same with K fixed at 8

and prints one table (markdown with --markdown): decode tok/s, time to first
token, tokens per round trip (n_gen / rounds, the brief's measure), acceptance
rate, and the mean time per decode round split into drafting, head compute,
network (everything the head waited for that was not compute) and tail
compute, as the head measured them (the "timing" object of the JSON), without
the prefill round (a 1-token request per prompt measures it; it is subtracted).
"round ms" is the mean wall time of a decode round seen by the head
(decode time / rounds), which the four parts add up to. "ahead ms" is the
drafting done while rounds travelled (off the critical path, not part of the
round), "hit" the share of rounds drafted ahead whose guess held, "rows" the
drafts sent per round (tree rounds carry more drafts than they are deep).

  python3 scripts/bench/bench_wan.py --reps 2                          # Qwen2.5-Coder 1.5B + 0.5B
  python3 scripts/bench/bench_wan.py --delay-ms 43 --configs none,auto,ahead,tree,both  # 172 ms
  python3 scripts/bench/bench_wan.py --target models/SmolLM2-135M-Instruct.Q4_1.gguf \\
          --draft models/SmolLM2-135M-Instruct.Q4_1.gguf        # the ceiling (self-drafting)

Every process it starts is stopped at the end, also on failure or Ctrl-C.
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The model cache scripts/fetch_model.sh fills: $SW_MODELS_DIR, else models/.
MODELS = os.environ.get("SW_MODELS_DIR") or os.path.join(HERE, "models")
# Short raw code prompts (sent without a chat template by default): the
# prefill stays small next to the decode rounds that are measured.
DEFAULT_PROMPTS = [
    "def is_palindrome(s: str) -> bool:\n",
    "/* Reverse a singly linked list in place. */\nstruct node *reverse(struct node *head)\n{\n",
]
OFF, ON = ["--draft-ahead", "off"], ["--draft-ahead", "on"]
CONFIGS = {
    "none": ("no speculation", ["--draft", "none"]),
    "ngram": ("n-gram, adaptive K", ["--draft", "ngram", *OFF]),
    "k4": ("draft model, K=4", ["--draft", "model", "--draft-k", "4", *OFF]),
    "k8": ("draft model, K=8", ["--draft", "model", "--draft-k", "8", *OFF]),
    "k16": ("draft model, K=16", ["--draft", "model", "--draft-k", "16", *OFF]),
    "auto": ("draft model, adaptive K", ["--draft", "model", *OFF]),
    "ahead": ("adaptive K, drafting ahead", ["--draft", "model", *ON]),
    "tree": ("adaptive K, trees", ["--draft", "model", "--draft-tree", "TREE", *OFF]),
    "both": ("adaptive K, trees + ahead", ["--draft", "model", "--draft-tree", "TREE", *ON]),
    "ahead8": ("K=8, drafting ahead", ["--draft", "model", "--draft-k", "8", *ON]),
    "tree8": ("K=8, trees", ["--draft", "model", "--draft-k", "8", "--draft-tree", "TREE", *OFF]),
    "both8": ("K=8, trees + ahead",
              ["--draft", "model", "--draft-k", "8", "--draft-tree", "TREE", *ON]),
}


def gguf_block_count(path):
    """Reads <arch>.block_count from a GGUF header (v2/v3)."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise SystemExit(f"bench_wan: {path} is not a GGUF file")
        (version,) = struct.unpack("<I", f.read(4))
        _n_tensors, n_kv = struct.unpack("<QQ", f.read(16))
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

        def rstr():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n)

        def rval(t):
            if t == 8:
                return rstr()
            if t == 9:
                (et,) = struct.unpack("<I", f.read(4))
                (n,) = struct.unpack("<Q", f.read(8))
                if et in sizes:
                    f.seek(n * sizes[et], 1)
                else:
                    for _ in range(n):
                        rval(et)
                return None
            raw = f.read(sizes[t])
            fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                   10: "<Q", 11: "<q", 12: "<d"}[t]
            return struct.unpack(fmt, raw)[0]

        arch, blocks = None, {}
        for _ in range(n_kv):
            key = rstr().decode()
            (t,) = struct.unpack("<I", f.read(4))
            v = rval(t)
            if key == "general.architecture":
                arch = v.decode()
            if key.endswith(".block_count"):
                blocks[key] = v
        return blocks.get(f"{arch}.block_count")


def run_info():
    """What a result file records of the run: the source commit (and whether the tree had
    changes), the machine (CPU model, CPUs), the UTC date, the command and the load average."""
    def git(*args):
        return subprocess.run(["git", "-C", HERE, *args], capture_output=True,
                              text=True).stdout.strip()
    model = os.uname().machine
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         model)
    except OSError:
        pass
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "--short", "HEAD") + ("+changes" if dirty else ""),
            "machine": f"{model}, {os.cpu_count()} CPUs",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": shlex.join([os.path.basename(sys.argv[0]), *sys.argv[1:]]),
            "loadavg": os.getloadavg()}


def write_result(path, info, who):
    """Writes a result file (JSON, its folder made) and says where on stderr."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(info, f, indent=1)
    print(f"{who}: result file {path}", file=sys.stderr)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(b, kd, names):
    """`shardwire keygen` (programs in b) into folder kd: NAME.key / NAME.pub for each of
    names, cluster.key and access.key."""
    os.makedirs(kd, mode=0o700, exist_ok=True)
    for k in names:
        subprocess.run([f"{b}/shardwire", "keygen", "--out", f"{kd}/{k}"], check=True,
                       capture_output=True)
    for kind in ("cluster", "access"):
        subprocess.run([f"{b}/shardwire", "keygen", f"--{kind}-key", f"{kd}/{kind}.key"],
                       check=True, capture_output=True)


class Cluster:
    def __init__(self, args, logdir):
        self.args, self.logdir, self.procs = args, logdir, []
        # clients in flight (run() may be called from several threads): stop()
        # ends them too, so that Ctrl-C never waits for a client retrying a
        # relay that is gone
        self.clients, self.lock, self.stopped = set(), threading.Lock(), False

    def spawn(self, name, argv, cpus=None):
        """cpus: the CPU set the process may run on (--pin), or None for all."""
        log = open(os.path.join(self.logdir, name + ".log"), "w")
        pre = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pre)
        self.procs.append((name, p))
        return p

    def stop(self):
        with self.lock:
            self.stopped = True
            clients = list(self.clients)
        for p in clients:
            if p.poll() is None:
                p.kill()
        for _name, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for _name, p in reversed(self.procs):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def start(self):
        a, b = self.args, os.path.join(HERE, self.args.build, "bin")
        missing = [p for p in ("shardwire", "shardwire-relay", "shardwire-node", "shardwire-wanem")
                   if not os.access(os.path.join(b, p), os.X_OK)]
        if missing:
            raise SystemExit(f"{os.path.basename(sys.argv[0])}: no {missing[0]} in {b}: build "
                             f"first (bash scripts/build.sh) or pass --build DIR, the folder "
                             f"whose bin/ holds the programs")
        pr, pa, pb = free_port(), free_port(), free_port()
        self.relay = f"tcp://127.0.0.1:{pr}"
        # Real keys, as deployed: CURVE to the relay and sealed payloads.
        kd = os.path.join(self.logdir, "keys")
        os.makedirs(kd, mode=0o700, exist_ok=True)
        for k in ("relay", "head", "tail", "client"):
            subprocess.run([f"{b}/shardwire", "keygen", "--out", f"{kd}/{k}"], check=True,
                           capture_output=True)
        for kind in ("cluster", "access"):  # the nodes' key, the clients' and head's key
            subprocess.run([f"{b}/shardwire", "keygen", f"--{kind}-key", f"{kd}/{kind}.key"],
                           check=True, capture_output=True)
        # each node key bound to its name and role, as `shardwire cluster init` writes them
        role = {"head": "head bench-head", "tail": "stage bench-tail", "client": "client"}
        with open(f"{kd}/allow.txt", "w") as f:
            for k in ("head", "tail", "client"):
                f.write(open(f"{kd}/{k}.pub").read().strip() + " " + role[k] + "\n")
        ck, ak = ["--cluster-key", f"{kd}/cluster.key"], ["--access-key", f"{kd}/access.key"]
        keys = {"head": ck + ak, "tail": ck, "client": ak}
        self.sec = {k: ["--key", f"{kd}/{k}.key", "--relay-key", f"{kd}/relay.pub", *keys[k]]
                    for k in ("head", "tail", "client")}
        self.spawn("relay", [f"{b}/shardwire-relay", "--listen", self.relay, "--key",
                             f"{kd}/relay.key", "--allow", f"{kd}/allow.txt"])
        time.sleep(0.3)
        for name, port in (("wanem-head", pa), ("wanem-tail", pb)):
            self.spawn(name, [f"{b}/shardwire-wanem", "--listen", f"127.0.0.1:{port}",
                              "--connect", f"127.0.0.1:{pr}", "--delay-ms", str(a.delay_ms)])
        time.sleep(0.3)
        self.head_ep = f"tcp://127.0.0.1:{pa}"
        n_layers = gguf_block_count(a.target)
        split = a.split or n_layers // 2
        common = ["--threads", str(a.threads), "--dtype", a.dtype, "--ctx", "1024",
                  *getattr(a, "node_extra", [])]
        head = [f"{b}/shardwire-node", "--model", a.target, "--layers", f"0:{split}",
                "--relay", self.head_ep, "--name", "bench-head", *common, *self.sec["head"],
                "--draft-k-max", str(a.k_max)]
        if a.draft:
            head += ["--draft-model", a.draft, "--draft-threads", str(a.draft_threads)]
        pin = getattr(a, "pin_cpus", None)  # (head CPUs, tail CPUs) with --pin
        self.spawn("head", head, pin[0] if pin else None)
        self.spawn("tail", [f"{b}/shardwire-node", "--model", a.target, "--layers",
                            f"{split}:end", "--relay", f"tcp://127.0.0.1:{pb}",
                            "--name", "bench-tail", *common, *self.sec["tail"]],
                   pin[1] if pin else None)
        deadline = time.time() + 600
        while time.time() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    path = f"{self.logdir}/{name}.log"
                    with open(path, errors="replace") as f:
                        last = ([ln.strip() for ln in f if ln.strip()] or [""])[-1]
                    raise SystemExit(f"bench_wan: {name} exited ({p.returncode}): {last}\n"
                                     f"  (whole log: {path})")
            st = subprocess.run([f"{b}/shardwire", "status", "--relay", self.relay, "--json",
                                 *self.sec["client"]],
                                capture_output=True, text=True)
            if '"name":"bench-head"' in st.stdout and '"name":"bench-tail"' in st.stdout:
                return n_layers, split
            time.sleep(1)
        raise SystemExit("bench_wan: the nodes did not join the relay within 600 s")

    def run(self, prompt, flags, n=None):
        b = os.path.join(HERE, self.args.build, "bin")
        argv = [f"{b}/shardwire", "run", "--greedy", "--relay", self.head_ep, "-p", prompt, "-n",
                str(n or self.args.n), "--json", "--timeout-s", "900", *self.sec["client"], *flags]
        if self.args.chat:
            argv.append("--chat")
        with self.lock:
            if self.stopped:
                raise SystemExit("bench_wan: the cluster was stopped")
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.clients.add(p)
        try:
            out, err = p.communicate()
        except BaseException:  # interrupted here (Ctrl-C, SIGTERM): the client goes too
            p.kill()
            p.wait()
            raise
        finally:
            with self.lock:
                self.clients.discard(p)
        if p.returncode != 0:
            raise SystemExit(f"bench_wan: shardwire run failed: {err.strip()}")
        return json.loads(out.strip().splitlines()[-1])


def time_split(r):
    """(head compute, network, tail compute) totals of one run, ms."""
    t = r["timing"]
    return t["head_compute_ms"], t["network_ms"], sum(t["stage_compute_ms"].values())


def summarize(runs, prefill):
    """Sums over the prompts of one configuration. prefill[i] is the split of
    a 1-token request on prompt i: the prefill round, subtracted so that the
    split is per decode round."""
    n_gen = sum(r["n_gen"] for r in runs)
    rounds = sum(r["rounds"] for r in runs)
    drafted = sum(r["drafted"] for r in runs)
    accepted = sum(r["accepted"] for r in runs)
    decode_ms = sum((r["n_gen"] - 1) / r["decode_tok_s"] * 1e3 for r in runs
                    if r["decode_tok_s"] > 0)
    tm = [r["timing"] for r in runs]
    dec = [max(0.0, sum(time_split(r)[j] - prefill[i][j] for i, r in enumerate(runs))) for j in
           range(3)]
    return {
        "tok_s": (n_gen - len(runs)) / decode_ms * 1e3 if decode_ms else 0,
        "ttft": sum(r["ttft_ms"] for r in runs) / len(runs),
        "tpr": n_gen / rounds if rounds else 0,
        "acc": accepted / drafted if drafted else None,
        "k": drafted / rounds if rounds else 0,
        "draft": sum(t["draft_ms"] for t in tm) / max(rounds, 1),
        "ahead": sum(t.get("draft_ahead_ms", 0) for t in tm) / max(rounds, 1),
        "hit": (sum(r.get("ahead_hits", 0) for r in runs) /
                max(1, sum(r.get("ahead_hits", 0) + r.get("ahead_misses", 0) for r in runs))
                if any(r.get("ahead_hits", 0) + r.get("ahead_misses", 0) for r in runs) else None),
        "head": dec[0] / max(rounds, 1),
        "net": dec[1] / max(rounds, 1),
        "tail": dec[2] / max(rounds, 1),
        "round": sum((r["n_gen"] - 1) / r["decode_tok_s"] * 1e3 for r in runs
                     if r["decode_tok_s"] > 0) / max(rounds, 1),
        "tokens": [r["tokens"] for r in runs],
    }


def print_table(hdr, rows, markdown):
    """One table on stdout: markdown, or columns aligned to the right."""
    if markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "|".join("---" for _ in hdr) + "|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
    print("  ".join(h.rjust(w[i]) for i, h in enumerate(hdr)))
    for row in rows:
        print("  ".join(c.rjust(w[i]) for i, c in enumerate(row)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=os.path.join(MODELS,
                                                     "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"))
    ap.add_argument("--draft", default=os.path.join(MODELS,
                                                    "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"))
    ap.add_argument("--n", type=int, default=48, help="tokens per request (default 48)")
    ap.add_argument("--prompt", action="append", help="prompt (repeatable; default: two coding "
                    "prompts)")
    ap.add_argument("--delay-ms", type=float, default=21.5, help="one-way delay per link")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads per node (default 2; with --pin the CPUs of a node's half)")
    ap.add_argument("--draft-threads", type=int, default=0,
                    help="threads of the head's draft model (default as --threads)")
    ap.add_argument("--pin", action="store_true",
                    help="the head (with its draft model) on the first half of the CPUs, the "
                    "tail on the other half, as if each node had its own machine (the relay "
                    "and proxies run anywhere)")
    ap.add_argument("--k-max", type=int, default=16, help="adaptive K ceiling (default 16)")
    ap.add_argument("--split", type=int, default=0, help="first layer of the tail (default: half)")
    ap.add_argument("--dtype", default="f32", help="hidden states on the wire (default f32, as the nodes)")
    ap.add_argument("--configs", default="none,ngram,k4,k8,k16,auto,ahead,tree,both")
    ap.add_argument("--tree", type=int, default=16, help="most drafts of a tree (default 16)")
    ap.add_argument("--build", default="build", help="build folder (default build)")
    ap.add_argument("--chat", action="store_true", help="wrap the prompts in the model's chat "
                    "template (default: raw)")
    ap.add_argument("--reps", type=int, default=1, help="passes over the configurations "
                    "(interleaved, summed; default 1)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json-out", help="write the result file here: commit, machine, date, "
                    "command, load (run_info), the settings and every raw result "
                    "(scripts/docs/render_bench.py renders its table)")
    ap.add_argument("--note", default="", help="recorded in the result file, e.g. 'shared machine'")
    info = run_info()  # commit, machine, date, command, load at the start
    args = ap.parse_args()
    unknown = [k for k in args.configs.split(",") if k not in CONFIGS]
    if unknown:
        raise SystemExit(f"bench_wan: unknown configuration {', '.join(unknown)} (known: "
                         f"{', '.join(CONFIGS)})")
    args.pin_cpus = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise SystemExit("bench_wan: --pin needs at least 2 CPUs (this process may use "
                             f"{len(cpus)})")
        half = len(cpus) // 2
        args.pin_cpus = (set(cpus[:half]), set(cpus[half:]))
    if args.threads <= 0:
        args.threads = len(args.pin_cpus[0]) if args.pin else 2
    if args.draft_threads <= 0:
        args.draft_threads = args.threads
    prompts = args.prompt or DEFAULT_PROMPTS
    for path in (args.target, args.draft):
        if path and not os.path.exists(path):
            raise SystemExit(f"bench_wan: {path} is missing (bash scripts/fetch_model.sh ...)")
    logdir = tempfile.mkdtemp(prefix="bench_wan.")
    cl = Cluster(args, logdir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    results, raw = {}, {}
    keys = args.configs.split(",")
    try:
        n_layers, split = cl.start()
        print(f"# target {os.path.basename(args.target)} ({n_layers} layers, head [0,{split}) "
              f"tail [{split},{n_layers})), draft {os.path.basename(args.draft or '-')}, "
              f"{args.delay_ms} ms one way per link ({4 * args.delay_ms:g} ms per round trip), "
              f"{args.threads} thread(s) per node, {args.n} tokens x {len(prompts)} prompts"
              + (f", head on CPUs {sorted(args.pin_cpus[0])}, tail on {sorted(args.pin_cpus[1])}"
                 if args.pin else ""),
              file=sys.stderr)
        # The prefill round of each prompt alone, once to warm up (page cache,
        # first touch), once measured: its time split is subtracted from the
        # runs' totals.
        for p in prompts:
            cl.run(p, ["--draft", "none"], n=1)
        prefill_raw = [cl.run(p, ["--draft", "none"], n=1) for p in prompts]
        prefill = [time_split(x) for x in prefill_raw]
        for rep in range(args.reps):
            for key in keys:
                label, flags = CONFIGS[key]
                flags = [str(args.tree) if f == "TREE" else f for f in flags]
                for p in prompts:
                    t0 = time.time()
                    raw.setdefault(key, []).append(cl.run(p, flags))
                    print(f"  pass {rep + 1}, {label}: {raw[key][-1]['n_gen']} tokens in "
                          f"{time.time() - t0:.1f} s", file=sys.stderr)
        for key in keys:
            results[key] = summarize(raw[key], prefill * args.reps)
    finally:
        cl.stop()
    for key, r in results.items():
        if "none" in results and r["tokens"] != results["none"]["tokens"] and key != "none":
            print(f"warning: {key}: tokens differ from the run without speculation",
                  file=sys.stderr)
    hdr, rows = table(results)
    print_table(hdr, rows, args.markdown)
    if args.json_out:
        info.update({"note": args.note, "load_end": os.getloadavg(), "target": args.target,
                     "draft": args.draft, "n": args.n, "prompts": prompts,
                     "delay_ms": args.delay_ms, "threads": args.threads,
                     "draft_threads": args.draft_threads, "pin": args.pin, "reps": args.reps,
                     "configs": keys, "prefill": prefill_raw, "raw": raw})
        write_result(args.json_out, info, "bench_wan")
    shutil.rmtree(logdir, ignore_errors=True)


def table(results):
    """The table's header and rows from summarize()'s result per configuration ("none",
    when there, is the speed-up's base)."""
    base = results.get("none")
    hdr = ["config", "tok/s", "speed-up", "TTFT ms", "tok/round", "accept", "rows",
           "round ms", "draft ms", "head ms", "net ms", "tail ms", "ahead ms", "hit"]
    rows = []
    for key, r in results.items():
        rows.append([CONFIGS[key][0], f"{r['tok_s']:.2f}",
                     f"{r['tok_s'] / base['tok_s']:.2f}x" if base and base["tok_s"] else "-",
                     f"{r['ttft']:.0f}", f"{r['tpr']:.2f}",
                     "-" if r["acc"] is None else f"{r['acc']:.2f}", f"{r['k']:.1f}",
                     f"{r['round']:.0f}", f"{r['draft']:.0f}", f"{r['head']:.0f}", f"{r['net']:.0f}",
                     f"{r['tail']:.0f}", f"{r['ahead']:.0f}",
                     "-" if r["hit"] is None else f"{r['hit']:.2f}"])
    return hdr, rows


def from_file(r):
    """summarize() per configuration from a result file's raw runs (scripts/docs/render_bench.py)."""
    prefill = [time_split(x) for x in r["prefill"]]
    return {key: summarize(r["raw"][key], prefill * r["reps"]) for key in r["configs"]}

if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the cluster was stopped on the way out
        sys.exit("bench_wan: interrupted; the relay, proxies and nodes were stopped")
