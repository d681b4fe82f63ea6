#!/usr/bin/env python3
"""bench_lowbit.py - the low-bit quant types (issue 34) against llama-bench, in one run.

For each requantized model of scripts/requant_model.sh (IQ4_NL, IQ4_XS,
Q2_K, Q3_K_M; the types shardwire's kernels reproduce bit for bit), the
prompt speed (pp<N>: tokens/s of one N-token prompt pass) and the
generation speed after it (tg<M>@<N>: tokens/s of the M-1 single-token steps)
of three engines, interleaved rep by rep so that other jobs' load hits them
alike (medians):

  shardwire        `shardwire generate --greedy --json` (bench_engine.py's run)
  llama repack 0   llama-bench -fa off --repack 0: llama.cpp's plain path, the
                   order shardwire reproduces
  llama default    llama-bench -fa off with its default --repack 1 (weights
                   repacked where llama.cpp has a repacked layout for the type)

llama-bench comes from scripts/bench/llama_peer.py's build of the
llama-cpp-python 0.3.36 sdist (its host-native build: AVX-512 where the CPU
has it). The prompt text given to shardwire is exactly N llama.cpp tokens.

    python3 scripts/bench/bench_lowbit.py                       # 2 threads, 3 reps, pp128, tg32
    python3 scripts/bench/bench_lowbit.py --reps 5 --pp 128,512 --n-gen 32 --out result.json
    python3 scripts/bench/bench_lowbit.py --cpu-time --types IQ4_NL,IQ4_XS

--cpu-time measures CPU seconds instead of the wall clock, on one thread (for
a machine shared with other jobs: time slices taken by others do not count;
caches and memory bandwidth still are shared): each engine's run with K more
prompt tokens or generated tokens minus the same run without them, so that
loading, warm-up and tokenizing cancel. shardwire: `generate` with the
N-token prompt and -n 1 minus a 1-token prompt and -n 1 (N - 1 prompt
tokens), and -n M+1 minus -n 1 after a 1-token prompt (M generated tokens);
llama-bench: -r 6 minus -r 1 of -p N -n 0 and of -p 0 -n M (5 repetitions).
The table gives milliseconds a token and the speed ratio (llama.cpp's CPU
time over shardwire's).

Prints one table and writes a result file (--out, default
build/bench_lowbit.json): the commit (or --label's words for the binary),
the machine (CPU model, cores, load averages and `uptime` at the start and
the end; the end's include this run's own threads), the date, the command
and every sample.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)
import bench_engine  # noqa: E402
import llama_peer  # noqa: E402

MODELS = [  # (requant_model.sh name, type label)
    ("qwen-coder-0.5b-iq4_nl", "IQ4_NL"),
    ("qwen-coder-0.5b-iq4_xs", "IQ4_XS"),
    ("qwen-coder-1.5b-q2_k", "Q2_K"),
    ("qwen-coder-1.5b-q3_k_m", "Q3_K_M"),
]
ENGINES = ["shardwire", "llama repack 0", "llama default"]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def commit():
    r = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty"], capture_output=True,
                       text=True)
    return r.stdout.strip() or "unknown"


def uptime():
    r = subprocess.run(["uptime"], capture_output=True, text=True)
    return r.stdout.strip()


def model_path(name):
    r = subprocess.run(["bash", os.path.join(root, "scripts", "requant_model.sh"), name],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench_lowbit: scripts/requant_model.sh {name} failed: {r.stderr.strip()[-400:]}")
    return r.stdout.strip().splitlines()[-1]


def child_cpu(argv):
    """CPU seconds (user + system) of one run of argv."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def cpu_time(args, models, bindir, pps):
    """--cpu-time: ms of CPU a token on one thread, by differences; prints the table, writes --out."""
    started = datetime.datetime.now(datetime.timezone.utc)
    load0, uptime0 = os.getloadavg(), uptime()
    rows, samples = [], {}
    for name, t in models:
        path = model_path(name)
        peer = bench_engine.LlamaBinBench(bindir, path, 1, "off", "0")
        one = peer.prompt_text(1)
        sw = [args.bin, "generate", "--greedy", "--model", path, "--threads", "1", "--json"]
        samples[t] = {}
        for n in pps:
            text = peer.prompt_text(n)
            tests = [(f"pp{n}", n - 1,
                      lambda: child_cpu(sw + ["-p", text, "-n", "1"]) - child_cpu(sw + ["-p", one, "-n", "1"]),
                      ["-p", str(n), "-n", "0"], n),
                     (f"tg{args.n_gen}", args.n_gen,
                      lambda: child_cpu(sw + ["-p", one, "-n", str(args.n_gen + 1)]) -
                      child_cpu(sw + ["-p", one, "-n", "1"]),
                      ["-p", "0", "-n", str(args.n_gen)], args.n_gen)]
            for label, sw_tokens, sw_run, lb_args, lb_tokens in tests:
                if label in samples[t]:
                    continue
                got = {e: [] for e in ENGINES}
                for _ in range(args.reps):
                    got["shardwire"].append(1e3 * sw_run() / sw_tokens)
                    for e, rp in (("llama repack 0", "0"), ("llama default", "1")):
                        base = [os.path.join(bindir, "llama-bench"), "-m", path, "-t", "1", "-fa", "off",
                                "--repack", rp] + lb_args
                        cpu = child_cpu(base + ["-r", "6"]) - child_cpu(base + ["-r", "1"])
                        got[e].append(1e3 * cpu / 5 / lb_tokens)
                samples[t][label] = got
                med = {e: statistics.median(v) for e, v in got.items()}
                rows.append({"type": t, "test": label, "shardwire_cpu_ms_per_tok": med["shardwire"],
                             "llama_repack0_cpu_ms_per_tok": med["llama repack 0"],
                             "llama_default_cpu_ms_per_tok": med["llama default"],
                             "ratio_repack0": med["llama repack 0"] / med["shardwire"],
                             "ratio_default": med["llama default"] / med["shardwire"]})
    load, uptime1 = os.getloadavg(), uptime()
    ended = datetime.datetime.now(datetime.timezone.utc)
    print(f"{cpu_model()}, 1 thread, CPU ms a token (medians of {args.reps}), commit {commit()}, "
          f"{started:%Y-%m-%d %H:%M}-{ended:%H:%M} UTC, load average {load0[0]:.2f} -> {load[0]:.2f}"
          + (f"; shardwire: {args.label}" if args.label else ""))
    print(f"{'type':<8}{'test':<8}{'shardwire':>11}{'llama rp0':>11}{'ratio':>7}{'llama def':>11}{'ratio':>7}")
    for r in rows:
        print(f"{r['type']:<8}{r['test']:<8}{r['shardwire_cpu_ms_per_tok']:>11.2f}"
              f"{r['llama_repack0_cpu_ms_per_tok']:>11.2f}{r['ratio_repack0']:>7.2f}"
              f"{r['llama_default_cpu_ms_per_tok']:>11.2f}{r['ratio_default']:>7.2f}")
    result = {
        "benchmark": "bench_lowbit --cpu-time", "commit": commit(), "cpu": cpu_model(),
        "n_cpus": os.cpu_count(), "started_utc": started.isoformat(timespec="seconds"),
        "ended_utc": ended.isoformat(timespec="seconds"),
        "command": shlex.join([os.path.relpath(sys.argv[0], root)] + sys.argv[1:]),
        "loadavg_start": load0, "loadavg_end": load, "uptime_start": uptime0, "uptime_end": uptime1,
        "machine_note": "shared machine" if load0[0] >= 1.5 else "quiet at the start (load under 1.5)",
        "bin": os.path.relpath(os.path.abspath(args.bin), root), "label": args.label, "threads": 1,
        "reps": args.reps, "unit": "CPU milliseconds a token (user + system), by differences",
        "llama": f"llama-bench from {bindir}, -fa off, --repack 0 and 1", "table": rows,
        "samples": samples,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"bench_lowbit: result file {args.out}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(root, "build", "bin", "shardwire"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pp", default="128", help="comma-separated prompt lengths in tokens")
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--types", default=",".join(t for _, t in MODELS),
                    help="which of IQ4_NL,IQ4_XS,Q2_K,Q3_K_M (default all)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per shardwire run")
    ap.add_argument("--out", default=os.path.join(root, "build", "bench_lowbit.json"))
    ap.add_argument("--cpu-time", action="store_true",
                    help="CPU seconds on one thread, by differences (see above), instead of the wall clock")
    ap.add_argument("--label", default="",
                    help="what the shardwire binary is (e.g. the commit it was built from, when --bin "
                         "is not this tree's build); recorded in the result file")
    args = ap.parse_args()
    if llama_peer.has_amx():
        # its "llama default" column is llama-bench --repack 1, which dies of SIGILL on
        # these AMX VMs (llama_peer.py); bench_engine.py --llama-repack 0 compares without it
        raise SystemExit("bench_lowbit: this CPU has AMX, where llama-bench --repack 1 (the "
                         "'llama default' column) crashes: run it on a CPU without AMX, or "
                         "compare with bench_engine.py --llama-repack 0")
    pps = [int(x) for x in args.pp.split(",") if x.strip()]
    if not pps or min(pps) < 1 or args.n_gen < 2 or args.reps < 1 or args.threads < 1:
        sys.exit("bench_lowbit: --pp values must be >= 1, --n-gen >= 2, --reps >= 1, --threads >= 1")
    want = {t.strip().upper() for t in args.types.split(",") if t.strip()}
    models = [(n, t) for n, t in MODELS if t in want]
    if not models or len(models) != len(want):
        sys.exit(f"bench_lowbit: --types takes {','.join(t for _, t in MODELS)}; got '{args.types}'")
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"bench_lowbit: no shardwire at {args.bin} (run scripts/build.sh)")
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # as bench_engine.py's default

    bindir = llama_peer.ensure()
    if args.cpu_time:
        return cpu_time(args, models, bindir, pps)
    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = os.getloadavg()
    uptime0 = uptime()
    paths = {t: model_path(n) for n, t in models}
    peers = {t: {"llama repack 0": bench_engine.LlamaBinBench(bindir, paths[t], args.threads, "off", "0"),
                 "llama default": bench_engine.LlamaBinBench(bindir, paths[t], args.threads, "off", "1")}
             for _, t in models}
    prompts = {t: {n: peers[t]["llama repack 0"].prompt_text(n) for n in pps} for _, t in models}
    samples = {t: {n: {e: [] for e in ENGINES} for n in pps} for _, t in models}
    for _, t in models:  # untimed warm-up: page the file in
        bench_engine.run_shardwire(args.bin, paths[t], prompts[t][pps[0]][:64], 4, args.threads,
                                   args.timeout)
    for rep in range(args.reps):
        for _, t in models:
            for e in ("llama repack 0", "llama default"):
                res = peers[t][e].run_all(pps, args.n_gen)
                for n in pps:
                    samples[t][n][e].append(res[n])
            for n in pps:
                samples[t][n]["shardwire"].append(
                    bench_engine.run_shardwire(args.bin, paths[t], prompts[t][n], args.n_gen,
                                               args.threads, args.timeout))
        print(f"bench_lowbit: rep {rep + 1}/{args.reps} done", file=sys.stderr)
    load = os.getloadavg()
    uptime1 = uptime()
    ended = datetime.datetime.now(datetime.timezone.utc)

    def med(rows, key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    print(f"{cpu_model()}, {os.cpu_count()} CPUs, {args.threads} threads, {args.reps} reps (medians), "
          f"commit {commit()}, {started:%Y-%m-%d %H:%M}-{ended:%H:%M} UTC, load average "
          f"{load0[0]:.2f} at the start, {load[0]:.2f} {load[1]:.2f} at the end"
          + (f"; shardwire: {args.label}" if args.label else ""))
    print(f"{'type':<8}{'test':<12}{'shardwire':>11}{'llama rp0':>11}{'ratio':>7}"
          f"{'llama def':>11}{'ratio':>7}")
    table = []
    for _, t in models:
        for n in pps:
            for label, key in ((f"pp{n}", "prefill_tok_s"), (f"tg{args.n_gen}@{n}", "decode_tok_s")):
                s = med(samples[t][n]["shardwire"], key)
                l0 = med(samples[t][n]["llama repack 0"], key)
                l1 = med(samples[t][n]["llama default"], key)
                r0 = s / l0 if s and l0 else None
                r1 = s / l1 if s and l1 else None
                print(f"{t:<8}{label:<12}{bench_engine.fmt(s):>11}{bench_engine.fmt(l0):>11}"
                      f"{'n/a' if r0 is None else f'{r0:.2f}':>7}{bench_engine.fmt(l1):>11}"
                      f"{'n/a' if r1 is None else f'{r1:.2f}':>7}")
                table.append({"type": t, "test": label, "shardwire_tok_s": s, "llama_repack0_tok_s": l0,
                              "llama_default_tok_s": l1, "ratio_repack0": r0, "ratio_default": r1})
    result = {
        "benchmark": "bench_lowbit", "commit": commit(), "cpu": cpu_model(), "n_cpus": os.cpu_count(),
        "started_utc": started.isoformat(timespec="seconds"),
        "ended_utc": ended.isoformat(timespec="seconds"),
        "command": shlex.join([os.path.relpath(sys.argv[0], root)] + sys.argv[1:]),
        "loadavg_start": load0, "loadavg_end": load, "uptime_start": uptime0, "uptime_end": uptime1,
        # the end's load averages include this run's own threads
        "machine_note": "shared machine" if load0[0] >= 1.5 else "quiet at the start (load under 1.5)",
        "bin": os.path.relpath(os.path.abspath(args.bin), root), "label": args.label, "threads": args.threads, "reps": args.reps,
        "n_gen": args.n_gen, "llama": f"llama-bench from {bindir}, -fa off, --repack 0 and 1",
        "omp_wait_policy": "passive", "models": paths, "table": table,
        "samples": {t: {str(n): samples[t][n] for n in pps} for _, t in models},
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"bench_lowbit: result file {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
