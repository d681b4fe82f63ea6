#!/usr/bin/env python3
"""bench_big.py - issue 33's benchmarks on one big shape, in one command: cold and
warm load and resident memory per node, decode against llama.cpp's RPC backend
over 172 ms, time to first token of ~2,000 tokens at 50 Mbit/s, the short-request
ratio.

The model is a synthetic file of a real shape (`shardwire-mkmodel --synth
qwen2.5-7b`, made once into models/synth/ by tests/big or by hand). Parts:

  load     the layers split evenly over --stages nodes (one thread each,
           loopback, keys): the file is dropped from the page cache
           (posix_fadvise DONTNEED), the nodes started, and the time until all
           have joined the relay is the cold load; the same again with the file
           cached is the warm load. Each node's resident memory (VmRSS) after
           joining and after one 16-token request, against its share of the
           file (its layers' tensors, the embedding on the first stage, the
           output on the last).
  decode   scripts/bench/bench_peer.py at 172 ms round trips: shardwire plain
           and speculative (token trees; the drafter: --draft, by default the
           0.5B Qwen when its tokens are the target's, else a synthetic 0.5B
           with the target's tokenizer, made once next to it) against
           llama.cpp's RPC backend plain and speculative on the same file,
           OpenMP waiting passively (both share the cores).
  ttft     scripts/bench/bench_ttft.py: ~2,000 tokens through 2 and 3 stages,
           20 ms and 50 Mbit/s per link, against max(compute, transfer).
  fair     scripts/bench/bench_fair.py --parts short: a short request's time to
           first token during another client's ~2,000-token prefill against
           alone.

Random weights: the drafter's proposals are rejected about as often on both
systems, so the speculative rows compare the systems on the same file, not the
gain a trained pair would see.

    python3 scripts/bench/bench_big.py --model models/synth/qwen2.5-7b.gguf --stages 2
    python3 scripts/bench/bench_big.py --model models/synth/qwen2.5-14b.gguf --stages 3 \\
            --parts load,ttft

The result file (--json-out, default build/bench/big-<UTC time>.json) records the
commit, the machine, the date, the command, the load average and every part's
numbers, with the paths of the result files the other scripts wrote. Every
process it starts is stopped at the end, also on failure or Ctrl-C.
"""
import argparse
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_wan import HERE, free_port, run_info  # noqa: E402

GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q",
                11: "q", 12: "d"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def gguf_read(path, keep=()):
    """The metadata values named in keep ({key: value}; arrays as lists) and the tensor table
    [(offset, name)] of a GGUF file, and where its data starts."""
    with open(path, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def val(t):
            if t == 8:
                return f.read(rd("Q")).decode("utf-8", "replace")
            if t == 9:
                et, n = rd("I"), rd("Q")
                return [val(et) for _ in range(n)]
            return rd(GGUF_SCALARS[t])
        if f.read(4) != b"GGUF":
            raise SystemExit(f"bench_big: {path} is not a GGUF file")
        rd("I")
        n_t, n_kv = rd("Q"), rd("Q")
        kv = {}
        for _ in range(n_kv):
            k, v = val(8), val(rd("I"))
            if k in keep:
                kv[k] = v
        infos = []
        for _ in range(n_t):
            name = val(8)
            for _ in range(rd("I")):
                rd("Q")
            rd("I")
            infos.append((rd("Q"), name))
        align = kv.get("general.alignment", 32)
        data = (f.tell() + align - 1) // align * align
    return kv, infos, data


def gguf_tensors(path):
    """{name: bytes} of a GGUF file's tensors (each tensor's bytes up to the next one's
    offset, the last up to the end of the file: alignment padding included)."""
    _, infos, data = gguf_read(path, ("general.alignment",))
    end = os.path.getsize(path) - data
    infos.sort()
    return {n: (infos[i + 1][0] if i + 1 < len(infos) else end) - off
            for i, (off, n) in enumerate(infos)}


def gguf_tokens(path):
    """The tokenizer.ggml.tokens list of a GGUF file ([] when it has none)."""
    return gguf_read(path, ("tokenizer.ggml.tokens",))[0].get("tokenizer.ggml.tokens", [])


def draft_for(a, bindir):
    """The drafter of the decode part. With --draft auto: the real Qwen2.5-Coder 0.5B when
    its vocabulary is the target's, else (a synthetic target made with another tokenizer
    file, e.g. ggml-vocab-qwen2.gguf) a synthetic qwen2.5-0.5b with the target's own
    tokenizer, made once next to the target: llama.cpp's speculative refuses a drafter
    whose tokens differ from the target's."""
    if a.draft != "auto":
        return a.draft
    real = os.path.join(HERE, "models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf")
    if os.path.isfile(real) and gguf_tokens(real) == gguf_tokens(a.model):
        return real
    stem = os.path.splitext(os.path.basename(a.model))[0]
    path = os.path.join(os.path.dirname(os.path.abspath(a.model)),
                        f"qwen2.5-0.5b-draft-for-{stem}.gguf")
    if not os.path.isfile(path):
        log(f"bench_big: making {path} (a synthetic 0.5B drafter with the target's tokenizer)")
        subprocess.run([f"{bindir}/shardwire-mkmodel", "--synth", "qwen2.5-0.5b", "--vocab",
                        a.model, "-o", path + ".part"], check=True, stdout=subprocess.DEVNULL)
        os.replace(path + ".part", path)
    return path


def share(tensors, a, b, n_layers):
    """Bytes of the file that layers [a, b) keep: their blocks, the embedding on the first
    stage, the output and final norm on the last (the embedding there too when tied)."""
    total = 0
    for n, size in tensors.items():
        if n.startswith("blk."):
            keep = a <= int(n.split(".")[1]) < b
        elif n == "token_embd.weight":
            keep = a == 0 or (b == n_layers and "output.weight" not in tensors)
        else:
            keep = b == n_layers
        total += size if keep else 0
    return total


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) * 1024
    return -1


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_fraction(path):
    """Share of the file's pages in the page cache (libc mmap + mincore), or -1."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    size, page = os.path.getsize(path), os.sysconf("SC_PAGE_SIZE")
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            return -1
        n = (size + page - 1) // page
        vec = (ctypes.c_ubyte * n)()
        rc = libc.mincore(addr, size, vec)
        libc.munmap(addr, size)
        return -1 if rc else sum(v & 1 for v in vec) / n
    finally:
        os.close(fd)


class Nodes:
    """A keyed relay and n nodes on loopback, layers split evenly, one thread each."""

    def __init__(self, b, model, n, layers, logdir, threads):
        self.b, self.model, self.n, self.layers = b, model, n, layers
        self.logdir, self.threads, self.procs, self.nodes = logdir, threads, [], []

    def spawn(self, name, argv):
        p = subprocess.Popen(argv, stdout=open(os.path.join(self.logdir, name + ".log"), "w"),
                             stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs, self.nodes = [], []

    def keys(self):
        kd = os.path.join(self.logdir, "keys")
        if os.path.exists(kd):
            return kd
        os.makedirs(kd, mode=0o700)
        names = [f"st{i}" for i in range(self.n)]
        jobs = [["--out", f"{kd}/{k}"] for k in ["relay", "client", *names]] + \
            [[f"--{kind}-key", f"{kd}/{kind}.key"] for kind in ("cluster", "access")]
        for job in jobs:
            subprocess.run([f"{self.b}/shardwire", "keygen", *job], check=True,
                           capture_output=True)
        with open(f"{kd}/allow.txt", "w") as f:
            for k, role in [(k, f"node {k}") for k in names] + [("client", "client")]:
                f.write(open(f"{kd}/{k}.pub").read().strip() + f" {role}\n")
        return kd

    def start(self):
        """Starts the relay and the nodes; returns the seconds until every node joined."""
        kd, b = self.keys(), self.b
        self.relay = f"tcp://127.0.0.1:{free_port()}"
        self.spawn("relay", [f"{b}/shardwire-relay", "--listen", self.relay, "--key",
                             f"{kd}/relay.key", "--allow", f"{kd}/allow.txt"])
        self.sec = ["--key", f"{kd}/client.key", "--relay-key", f"{kd}/relay.pub",
                    "--access-key", f"{kd}/access.key"]
        time.sleep(0.3)
        cuts = [self.layers * i // self.n for i in range(self.n + 1)]
        t0 = time.monotonic()
        for i in range(self.n):
            argv = [f"{b}/shardwire-node", "--model", self.model, "--layers",
                    f"{cuts[i]}:{cuts[i + 1]}", "--relay", self.relay, "--name", f"st{i}",
                    "--threads", str(self.threads), "--key", f"{kd}/st{i}.key", "--relay-key",
                    f"{kd}/relay.pub", "--cluster-key", f"{kd}/cluster.key", "--prefix-cache",
                    "off", "--ctx", "4096"]
            if i == 0:
                argv += ["--access-key", f"{kd}/access.key", "--draft", "none"]
            self.nodes.append((f"st{i}", cuts[i], cuts[i + 1], self.spawn(f"st{i}", argv)))
        deadline = t0 + 1800
        while time.monotonic() < deadline:
            st = subprocess.run([f"{b}/shardwire", "status", "--relay", self.relay, "--json",
                                 *self.sec], capture_output=True, text=True)
            if all(f'"name":"{n}"' in st.stdout for n, _, _, _ in self.nodes):
                return time.monotonic() - t0
            if any(p.poll() is not None for p in self.procs):
                raise SystemExit(f"bench_big: a process exited; logs in {self.logdir}")
            time.sleep(0.2)
        raise SystemExit("bench_big: the nodes did not join within 1800 s")

    def run(self, prompt, n):
        out = subprocess.run([f"{self.b}/shardwire", "run", "--greedy", "--relay", self.relay,
                              "-p", prompt, "-n", str(n), "--json", "--timeout-s", "1800",
                              *self.sec], capture_output=True, text=True, timeout=2000)
        if out.returncode != 0:
            raise SystemExit(f"bench_big: run failed: {out.stderr.strip()[-400:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def part_load(a, b, info, result, save):
    tensors = gguf_tensors(a.model)
    L = info["n_layers"]
    logdir = tempfile.mkdtemp(prefix="bench_big.")
    c = Nodes(b, a.model, a.stages, L, logdir, a.threads)
    rows = result.setdefault("load", [])
    try:
        for kind in ("cold", "warm"):
            if kind == "cold":
                drop_cache(a.model)
            before = cached_fraction(a.model)
            row = {"kind": kind, "cached_before": before, "load_start": os.getloadavg()}
            rows.append(row)
            row["join_s"] = c.start()
            row["rss_joined"] = {n: rss(p.pid) for n, _, _, p in c.nodes}
            j = c.run("Write one sentence about rivers.", 16)
            row["rss_after_request"] = {n: rss(p.pid) for n, _, _, p in c.nodes}
            row["share"] = {n: share(tensors, lo, hi, L) for n, lo, hi, _ in c.nodes}
            row["ranges"] = {n: [lo, hi] for n, lo, hi, _ in c.nodes}
            row["tok_s"] = j.get("tokens_per_s")
            row["load_end"] = os.getloadavg()
            save()
            c.stop()
            log(f"{kind} load: all {a.stages} nodes joined in {row['join_s']:.1f} s")
    finally:
        c.stop()
    shutil.rmtree(logdir, ignore_errors=True)


def load_table(load):
    """(header, rows) of the load part: per load kind and node, the time until all joined,
    resident memory after joining and after a request, and the node's share of the file."""
    hdr = ["load", "joined s", "node", "layers", "resident MiB joined / after a request",
           "share MiB"]
    rows = [[r["kind"], f"{r['join_s']:.1f}", n, f"{r['ranges'][n][0]}:{r['ranges'][n][1]}",
             f"{r['rss_joined'][n] / 2**20:.0f} / {r['rss_after_request'][n] / 2**20:.0f}",
             f"{r['share'][n] / 2**20:.0f}"] for r in load for n in r["share"]]
    return hdr, rows


def sub(argv, result, key, save, out_json):
    """Runs another benchmark script, keeps its printed table and its result file's path."""
    log("bench_big: " + shlex.join(argv))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, *argv], capture_output=True, text=True)
    result[key] = {"command": shlex.join([os.path.basename(argv[0]), *argv[1:]]),
                   "rc": p.returncode, "seconds": round(time.monotonic() - t0, 1),
                   "table": p.stdout.strip(), "result_file": out_json,
                   "error": p.stderr.strip()[-600:] if p.returncode else ""}
    if p.returncode == 0 and os.path.isfile(out_json):
        with open(out_json) as f:  # the part's own result file, for scripts/docs/render_bench.py
            result[key]["result"] = json.load(f)
    save()
    print(p.stdout.strip() if p.returncode == 0 else
          f"{key}: failed (rc {p.returncode}): {p.stderr.strip()[-300:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(HERE, "models/synth/qwen2.5-7b.gguf"))
    ap.add_argument("--stages", type=int, default=2, help="nodes for load (default 2)")
    ap.add_argument("--parts", default="load,decode,ttft,fair")
    ap.add_argument("--threads", type=int, default=1, help="threads per node in load")
    ap.add_argument("--draft", default="auto",
                    help="drafter of the decode part (default auto: the real Qwen2.5-Coder "
                    "0.5B when its tokens are the target's, else a synthetic 0.5B with the "
                    "target's tokenizer)")
    ap.add_argument("--n", type=int, default=32, help="tokens per decode request")
    ap.add_argument("--build", default="build")
    ap.add_argument("--json-out", help="result file (default build/bench/big-<UTC time>.json)")
    ap.add_argument("--update", action="store_true",
                    help="run --parts into the existing --json-out file, keeping its other "
                    "parts (the file lists each update: parts, commit, date, command, load)")
    a = ap.parse_args()
    if a.update and not (a.json_out and os.path.isfile(a.json_out)):
        raise SystemExit("bench_big: --update needs --json-out naming an existing result file")
    if not os.path.isfile(a.model):
        raise SystemExit(f"bench_big: no model file {a.model}: make it with `build/bin/"
                         "shardwire-mkmodel --synth qwen2.5-7b --vocab DIR/ggml-vocab-qwen2.gguf "
                         "-o models/synth/qwen2.5-7b.gguf` (DIR: what `bash "
                         "scripts/fetch_test_data.sh all` prints; or run the big tests once: "
                         "SW_TEST_LABELS=big bash scripts/test.sh)")
    parts = a.parts.split(",")
    bad = [p for p in parts if p not in ("load", "decode", "ttft", "fair")]
    if bad:
        raise SystemExit(f"bench_big: unknown part {bad[0]!r}: give load, decode, ttft, fair")
    b = a.build if os.path.isabs(a.build) else os.path.join(HERE, a.build)
    bindir = os.path.join(b, "bin")
    result = run_info()
    if a.update:
        with open(a.json_out) as f:
            first = json.load(f)
        if os.path.abspath(first.get("model", "")) != os.path.abspath(a.model):
            raise SystemExit(f"bench_big: --update: {a.json_out} measured {first.get('model')}, "
                             f"not {a.model}")
        first.setdefault("updates", []).append({"parts": a.parts, **result})
        result = first
    out = a.json_out or os.path.join(HERE, "build", "bench",
                                     f"big-{result['date'].replace(':', '')}.json")
    subdir = os.path.splitext(out)[0] + ".parts"
    os.makedirs(subdir, exist_ok=True)
    info = json.loads(subprocess.check_output([f"{bindir}/shardwire", "info", "--model",
                                               a.model, "--json"]))
    result.update(model=a.model, n_layers=info["n_layers"], n_embd=info["n_embd"],
                  file_bytes=os.path.getsize(a.model), stages=a.stages)

    def save():
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
    here = os.path.dirname(os.path.abspath(__file__))
    if "load" in parts:
        part_load(a, bindir, info, result, save)
        hdr, rows = load_table(result["load"])
        print("| " + " | ".join(hdr) + " |\n|" + "---|" * len(hdr))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    if "decode" in parts:
        pj = os.path.join(subdir, "peer.json")
        draft = draft_for(a, bindir)
        result["draft"] = draft
        sub([os.path.join(here, "bench_peer.py"), "--target", a.model, "--draft", draft,
             "--split", str(info["n_layers"] // 2), "--rtt-ms", "172", "--n", str(a.n),
             "--configs", "none,tree", "--omp-wait-policy", "passive", "--build", b,
             "--markdown", "--json-out", pj], result, "decode", save, pj)
    if "ttft" in parts:
        tj = os.path.join(subdir, "ttft.json")
        sub([os.path.join(here, "bench_ttft.py"), "--model", a.model, "--stages", "2,3",
             "--node-flag=--ctx", "--node-flag=4096", "--build", b, "--markdown",
             "--json-out", tj], result, "ttft", save, tj)
    if "fair" in parts:
        fj = os.path.join(subdir, "fair.json")
        sub([os.path.join(here, "bench_fair.py"), "--target", a.model, "--parts", "short",
             "--reps", "3", "--long-words", "650", "--ctx", "4096", "--timeout-s", "7200",
             "--build", b,
             "--markdown", "--json-out", fj], result, "fair", save, fj)
    (result["updates"][-1] if a.update else result)["loadavg_end"] = os.getloadavg()
    save()
    run = result["updates"][-1] if a.update else result
    print(f"\n{run['machine']}; commit {run['commit']}; {run['date']}; load average "
          f"{run['loadavg'][0]:.2f} at the start, {run['loadavg_end'][0]:.2f} at the end; "
          f"result file {os.path.relpath(out, HERE)}")


if __name__ == "__main__":
    main()
