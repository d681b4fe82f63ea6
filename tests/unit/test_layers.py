#!/usr/bin/env python3
"""test_layers.py - the module map of docs/architecture.md, checked on the
source tree and on the build that ctest runs in. It fails when a forbidden
dependency is added, at any of the places one can be added, and when a file
or a function outgrows the house's bounds:

1. CMake: a target links (directly or through another) a library its layer
   may not link -- the engine ZeroMQ, libsodium, protobuf, jansson or curl;
   the relay the engine or curl; the client library the engine; ... Read from
   `cmake --graphviz`, which lists every target's transitive dependencies. A
   library counts whether it is linked by its pkg-config label
   (PkgConfig::ZMQ) or by raw name (zmq, -lzmq, a path to libzmq.so).
2. Source: a file includes a header of a folder its folder may not depend on
   (engine/ including net/wire.h), or a system header of a library its
   layer may not use (engine/ including <zmq.h>), or a header private to
   another folder: an *_impl.h, or an engine header outside engine/include/;
   a file outside the codec files of net/ names a protobuf-c type or includes
   the codec's private header (node/stage.c building a Shardwire__Envelope by
   hand, net/peer.h taking one).
3. Shape: no product file over MAX_FILE_LINES lines and no function over
   MAX_FUNCTION_LINES, but those named in LONG_FILES / LONG_FUNCTIONS with
   their reason (and in docs/architecture.md, "Sizes").
4. Objects: the symbols the built object files define and use. A base,
   engine or drafter object uses no ZeroMQ / libsodium / protobuf / jansson /
   curl symbol; a relay, client-library, net or gateway object uses no symbol
   that the engine, the drafter or the hub defines; and no two object files of the product call each other in a
   circle (node/head.c calling node/stage.c calling node/head.c).

The planted violations each rule was shown to catch are listed in
docs/testing.md ("test_layers").

Environment (tests/CMakeLists.txt sets it): SW_SOURCE_DIR, SW_BUILD_DIR,
SW_CMAKE. Needs nm (binutils).
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

SRC = os.environ.get("SW_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("SW_BUILD_DIR") or os.path.join(SRC, "build")
CMAKE = os.environ.get("SW_CMAKE") or "cmake"

# The folders of the product, bottom up, and what each may include / link.
# (docs/architecture.md has the same table for people.)
MAY_INCLUDE = {
    "base": {"base"},
    "engine": {"base", "engine"},
    "hub": {"base", "engine", "hub"},  # the GGUF header and partial files (engine/include/partial.h)
    "net": {"base", "net", "proto"},
    "drafter": {"base", "engine", "drafter"},
    "client": {"base", "net", "client"},
    "gateway": {"base", "net", "client", "gateway"},
    "relay": {"base", "net", "relay"},
    "placement": {"base", "engine", "net", "proto", "placement"},
    "node": {"base", "engine", "drafter", "net", "hub", "placement", "node"},
    "cli": {"base", "engine", "drafter", "net", "hub", "client", "gateway", "placement", "cli"},
    "tools": {"base", "engine", "tools"},
}

# Headers private to their folder: an *_impl.h is never included from another
# folder. A folder listed in PUBLIC_DIR shows other folders only the headers of
# that subfolder (engine/CMakeLists.txt makes only engine/include/ public).
PRIVATE_HEADER = re.compile(r"_impl\.(h|cuh)$")
PUBLIC_DIR = {"engine": os.path.join("engine", "include")}

# System headers of the libraries a layer may not use.
NET_HEADERS = {"zmq.h", "sodium.h", "protobuf-c/protobuf-c.h", "jansson.h", "curl/curl.h",
               "microhttpd.h"}
FORBIDDEN_SYSTEM = {
    "base": NET_HEADERS,
    "engine": NET_HEADERS,
    "drafter": NET_HEADERS,
    "hub": {"zmq.h", "sodium.h", "protobuf-c/protobuf-c.h", "microhttpd.h"},  # sha256 from base/
    "net": {"curl/curl.h", "microhttpd.h", "jansson.h"},
    "client": {"curl/curl.h", "microhttpd.h"},
    "relay": {"curl/curl.h", "microhttpd.h", "jansson.h"},
}

# The codec files: the only product files that name a protobuf-c type
# (docs/architecture.md: protobuf lives in one codec). Every other file,
# net/'s other headers included, sees the plain structs of net/codec.h and
# the opaque sw_envelope_t of net/wire.h; CODEC_HEADER is the codec's private
# header, which only the codec files (and tests, to craft hostile Envelopes)
# include.
CODEC_FILES = {"net/codec.c", "net/codec_encode.c", "net/wire.c", "net/wire_check.c",
               "net/wire_check_field.c", "net/wire_check_round.c", "net/codec_pb.h"}
CODEC_HEADER = "net/codec_pb.h"
PROTOBUF_TOKEN = re.compile(r"\w*(?:Shardwire__|shardwire__|SHARDWIRE__|ProtobufC|protobuf_c_|"
                            r"PROTOBUF_C_)\w*|protobuf-c/[\w.-]*|shardwire\.pb-c\.h")

# Targets and what none of their (transitive) dependencies may be.
ENGINE_LIBS = {"swengine", "swcuda", "swdrafter"}
# A library can be linked by its pkg-config label or by its raw name
# (`target_link_libraries(x zmq)`, `-lzmq`, a path to libzmq.so): RAW maps each
# label to the names and files that mean the same library (see raw_link_name).
RAW = {
    "PkgConfig::ZMQ": "zmq",
    "PkgConfig::SODIUM": "sodium",
    "PkgConfig::PROTOBUFC": "protobuf-c",
    "PkgConfig::JANSSON": "jansson",
    "PkgConfig::CURL": "curl",
    "PkgConfig::MHD": "microhttpd",
}
NET_LIBS = {"swnet", "swproto", "swclient", "swgateway", "swhub", "PkgConfig::ZMQ",
            "PkgConfig::SODIUM", "PkgConfig::PROTOBUFC", "PkgConfig::JANSSON", "PkgConfig::CURL",
            "PkgConfig::MHD"}
FORBIDDEN_LINKS = {
    "swbase": ENGINE_LIBS | NET_LIBS,
    "swengine": NET_LIBS,
    "swcuda": NET_LIBS | {"swengine"},
    "swdrafter": NET_LIBS,
    "swplacement": {"swhub", "swclient", "swgateway", "swdrafter", "PkgConfig::CURL",
                "PkgConfig::JANSSON", "PkgConfig::MHD"},
    "swhub": {"swdrafter", "swnet", "swproto", "swclient", "swgateway", "PkgConfig::ZMQ",
              "PkgConfig::PROTOBUFC", "PkgConfig::MHD", "PkgConfig::SODIUM"},
    "swnet": ENGINE_LIBS | {"swhub", "swclient", "swgateway", "PkgConfig::CURL",
                            "PkgConfig::JANSSON", "PkgConfig::MHD"},
    "swclient": ENGINE_LIBS | {"swhub", "swgateway", "PkgConfig::CURL", "PkgConfig::MHD"},
    "swgateway": ENGINE_LIBS | {"swhub", "PkgConfig::CURL"},
    "shardwire-relay": ENGINE_LIBS | {"swhub", "swclient", "swgateway", "PkgConfig::CURL",
                                      "PkgConfig::JANSSON", "PkgConfig::MHD"},
    "shardwire-relay-bench": ENGINE_LIBS | {"swhub", "swclient", "swgateway", "PkgConfig::CURL",
                                            "PkgConfig::JANSSON", "PkgConfig::MHD"},
}

# Symbols of the network libraries, by prefix.
NET_SYMBOLS = re.compile(r"^(zmq_|sodium_|crypto_|randombytes|protobuf_c_|shardwire__|json_|curl_|MHD_)")

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


# ---- 1. CMake's target graph ----------------------------------------------------------------

RAW_LABEL = {raw: label for label, raw in RAW.items()}


def raw_link_name(label):
    """The library a raw link item names: "zmq", "-lzmq", "/usr/lib/x86_64-linux-gnu/libzmq.so"
    and "libzmq.so.5" all give "zmq"; anything else is returned unchanged."""
    name = os.path.basename(label)
    if name.startswith("-l"):
        return name[2:]
    m = re.match(r"lib(.+?)\.(so|a)(\.[0-9.]*)?$", name)
    return m.group(1) if m else name


def check_links():
    with tempfile.TemporaryDirectory(prefix="sw-layers-") as tmp:
        dot = os.path.join(tmp, "deps.dot")
        r = subprocess.run([CMAKE, "--graphviz=" + dot, BUILD], capture_output=True, text=True)
        if r.returncode != 0:
            fail("cmake --graphviz failed: " + r.stderr.strip().splitlines()[-1:][0]
                 if r.stderr.strip() else "cmake --graphviz failed")
            return
        checked = 0
        for target, forbidden in sorted(FORBIDDEN_LINKS.items()):
            path = dot + "." + target
            if not os.path.exists(path):
                if target == "swcuda":  # a build without nvcc has no swcuda
                    continue
                fail("no target %s in the build (cmake --graphviz wrote no %s)" % (target, path))
                continue
            labels = set(re.findall(r'label = "([^"]+)"', open(path).read()))
            labels.discard(target)
            named = {RAW_LABEL[raw_link_name(x)]: x for x in labels if raw_link_name(x) in RAW_LABEL}
            labels |= set(named)
            bad = sorted((x if x not in named else "%s (as %s)" % (named[x], x))
                         for x in labels & forbidden)
            if bad:
                fail("target %s links %s (directly or through another target): %s may not"
                     % (target, ", ".join(bad), target))
            checked += 1
        print("links: %d targets checked" % checked)


# ---- 2. includes ----------------------------------------------------------------------------

def product_files():
    out = []
    for folder in MAY_INCLUDE:
        top = os.path.join(SRC, folder)
        for root, _, names in os.walk(top):
            for n in names:
                if n.endswith((".c", ".h", ".cu", ".cuh")):
                    out.append(os.path.join(root, n))
    return out


def check_includes(files):
    owner = {}  # header basename -> folder
    where = {}  # header basename -> its path below SRC
    for f in files:
        if f.endswith((".h", ".cuh")):
            folder = os.path.relpath(f, SRC).split(os.sep)[0]
            owner.setdefault(os.path.basename(f), folder)
            where.setdefault(os.path.basename(f), os.path.relpath(f, SRC))
    owner["shardwire.pb-c.h"] = "proto"
    n_inc = 0
    for f in files:
        rel = os.path.relpath(f, SRC)
        folder = rel.split(os.sep)[0]
        for ln, line in enumerate(open(f, errors="replace"), 1):
            m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', line)
            if not m:
                continue
            n_inc += 1
            kind, name = m.groups()
            if kind == "<":
                if name in FORBIDDEN_SYSTEM.get(folder, ()):
                    fail("%s:%d includes <%s>: %s/ may not use that library" % (rel, ln, name, folder))
                continue
            here = os.path.join(os.path.dirname(f), name)
            if os.path.exists(here):
                to = os.path.relpath(os.path.realpath(here), SRC).split(os.sep)[0]
            else:
                to = owner.get(os.path.basename(name))
            if to is None:
                continue  # a generated or system header included with quotes
            if to not in MAY_INCLUDE[folder]:
                fail('%s:%d includes "%s" of %s/: %s/ may not depend on %s/'
                     % (rel, ln, name, to, folder, to))
            elif to != folder and PRIVATE_HEADER.search(name):
                fail('%s:%d includes "%s", private to %s/ (an *_impl.h stays inside its folder)'
                     % (rel, ln, name, to))
            elif to != folder and to in PUBLIC_DIR:
                path = where.get(os.path.basename(name), "")
                if not path.startswith(PUBLIC_DIR[to] + os.sep):
                    fail('%s:%d includes "%s" (%s), private to %s/: only %s/ is public'
                         % (rel, ln, name, path, to, PUBLIC_DIR[to]))
    print("includes: %d lines in %d files checked" % (n_inc, len(files)))


def check_codec(files):
    assert CODEC_HEADER in CODEC_FILES
    n_files = 0
    for f in files:
        rel = os.path.relpath(f, SRC)
        if rel.replace(os.sep, "/") in CODEC_FILES:
            continue
        n_files += 1
        for ln, line in enumerate(open(f, errors="replace"), 1):
            m = PROTOBUF_TOKEN.search(line)
            if m:
                what = ("a header of net/ shows it to every program"
                        if rel.startswith("net" + os.sep) and rel.endswith(".h") else
                        "only the codec files may")
                fail("%s:%d names %s: %s (protobuf lives in %s; the rest uses codec.h's plain "
                     "structs and wire.h's opaque sw_envelope_t)"
                     % (rel, ln, m.group(0), what, ", ".join(sorted(CODEC_FILES))))
            m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', line)
            if m and os.path.basename(m.group(1)) == os.path.basename(CODEC_HEADER):
                fail('%s:%d includes "%s": the codec\'s private header, for the codec files only'
                     % (rel, ln, m.group(1)))
    print("codec: %d files outside the codec files checked" % n_files)


# ---- 3. shape: one concern per file, functions that fit a screen or two ----------------------

MAX_FUNCTION_LINES = 120
MAX_FILE_LINES = 1000
# Files and functions allowed past those bounds, each with its reason; docs/architecture.md
# ("Sizes") names the same ones (checked below), so an exception is a decision on the page.
LONG_FILES = {}
LONG_FUNCTIONS = {}


def functions(path):
    """(name, first line, number of lines) of each function definition in a C or CUDA
    file formatted by .clang-format (BreakBeforeBraces Linux: a definition's body opens
    with "{" alone in column 0 and closes with "}" in column 0)."""
    lines = open(path, errors="replace").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i] == "{" and i > 0:
            j = i - 1  # back over the declarator's continuation lines to its first line
            while j > 0 and lines[j][:1] in " \t":
                j -= 1
            if j > 0 and lines[j - 1][:1].isalpha() and not lines[j - 1].rstrip().endswith((";", "*/")) \
                    and "(" not in lines[j - 1]:
                j -= 1  # a return type on a line of its own
            m = re.search(r"(\w+)\s*\(", " ".join(lines[j:i]))
            k = i + 1
            while k < len(lines) and lines[k] != "}":
                k += 1
            out.append((m.group(1) if m else "?", i + 1, k - i + 1))
            i = k
        i += 1
    return out


def check_shape(files):
    doc = open(os.path.join(SRC, "docs", "architecture.md"), errors="replace").read()
    for name in sorted(set(LONG_FILES) | set(LONG_FUNCTIONS)):
        if "`%s`" % name not in doc:
            fail("%s is allowed past the size bounds here but docs/architecture.md (\"Sizes\") "
                 "does not name it" % name)
    n_fn = 0
    for f in files:
        rel = os.path.relpath(f, SRC)
        n = sum(1 for _ in open(f, errors="replace"))
        if n > MAX_FILE_LINES and rel not in LONG_FILES:
            fail("%s has %d lines (bound %d): split it by concern, or name it with its reason "
                 "in LONG_FILES and docs/architecture.md" % (rel, n, MAX_FILE_LINES))
        if not f.endswith((".c", ".cu", ".cc")):
            continue
        for name, ln, length in functions(f):
            n_fn += 1
            key = "%s:%s" % (rel, name)
            if length > MAX_FUNCTION_LINES and key not in LONG_FUNCTIONS:
                fail("%s:%d %s() has %d lines (bound %d): split it (parse, then run)"
                     % (rel, ln, name, length, MAX_FUNCTION_LINES))
    print("shape: %d files and %d functions checked (bounds: %d lines a file, %d a function)"
          % (len(files), n_fn, MAX_FILE_LINES, MAX_FUNCTION_LINES))


# ---- 4. objects -----------------------------------------------------------------------------

def source_of(obj):
    """engine/CMakeFiles/swengine.dir/cpu/backend_cpu.c.o -> SRC/engine/cpu/backend_cpu.c"""
    rel = os.path.relpath(obj, BUILD)
    return os.path.join(SRC, re.sub(r"CMakeFiles/[^/]+\.dir/", "", rel)[: -len(".o")])


def objects():
    """The object files of the product's folders whose source still exists (a
    build folder keeps the object of a file that was removed or moved)."""
    objs = []
    for folder in MAY_INCLUDE:
        top = os.path.join(BUILD, folder)
        for root, _, names in os.walk(top):
            for n in names:
                path = os.path.join(root, n)
                src = source_of(path)
                if n.endswith(".o") and "CMakeFiles" in root and os.path.exists(src):
                    objs.append(path)
    return objs


def symbols(objs):
    defs, undef = {}, {}
    r = subprocess.run(["nm", "-g", "-A"] + objs, capture_output=True, text=True)
    if r.returncode != 0:
        fail("nm failed: " + r.stderr.strip())
    for o in objs:
        defs[o], undef[o] = set(), set()
    for line in r.stdout.splitlines():
        path, _, rest = line.partition(":")
        parts = rest.split()
        if path not in defs:
            continue
        if len(parts) == 2 and parts[0] == "U":
            undef[path].add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRVWCG":
            defs[path].add(parts[2])
    return defs, undef


def folder_of(obj):
    return os.path.relpath(obj, BUILD).split(os.sep)[0]


def short(obj):
    rel = os.path.relpath(obj, BUILD)
    return re.sub(r"CMakeFiles/[^/]+\.dir/", "", rel)[: -len(".o")]


def check_objects():
    objs = objects()
    if not objs:
        fail("no object files under %s: build first" % BUILD)
        return
    defs, undef = symbols(objs)
    owner = {}
    for o in objs:
        for s in defs[o]:
            owner.setdefault(s, o)
    # the engine (and the drafter on top of it) uses no network symbol
    for o in objs:
        if folder_of(o) in ("base", "engine", "drafter"):
            bad = sorted(s for s in undef[o] if NET_SYMBOLS.match(s))
            if bad:
                fail("%s uses %s: the engine links no network library" % (short(o), ", ".join(bad[:4])))
    # the relay and the client library use nothing of the engine or the hub
    for o in objs:
        if folder_of(o) in ("relay", "client", "net", "gateway"):
            for s in sorted(undef[o]):
                w = owner.get(s)
                if w and folder_of(w) in ("engine", "drafter", "hub"):
                    fail("%s calls %s of %s: %s/ may not use %s/"
                         % (short(o), s, short(w), folder_of(o), folder_of(w)))
    # no circle of calls between object files
    graph = collections.defaultdict(set)
    why = {}
    for o in objs:
        for s in undef[o]:
            w = owner.get(s)
            if w and w != o:
                graph[o].add(w)
                why.setdefault((o, w), s)
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):  # Tarjan's strongly connected components, iteratively
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    comps.append(comp)

    for v in sorted(objs):
        if v not in index:
            visit(v)
    for comp in comps:
        members = set(comp)
        edges = ["%s -> %s (%s)" % (short(a), short(b), why[(a, b)])
                 for a in sorted(comp) for b in sorted(graph[a]) if b in members]
        fail("object files that call each other in a circle: %s; calls: %s"
             % (", ".join(sorted(short(c) for c in comp)), "; ".join(edges[:8])))
    print("objects: %d files, %d calls between them checked" % (len(objs), len(why)))


def main():
    check_links()
    files = product_files()
    check_includes(files)
    check_codec(files)
    check_shape(files)
    check_objects()
    if failures:
        print("test_layers: %d violation(s) of the module map (docs/architecture.md)" % len(failures))
        return 1
    print("test_layers: the module map holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
