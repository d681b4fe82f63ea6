#!/usr/bin/env bash
# Fetches the data the test suites need, so that a fresh clone's suite skips
# nothing (scripts/test.sh and .ci/run both call it; each fetch is cached and
# sha256-checked, a second call only re-checks):
#
#   - the default model (SmolLM2-135M), Qwen2.5-Coder 0.5B and Gemma 3 270M
#     (tests/e2e/test_arch_cluster.c, default suite, and tests/slow/test_arch.c; the 0.5B's greedy and
#     low-bit fixtures are the slow suite's, tests/slow/test_greedy_*.c; the
#     other families' models are made by shardwire-mkmodel from the tokenizer
#     conformance data);
#   - the tokenizer conformance data: $SW_TEST_VOCAB_DIR, else
#     ../shared/testdata/vocab beside the checkout (or beside a worktree's main
#     checkout), else a copy fetched by scripts/ci/fetch_vocab.sh into the
#     model cache (the same choice tests/CMakeLists.txt makes at configure);
#   - with "slow" among the arguments (or "all"): Qwen2.5-Coder 1.5B too (the
#     slow suite's test_greedy_qwen) and the four low-bit requantizations of
#     the Qwen pair (test_greedy_lowbit; scripts/requant_model.sh, which builds
#     llama.cpp's llama-quantize alone the first time: docs/testing.md).
#
# Prints the tokenizer conformance data's folder.
#   bash scripts/fetch_test_data.sh            # the default suite's data
#   bash scripts/fetch_test_data.sh all        # and the slow suite's
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
slow=0
for a in "$@"; do
    case "$a" in
    *slow* | all) slow=1 ;;
    esac
done
models=(smollm2 qwen-coder-0.5b gemma3-270m)
[ "$slow" = 1 ] && models+=(qwen-coder-1.5b)
for m in "${models[@]}"; do
    bash scripts/fetch_model.sh "$m" >/dev/null
done
if [ "$slow" = 1 ]; then
    for m in qwen-coder-0.5b-iq4_nl qwen-coder-0.5b-iq4_xs qwen-coder-1.5b-q2_k \
        qwen-coder-1.5b-q3_k_m; do
        bash scripts/requant_model.sh "$m" >/dev/null
    done
fi
vocab=${SW_TEST_VOCAB_DIR:-}
common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
for cand in ../shared/testdata/vocab ${common:+"$common/../../shared/testdata/vocab"}; do
    [ -z "$vocab" ] && [ -d "$cand" ] && vocab=$cand
done
if [ -z "$vocab" ]; then
    vocab=$(bash scripts/ci/fetch_vocab.sh)
fi
cd "$vocab" && pwd
