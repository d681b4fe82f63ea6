#!/usr/bin/env python3
"""render_bench.py - benchmark tables rendered from the result files the benchmark scripts
write (docs/results/NAME.json: commit, machine, date, command, load and the raw results),
into the marked regions of README.md and docs/*.md:

    <!-- bench:NAME -->
    (what this script renders from docs/results/NAME.json; do not edit by hand)
    <!-- /bench -->

(README.md's regions end with a short provenance line: file, commit, machine, date and load;
the command stays in the file and in docs/benchmarks.md.) The script that wrote a file is the first word of its "command": demo.sh (a whole demo run,
scripts/bench/demo_result.py: each part's table and the run's times), demo_wan.py (the main
job's table, rendered with demo_wan.table itself), bench_ttft.py (time to first token per stage
count), bench_wan.py, bench_multi.py, bench_fair.py, bench_peer.py, bench_direct.py and bench_engine.py (each rendered with
the script's own table(), as a markdown table) and bench_big.py (its load table, then each
part's result it embeds, rendered as above) are known. A table anywhere else in the docs is typed by hand and belongs in a dated
history section (tests/unit/test_docs.py checks docs/benchmarks.md for that).

    python3 scripts/docs/render_bench.py           # rewrite every region
    python3 scripts/docs/render_bench.py --check   # exit 1, naming each stale region

tests/unit/test_docs.py runs the check: a number changed in a result file or in a rendered
region alone fails the default suite.
"""
import glob
import json
import os
import re
import sys

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "scripts", "bench"))
REGION = re.compile(r"(<!-- bench:([A-Za-z0-9_.-]+) -->\n)(.*?)(<!-- /bench -->)", re.S)


def s_provenance_short(r, name):
    """README.md's line: the file, commit, machine, date and load; the command stays in the file."""
    load = r.get("loadavg")
    la = f", load {load[0]:.1f}" if load else ""
    machine = r["machine"]
    if isinstance(machine, dict):
        machine = machine["cpu"]["model"]
    return (f"From `docs/results/{name}.json` (commit {r['commit']}, {machine}, {r['date']}{la}; "
            "its command and conditions: [docs/benchmarks.md](docs/benchmarks.md)).")


def s_provenance(r, name):
    load = r.get("loadavg")
    note = f"; {r['note']}" if r.get("note") else ""
    la = f", load average {load[0]:.1f} at the start" if load else ""
    machine = r["machine"]
    if isinstance(machine, dict):  # bench_engine.py: the CPU as cpu_info() describes it
        import bench_engine
        cpu = machine["cpu"]
        machine = (f"{cpu['model']} ({cpu['family']}; {cpu['n_cpus']} CPUs; SIMD "
                   f"{' '.join(cpu['flags'])}), shardwire "
                   f"{bench_engine.kernel_level(machine['shardwire_kernels'])}, "
                   f"{machine['note']}")
    return (f"From `docs/results/{name}.json`: commit {r['commit']}, {machine}, "
            f"{r['date']}{la}{note}; `{r['command']}`.")


def s_demo(r):
    import demo_wan
    rows = [(x["label"], x["result"], x["wall_s"]) for x in r["rows"]]
    lines, _ = demo_wan.table(rows, r["delay_ms"], r["n"], r.get("repeat_penalty", 1.0))
    return "```\n" + "\n".join(lines) + "\n```\n"


def s_ttft(r):
    import bench_ttft
    return s_markdown(*bench_ttft.table(r))


def s_demo_sh(r):
    """A whole scripts/demo.sh run (scripts/bench/demo_result.py): each part's table, then its
    times."""
    out = []
    for part in r["parts"]:
        draft = os.path.basename(part["draft"])
        out.append(f"{os.path.basename(part['target'])}, drafts by {draft}:\n")
        out.append(s_demo(part))
    out.append(f"The whole `{r['command']}`: {r['ready_s']:.0f} s until ready (dependencies, "
               f"models, build), {r['total_s']:.0f} s in all "
               f"({int(r['total_s']) // 60} min {int(r['total_s']) % 60} s).\n")
    return "\n".join(out)


def s_markdown(hdr, rows):
    out = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def s_wan(r):
    import bench_wan
    return s_markdown(*bench_wan.table(bench_wan.from_file(r)))


def s_multi(r):
    import bench_multi
    return s_markdown(*bench_multi.table(r["raw"], r["clients"], r["goal_ms"]))


def s_fair(r):
    import bench_fair
    return s_markdown(*bench_fair.table(r["raw"], r["reps"], r["n"], r["delay_ms"]))


def s_peer(r):
    import bench_peer
    return s_markdown(*bench_peer.table(*bench_peer.from_file(r)))


def s_direct(r):
    import bench_direct
    return s_markdown(*bench_direct.table(r))


def s_engine(r):
    import bench_engine
    return s_markdown(*bench_engine.table(r))


def s_big(r):
    """A scripts/bench/bench_big.py run: its load table, then each part's table rendered from
    the part's own result, embedded in the file."""
    import bench_big
    out = []
    if r.get("load"):
        out.append(f"Load ({r['stages']} nodes, one thread each; cold: the file dropped from "
                   "the page cache first):\n")
        out.append(s_markdown(*bench_big.load_table(r["load"])))
    names = {"decode": "Decode over 172 ms round trips against llama.cpp's RPC backend "
                       f"(drafter {os.path.basename(r.get('draft', ''))})",
             "ttft": "Time to first token of ~2,000 tokens at 50 Mbit/s per link",
             "fair": "A short request's time to first token during another's ~2,000-token "
                     "prefill"}
    for key, title in names.items():
        part = r.get(key)
        if not part:
            continue
        out.append(f"\n{title} (`{part['command'].split(' ')[0]}`, {part['seconds']:.0f} s):\n")
        sub = part.get("result")
        if part["rc"] != 0 or not sub:
            out.append(f"no number: the part failed ({part['error'].splitlines()[-1][:200]})\n"
                       if part.get("error") else "no number: the part wrote no result\n")
            continue
        if key == "ttft" and "n_embd" not in sub:  # written before bench_ttft recorded it
            f16 = any(x in sub.get("node_flags", []) for x in ("f16", "bf16"))
            sub = dict(sub, n_embd=r["n_embd"], width=2 if f16 else 4)
        out.append(RENDERERS[os.path.basename(sub["command"].split(" ")[0])](sub))
    for u in r.get("updates", []):
        out.append(f"\nThe {u['parts']} part(s) above come from a later run into the same file: "
                   f"commit {u['commit']}, {u['date']}, load average {u['loadavg'][0]:.1f} at "
                   f"the start; `{u['command']}`.\n")
    return "".join(out)


RENDERERS = {"bench_big.py": s_big, "demo.sh": s_demo_sh, "demo_wan.py": s_demo, "bench_ttft.py": s_ttft, "bench_wan.py": s_wan,
             "bench_multi.py": s_multi, "bench_fair.py": s_fair, "bench_peer.py": s_peer,
             "bench_direct.py": s_direct, "bench_engine.py": s_engine}


def render(name, short=False):
    """The region's text for docs/results/NAME.json (short: README.md's provenance line), or
    raises ValueError saying why not."""
    path = os.path.join(SRC, "docs", "results", name + ".json")
    if not os.path.exists(path):
        raise ValueError(f"docs/results/{name}.json does not exist")
    with open(path) as f:
        r = json.load(f)
    script = os.path.basename(r.get("command", "").split(" ")[0])
    if script not in RENDERERS:
        raise ValueError(f"docs/results/{name}.json: no renderer for '{script}' "
                         f"(known: {', '.join(RENDERERS)})")
    prov = s_provenance_short(r, name) if short else s_provenance(r, name)
    return RENDERERS[script](r) + "\n" + prov + "\n"


def docs():
    return [os.path.join(SRC, "README.md")] + sorted(glob.glob(os.path.join(SRC, "docs", "*.md")))


def regions(text):
    """(name, its text now, start, end of the text) of every marked region."""
    return [(m.group(2), m.group(3), m.start(3), m.end(3)) for m in REGION.finditer(text)]


def run(check):
    """Rewrites (or with check, compares) every region; returns the problems, one line each."""
    problems = []
    for path in docs():
        text = open(path).read()
        new, pos = [], 0
        for name, now, start, end in regions(text):
            try:
                want = render(name, short=os.path.basename(path) == "README.md")
            except ValueError as e:
                problems.append(f"{os.path.relpath(path, SRC)}: bench:{name}: {e}")
                want = now
            if check and want != now:
                problems.append(f"{os.path.relpath(path, SRC)}: bench:{name} differs from what "
                                f"docs/results/{name}.json renders: run python3 "
                                "scripts/docs/render_bench.py")
            new += [text[pos:start], want]
            pos = end
        new.append(text[pos:])
        if not check and "".join(new) != text:
            with open(path, "w") as f:
                f.write("".join(new))
            print(f"wrote {os.path.relpath(path, SRC)}")
    return problems


def main():
    check = "--check" in sys.argv[1:]
    problems = run(check)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
