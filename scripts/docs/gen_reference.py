#!/usr/bin/env python3
"""gen_reference.py - docs/reference.md from the code: every program's options
with their defaults (parsed from the built programs' --help, which print the
macros of base/sw_limits.h and of each program), every limit of
base/sw_limits.h (name, value, comment) and every CTest test with its labels,
timeout, RUN_SERIAL and fixtures (what `ctest --show-only=json-v1` lists for
the source tree configured, not built, in temporary folders with -DSW_CUDA=OFF
and with -DSW_CUDA=EMU: the same whatever build BUILD_DIR is, a sanitizer
build of two areas or a GPU one, and no older than tests/CMakeLists.txt).
Numbers the docs would otherwise type by hand are read here, so they cannot
drift.

  python3 scripts/docs/gen_reference.py [BUILD_DIR]          # write docs/reference.md
  python3 scripts/docs/gen_reference.py --check [BUILD_DIR]  # exit 1 when it is stale

BUILD_DIR defaults to $SW_BUILD_DIR, else build/. tests/unit/test_docs.py runs
the check in the default suite, and imports the --help parser below.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "docs", "reference.md")
LIMITS = os.path.join(ROOT, "base", "sw_limits.h")

# (program, arguments before --help); the shardwire commands are those its --help lists.
PROGRAMS = ["shardwire-node", "shardwire-relay", "shardwire-wanem", "shardwire-mkmodel",
            "shardwire-mksplit"]
ENTRY = re.compile(r"^\s{2,}(?:-(\w), )?(--[a-z0-9][a-z0-9-]*)(.*)$")
SECTION = re.compile(r"^(\S.*|\s{0,2}[a-z][^:]*):\s*$")


def help_text(bin_dir, prog, args=()):
    """The --help of a program (stdout and stderr: some print usage on stderr)."""
    r = subprocess.run([os.path.join(bin_dir, prog)] + list(args) + ["--help"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    return r.stdout


def commands(bin_dir):
    """The shardwire commands its --help lists."""
    text = help_text(bin_dir, "shardwire")
    body = text.split("commands:", 1)[1].split("\n\n", 1)[0]
    return [l.split()[0] for l in body.splitlines() if l.strip()]


def parse_help(text):
    """[(section, flag, short, metavar, description)] of one --help text."""
    out, section, cur = [], "", None
    for line in text.splitlines():
        m = ENTRY.match(line)
        # options are listed under a section heading; a flag named in the paragraph under the
        # usage line ("  --draft-ahead choose ...") is prose, not an entry
        if m and section and line.lstrip().startswith("-"):
            if cur:
                out.append(cur)
            rest = m.group(3)
            parts = re.split(r"\s{2,}", rest.strip(), maxsplit=1) if rest.strip() else [""]
            if not rest.strip() or rest.startswith("  "):
                meta, desc = "", rest.strip()  # no metavar: the description follows the flag
            else:
                meta, desc = parts[0], parts[1] if len(parts) > 1 else ""
            cur = [section, m.group(2), m.group(1) or "", meta, desc]
        elif cur and line.startswith(" " * 10) and line.strip():
            cur[4] = (cur[4] + " " + line.strip()).strip()
        else:
            if cur:
                out.append(cur)
                cur = None
            s = SECTION.match(line)
            if s and not line.startswith("usage"):
                section = s.group(1).strip()
    if cur:
        out.append(cur)
    return [tuple(e) for e in out]


def default_of(desc):
    """The default a description states: the text after 'default' up to its closing
    parenthesis ('' when it states none)."""
    m = re.search(r"\(default:? ([^()]*(?:\([^()]*\)[^()]*)*)\)", desc)
    if m:
        return m.group(1).strip()
    m = re.search(r"\(([^()]*?), default:? ([^()]*)\)", desc)
    if m:
        return m.group(2).split(";")[0].strip()  # "(0..1, default 0; docs/security.md)"
    m = re.search(r"\([^()]*?; default:? ([^();]*)[;)]", desc)  # "(while others run: 2; default 4; ...)"
    if m:
        return m.group(1).strip()
    # the value named just before "(default...)": "f16 (default; ...)", "auto = adaptive
    # (default)", "1 (decoding without drafts, default)"
    m = re.search(r"([\w.]+)(?: = [^,;()]*)? \((?:[^()]*, )?default[;)]", desc)
    return m.group(1) if m else ""


def numbers(text):
    """The numbers of a default's text (0x5eed included) as floats."""
    out = []
    for n in re.findall(r"(?<![\w.])(0x[0-9a-f]+|\d+(?:\.\d+)?)(?![\w.])", text):
        out.append(float(int(n, 16)) if n.startswith("0x") else float(n))
    return out


def all_help(bin_dir):
    """{program label: [entries]} for every program and shardwire command."""
    progs = {}
    for cmd in commands(bin_dir):
        progs["shardwire " + cmd] = parse_help(help_text(bin_dir, "shardwire", [cmd]))
    for p in PROGRAMS:
        progs[p] = parse_help(help_text(bin_dir, p))
    return progs


def limits():
    """[(name, value, comment)] of base/sw_limits.h's #defines (the SW_STR helpers left out)."""
    out, pending = [], []
    text = open(LIMITS).read()
    lines = text.splitlines()
    i = 0
    block = []  # the comment lines just above a #define
    while i < len(lines):
        line = lines[i]
        st = line.strip()
        if st.startswith("/*") and "*/" not in st or st.startswith("/*") and not st.startswith("/* ----"):
            block = []
            while True:
                block.append(lines[i].strip().lstrip("/*").rstrip("*/").strip())
                if "*/" in lines[i]:
                    break
                i += 1
            i += 1
            continue
        m = re.match(r"#define\s+([A-Z][A-Z0-9_]+)\s+(.*)$", st)
        if m and not m.group(1).startswith(("SW_STR", "SW_LIMITS_H")):
            name, rest = m.group(1), m.group(2)
            while rest.endswith("\\"):  # continued lines (the comment may be on them)
                i += 1
                rest = rest[:-1].strip() + " " + lines[i].strip()
            while "/*" in rest and "*/" not in rest.split("/*", 1)[1]:  # a comment over lines
                i += 1
                rest += " " + lines[i].strip()
            comment = ""
            c = re.search(r"(//|/\*)(.*?)(\*/)?$", rest)
            if c:
                comment = " ".join(c.group(2).split())
                rest = rest[:c.start()].strip()
            if not comment and block:
                comment = " ".join(b for b in block if b)
            out.append((name, rest.strip(), comment))  # (the block holds for its whole group)
        elif not st:
            block = []
        i += 1
    return out


# The configurations the Tests table is read from: (name, cmake arguments). Neither needs nvcc
# nor a GPU; a build with a real CUDA backend (nvcc found: .ci/run's build/) is not configured
# here, since the page would then depend on the machine.
CONFIGS = [("OFF", ["-DSW_CUDA=OFF"]), ("EMU", ["-DSW_CUDA=EMU"])]
_tests = None


def ctest_tests(args):
    """{test: {labels, timeout, serial, requires, sets_up}} as CTest lists them for the source
    tree configured with args in a temporary folder (removed after)."""
    cmake = os.environ.get("SW_CMAKE") or shutil.which("cmake") or "cmake"
    ctest = os.path.join(os.path.dirname(cmake), "ctest")
    if not os.path.isfile(ctest):
        ctest = shutil.which("ctest") or "ctest"
    with tempfile.TemporaryDirectory(prefix="swdocs-") as d:
        r = subprocess.run([cmake, "-S", ROOT, "-B", d] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"cmake {' '.join(args)} (for the Tests table) failed:\n" + r.stdout[-2000:])
        r = subprocess.run([ctest, "--show-only=json-v1"], cwd=d, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"ctest --show-only=json-v1 ({' '.join(args)}) failed:\n" + r.stderr[-2000:])
        listed = json.loads(r.stdout)["tests"]
    out = {}
    for t in listed:
        p = {x["name"]: x["value"] for x in t.get("properties", [])}
        out[t["name"]] = {"labels": list(p.get("LABELS", [])), "timeout": p.get("TIMEOUT"),
                          "serial": bool(p.get("RUN_SERIAL")), "requires": list(p.get("FIXTURES_REQUIRED", [])),
                          "sets_up": list(p.get("FIXTURES_SETUP", []))}
    return out


def tests():
    """{configuration: {test: facts}} for CONFIGS (configured once per process)."""
    global _tests
    if _tests is None:
        _tests = {name: ctest_tests(args) for name, args in CONFIGS}
    return _tests


def test_cells(f):
    """A test's facts as the table's cells: labels, timeout, run alone, fixtures."""
    t = f["timeout"]
    fixtures = f["requires"] + [f"sets up {x}" for x in f["sets_up"]]
    return [", ".join(f["labels"]), "" if t is None else ("%d" % t if t == int(t) else str(t)),
            "yes" if f["serial"] else "", ", ".join(fixtures)]


def test_rows():
    """[(test, cells)] of every test any configuration lists, by name: a cell the configurations
    disagree on reads "OFF's / EMU's"; a test some lack is marked "(EMU only)"."""
    per = tests()
    names = sorted(set().union(*per.values()))
    rows = []
    for n in names:
        have = [c for c, _ in CONFIGS if n in per[c]]
        cols = list(zip(*[test_cells(per[c][n]) for c in have]))
        cells = [vs[0] if len(set(vs)) == 1 else " / ".join(v or "-" for v in vs) for vs in cols]
        label = f"`{n}`" + ("" if len(have) == len(CONFIGS) else f" ({', '.join(have)} only)")
        rows.append((label, cells))
    return rows


def cell(s):
    return s.replace("|", "\\|").strip()


def render(bin_dir):
    lines = ["# Reference: options, defaults, limits and tests", "",
             "Generated from the code by `python3 scripts/docs/gen_reference.py` (the built",
             "programs' `--help`, which print the macros, `base/sw_limits.h` and CTest's list",
             "of the tests); do not edit by hand. `tests/unit/test_docs.py` fails when this",
             "page is stale, and when another page states a default that differs from",
             "`--help`, names a macro (SW_*, NODE_*, ERR_*, ...) the code lacks or a path that",
             "does not exist, in the forms its header lists, or types a test's timeout. Some",
             "pages point here for these numbers; others type them, and what they type in",
             "those forms is compared with `--help` and the `#define`s.",
             "",
             "An option's default is the text its `--help` gives after \"default\" in",
             "parentheses, or the value named just before \"(default)\" (`--draft-k`'s",
             "\"auto = adaptive (default)\" gives auto); the column is empty where the help",
             "states none in either form.",
             "", "## Programs", ""]
    progs = all_help(bin_dir)
    lines.append(", ".join(f"[`{p}`](#{p.replace(' ', '-')})" for p in progs))
    for prog, entries in progs.items():
        lines += ["", f"### {prog}", "", "| option | argument | default | what |", "|---|---|---|---|"]
        for section, flag, short, meta, desc in entries:
            name = f"`{flag}`" + (f" (`-{short}`)" if short else "")
            lines.append(f"| {name} | {cell(meta)} | {cell(default_of(desc))} | {cell(desc)} |")
    lines += ["", "## Limits: base/sw_limits.h", "",
              "Each `#define` of the header with its value as written and its comment: the one on",
              "its line, else the comment block above its group (the `#define`s under it up to a",
              "blank line); but the include guard and the function-like macros (`SW_STR`,",
              "`SW_MIB_CEIL`, `SW_NODE_DEFAULT_SESSIONS_PER_CLIENT`).", "",
              "| name | value | comment |", "|---|---|---|"]
    for name, value, comment in limits():
        lines.append(f"| `{name}` | `{cell(value)}` | {cell(comment)} |")
    names = " and ".join(f"`-DSW_CUDA={c}`" for c, _ in CONFIGS)
    lines += ["", "## Tests", "",
              "Every CTest test with what tests/CMakeLists.txt gives it: its labels, its timeout",
              "(CTest's `TIMEOUT`, in seconds), whether it runs alone (`RUN_SERIAL`: no other test",
              "beside it under `ctest -j`) and the fixtures it needs (`FIXTURES_REQUIRED`: the test",
              "that sets one up runs first) or sets up (`FIXTURES_SETUP`). Read from",
              "`ctest --show-only=json-v1` with the source",
              f"tree configured (not built) in temporary folders with {names}, so the",
              "page is the same whatever build it is generated from. Where the two differ a cell",
              "reads \"OFF's / EMU's\" (`-` for none), and a test only one lists says so. A",
              "build with a real CUDA backend (nvcc found, as `.ci/run`'s `build/`) lists the OFF",
              "build's tests; what tests/CMakeLists.txt sets for any CUDA backend",
              "(`if(SW_HAVE_CUDA)`) takes the EMU value there, what it sets for the emulation",
              "alone (`if(SW_CUDA_EMU)`) keeps the OFF one. What the labels mean and which suite",
              "runs them: [testing.md, \"Suites\"](testing.md#suites).", "",
              "| test | labels | timeout (s) | run alone | fixtures |", "|---|---|---|---|---|"]
    for label, cells in test_rows():
        lines.append(f"| {label} | " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    build = rest[0] if rest else os.environ.get("SW_BUILD_DIR") or os.path.join(ROOT, "build")
    bin_dir = os.path.join(build, "bin")
    if not os.path.isfile(os.path.join(bin_dir, "shardwire")):
        print(f"{bin_dir}/shardwire: not built (bash scripts/build.sh first)", file=sys.stderr)
        return 2
    text = render(bin_dir)
    if check:
        old = open(OUT).read() if os.path.exists(OUT) else ""
        if old != text:
            print("docs/reference.md is stale: run python3 scripts/docs/gen_reference.py")
            return 1
        return 0
    open(OUT, "w").write(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
