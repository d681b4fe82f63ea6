#!/usr/bin/env python3
"""test_docs.py - the docs (README.md, docs/*.md) checked against the code, so
that a number or a name changed on one side alone fails the default suite:

1. Paths: every repository path a doc names (engine/gguf.c, tests/unit/..., a
   relative link [x](deploy.md)) exists, but the few examples in PATH_EXAMPLES,
   and a file it names without its folder (`stage_timing.c`) is one some file
   of the repository is called, but the few FILE_EXAMPLES.
2. Defaults: a default a doc states for a flag ("`--flag` (N)", "`--flag`
   (default N)", "`--flag` (`MACRO`, N)", "`--flag`, default N") is one that
   some program's --help prints for that flag (the built programs print the
   macros); a macro a doc names (SW_*, NODE_*, HEAD_*, GW_*, ERR_* ...) occurs
   in the code, and where the doc gives its value ("`MACRO`, N") the #define
   says N.
3. Mutations: every mutation a row of docs/testing.md's claims table names
   (`m:ID`) is in scripts/ci/mutations.py's claims group, every row names one
   or says why not ("by hand", "not shown", "not a code mutation"), and every
   mutation of the group is named by a row.
4. docs/reference.md is what scripts/docs/gen_reference.py writes from this
   build (the programs' options and defaults, base/sw_limits.h).
5. Benchmarks: every region between `<!-- bench:NAME -->` and `<!-- /bench -->`
   (README.md, docs/*.md) is what scripts/docs/render_bench.py renders from
   docs/results/NAME.json, and every other table of docs/benchmarks.md is
   history: a date (YYYY-MM-DD) stands in its heading or between the heading
   and the table.
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

Environment (tests/CMakeLists.txt sets it): SW_SOURCE_DIR, SW_BUILD_DIR.
The planted changes each check was shown to catch are in docs/testing.md
("test_docs").
"""
import glob
import json
import os
import re
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
LINK = re.compile(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)")
# Macro names of this code base a doc may cite (external ones, ZMQ_*, AF_*, are not checked).
MACRO = re.compile(r"(?<![\w.])((?:SW|NODE|HEAD|GW|RELAY|CLIENT|STAGE|PLACE|HUB|ERR|S)_[A-Z0-9_]*[A-Z0-9])(?![\w(])")
NUM = r"(\d+(?:\.\d+)?)"
UNIT = r"(?:\s*(ms|s|MiB|MB|GiB|KiB))?"
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
    basenames = {os.path.basename(f) for f in source_files()}
    for doc in docs() + sorted(cmake):
        text = read_doc(doc)
        for m in PATH.finditer(text):
            p = m.group(1).rstrip(".,:;)")
            if any(c in text[m.end():m.end() + 1] for c in "<*{[") or "..." in p or "XXXX" in p:
                continue  # a pattern (tests/<label>/test_*.c), not a path
            if p in PATH_EXAMPLES or not os.path.exists(os.path.join(SRC, p)):
                if p not in PATH_EXAMPLES:
                    fail(f"{rel(doc)}:{line_of(text, m.start())}: names {p}, which does not exist")
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


def check_defaults():
    progs = gen_reference.all_help(os.path.join(BUILD, "bin"))
    defaults = {}  # flag -> {program: [numbers of its default]}
    for prog, entries in progs.items():
        for _, flag, _, _, desc in entries:
            defaults.setdefault(flag, {})[prog] = gen_reference.numbers(gen_reference.default_of(desc))
    code = code_text()
    defines = dict(re.findall(r"#define\s+([A-Z][A-Z0-9_]+)\s+\(?(\d+(?:\.\d+)?)[uUlLfF]*\)?\s*(?://|/\*|$)",
                              code, re.M))
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
                v = to_unit(name.lower().replace("_", "-"), value, m.group(3))
                if name in defines and float(defines[name]) != v:
                    fail(f"{rel(doc)}: {m.group(0)}: {name} is {defines[name]} in the code, the doc says {value}")
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
    print(f"defaults: {checked} stated defaults and macro values compared with the code")


def check_mutations():
    import mutations
    ids = {}
    for name, *_ in mutations.CLAIMS:
        mid = name.split(":", 1)[0]
        if not re.fullmatch(r"[a-z0-9-]+", mid) or mid in ids:
            fail(f"scripts/ci/mutations.py: claims mutation '{name[:60]}' has no unique 'id: ' prefix")
        ids[mid] = name
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
    for mid in ids:
        if mid not in named:
            fail(f"scripts/ci/mutations.py: claims mutation {mid} is named by no row of docs/testing.md")
    print(f"mutations: {len(rows)} rows, {len(named)} mutations named, {len(ids)} in mutations.py")


def check_reference():
    text = gen_reference.render(os.path.join(BUILD, "bin"))
    path = os.path.join(SRC, "docs", "reference.md")
    if not os.path.exists(path) or open(path).read() != text:
        fail("docs/reference.md is stale: run python3 scripts/docs/gen_reference.py")


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
    print(f"benchmarks: {len(render_bench.docs())} pages' bench regions rendered, "
          f"{n} typed tables of docs/benchmarks.md dated")


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


def main():
    if not os.path.isfile(os.path.join(BUILD, "bin", "shardwire")):
        print(f"{BUILD}/bin/shardwire: not built", file=sys.stderr)
        return 1
    check_paths()
    check_defaults()
    check_mutations()
    check_reference()
    check_bench()
    check_xrefs()
    check_fixtures()
    check_types()
    print(f"{len(failures)} failures" if failures else "docs agree with the code")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
