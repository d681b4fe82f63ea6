#!/bin/sh
# The models the CUDA tests use on the CPU emulation (tests/CMakeLists.txt,
# fixture cudaemu_models), made by shardwire-mkmodel into OUT_DIR once:
#   tiny-float, tiny-qwen3  synthetic, 2 layers (f16/bf16/f32; q4_0/q5_1/q8_0/q5_K/q6_K,
#                           Qwen3's QK norm), vocabularies of 4096 and 8192
#   smollm2-2layers         SmolLM2-135M cut to 2 layers: real weights and tokenizer
#   smollm2-1layer          the same cut to 1 layer, the draft model
#   gemma3-mini             Gemma 3 270M's shapes in miniature (6 layers: 5 with a
#                           sliding window of 16, 1 global), SmolLM2's vocabulary
#   qwen3moe-mini           Qwen3-30B-A3B's in miniature (2 layers of 16 experts,
#                           4 per token), SmolLM2's vocabulary
#
#   sh scripts/ci/emu_models.sh MKMODEL SMOLLM2.gguf OUT_DIR
#
# Without SmolLM2 (bash scripts/fetch_model.sh) it skips (exit 77, recorded
# in $SW_TEST_SKIP_LOG), or fails when SW_TEST_STRICT=1.
set -eu
mk=$1
smol=$2
out=$3
sh "$(dirname "$0")/need_model.sh" cudaemu_models "$smol" || exit $?
mkdir -p "$out"
for p in tiny-float tiny-qwen3; do
    [ -f "$out/$p.gguf" ] || "$mk" --synth "$p" --layers 2 -o "$out/$p.gguf" >/dev/null
done
[ -f "$out/smollm2-2layers.gguf" ] ||
    "$mk" --from "$smol" --layers 2 --embd-type q4_0 -o "$out/smollm2-2layers.gguf" >/dev/null
[ -f "$out/smollm2-1layer.gguf" ] ||
    "$mk" --from "$smol" --layers 1 --embd-type q4_0 -o "$out/smollm2-1layer.gguf" >/dev/null
[ -f "$out/gemma3-mini.gguf" ] ||
    "$mk" --synth gemma3-mini --vocab "$smol" -o "$out/gemma3-mini.gguf" >/dev/null
[ -f "$out/qwen3moe-mini.gguf" ] ||
    "$mk" --synth qwen3moe-mini --layers 2 --vocab "$smol" -o "$out/qwen3moe-mini.gguf" >/dev/null
ls -l "$out"
