#!/usr/bin/env python3
"""test_docs.py - the docs (README.md, docs/*.md) checked against the code, so
that a number or a name changed on one side alone fails the default suite:

1. Paths: every repository path a doc names (engine/gguf.c, tests/unit/..., a
   relative link [x](deploy.md)) exists, but the few examples in PATH_EXAMPLES;
   a source file named under another first folder (common/verify.c, a folder
   the repository no longer has) is the end of a repository path (cpu/x.c of
   engine/cpu/) or lies in a folder programs make (keys/, build/); and a file
   it names without its folder (`stage_timing.c`) is one some file
   of the repository is called, but the few FILE_EXAMPLES.
2. Defaults: a default a doc states for a flag ("`--flag` (N)", "`--flag`
   (default N)", "`--flag` (`MACRO`, N)", "`--flag`, default N", "N
   (`serve --flag`)") is one that some program's --help prints for that flag (the built programs print the
   macros); a macro a doc names (SW_*, NODE_*, HEAD_*, GW_*, ERR_* ...) occurs
   in the code, and where the doc gives its value ("`MACRO`, N", "`MACRO` (N
   MiB)", "N unit (`MACRO`)", "MACRO = N", or a table row "| MACRO | N unit |", e.g.
   protocol.md's limits) the #define says N (its expression evaluated, the
   unit converted: 16 MiB, 2^24, 16 MiB + 128 B); an error code a doc numbers
   ("`ERR_BUSY` 15") is that number in proto/shardwire.proto.
3. Mutations: every mutation a row of docs/testing.md's claims table names
   (`m:ID`) is in scripts/ci/mutations.py's claims group, every row names one
   or says why not ("by hand", "not shown", "not a code mutation"), and every
   mutation of the group is named by a row; a row naming `m:ID` names, in its
   test cell, the test the script runs for it, and names every file the
   mutation edits (so a row cannot describe another file's mutation).
4. docs/reference.md is what scripts/docs/gen_reference.py writes from this
   build (the programs' options and defaults, base/sw_limits.h) and from CTest's
   list of the tests (the source tree configured with -DSW_CUDA=OFF and =EMU in
   temporary folders: it needs cmake, a C and a C++ compiler, not this build).
5. Benchmarks: every region between `<!-- bench:NAME -->` and `<!-- /bench -->`
   (README.md, docs/*.md) is what scripts/docs/render_bench.py renders from
   docs/results/NAME.json, and every other table of docs/benchmarks.md is
   history: a date (YYYY-MM-DD) stands in its heading or between the heading
   and the table. A command a doc gives for a result file (`python3
   scripts/bench/X.py ARGS --json-out docs/results/NAME.json`) is that file's
   script, and every `--flag value` pair and word of ARGS is in the command the
   file records.
6. Cross-references: a part of a page a doc cites by name (`docs/X.md,
   "Heading"`, `X.md "Heading"`) is a heading, a bold run-in title or a list
   item's opening words of that page, and one cited by number (`X.md section
   N`) is a numbered heading there; a function or variable of the code a doc
   names (a word with one of CODE_PREFIXES: sw_model_fingerprint,
   s_allow_reload) occurs in the code, but the few CODE_EXAMPLES.
7. Fixtures: a table cell naming greedy fixtures (`greedy_smollm2.json`) with
   "P prompts x T tokens" states the prompts and n_gen the files hold.
8. Weight types: "N weight types" and the list "F32/F16/..." are the types
   engine/quant_types.c marks supported, but the activation-only q8_1, q8_K.
9. Quoted benchmark numbers: a speed ratio ("1.09-1.63x") or a speed ("7.2
   tok/s") that README.md, docs/status.md or docs/usage.md quote outside a
   rendered region is one docs/benchmarks.md holds (a rendered region or a
   dated history table there), so that it cannot drift from its source.
10. Test timeouts: a doc outside reference.md types no CTest timeout: "`test_x`
   N s" (or "`test_x` (N s", "`test_x`: N s") where N is that test's TIMEOUT in
   a configuration, or any N in a sentence that speaks of timeouts ("timeout",
   "TIMEOUT", "may take"), fails; the docs link reference.md's Tests table,
   which is generated from CTest. Other "`test_x` N s" (measured run times) pass.

Environment (tests/CMakeLists.txt sets it): SW_SOURCE_DIR, SW_BUILD_DIR.
The planted changes each check was shown to catch are in docs/testing.md
("test_docs").
"""
import glob
import json
import os
import re
import shlex
import subprocess
import sys

SRC = os.environ.get("SW_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("SW_BUILD_DIR") or os.path.join(SRC, "build")
sys.path.insert(0, os.path.join(SRC, "scripts", "docs"))
sys.path.insert(0, os.path.join(SRC, "scripts", "ci"))
import gen_reference  # noqa: E402

# Paths a doc names that are examples, not files of the repository (keep short; say why).
PATH_EXAMPLES = {
    "client/api.keys",  # docs/deploy.md: a file in the keys volume `shardwire cluster init` writes
    "docs/results/NAME.json",  # docs/benchmarks.md: how a rendered table names its result file
    "greedy_qwen05/15.json",  # docs/status.md: the two fixtures greedy_qwen05.json and greedy_qwen15.json
}
# A file a doc names without its folder (`stage.c`, `seal.[ch]`, `vm_systemd.sh`) is one of the
# repository's, but these, which programs write or systems hold (keep short; say why).
FILE_EXAMPLES = {
    "start.sh", "shardwire.sh",  # docs/deploy.md: the bundles `shardwire cluster init` writes
    "podman-restart.service",  # docs/deploy.md: podman's own systemd unit
}
FILE_NAME = re.compile(r"(?<![\w/.-])([A-Za-z0-9_+-]+)\.(\[ch\]|c|h|cu|cuh|cc|py|sh|cmake|ipynb|service|nft|yaml)\b")
# Upper-case words a doc uses that look like this code's macros but are placeholders.
MACRO_EXAMPLES = {
    "RELAY_HOST",  # docs/deploy.md: `--relay RELAY_HOST:5555`, the relay machine's address
}
FOLDERS = ("base", "engine", "net", "node", "relay", "client", "gateway", "hub", "cli", "tools",
           "drafter", "placement", "proto", "deploy", "scripts", "tests", "docs", ".ci")
PATH = re.compile(r"(?<![\w./~$-])((?:%s)/[A-Za-z0-9_./+-]*)" % "|".join(re.escape(f) for f in FOLDERS))
# A source file named under some other first folder (common/verify.c, from before engine/ and
# base/): it is the tail of a repository path (cpu/attention_cpu.c, in engine/), or a folder that
# programs make at run time (RUNTIME_FOLDERS), or it names a file that is not there.
OTHER_PATH = re.compile(r"(?<![\w./~$:-])([A-Za-z_][\w.-]*)/([\w./+-]*\.(?:c|h|cu|cuh|py|sh|proto|txt|"
                        r"cmake|yml|yaml|toml|json))\b")
RUNTIME_FOLDERS = ("keys", "relay-keys",  # docs/deploy.md: what `shardwire cluster init` writes
                   "build")  # a build folder (build/, build-m/): what scripts/build.sh makes
LINK = re.compile(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)")
# Macro names of this code base a doc may cite (external ones, ZMQ_*, AF_*, are not checked).
MACRO_NAME = r"(?:SW|NODE|HEAD|GW|RELAY|CLIENT|STAGE|PLACE|HUB|ERR|S)_[A-Z0-9_]*[A-Z0-9]"
MACRO = re.compile(r"(?<![\w.])(%s)(?![\w(])" % MACRO_NAME)
NUM = r"(\d+(?:\.\d+)?)"
UNIT = r"(?:\s*(ms|min|s|MiB|MB|GiB|KiB)(?![\w/]))?"
# "`--flag` (N)", "`--flag` (N unit)", "`--flag` (default N", "`--flag` (`MACRO`, N)",
# "`--flag`, default N"; the flag's backticks may hold a metavariable (`--spot-check P`), not a value.
FLAG = r"`(--[a-z0-9][a-z0-9-]*)(?: [A-Z][A-Za-z|]*)?`"
STATED = [
    re.compile(FLAG + r"\s*\((?:default:?\s*)?" + NUM + UNIT + r"\s*[),;:]"),
    re.compile(FLAG + r"\s*\(default:?\s*" + NUM + UNIT),
    re.compile(FLAG + r"\s*\(`([A-Z][A-Z0-9_]+)`,\s*" + NUM + UNIT + r"\s*\)"),
    re.compile(FLAG + r",\s*default:?\s*" + NUM + UNIT + r"(?![\w.])"),
]
# "`MACRO` (N)", "(`MACRO`, N)": the value a doc gives a macro of the code.
MACRO_VALUE = [re.compile(r"`([A-Z][A-Z0-9_]+)`\s*\(" + NUM + UNIT + r"\s*[),;]"),
               re.compile(r"\(`([A-Z][A-Z0-9_]+)`,\s*" + NUM + UNIT + r"\s*[),;]")]
TESTING = os.path.join(SRC, "docs", "testing.md")
NO_MUTATION = ("by hand", "not shown", "not a code mutation")

# Prefixes of this code's functions and variables: a doc's `name` or `name()` with one is looked up.
CODE_PREFIXES = ("sw_", "s_", "node_", "relay_", "head_", "stage_", "gw_", "client_", "wire_", "draft_",
                 "place_", "hub_", "cli_", "swemu_")
CODE_NAME = re.compile(r"(?<![\w./-])((?:%s)[a-z0-9_]*[a-z0-9])(?![\w/.-]*\.(?:c|h|cc|py|sh|md)\b)(?=\W)"
                       % "|".join(CODE_PREFIXES))
# Such names a doc uses that are not the code's: test_layers' planted violations (testing.md).
CODE_EXAMPLES = {"s_plant", "sw_plant", "relay_plant"}
# A page part cited by name or number: `docs/X.md, "Heading"`, `X.md "Heading"`, `X.md section N`.
CITED_NAME = re.compile(r"((?:docs/)?([a-z-]+|README)\.md)(?:'s)?,?\s*(?:section\s+\d+,?\s*)?\"([^\"\n]{2,80})\"")
CITED_NUMBER = re.compile(r"((?:docs/)?([a-z-]+|README)\.md)(?:'s)?,?\s*sections?\s+(\d+)")

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def docs():
    out = [os.path.join(SRC, "README.md")]
    out += sorted(glob.glob(os.path.join(SRC, "docs", "*.md")))
    return out


OFF = re.compile(r"<!-- test_docs: off -->.*?<!-- test_docs: on -->", re.S)


def read_doc(path):
    """A doc's text with its `<!-- test_docs: off -->` ... `on` regions blanked (lines kept):
    the one such region is docs/testing.md's table of planted wrong names and numbers."""
    text = open(path).read()
    return OFF.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def rel(p):
    return os.path.relpath(p, SRC)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def check_paths():
    cmake = [os.path.join(SRC, f) for f in source_files() if os.path.basename(f) == "CMakeLists.txt"]
    files = source_files()
    basenames = {os.path.basename(f) for f in files}
    for doc in docs() + sorted(cmake):
        text = read_doc(doc)
        for m in PATH.finditer(text):
            p = m.group(1).rstrip(".,:;)")
            if any(c in text[m.end():m.end() + 1] for c in "<*{[") or "..." in p or "XXXX" in p:
                continue  # a pattern (tests/<label>/test_*.c), not a path
            if p in PATH_EXAMPLES or not os.path.exists(os.path.join(SRC, p)):
                if p not in PATH_EXAMPLES:
                    fail(f"{rel(doc)}:{line_of(text, m.start())}: names {p}, which does not exist")
        for m in OTHER_PATH.finditer(text):
            top, p = m.group(1), m.group(0)
            if top in FOLDERS or top in RUNTIME_FOLDERS or top.startswith("build-") or p in PATH_EXAMPLES:
                continue
            if not any(f == p or f.endswith("/" + p) for f in files):
                fail(f"{rel(doc)}:{line_of(text, m.start())}: names {p}, which is no repository "
                     f"path nor the end of one")
        if not doc.endswith(".md"):
            continue
        for m in FILE_NAME.finditer(text):  # a file named without its folder: some file has that name
            name, ext = m.group(1), m.group(2)
            names = [name + ".c", name + ".h"] if ext == "[ch]" else [name + "." + ext]
            if not any(n in basenames or n in FILE_EXAMPLES for n in names) and not name.startswith("_"):
                fail(f"{rel(doc)}:{line_of(text, m.start())}: names {m.group(0)}, which no file is called")
        for m in LINK.finditer(text):
            target = m.group(1)
            if target.startswith(("http", "mailto")):
                continue
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(doc), target))):
                fail(f"{rel(doc)}:{line_of(text, m.start())}: links {target}, which does not exist")


def source_files():
    """The repository's files: git's list, else (a tree without .git) a walk of its folders."""
    r = subprocess.run(["git", "ls-files"], cwd=SRC, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True)
    if r.returncode == 0 and r.stdout.strip():
        return r.stdout.split()
    out = [f for f in os.listdir(SRC) if os.path.isfile(os.path.join(SRC, f))]
    for top in FOLDERS:
        for d, _, names in os.walk(os.path.join(SRC, top)):
            out += [os.path.relpath(os.path.join(d, n), SRC) for n in names]
    return out


def code_text():
    """Every file of the repository but the docs, concatenated (where macros are looked up)."""
    files = source_files()
    parts = []
    for f in files:
        if f.endswith((".md", ".gguf", ".bin", ".json", ".png")) or f.startswith(("docs/", "tests/fixtures/")):
            continue
        try:
            parts.append(open(os.path.join(SRC, f), errors="replace").read())
        except (IsADirectoryError, FileNotFoundError):
            pass
    return "\n".join(parts)


def to_unit(flag, value, unit):
    """A doc's value in the unit of the flag's name (--round-timeout-ms (60 s) is 60000)."""
    v = float(value)
    if unit == "s" and flag.endswith("-ms"):
        return v * 1000
    if unit == "ms" and flag.endswith("-s"):
        return v / 1000
    return v


def s_macro_values():
    """{MACRO: value} of every #define of the C sources whose value is a constant expression of
    numbers and other such macros ((4u << 20), (SW_WIRE_MAX_PAYLOAD + 128u), 10 * 60 * 1000);
    a name defined twice with different values is left out."""
    raw = {}
    for f in source_files():
        if not f.endswith((".c", ".h", ".cu", ".cuh")):
            continue
        try:
            text = re.sub(r"\\\n", " ", open(os.path.join(SRC, f), errors="replace").read())
        except (IsADirectoryError, FileNotFoundError):
            continue
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+([A-Z][A-Z0-9_]+)[ \t]+([^\n]*?)[ \t]*(?://[^\n]*|/\*[^\n]*)?$",
                             text, re.M):
            raw.setdefault(m.group(1), set()).add(m.group(2))
    values = {}

    def value(name, depth=0):
        if name in values:
            return values[name]
        if name not in raw or depth > 20 or len(raw[name]) != 1:
            return None
        expr = next(iter(raw[name]))
        expr = re.sub(r"\b(\d+(?:\.\d+)?)[uUlLfF]+\b", r"\1", expr)
        expr = re.sub(r"\(\s*(?:u?int\d+_t|size_t|double|float|int|long|unsigned)\s*\)", "", expr)
        if not re.fullmatch(r"[\sA-Z0-9_().+*/<>-]+", expr):
            return None
        names = re.findall(r"\b[A-Z_][A-Z0-9_]*\b", expr)
        subs = {n: value(n, depth + 1) for n in names}
        if any(v is None for v in subs.values()):
            return None
        expr = re.sub(r"\b[A-Z_][A-Z0-9_]*\b", lambda m: "(%r)" % subs[m.group(0)], expr)
        try:
            v = eval(expr.replace("/", "//") if "." not in expr else expr, {"__builtins__": {}})
        except Exception:  # noqa: BLE001 - not a constant expression
            return None
        values[name] = v if isinstance(v, (int, float)) else None
        return values[name]

    for name in raw:
        value(name)
    return {k: v for k, v in values.items() if v is not None}


# What a unit a doc writes after a number may stand for in the code: the value as written, or
# converted (16 MiB is 16777216 bytes for SW_WIRE_MAX_PAYLOAD, 16 for SW_RELAY_DEFAULT_..._MIB).
SCALES = {"": (1,), "B": (1,), "bytes": (1,), "ms": (1, 1e-3), "s": (1, 1e3), "min": (1, 60, 6e4),
          "KiB": (1, 1 << 10), "MiB": (1, 1 << 20), "GiB": (1, 1 << 30)}
AMOUNT = re.compile(r"(\d[\d,]*(?:\.\d+)?)(?:\^(\d+))?(?:\s*(minutes?|seconds?|ms|min|s|B|bytes|KiB|MiB|GiB)\b)?")


def s_amounts(text):
    """The values a doc's "N unit [+ N unit]" at the start of text may mean, or None when it
    does not start with one: 2^24, 16 MiB + 128 B (one value: bytes), 1000 ms."""
    parts = []
    rest = text.strip()
    while True:
        m = AMOUNT.match(rest)
        if not m:
            return None
        v = float(m.group(1).replace(",", ""))
        if m.group(2):
            v = v ** int(m.group(2))
        unit = {"minute": "min", "minutes": "min", "second": "s", "seconds": "s"}.get(m.group(3), m.group(3))
        parts.append((v, unit or ""))
        rest = rest[m.end():].lstrip()
        if not rest.startswith("+ "):
            break
        rest = rest[2:]
    if len(parts) == 1:
        v, unit = parts[0]
        return {v * k for k in SCALES[unit]}
    total = 0.0  # a sum is in bytes (or plain numbers)
    for v, unit in parts:
        total += v * (max(SCALES[unit]) if unit in ("KiB", "MiB", "GiB") else 1)
    return {total}


def s_same(code_value, amounts):
    return any(abs(code_value - a) <= 1e-9 * max(1.0, abs(a)) for a in amounts)


def s_macro_cell(cell):
    """The macros a table cell names (`SW_WIRE_MAX_STOP / _STOP_LEN`: two), or [] when the cell is
    not only macro names."""
    names = [n.strip().strip("`") for n in cell.split(" / ")]
    if not names or not re.fullmatch(MACRO_NAME, names[0]):
        return []
    out = [names[0]]
    for short in names[1:]:
        if not re.fullmatch(r"_[A-Z0-9_]+", short):
            return []
        base = names[0]
        cands = [base[:i] + short for i in range(len(base)) if base[i] == "_"] + [base + short]
        out.append(next((c for c in reversed(cands) if c in s_macro_cell.known), cands[-1]))
    return out


s_macro_cell.known = set()


def check_default_tables(defaults):
    """A table with a "default" column whose row names a flag (architecture.md's bounds,
    fault-tolerance.md's settings, protocol.md's relay defaults): the number the default cell
    starts with is one --help prints for that flag (a cell without a number is not checked)."""
    n = 0
    for doc in docs():
        if doc.endswith("reference.md"):
            continue  # generated from the code
        col = None
        for ln, line in enumerate(read_doc(doc).splitlines(), 1):
            if not line.startswith("|"):
                col = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if col is None:
                low = [c.lower() for c in cells]
                col = low.index("default") if "default" in low else -1
                continue
            if col < 0 or len(cells) <= col or set(cells[0]) <= set("-: "):
                continue
            flag = re.search(r"`(--[a-z0-9][a-z0-9-]*)(?: [A-Z][A-Za-z|]*)?`", cells[0])
            amounts = s_amounts(re.sub(r"\([^)]*\)", "", cells[col]))
            if not flag or amounts is None:
                continue
            stated = {p: v for p, v in defaults.get(flag.group(1), {}).items() if v}
            if not stated:
                continue
            n += 1
            if not any(any(s_same(x, amounts) for x in v) for v in stated.values()):
                fail(f"{rel(doc)}:{ln}: the table gives {flag.group(1)} the default '{cells[col]}'; --help "
                     f"says {sorted({x for v in stated.values() for x in v})}")
    return n


def check_macro_values(defines):
    """The values docs give the code's macros in limits tables ("| SW_WIRE_MAX_POS | 2^24 |",
    "| `--hwm` | SW_RELAY_DEFAULT_HWM | 128 messages |") and as "MACRO = N"; and the numbers
    they give error codes ("`ERR_BUSY` 15") against proto/shardwire.proto; and a value a doc
    gives before the macro's name ("every 300 ms (`CLIENT_RESUME_GAP_MS`)")."""
    s_macro_cell.known = set(defines)
    # test_layers.py's bounds (MAX_FILE_LINES = 1000), which architecture.md "Sizes" states
    layers = open(os.path.join(SRC, "tests", "unit", "test_layers.py")).read()
    defines = dict(defines, **{k: int(v) for k, v in re.findall(r"^(MAX_[A-Z_]+) = (\d+)$", layers, re.M)})
    proto = open(os.path.join(SRC, "proto", "shardwire.proto")).read()
    codes = {k: int(v) for k, v in re.findall(r"\b(ERR_[A-Z_]+)\s*=\s*(\d+);", proto)}
    n = 0
    for doc in docs():
        if doc.endswith("reference.md"):
            continue  # generated from the code
        raw = read_doc(doc)
        for ln, line in enumerate(raw.splitlines(), 1):
            if not line.startswith("|"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            for i, cell in enumerate(cells[:-1]):
                names = s_macro_cell(cell)
                if not names:
                    continue
                vals = [re.sub(r"\([^)]*\)", "", v).strip() for v in cells[i + 1].split(" / ")]
                if len(vals) != len(names):
                    continue
                for name, val in zip(names, vals):
                    amounts = s_amounts(val)
                    if amounts is None or name not in defines:
                        continue
                    n += 1
                    if not s_same(defines[name], amounts):
                        fail(f"{rel(doc)}:{ln}: the table gives {name} as '{val}'; the code's value is "
                             f"{defines[name]:.15g}")
        text = re.sub(r"\s*\n\s*", " ", raw)
        for m in re.finditer(r"`?\b([A-Z][A-Z0-9_]*_[A-Z0-9_]+)`?\s*=\s*(\d[^\s,;)]*(?:\s*(?:ms|min|s|MiB|KiB|GiB|B|bytes)\b)?)",
                             text):
            name, val = m.group(1), m.group(2)
            amounts = s_amounts(val)
            if name not in defines or amounts is None:
                continue  # an environment variable (SW_NCCL=0) or another program's constant
            n += 1
            if not s_same(defines[name], amounts):
                fail(f"{rel(doc)}: '{m.group(0)}': {name} is {defines[name]:.15g} in the code")
        # "300 ms (`CLIENT_RESUME_GAP_MS`)", "16 MiB + 128 B (`SW_WIRE_MAX_FRAME`)", "30 s, `MACRO`"
        # (up to three words between: "16384 such windows (`SW_SEAL_SENDERS_MAX`)")
        unit = r"(?:\s*(?:minutes?|seconds?|ms|min|s|MiB|KiB|GiB|B|bytes)\b)?"
        # (the upper end of a range counts: "1..1048576 (`SW_REQUEST_MAX_N_PREDICT`)")
        for m in re.finditer(r"(?<![\w^+-])(?<![^.]\.)((?:\d[\d,]*(?:\.\d+)?(?:\^\d+)?" + unit + r"\s*\+\s*)*"
                             r"\d[\d,]*(?:\.\d+)?(?:\^\d+)?" + unit + r")(?:\s+[a-z-]+){0,3}"
                             r"\s*(?:\(|,\s*)`(%s|MAX_[A-Z_]+)`" % MACRO_NAME, text):
            val, name = m.group(1), m.group(2)
            amounts = s_amounts(val)
            if name not in defines or amounts is None:
                continue
            n += 1
            if not s_same(defines[name], amounts):
                fail(f"{rel(doc)}: '{m.group(0)}': {name} is {defines[name]:.15g} in the code")
        for m in re.finditer(r"`(ERR_[A-Z_]+)`\s*(?:(\d+)\b(?![\d.]|\s*(?:peers|ms|s\b|bytes|MiB))|\((\d+)\))",
                             text):
            name, val = m.group(1), m.group(2) or m.group(3)
            n += 1
            if name not in codes:
                fail(f"{rel(doc)}: names {name}, which proto/shardwire.proto lacks")
            elif codes[name] != int(val):
                fail(f"{rel(doc)}: '{m.group(0)}': {name} is {codes[name]} in proto/shardwire.proto")
    return n


def check_defaults():
    progs = gen_reference.all_help(os.path.join(BUILD, "bin"))
    defaults = {}  # flag -> {program: [numbers of its default]}
    for prog, entries in progs.items():
        for _, flag, _, _, desc in entries:
            defaults.setdefault(flag, {})[prog] = gen_reference.numbers(gen_reference.default_of(desc))
    code = code_text()
    defines = s_macro_values()
    names = set(re.findall(r"[A-Z][A-Z0-9_]+", code))
    checked, seen = 0, set()
    for doc in docs():
        if doc.endswith("reference.md"):
            continue  # generated from the code
        raw = read_doc(doc)
        text = re.sub(r"\s*\n\s*", " ", raw)  # sentences wrap: match across lines
        for m in MACRO.finditer(raw):
            if m.group(1) not in names and m.group(1) not in MACRO_EXAMPLES:
                fail(f"{rel(doc)}:{line_of(raw, m.start())}: names {m.group(1)}, which the code lacks")
        for rx in MACRO_VALUE:
            for m in rx.finditer(text):
                name, value = m.group(1), m.group(2)
                amounts = s_amounts(value + (" " + m.group(3) if m.group(3) else ""))
                if name in defines and not s_same(defines[name], amounts):
                    fail(f"{rel(doc)}: {m.group(0)}: {name} is {defines[name]:.15g} in the code, the doc says {value}")
                elif name in defines:
                    checked += 1
        for rx in STATED:
            for m in rx.finditer(text):
                g = m.groups()
                flag = g[0]
                macro, value, unit = (g[1], g[2], g[3]) if len(g) == 4 else (None, g[1], g[2])
                where = f"{rel(doc)}: `{flag}` ({m.group(0)[len(flag) + 2:].strip()[:40]})"
                if (doc, m.start()) in seen:
                    continue  # two forms matched the same words
                seen.add((doc, m.start()))
                if re.match(r"\s*(of|or|to|:\d)", text[m.end(m.lastindex):]):
                    continue  # "12 of 16", "8 or more", a time of day: not a default
                if flag not in defaults:
                    continue  # a script's flag (scripts/bench/*.py --qwen); test_cli checks the programs'

                stated = {p: n for p, n in defaults[flag].items() if n}
                if not stated:
                    continue  # --help states no numeric default for it (e.g. "half the memory")
                v = to_unit(flag, value, unit)
                checked += 1
                if not any(v in n for n in stated.values()):
                    got = "; ".join(f"{p}: {gen_reference.default_of(d)}"
                                    for p in stated for _, f, _, _, d in progs[p] if f == flag)
                    fail(f"{where}: the doc says {value}{' ' + unit if unit else ''}, --help says {got}")
    # "512 (`serve --max-tokens`)", "40 (`--top-k`)", "5 s (`--handshake-ms`)": a value before its flag
    for doc in docs():
        if doc.endswith("reference.md"):
            continue
        text = re.sub(r"\s*\n\s*", " ", read_doc(doc))
        for m in re.finditer(r"(?<![\w.])" + NUM + UNIT + r"\s*\(`(?:[a-z]+ )?(--[a-z0-9][a-z0-9-]*)`\)", text):
            value, unit, flag = m.group(1), m.group(2), m.group(3)
            stated = {p: n for p, n in defaults.get(flag, {}).items() if n}
            if not stated:
                continue  # a script's flag, or one whose --help states no numeric default
            checked += 1
            if not any(to_unit(flag, value, unit) in n for n in stated.values()):
                fail(f"{rel(doc)}: '{m.group(0)}': --help gives {flag} the default(s) "
                     f"{sorted({x for n in stated.values() for x in n})}")
    checked += check_default_tables(defaults)
    checked += check_macro_values(defines)
    print(f"defaults: {checked} stated defaults, macro values and error codes compared with the code")


def mutation_parts(entry):
    """(name, [files], old, new, test, env) of a claims entry of scripts/ci/mutations.py: a
    mutation edits one file or a list of them; its test is a ctest name or a command."""
    name, files, old, new, test, env = entry
    return name, files if isinstance(files, list) else [files], old, new, test, env


def check_mutations():
    import mutations
    ids = {}
    for entry in mutations.CLAIMS:
        name = entry[0]
        mid = name.split(":", 1)[0]
        if not re.fullmatch(r"[a-z0-9-]+", mid) or mid in ids:
            fail(f"scripts/ci/mutations.py: claims mutation '{name[:60]}' has no unique 'id: ' prefix")
        ids[mid] = entry
    text = open(TESTING).read()
    section = text.split("## Claims and the tests that back them", 1)[1]
    rows = [l for l in section.splitlines() if l.startswith("| ") and not l.startswith("| claim |")]
    named = set()
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
        tags = re.findall(r"`m:([a-z0-9-]+)`", row)
        for t in tags:
            named.add(t)
            if t not in ids:
                fail(f"docs/testing.md: row '{cells[0][:50]}' names mutation m:{t}, "
                     "which scripts/ci/mutations.py claims lacks")
        if not tags and not any(k in cells[-1] for k in NO_MUTATION):
            fail(f"docs/testing.md: row '{cells[0][:50]}' names no `m:ID` of scripts/ci/mutations.py "
                 f"and does not say {' / '.join(NO_MUTATION)}")
        for t in tags:
            if t not in ids:
                continue
            # the row names the ctest the script runs for it (in its test cell) and every file
            # the mutation edits, so that a row cannot describe a mutation of another file or
            # one the script checks with another test
            _, files, _, _, test, _ = mutation_parts(ids[t])
            if isinstance(test, str) and len(cells) >= 3 and not re.search(r"\b%s\b" % re.escape(test), cells[2]):
                fail(f"docs/testing.md: row '{cells[0][:50]}' names m:{t}, which "
                     f"scripts/ci/mutations.py checks with {test}, not named in its test cell")
            for f in files:
                if not re.search(r"(?<![\w.-])%s\b" % re.escape(os.path.basename(f)), row):
                    fail(f"docs/testing.md: row '{cells[0][:50]}' names m:{t}, which edits {f}; "
                         "the row does not name that file")
    # every mutation's text is in its file exactly once, in every group (CI's claims run is
    # a seeded window: a text that a refactor moved would otherwise fail only when drawn)
    for group, (entries, _, _) in mutations.GROUPS.items():
        for entry in entries:
            bad = mutations.apply_text(mutations.edits_of(entry[1], entry[2], entry[3]))
            if isinstance(bad, str):
                fail(f"scripts/ci/mutations.py: {group} mutation '{entry[0][:60]}': the text to "
                     f"mutate is not in {bad} exactly once; update it to the code")
    for mid in ids:
        if mid not in named:
            fail(f"scripts/ci/mutations.py: claims mutation {mid} is named by no row of docs/testing.md")
    print(f"mutations: {len(rows)} rows, {len(named)} mutations named, {len(ids)} in mutations.py")


def check_reference():
    text = gen_reference.render(os.path.join(BUILD, "bin"))
    path = os.path.join(SRC, "docs", "reference.md")
    old = open(path).read() if os.path.exists(path) else ""
    if old != text:
        was, now = old.splitlines(), text.splitlines()
        i = next((k for k in range(min(len(was), len(now))) if was[k] != now[k]), min(len(was), len(now)))
        first = (f" (line {i + 1} is '{was[i] if i < len(was) else ''}', the code gives "
                 f"'{now[i] if i < len(now) else ''}')")
        fail("docs/reference.md is stale: run python3 scripts/docs/gen_reference.py" + first)


# "`test_x` N s", "`test_x` (N s", "`test_x`: N s": a number of seconds next to a test's name.
TEST_SECONDS = re.compile(r"`([A-Za-z][\w]*)`[\s:,(]*(\d[\d,]*(?:\.\d+)?) ?s\b")
TIMEOUT_WORDS = re.compile(r"timeout|TIMEOUT|may take")


def check_tests():
    per = gen_reference.tests()
    timeouts = {}
    for facts in per.values():
        for name, f in facts.items():
            if f["timeout"] is not None:
                timeouts.setdefault(name, set()).add(float(f["timeout"]))
    n, bad = 0, len(failures)
    for doc in docs():
        if doc.endswith("reference.md"):
            continue
        text = read_doc(doc)
        for m in TEST_SECONDS.finditer(text):
            name, secs = m.group(1), float(m.group(2).replace(",", ""))
            if name not in timeouts:
                continue
            n += 1
            # the sentence (or table cell) around the number, before it and after it
            begin = max([text.rfind(sep, 0, m.start()) for sep in (". ", "\n\n", " | ")] + [0])
            ends = [text.find(sep, m.end()) for sep in (". ", "\n\n", " | ")]
            end = min([e for e in ends if e >= 0] + [len(text)])
            where = f"{rel(doc)}:{line_of(text, m.start())}"
            table = "/".join("%g" % t for t in sorted(timeouts[name]))
            if secs in timeouts[name]:
                fail(f"{where}: types {name}'s CTest timeout ({m.group(2)} s): link the generated "
                     "table docs/reference.md#tests instead")
            elif TIMEOUT_WORDS.search(text, begin, end):
                fail(f"{where}: gives {name} {m.group(2)} s where it speaks of timeouts; its TIMEOUT "
                     f"is {table} s (docs/reference.md#tests): link the table instead")
    listed = ", ".join(f"{len(v)} ({c})" for c, v in per.items())
    print(f"tests: CTest lists {listed}; {n} '`test` N s' in the docs, "
          f"{len(failures) - bad} of them timeouts")


def check_bench():
    import render_bench
    for problem in render_bench.run(check=True):
        fail(problem)
    text = render_bench.REGION.sub("", open(os.path.join(SRC, "docs", "benchmarks.md")).read())
    lines, start, in_table, n = text.splitlines(), 0, False, 0
    for i, line in enumerate(lines):
        if line.startswith("#"):
            start = i
        if line.startswith("|") and not in_table:
            n += 1
            if not re.search(r"20\d\d-\d\d-\d\d", "\n".join(lines[start:i])):
                fail(f"docs/benchmarks.md: the table under '{lines[start][:60]}' is neither "
                     "rendered (<!-- bench:NAME -->) nor dated history (a date above it)")
        in_table = line.startswith("|")
    n += check_measured_tables()
    n_cmd = check_bench_commands()
    print(f"benchmarks: {len(render_bench.docs())} pages' bench regions rendered, "
          f"{n} typed tables of measurements dated, {n_cmd} commands of result files compared")


# A table of other pages holding measurements of speed, latency or memory (these units) is
# history too: dated like benchmarks.md's (protocol.md section 9, security.md section 7).
MEASURED = re.compile(r"tok/s|msg/s|GB/s|MB/s|\d ?us\b|\d ?\u00b5s\b|VmRSS")


def check_measured_tables():
    import render_bench
    n = 0
    for doc in docs():
        if doc.endswith(("reference.md", "benchmarks.md")):
            continue
        lines = render_bench.REGION.sub("", read_doc(doc)).splitlines()
        start, in_table = 0, False
        for i, line in enumerate(lines):
            if line.startswith("#"):
                start = i
            if line.startswith("|") and not in_table:
                end = i
                while end < len(lines) and lines[end].startswith("|"):
                    end += 1
                if MEASURED.search("\n".join(lines[i:end])):
                    n += 1
                    if not re.search(r"20\d\d-\d\d-\d\d", "\n".join(lines[start:i])):
                        fail(f"{rel(doc)}:{i + 1}: the table under '{lines[start][:60]}' holds measurements "
                             "but no date (YYYY-MM-DD in its heading or the text above it)")
            in_table = line.startswith("|")
    return n


# A command a doc gives for a result file: `python3 scripts/bench/X.py ARGS --json-out
# docs/results/NAME.json` (lines joined at a trailing backslash).
BENCH_CMD = re.compile(r"python3 scripts/bench/([\w]+\.py)((?:[^\n`]|\\\n)*?)--json-out\s+docs/results/([\w.-]+)\.json")


def s_words(command):
    """A command's words as a shell reads them (the bench scripts record shlex.join(argv));
    split on spaces where the quotes do not pair (older records joined argv with spaces)."""
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def check_bench_commands():
    """Every argument of a command a doc gives for docs/results/NAME.json is in the command the
    file records (the file may hold more: --build, --note), and it is the same script."""
    n = 0
    for path in docs():
        text = read_doc(path)
        for m in BENCH_CMD.finditer(text):
            script, args, name = m.group(1), m.group(2).replace("\\\n", " "), m.group(3)
            res = os.path.join(SRC, "docs", "results", name + ".json")
            if not os.path.exists(res):
                continue  # a path check names it
            n += 1
            recorded = json.load(open(res)).get("command", "")
            words = s_words(recorded)
            if not words or words[0] != script:
                fail(f"{rel(path)}:{line_of(text, m.start())}: gives {script} for {name}.json, "
                     f"whose command is '{recorded[:60]}'")
                continue
            given = [a for a in s_words(args) if a != "\\"]
            pairs = {(a, b) for a, b in zip(words, words[1:])}
            for i, a in enumerate(given):
                # a flag with its value is a pair of the recorded command, anything else a word
                if a.startswith("--") and i + 1 < len(given) and not given[i + 1].startswith("--"):
                    # (older records joined the words without quotes: a quoted value is then
                    # the recorded words that follow the flag)
                    run = [a] + given[i + 1].split()
                    ok = (a, given[i + 1]) in pairs or any(
                        words[k:k + len(run)] == run for k in range(len(words)))
                    what = f"{a} {given[i + 1]}"
                elif i > 0 and given[i - 1].startswith("--") and not a.startswith("--"):
                    continue  # the value of the pair above
                else:
                    ok, what = a in words, a
                if not ok:
                    fail(f"{rel(path)}:{line_of(text, m.start())}: the command for {name}.json has "
                         f"'{what}', which the command the file records lacks: '{recorded[:200]}'")
    return n


def s_parts(text):
    """A page's parts a doc may cite by name: headings, bold run-in titles (**Split sets.**)
    and list items' opening words (- Compute shared per key (...)), lower-case, without `*`."""
    parts = re.findall(r"^#+\s+(.*)$", text, re.M) + re.findall(r"\*\*([^*\n]{2,80})\*\*", text)
    parts += re.findall(r"^\s*- ([^\n]{2,80})", text, re.M)
    return [re.sub(r"[`*]", "", p).strip().lower() for p in parts]


def check_xrefs():
    pages = {os.path.basename(d): read_doc(d) for d in docs()}
    parts = {name: s_parts(text) for name, text in pages.items()}
    c_files = [f for f in source_files() if f.endswith((".c", ".h", ".cu", ".cuh", ".cc"))]
    names = set()
    for f in c_files:  # the C sources alone: a script's text (a mutation) is no definition
        try:
            names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", open(os.path.join(SRC, f), errors="replace").read()))
        except (IsADirectoryError, FileNotFoundError):
            pass
    n_cited = n_named = 0
    for doc in docs():
        if doc.endswith("reference.md"):
            continue  # generated from the code
        raw = read_doc(doc)
        text = re.sub(r"\s*\n\s*", " ", raw)
        for m in CITED_NAME.finditer(text):
            page, quoted = m.group(2) + ".md", re.sub(r"[`*]", "", m.group(3)).strip().lower()
            if page not in parts:
                continue  # a link check's matter (check_paths)
            n_cited += 1
            if not any(p.startswith(quoted) or quoted in p for p in parts[page]):
                fail(f"{rel(doc)}: cites {m.group(1)} \"{m.group(3)}\", which is no heading, bold title "
                     "or list item of that page")
        for m in CITED_NUMBER.finditer(text):
            page, n = m.group(2) + ".md", m.group(3)
            if page not in pages:
                continue
            n_cited += 1
            if not re.search(r"^#+\s+%s\.\s" % n, pages[page], re.M):
                fail(f"{rel(doc)}: cites {m.group(1)} section {n}, which has no heading '{n}.'")
        for m in CODE_NAME.finditer(raw):
            n_named += 1
            if m.group(1) not in names and m.group(1) not in CODE_EXAMPLES:
                fail(f"{rel(doc)}:{line_of(raw, m.start())}: names {m.group(1)}, which the code lacks")
    print(f"cross-references: {n_cited} page parts cited, {n_named} code names looked up")


FIXTURE = re.compile(r"([a-z][a-z0-9_]*?)(\d+(?:/\d+)+)?\.json")
PROMPTS_X_TOKENS = re.compile(r"(\d+) (?:prompts )?x (\d+)")


def s_fixture(name):
    """(prompts, tokens each) of tests/fixtures/NAME.json, or None when there is no such file."""
    path = os.path.join(SRC, "tests", "fixtures", name + ".json")
    if not os.path.isfile(path):
        return None
    d = json.load(open(path))
    cases = next((v for v in d.values() if isinstance(v, list)), [])
    return len(cases), d.get("n_gen")


def check_fixtures():
    """A table cell that names greedy fixtures (greedy_smollm2.json, greedy_qwen05/15.json) and
    states "P prompts x T tokens" (or "P x T", one pair for all of them or one each, in order)
    states what the fixture files hold: their number of prompts and n_gen."""
    n = 0
    for doc in docs():
        for ln, line in enumerate(read_doc(doc).splitlines(), 1):
            for cell in line.split(" | ") if line.startswith("|") else []:
                names = []
                for m in FIXTURE.finditer(cell):
                    names.append(m.group(1) + (m.group(2) or "").split("/")[0])
                    names += [m.group(1) + x for x in (m.group(2) or "").split("/")[1:]]
                names = [x for x in names if s_fixture(x)]
                pairs = PROMPTS_X_TOKENS.findall(cell)
                if not names or not pairs:
                    continue
                if len(pairs) == 1:
                    pairs = pairs * len(names)
                if len(pairs) != len(names):
                    fail(f"{rel(doc)}:{ln}: {len(names)} fixtures but {len(pairs)} 'P x T' counts in one cell")
                    continue
                for name, (p, t) in zip(names, pairs):
                    n += 1
                    if s_fixture(name) != (int(p), int(t)):
                        got = s_fixture(name)
                        fail(f"{rel(doc)}:{ln}: {name}.json: the doc says {p} prompts x {t} tokens, "
                             f"the fixture holds {got[0]} x {got[1]}")
    print(f"fixtures: {n} stated prompt and token counts compared with tests/fixtures/")


# Types the engine computes only as activations (the vec of a weight type), never as weights.
ACTIVATION_ONLY = {"q8_1", "q8_K"}


def check_types():
    """The weight types the docs count and list are those engine/quant_types.c supports."""
    traits = open(os.path.join(SRC, "engine", "quant_types.c")).read()
    weights = {t for t in re.findall(r'\{"([A-Za-z0-9_]+)", \d+, \d+, 1, ', traits)} - ACTIVATION_ONLY
    if not weights:
        fail("engine/quant_types.c: no supported type found (did its table's layout change?)")
        return
    n = 0
    for doc in docs():
        text = re.sub(r"\s*\n\s*", " ", read_doc(doc))
        for m in re.finditer(r"(\d+) weight types", text):
            n += 1
            if int(m.group(1)) != len(weights):
                fail(f"{rel(doc)}: '{m.group(0)}', engine/quant_types.c supports {len(weights)}")
        for m in re.finditer(r"\bF32/F16(?:/[A-Z0-9_]+)+", text):  # status.md's list of them
            n += 1
            listed = {t.lower() for t in m.group(0).split("/")}
            want = {t.lower() for t in weights}
            if listed != want:
                fail(f"{rel(doc)}: lists {m.group(0)}; engine/quant_types.c supports "
                     f"{'/'.join(sorted(weights))} (missing {sorted(want - listed)}, extra {sorted(listed - want)})")
    print(f"weight types: {n} counts and lists compared with engine/quant_types.c ({len(weights)} types)")


# Pages that quote benchmark numbers from docs/benchmarks.md (which holds them rendered from a
# result file or in a dated history table): a ratio or a speed they give must be in the section
# of it they cite next (`docs/benchmarks.md "K-quant prompts"` after it in the same table cell
# or paragraph; the one before it when none follows), or, citing none there, in the page.
QUOTING = ("README.md", os.path.join("docs", "status.md"), os.path.join("docs", "usage.md"))
QUOTED = re.compile(r"(?<![\w.])(\d+\.\d+)(?:-(\d+(?:\.\d+)?))?(x\b| tok/s\b)")
CITES_BENCH = re.compile(r"benchmarks\.md,?\s*\"([^\"\n]{2,80})\"")


def s_section(text, title):
    """The text of the section of a page whose heading starts with (or holds) title, to the next
    heading of its level or above; None when there is none."""
    lines = text.splitlines()
    t = title.lower()
    for i, line in enumerate(lines):
        m = re.match(r"(#+)\s+(.*)", line)
        if m and (m.group(2).lower().replace("`", "").startswith(t) or t in m.group(2).lower().replace("`", "")):
            level = len(m.group(1))
            j = i + 1
            while j < len(lines) and not (re.match(r"#+\s", lines[j]) and len(re.match(r"#+", lines[j]).group(0)) <= level):
                j += 1
            return "\n".join(lines[i:j])
    return None


def check_quoted_bench():
    import render_bench
    bench = open(os.path.join(SRC, "docs", "benchmarks.md")).read()
    n = 0
    for page in QUOTING:
        text = render_bench.REGION.sub("", read_doc(os.path.join(SRC, page)))
        for m in QUOTED.finditer(text):
            # the paragraph or table cell the number stands in
            ends = [e for e in (text.find("\n\n", m.end()), text.find(" | ", m.end())) if e >= 0]
            end = min(ends or [len(text)])
            begins = [b + 2 for b in (text.rfind("\n\n", 0, m.start()), text.rfind(" | ", 0, m.start())) if b >= 0]
            begin = max(begins or [0])
            after = CITES_BENCH.search(text, m.end(), end)
            before = [c for c in CITES_BENCH.finditer(text, begin, m.start())][-1:]
            cites = [c.group(1) for c in ([after] if after else before)]
            scopes = [s_section(bench, c) for c in cites]
            if cites and all(sc is None for sc in scopes):
                continue  # check_xrefs names a citation of no section
            scopes = [sc for sc in scopes if sc is not None] or [bench]
            where = " or ".join(f'"{c}"' for c in cites) or "the page"
            for v in (m.group(1), m.group(2)):
                if not v:
                    continue
                n += 1
                if not any(re.search(r"(?<![\w.])%s(?!\d)" % re.escape(v), sc) for sc in scopes):
                    fail(f"{page}:{line_of(text, m.start())}: quotes '{m.group(0)}'; docs/benchmarks.md "
                         f"{where} has no {v} (a quoted number comes from the tables it cites)")
    print(f"quoted benchmark numbers: {n} ratios and speeds of {', '.join(QUOTING)} found where they cite")

def main():
    if not os.path.isfile(os.path.join(BUILD, "bin", "shardwire")):
        print(f"{BUILD}/bin/shardwire: not built", file=sys.stderr)
        return 1
    check_paths()
    check_defaults()
    check_mutations()
    check_reference()
    check_tests()
    check_bench()
    check_xrefs()
    check_fixtures()
    check_types()
    check_quoted_bench()
    print(f"{len(failures)} failures" if failures else "docs agree with the code")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
