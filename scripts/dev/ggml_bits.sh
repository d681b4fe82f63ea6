#!/usr/bin/env bash
# Builds GGML's CPU backend from a llama.cpp source tree for plain AVX2+FMA+F16C
# (the arithmetic shardwire's kernels follow) and compares shardwire's
# quantizers and dot products with it bit for bit (scripts/dev/ggml_bits.c).
#
#   bash scripts/dev/ggml_bits.sh /path/to/llama.cpp/ggml [work dir]
#   SW_GGML_BENCH=1 bash scripts/dev/ggml_bits.sh ...   # also time ggml_mul_mat vs sw_matmul
#
# Needs shardwire built first (build/engine/libswengine.a, or $SW_BUILD_DIR).
# The ggml tree is copied into the work dir (default /tmp/sw-ggml-bits), never modified.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
ggml=${1:?usage: ggml_bits.sh /path/to/llama.cpp/ggml [work dir]}
work=${2:-/tmp/sw-ggml-bits}
build=${SW_BUILD_DIR:-$here/build}
lib=$build/engine/libswengine.a
[ -f "$lib" ] || { echo "ggml_bits: $lib not found: build shardwire first" >&2; exit 2; }
# A CUDA build's engine library needs the CUDA runtime it was linked with.
cuda_libs=()
if [ -f "$build/engine/cuda/libswcuda.a" ]; then
    cuda_libs=("$build/engine/cuda/libswcuda.a" -L"${CUDA_HOME:-/usr/local/cuda}/lib64" -lcudart_static -ldl -lrt)
fi
[ -f "$ggml/src/ggml-cpu/ggml-cpu.c" ] || { echo "ggml_bits: $ggml is not a ggml source tree" >&2; exit 2; }
mkdir -p "$work"
rm -rf "$work/ggml"
cp -r "$ggml" "$work/ggml"
touch "$work/ggml/ggml.pc.in" # absent from some vendored copies
cmake -S "$work/ggml" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
    -DGGML_OPENMP=OFF -DGGML_CPU_REPACK=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$work/build" --target ggml-cpu -j "${SW_JOBS:-2}" >/dev/null
cc -O2 -std=gnu11 -D_GNU_SOURCE -I"$work/ggml/include" -I"$here/engine" -I"$here/engine/include" -I"$here/base" "$here/scripts/dev/ggml_bits.c" \
    "$lib" "${cuda_libs[@]}" "$work/build/src/libggml-cpu.a" "$work/build/src/libggml-base.a" \
    -lstdc++ -lm -lpthread -o "$work/ggml_bits"
if [ "${SW_GGML_BENCH:-0}" = 1 ]; then # also time GGML's mul_mat against sw_matmul
    cc -O2 -std=gnu11 -D_GNU_SOURCE -I"$work/ggml/include" -I"$here/engine" -I"$here/engine/include" -I"$here/base" \
        "$here/scripts/dev/ggml_bench.c" "$lib" "${cuda_libs[@]}" "$work/build/src/libggml-cpu.a" \
        "$work/build/src/libggml-base.a" -lstdc++ -lm -lpthread -o "$work/ggml_bench"
    "$work/ggml_bench" 1
    "$work/ggml_bench" 2
fi
"$work/ggml_bits"
if [ "${SW_GGML_BENCH:-0}" = 1 ]; then # also time GGML's mul_mat against sw_matmul
    cc -O2 -std=gnu11 -D_GNU_SOURCE -I"$work/ggml/include" -I"$here/engine" -I"$here/engine/include" -I"$here/base" \
        "$here/scripts/dev/ggml_bench.c" "$lib" "${cuda_libs[@]}" "$work/build/src/libggml-cpu.a" \
        "$work/build/src/libggml-base.a" -lstdc++ -lm -lpthread -o "$work/ggml_bench"
    "$work/ggml_bench" 1
    "$work/ggml_bench" 2
fi
