#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/fuzz_*.c) with clang, ASan and
# UBSan into $SW_FUZZ_BUILD_DIR (build-fuzz/ by default) and runs each for
# ${SW_FUZZ_SECONDS:-30} seconds from its seed corpus tests/fuzz/corpus/<name>/
# (fuzz_gguf -> corpus/gguf/); targets: GGUF reader, wire decoder and sealed
# framing, tokenizer, chat templates, key files and the relay's allow-list.
# Every target must have a seed corpus (tests/fuzz/make_text_seeds.py,
# tests/fuzz/make_gguf_seed.py, tests/unit/test_gguf.c (synthetic.gguf),
# tests/fuzz/fuzz_gguf.c (split3.bin) and tests/unit/test_wire.c say how each
# was made). New inputs go to a scratch corpus in the build folder, crashes to
# build-fuzz/artifacts/. Exits non-zero on any finding.
# SW_FUZZ_ONLY=fuzz_wire runs one target. With SW_TEST_STRICT=1 (.ci/run),
# fuzz_tokenizer refuses to fall back to its synthetic vocabulary when the
# SmolLM2 model is absent.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${SW_FUZZ_BUILD_DIR:-$here/build-fuzz}
seconds=${SW_FUZZ_SECONDS:-30}
cc=${SW_FUZZ_CC:-clang}
if ! command -v "$cc" >/dev/null; then
    echo "fuzz: $cc not found (install clang and libclang-rt-dev)" >&2
    exit 1
fi
# SW_FUZZ=ON instruments every target, the libraries included (CMakeLists.txt);
# CMAKE_C_FLAGS is reset so that a stale cache cannot drop that.
CC=$cc cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSW_FUZZ=ON -DSW_CUDA=OFF \
    -DCMAKE_C_FLAGS="" >/dev/null
# fuzz_tokenizer uses the SmolLM2 vocabulary when it is cached, else a synthetic one.
export SW_TEST_MODEL=${SW_TEST_MODEL:-${SW_MODELS_DIR:-$here/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ "${SW_TEST_STRICT:-0}" != 0 ] && [ ! -f "$SW_TEST_MODEL" ]; then
    echo "fuzz: $SW_TEST_MODEL is absent (run: bash scripts/fetch_model.sh); SW_TEST_STRICT=1 forbids the synthetic fallback" >&2
    exit 1
fi
jobs=$(nproc)
[ "$jobs" -gt 2 ] || jobs=2
status=0
for src in "$here"/tests/fuzz/${SW_FUZZ_ONLY:-fuzz_*}.c; do
    name=$(basename "$src" .c)
    cmake --build "$build" -j "$jobs" --target "$name" >/dev/null
    seeds="$here/tests/fuzz/corpus/${name#fuzz_}"
    work="$build/corpus/$name"
    mkdir -p "$work" "$build/artifacts"
    if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then
        echo "fuzz: $name has no seed corpus in $seeds" >&2
        status=1
        continue
    fi
    echo "== $name: ${seconds}s from $(ls "$seeds" | wc -l) seeds"
    args=("$work" "$seeds")
    if ! UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$build/bin/$name" \
        -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$name-" "${args[@]}"; then
        echo "fuzz: $name found a problem (see $build/artifacts/)" >&2
        status=1
    fi
done
exit $status
