#!/usr/bin/env python3
"""bench_ttft.py - time to first token of a long prompt through 2 and 3 stages over
rate-limited links (issue 33), against what the work and the wire allow.

Each node and the client dial the relay through their own shardwire-wanem
(--delay-ms one way, --rate-kbps per direction and connection), the layers split
evenly, one thread per node, real keys, hidden states f32 (or --prefill-dtype).
For each stage count it prints, from the request's `timing` JSON:

  TTFT        the client's time to the first token (the prompt and one token)
  compute     the busiest node's work on the round (head_compute_ms, or a
              stage's stage_compute_ms: every chunk counted)
  transfer    the prompt's hidden states over one link: P x n_embd x bytes / rate
              (each hop of the pipeline carries all of them once; the hops
              work at once when the prompt is cut into pieces)
  bound       max(compute, transfer): a pipeline can do no better
  TTFT/bound  how far the pipelining is from it
  critical    each node's part of the critical path and the network's

    python3 scripts/bench/bench_ttft.py --model models/synth/qwen2.5-7b.gguf --markdown
    python3 scripts/bench/bench_ttft.py --build /tmp/base/build ...   # another build, same run

The result file (--json-out, default build/bench/ttft-<UTC time>.json) records the
commit, the machine (CPU model, CPUs), the date, the command, the load average at the
start and the end of each run and every row, also of a run that failed (its error).

Every process it starts is stopped at the end, also on failure or Ctrl-C.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_wan import free_port, run_info  # noqa: E402


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def prompt_of(n_words):
    return "".join(f"Section {i}: the relay forwards frames by name and never decodes tensors. "
                   for i in range(n_words))


class Cluster:
    def __init__(self, a, b, logdir, n_stages, layers):
        self.a, self.b, self.logdir, self.procs = a, b, logdir, []
        self.n, self.layers = n_stages, layers

    def spawn(self, name, argv):
        p = subprocess.Popen(argv, stdout=open(os.path.join(self.logdir, name + ".log"), "w"),
                             stderr=subprocess.STDOUT)
        self.procs.append(p)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()

    def start(self):
        a, b, kd = self.a, self.b, os.path.join(self.logdir, "keys")
        os.makedirs(kd, mode=0o700, exist_ok=True)
        names = [f"st{i}" for i in range(self.n)]
        # real keys: a pair per program, the nodes' cluster key and the clients' access key
        jobs = [["--out", f"{kd}/{k}"] for k in ["relay", "client", *names]] + \
            [[f"--{kind}-key", f"{kd}/{kind}.key"] for kind in ("cluster", "access")]
        for job in jobs:
            subprocess.run([f"{b}/shardwire", "keygen", *job], check=True, capture_output=True)
        allow = [(k, f"node {k}") for k in names] + [("client", "client")]
        with open(f"{kd}/allow.txt", "w") as f:
            f.writelines(open(f"{kd}/{k}.pub").read().strip() + f" {role}\n" for k, role in allow)
        pr = free_port()
        self.relay = f"tcp://127.0.0.1:{pr}"
        self.spawn("relay", [f"{b}/shardwire-relay", "--listen", self.relay, "--key",
                             f"{kd}/relay.key", "--allow", f"{kd}/allow.txt"])
        time.sleep(0.3)
        eps = []
        for who in [*names, "client"]:
            port = free_port()
            self.spawn(f"wanem-{who}", [f"{b}/shardwire-wanem", "--listen", f"127.0.0.1:{port}",
                                        "--connect", f"127.0.0.1:{pr}", "--delay-ms",
                                        str(a.delay_ms), "--rate-kbps", str(a.rate_kbps)])
            eps.append(f"tcp://127.0.0.1:{port}")
        time.sleep(0.3)
        self.client_ep = eps[-1]
        cuts = [self.layers * i // self.n for i in range(self.n + 1)]
        rk = ["--relay-key", f"{kd}/relay.pub", "--cluster-key", f"{kd}/cluster.key"]
        for i, name in enumerate(names):
            argv = [f"{b}/shardwire-node", "--model", a.model, "--layers",
                    f"{cuts[i]}:{cuts[i + 1]}", "--relay", eps[i], "--name", name, "--threads",
                    str(a.threads), "--key", f"{kd}/{name}.key", *rk, "--prefix-cache", "off",
                    *a.node_flag]
            if i == 0:
                argv += ["--access-key", f"{kd}/access.key", "--draft", "none"]
            self.spawn(name, argv)
        self.sec = ["--key", f"{kd}/client.key", "--relay-key", f"{kd}/relay.pub",
                    "--access-key", f"{kd}/access.key"]
        deadline = time.time() + 900
        while time.time() < deadline:
            st = subprocess.run([f"{b}/shardwire", "status", "--relay", self.relay, "--json",
                                 *self.sec], capture_output=True, text=True)
            if all(f'"name":"{n}"' in st.stdout for n in names):
                return
            if any(p.poll() is not None for p in self.procs):
                raise SystemExit(f"bench_ttft: a process exited; logs in {self.logdir}")
            time.sleep(1)
        raise SystemExit("bench_ttft: the nodes did not join within 900 s")

    def run(self, prompt):
        out = subprocess.run([f"{self.b}/shardwire", "run", "--greedy", "--relay", self.client_ep,
                              "-p", prompt, "-n", "1", "--json", "--timeout-s", "3600",
                              *self.sec], capture_output=True, text=True, timeout=4000)
        if out.returncode != 0:
            raise SystemExit(f"bench_ttft: run failed: {out.stderr.strip()[-400:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def table(result):
    """(header, rows) of a result file: per stage count the TTFT, the busiest node's compute,
    the prompt's hidden states over one link at the file's rate (files written before the
    width was recorded: no transfer, the bound is the compute), the bound and the ratio."""
    hdr = ["stages", "prompt", "TTFT s", "busiest node's compute s", "transfer s", "bound s",
           "TTFT / bound", "compute per node s", "critical path s (network)", "Resumes"]
    rows = []
    for run in result["runs"]:
        if "result" not in run:
            rows.append([str(run["stages"]), "", "no number: " + run.get("error", "no result")]
                        + [""] * (len(hdr) - 3))
            continue
        j = run["result"]
        tm, P = j["timing"], j["n_prompt"]
        work = {"head": tm.get("head_compute_ms", 0), **tm.get("stage_compute_ms", {})}
        crit = tm.get("stage_critical_ms", {})
        cmax = max(work.values())
        tr = (P * result["n_embd"] * result["width"] * 8 / (result["rate_kbps"] * 1e3) * 1e3
              if "n_embd" in result else None)
        bound = max(cmax, tr or 0)
        rows.append([str(run["stages"]), str(P), f"{j['ttft_ms'] / 1e3:.1f}", f"{cmax / 1e3:.1f}",
                     f"{tr / 1e3:.1f}" if tr is not None else "not recorded",
                     f"{bound / 1e3:.1f}", f"{j['ttft_ms'] / bound:.2f}",
                     ", ".join(f"{k} {v / 1e3:.1f}" for k, v in work.items()),
                     ", ".join(f"{k} {v / 1e3:.1f}" for k, v in crit.items()) +
                     f" ({tm.get('network_ms', 0) / 1e3:.1f})", str(j.get("resumes", 0))])
    return hdr, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(HERE, "models/synth/qwen2.5-7b.gguf"))
    ap.add_argument("--stages", default="2,3", help="stage counts (default 2,3)")
    ap.add_argument("--words", type=int, default=125, help="prompt sentences, ~16 tokens each "
                    "(default 125: about 2,000 tokens)")
    ap.add_argument("--delay-ms", type=float, default=20, help="one-way delay per link (20)")
    ap.add_argument("--rate-kbps", type=int, default=50000, help="per link and direction (50000)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--node-flag", action="append", default=[],
                    help="extra node flag, e.g. --node-flag=--prefill-dtype --node-flag=f16")
    ap.add_argument("--build", default="build")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json-out", help="result file (default build/bench/ttft-<UTC time>.json)")
    a = ap.parse_args()
    result = run_info()
    started = result["date"]
    out_path = a.json_out or os.path.join(HERE, "build", "bench",
                                          f"ttft-{started.replace(':', '')}.json")
    result.update({"model": a.model, "delay_ms": a.delay_ms, "rate_kbps": a.rate_kbps,
              "threads": a.threads, "node_flags": a.node_flag, "runs": []})

    def save():
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)

    b = os.path.join(HERE, a.build, "bin") if not os.path.isabs(a.build) else \
        os.path.join(a.build, "bin")
    info = json.loads(subprocess.check_output([f"{b}/shardwire", "info", "--model", a.model,
                                               "--json"]))
    L, E = info["n_layers"], info["n_embd"]
    width = 2 if "f16" in a.node_flag or "bf16" in a.node_flag else 4
    prompt = prompt_of(a.words)
    result.update(n_embd=E, width=width)
    for n in (int(x) for x in a.stages.split(",")):
        logdir = tempfile.mkdtemp(prefix="bench_ttft.")
        c = Cluster(a, b, logdir, n, L)
        run = {"stages": n, "load_start": os.getloadavg()}
        result["runs"].append(run)
        try:
            c.start()
            log(f"{n} stages up; the prompt...")
            j = c.run(prompt)
        except SystemExit as e:
            run.update(error=str(e), logs=logdir, load_end=os.getloadavg())
            save()
            raise
        finally:
            c.stop()
        run.update(load_end=os.getloadavg(), result=j)
        save()
        shutil.rmtree(logdir, ignore_errors=True)
    hdr, rows = table(result)
    if a.markdown:
        print("| " + " | ".join(hdr) + " |\n|" + "---|" * len(hdr))
    for cells in rows:
        print(("| " + " | ".join(cells) + " |") if a.markdown else "  ".join(cells))
    loads = ", ".join(f"{r['load_start'][0]:.1f}-{r['load_end'][0]:.1f}" for r in result["runs"])
    print(f"\n{result['machine']}; commit {result['commit']}; {started}; load average {loads}; "
          f"result file {os.path.relpath(out_path, HERE)}")


if __name__ == "__main__":
    main()
