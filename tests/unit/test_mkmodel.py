#!/usr/bin/env python3
"""test_mkmodel.py - `shardwire-mkmodel --synth` gives the Qwen presets the real files' tensor
types, tensor by tensor (tools/mkmodel.c). llama.cpp's Q4_K_M gives attn_v and ffn_down their
larger type in the layers use_more_bits picks, counting the layers in the file's order (blk.0,
blk.1, blk.10, ...): the synthetic files that the GPU and big-model benchmarks measure read
what the real ones read only when they follow the same rule (picked by the layer index, 16
layers of each preset would have the other type; before 2026-12-07 the 1.5B's preset gave the
larger types to layers 0 and 1 only and the 0.5B's to every layer).

qwen2.5-0.5b against Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf (the default test data) and
qwen2.5-1.5b against the 1.5B (scripts/fetch_test_data.sh slow or all; a part skip without it).
Environment (tests/CMakeLists.txt): SW_BIN_DIR, SW_MODELS_DIR, SW_TEST_SKIP_LOG, SW_TEST_STRICT.
"""
import os
import subprocess
import sys
import tempfile

# The GGUF header reader of scripts/bench/bench_engine.py, not a second one.
sys.path.insert(0, os.path.join(os.environ.get("SW_SOURCE_DIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")), "scripts", "bench"))
from bench_engine import gguf_tensors  # noqa: E402


def tensor_types(path):
    """{tensor name: GGML type} from a GGUF file's header."""
    return {name: t for name, (t, _dims) in gguf_tensors(path)[1].items()}


def skip_part(why):
    log = os.environ.get("SW_TEST_SKIP_LOG", "")
    if log:
        with open(log, "a") as f:
            f.write(f"test_mkmodel (part): {why}\n")
    if os.environ.get("SW_TEST_STRICT", "0") not in ("", "0"):
        print(f"FAILED: would skip a part, and SW_TEST_STRICT=1 forbids skips: {why}")
        return 1
    print(f"SKIP (part): {why}")
    return 0


def main():
    bin_dir = os.environ.get("SW_BIN_DIR", "build/bin")
    models = os.environ.get("SW_MODELS_DIR", "models")
    failures = compared = 0
    cases = [("qwen2.5-0.5b", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf", "qwen-coder-0.5b"),
             ("qwen2.5-1.5b", "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf", "qwen-coder-1.5b")]
    with tempfile.TemporaryDirectory(prefix="swtest.mkmodel.") as tmp:
        for preset, real_name, fetch in cases:
            real = os.path.join(models, real_name)
            if not os.path.exists(real):
                failures += skip_part(f"{real_name} is absent (run: bash scripts/fetch_model.sh "
                                      f"{fetch})")
                continue
            out = os.path.join(tmp, preset + ".gguf")
            r = subprocess.run([os.path.join(bin_dir, "shardwire-mkmodel"), "--synth", preset,
                                "-o", out], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {preset}: shardwire-mkmodel exited {r.returncode}: {r.stderr[-500:]}")
                failures += 1
                continue
            got, want = tensor_types(out), tensor_types(real)
            diff = [(k, got.get(k), want.get(k)) for k in sorted(set(got) | set(want))
                    if got.get(k) != want.get(k)]
            compared += 1
            print(f"{preset}: {len(got)} tensors, {len(diff)} of another type than in {real_name}")
            for k, g, w in diff[:8]:
                print(f"  {k}: synthetic type {g}, real {w}")
            failures += 1 if diff else 0
            os.unlink(out)
    print(f"{compared} preset(s) compared, {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
