#!/usr/bin/env python3
"""llama_peer.py - llama.cpp, the peer shardwire is measured against, built on demand.

The sources are the ones the llama-cpp-python sdist on PyPI vendors
(vendor/llama.cpp; no other download): `pip download --no-deps --no-binary
:all: llama-cpp-python==VERSION` into a cache folder, unpacked there and built
with CMake into <cache>/build-rpc with its RPC backend on (GGML_RPC=ON) and
the host's instruction set (GGML_NATIVE, as a user building it would get),
static libraries, the programs the benchmarks run:

  ggml-rpc-server    a worker holding layers for a remote main process
  llama-completion   the classic CLI (plain decoding, prints its timings)
  llama-speculative  the speculative decoding example (draft + target)
  llama-bench        prompt and generation speed (bench_engine.py)
  llama-tokenize     token counts of prompts (bench_engine.py)

The cache folder defaults to $SW_LLAMA_CACHE, else ~/.cache/shardwire/peer;
nothing of it belongs in the repository. A build is reused when its stamp
(version + CMake flags) matches; the first build takes a long time on 2 cores
(about 40 minutes of CPU).

On CPUs with AMX (amx_tile in /proc/cpuinfo) llama.cpp's extra buffer types
(AMX and the weight repacking) crash in these VMs: on the 2-vCPU Xeon of
2026-12-06 `llama-bench --repack 1` of this build died of SIGILL (exit 132)
on Qwen2.5-Coder-1.5B Q4_K_M, while AMX tile instructions themselves ran
there (arch_prctl(ARCH_REQ_XCOMP_PERM) and a tdpbssd gave the right sums).
So the callers pass `--no-repack` (llama-bench: `--repack 0`): repack_flags()
says which, and `amx_note()` the sentence the benchmarks print.

The fixtures' requantizer (scripts/requant_model.sh) needs only llama.cpp's
llama-quantize: `--quantize` builds that one program into <cache>/build-quantize
with the smallest configuration that has it (generic x86-64, no instruction-set
variants, no repacking, no llamafile, no OpenMP, no server, examples or tests;
C++ at -O0: the quantizers are ggml-base's C, which keeps -O3): about 4.5
minutes of CPU (measured on the 2-core AMD EPYC, Zen 4: 241 s user + 29 s
system), so about 2.5-3 minutes on 2 idle cores, against ~40 CPU-minutes for
the peer's build (docs/testing.md); it is reused while its stamp matches.

    python3 scripts/bench/llama_peer.py            # build (or find) it, print the bin folder
    python3 scripts/bench/llama_peer.py --quantize # build (or find) llama-quantize, print its path
"""
import os
import shutil
import subprocess
import sys
import tarfile

VERSION = "0.3.36"
TARGETS = ["ggml-rpc-server", "llama-completion", "llama-speculative", "llama-bench",
           "llama-tokenize"]
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_RPC=ON", "-DGGML_NATIVE=ON",
               "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
               "-DBUILD_SHARED_LIBS=OFF"]


QUANTIZE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG",
                  "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF", "-DGGML_SSE42=OFF",
                  "-DGGML_AVX=OFF", "-DGGML_AVX2=OFF", "-DGGML_BMI2=OFF", "-DGGML_FMA=OFF",
                  "-DGGML_F16C=OFF", "-DGGML_CPU_REPACK=OFF", "-DGGML_LLAMAFILE=OFF",
                  "-DGGML_OPENMP=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
                  "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                  "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_TOOLS=ON"]


def cache_dir():
    return os.environ.get("SW_LLAMA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                            "shardwire", "peer")


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def has_amx():
    return "amx_tile" in cpu_flags()


def repack_flags(tool):
    """The flags that keep llama.cpp off its extra buffer types on AMX CPUs."""
    if not has_amx():
        return []
    return ["--repack", "0"] if tool == "llama-bench" else ["--no-repack"]


def amx_note():
    if has_amx():
        return ("this CPU has AMX: llama.cpp runs with --no-repack (llama-bench --repack 0), "
                "its AMX/repacked buffer types crash in these VMs")
    return "this CPU has no AMX: llama.cpp runs with its default buffer types"


def _log(msg):
    print(f"llama_peer: {msg}", file=sys.stderr, flush=True)


def source(version=VERSION, cache=None):
    """The vendored llama.cpp of the llama-cpp-python sdist, downloaded and unpacked once."""
    cache = cache or cache_dir()
    os.makedirs(cache, exist_ok=True)
    sdist = os.path.join(cache, f"llama_cpp_python-{version}.tar.gz")
    if not os.path.exists(sdist):
        _log(f"downloading the llama-cpp-python {version} sdist from PyPI into {cache}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={version}", "-d", cache], check=True,
                       stdout=subprocess.DEVNULL)
    src = os.path.join(cache, f"llama_cpp_python-{version}", "vendor", "llama.cpp")
    if not os.path.isdir(src):
        _log(f"unpacking {sdist}")
        with tarfile.open(sdist) as tf:
            tf.extractall(cache)
    return src


def _build(src, build, flags, targets, what, jobs):
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    if os.path.exists(os.path.join(build, "CMakeCache.txt")) and gen and not os.path.exists(
            os.path.join(build, "build.ninja")):
        gen = []  # an earlier configure chose another generator: keep it
    log = os.path.join(os.path.dirname(build), "build.log")
    _log(f"building llama.cpp ({' '.join(targets)}) in {build}; log in {log} ({what})")
    with open(log, "a") as lf:
        subprocess.run(["cmake", "-S", src, "-B", build, *gen, *flags], check=True, stdout=lf,
                       stderr=subprocess.STDOUT)
        subprocess.run(["cmake", "--build", build, "-j", str(jobs or os.cpu_count() or 2),
                        "--target", *targets], check=True, stdout=lf, stderr=subprocess.STDOUT)


def _stamp(version, flags, targets):
    return f"llama-cpp-python {version}\n" + " ".join(flags) + "\n" + " ".join(targets) + "\n"


def ensure(version=VERSION, cache=None, jobs=None):
    """Returns the folder holding the built programs, building them if needed."""
    cache = cache or cache_dir()
    build = os.path.join(cache, "build-rpc")
    bindir = os.path.join(build, "bin")
    stamp = os.path.join(build, "shardwire-stamp.txt")
    want = _stamp(version, CMAKE_FLAGS, TARGETS)
    if (os.path.exists(stamp) and open(stamp).read() == want and
            all(os.access(os.path.join(bindir, t), os.X_OK) for t in TARGETS)):
        return bindir
    src = source(version, cache)
    _build(src, build, CMAKE_FLAGS, TARGETS, "long: ~40 min of CPU", jobs)
    with open(stamp, "w") as f:
        f.write(want)
    return bindir


def ensure_quantize(version=VERSION, cache=None, jobs=None):
    """Returns the path of llama-quantize: the peer's when its build folder has it, else
    the minimal build's (built if needed)."""
    cache = cache or cache_dir()
    peer = os.path.join(cache, "build-rpc", "bin", "llama-quantize")
    if os.access(peer, os.X_OK):
        return peer
    build = os.path.join(cache, "build-quantize")
    prog = os.path.join(build, "bin", "llama-quantize")
    stamp = os.path.join(build, "shardwire-stamp.txt")
    want = _stamp(version, QUANTIZE_FLAGS, ["llama-quantize"])
    if os.path.exists(stamp) and open(stamp).read() == want and os.access(prog, os.X_OK):
        return prog
    src = source(version, cache)
    _build(src, build, QUANTIZE_FLAGS, ["llama-quantize"],
           "llama-quantize alone: ~4.5 min of CPU", jobs)
    with open(stamp, "w") as f:
        f.write(want)
    return prog

if __name__ == "__main__":
    if sys.argv[1:] == ["--quantize"]:
        print(ensure_quantize())
        sys.exit(0)
    if sys.argv[1:]:
        sys.exit("usage: llama_peer.py [--quantize]")
    print(ensure())
    print(amx_note(), file=sys.stderr)
