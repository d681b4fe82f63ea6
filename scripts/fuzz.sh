#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/fuzz_*.c) with clang, ASan and
# UBSan into $SW_FUZZ_BUILD_DIR (build-fuzz/ by default) and runs each for
# ${SW_FUZZ_SECONDS:-30} seconds from its seed corpus tests/fuzz/corpus/<name>/
# (fuzz_gguf -> corpus/gguf/); targets: GGUF reader, wire decoder and sealed
# framing, tokenizer, chat templates. New inputs go to a scratch corpus in the build
# folder, crashes to build-fuzz/artifacts/. Exits non-zero on any finding.
# SW_FUZZ_ONLY=fuzz_wire runs one target.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
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
export SW_TEST_MODEL=${SW_TEST_MODEL:-$here/models/SmolLM2-135M-Instruct.Q4_1.gguf}
jobs=$(nproc)
[ "$jobs" -gt 2 ] || jobs=2
status=0
for src in "$here"/tests/fuzz/${SW_FUZZ_ONLY:-fuzz_*}.c; do
    name=$(basename "$src" .c)
    cmake --build "$build" -j "$jobs" --target "$name" >/dev/null
    seeds="$here/tests/fuzz/corpus/${name#fuzz_}"
    work="$build/corpus/$name"
    mkdir -p "$work" "$build/artifacts"
    echo "== $name: ${seconds}s"
    args=("$work")
    [ -d "$seeds" ] && args+=("$seeds")
    if ! UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$build/bin/$name" \
        -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$name-" "${args[@]}"; then
        echo "fuzz: $name found a problem (see $build/artifacts/)" >&2
        status=1
    fi
done
exit $status
