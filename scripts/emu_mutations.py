#!/usr/bin/env python3
"""The mutations issue 20 lists, each applied to the CUDA backend in turn,
built on the CPU emulation and run against the test that should catch it;
prints one line per mutation (caught or NOT CAUGHT) and restores the file.

  python3 scripts/emu_mutations.py [BUILD_DIR]   # default build-emu (SW_CUDA=EMU)

Each mutation must make its test fail; the script exits 1 when one does not.
It edits the sources in place and puts them back (git checkout) after each,
so run it on a clean tree.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build-emu")

# (name, file, old text, new text, test, environment)
MUTATIONS = [
    ("an off-by-one in a kernel's indexing (rmsnorm's sum reads one element past the row)",
     "engine/cuda/norm.cu",
     "for (int i = threadIdx.x; i < dim; i += S_THREADS)\n        p += (double)(xr[i] * xr[i]);",
     "for (int i = threadIdx.x; i <= dim; i += S_THREADS)\n        p += (double)(xr[i] * xr[i]);",
     "test_cuda_ops", {}),
    ("a removed __syncthreads in a reduction (norm.cu's tree sum)",
     "engine/cuda/norm.cu",
     "            part[threadIdx.x] += part[threadIdx.x + w];\n        __syncthreads();",
     "            part[threadIdx.x] += part[threadIdx.x + w];",
     "test_cuda_ops", {}),
    ("a missing cudaSetDevice in one op (rope)",
     "engine/cuda/rope.cu",
     "    if (swc_use(be) != 0)\n        return -1;\n    k_rope",
     "    k_rope",
     "test_cuda_ops", {"SW_CUDA_EMU_DEVICES": "2"}),
    ("a kv_move that drops one element (the last of each K row and V column)",
     "engine/cuda/attention.cu",
     "    if (d >= kv_dim)\n        return;\n    for (int i = 0; i < mv.n; i++)",
     "    if (d >= kv_dim - 1)\n        return;\n    for (int i = 0; i < mv.n; i++)",
     "test_cuda_ops", {}),
    ("a wrong block layout for one quantization type (q6_K: lane k reads lane k^1's high bits)",
     "engine/quant_math.h",
     "const uint32_t qh = sw_ld32(w->qh + 32 * h + 4 * k);",
     "const uint32_t qh = sw_ld32(w->qh + 32 * h + 4 * (k ^ 1));",
     "test_cuda_ops", {}),
]


def run(cmd, env=None, cwd=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run(cmd, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


def main():
    missed = 0
    for name, path, old, new, test, env in MUTATIONS:
        full = os.path.join(ROOT, path)
        src = open(full).read()
        if src.count(old) != 1:
            print(f"SETUP ERROR: {name}: the text to mutate is not in {path} exactly once")
            missed += 1
            continue
        open(full, "w").write(src.replace(old, new))
        try:
            b = run(["cmake", "--build", BUILD, "-j2", "--target", test])
            if b.returncode != 0:
                print(f"caught at build time: {name}")
                continue
            t = run([os.path.join(BUILD, "bin", test)], env=env, cwd=BUILD)
            lines = [l for l in t.stdout.splitlines()
                     if l.startswith("swemu:") or "differ" in l or "check failed" in l]
            if t.returncode != 0:
                why = lines[0] if lines else t.stdout.strip().splitlines()[-1]
                print(f"caught by {test}: {name}\n    {why[:300]}")
            else:
                print(f"NOT CAUGHT by {test}: {name}")
                missed += 1
        finally:
            open(full, "w").write(src)
    run(["cmake", "--build", BUILD, "-j2"])
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
