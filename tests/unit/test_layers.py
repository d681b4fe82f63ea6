#!/usr/bin/env python3
"""test_layers.py - the module map of docs/architecture.md, checked on the
source tree and on the build that ctest runs in. It fails when a forbidden
dependency is added, at any of the three places one can be added:

1. CMake: a target links (directly or through another) a library its layer
   may not link -- the engine ZeroMQ, libsodium, protobuf, jansson or curl;
   the relay the engine or curl; the client library the engine; ... Read from
   `cmake --graphviz`, which lists every target's transitive dependencies.
2. Source: a file includes a header of a folder its folder may not depend on
   (engine/ including net/wire.h), or a system header of a library its
   layer may not use (engine/ including <zmq.h>); a file outside the codec
   files of net/ names a protobuf-c type or includes the codec's private
   header (node/stage.c building a Shardwire__Envelope by hand, net/peer.h
   taking one).
3. Objects: the symbols the built object files define and use. An engine
   object uses no ZeroMQ / libsodium / protobuf / jansson / curl symbol; a
   relay or client-library object uses no symbol that the engine or the hub
   defines; and no two object files of the product call each other in a
   circle (node/head.c calling node/stage.c calling node/head.c).

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

# System headers of the libraries a layer may not use.
NET_HEADERS = {"zmq.h", "sodium.h", "protobuf-c/protobuf-c.h", "jansson.h", "curl/curl.h",
               "microhttpd.h"}
FORBIDDEN_SYSTEM = {
    "base": NET_HEADERS,
    "engine": NET_HEADERS,
    "drafter": NET_HEADERS,
    "hub": {"zmq.h", "protobuf-c/protobuf-c.h", "microhttpd.h"},
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
               "net/codec_pb.h"}
CODEC_HEADER = "net/codec_pb.h"
PROTOBUF_TOKEN = re.compile(r"\w*(?:Shardwire__|shardwire__|SHARDWIRE__|ProtobufC|protobuf_c_|"
                            r"PROTOBUF_C_)\w*|protobuf-c/[\w.-]*|shardwire\.pb-c\.h")

# Targets and what none of their (transitive) dependencies may be.
ENGINE_LIBS = {"swengine", "swcuda", "swdrafter"}
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
              "PkgConfig::PROTOBUFC", "PkgConfig::MHD"},
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
            bad = sorted(labels & forbidden)
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
    for f in files:
        if f.endswith((".h", ".cuh")):
            folder = os.path.relpath(f, SRC).split(os.sep)[0]
            owner.setdefault(os.path.basename(f), folder)
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


# ---- 3. objects -----------------------------------------------------------------------------

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
    check_objects()
    if failures:
        print("test_layers: %d violation(s) of the module map (docs/architecture.md)" % len(failures))
        return 1
    print("test_layers: the module map holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
