#!/usr/bin/env bash
# The CUDA backend built against CUDA 12 for sm_75 (a T4): the toolkit
# generation a Kaggle notebook has (drivers 535-560 run no CUDA 13 build), from
# PyPI's CUDA 12 wheels, into build-cu12/ (.ci/run calls it; docs/testing.md,
# "CUDA 12").
#
# PyPI's CUDA 12 wheels carry no nvcc: nvidia-cuda-nvcc-cu12 holds ptxas,
# libnvvm, libdevice and the crt headers, not the nvcc driver, cicc, cudafe++
# or fatbinary. So the compiler is clang (clang-19 from Debian, which
# compiles CUDA itself) over a CUDA 12.9 tree put together from the wheels:
#   nvidia-cuda-nvcc-cu12     ptxas (PTX -> sm_75 code), libdevice, crt/ headers
#   nvidia-cuda-runtime-cu12  cuda_runtime.h and the rest, libcudart_static.a
#   nvidia-cublas-cu12        cublas_v2.h (the library itself is opened at run time)
#   nvidia-nccl-cu12          nccl.h (likewise; the notebooks install it for libnccl.so.2)
# and two small shims in its bin/: `nvcc`, which only answers CMake's
# questions about the toolkit (version, root) and compiles nothing, and
# `fatbinary`, which passes clang's call to CUDA 13's fatbinary (it packs the
# sm_75 code and the PTX into the program; its format is the same across
# versions). Everything that compiles, assembles and links device code or
# the runtime is CUDA 12's or clang's.
#
# Then: the programs the notebooks build and the cuda tests, with -Werror,
# the sm_75 code checked in the programs (the fatbin holds an sm_75 image),
# and `shardwire generate --backend cuda` run here, where no GPU exists: the
# statically linked CUDA 12 runtime must start and its error (no driver it
# can use) come out in one line.
#
#   bash scripts/ci/cuda12.sh          # SW_CUDA12_CACHE (default ~/.cache/shardwire/cuda12),
#                                      # SW_BUILD_DIR (default build-cu12)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SW_CUDA12_CACHE:-$HOME/.cache/shardwire/cuda12}
build=${SW_BUILD_DIR:-$here/build-cu12}
t0=$(date +%s)

# The wheels (versions pinned: the tree below is made from exactly these).
WHEELS=(nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79
        nvidia-cublas-cu12==12.9.1.4 nvidia-nccl-cu12==2.32.3)
CUDA_VERSION=12.9.86
CLANG=clang++-19

if ! command -v "$CLANG" >/dev/null; then
    echo "cuda12: installing clang-19 (Debian)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq clang-19 >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq clang-19 >/dev/null; } || true
fi
command -v "$CLANG" >/dev/null || { echo "cuda12: $CLANG is missing (apt-get install clang-19)" >&2; exit 1; }
real_fatbinary=${SW_FATBINARY:-/usr/local/cuda/bin/fatbinary}
[ -x "$real_fatbinary" ] ||
    { echo "cuda12: $real_fatbinary is missing (CUDA 13's; set SW_FATBINARY)" >&2; exit 1; }

mkdir -p "$cache/wheels"
have=1
for w in "${WHEELS[@]}"; do
    name=${w%%==*}
    ls "$cache/wheels/${name//-/_}-${w#*==}-"*.whl >/dev/null 2>&1 || have=0
done
if [ $have = 0 ]; then
    echo "cuda12: downloading ${WHEELS[*]} (about 1 GB, once)"
    python3 -m pip download --quiet --no-deps --dest "$cache/wheels" "${WHEELS[@]}" \
        >"$cache/download.log" 2>&1 ||
        { echo "cuda12: downloading the CUDA 12 wheels from PyPI failed (network or PyPI; $cache/download.log says which): rerun when PyPI is reachable, or set SW_CUDA12_CACHE to a folder that holds them" >&2; exit 1; }
fi

# The tree, made once per set of wheels.
tree=$cache/cuda-$CUDA_VERSION
stamp="$tree/.made-from $(printf '%s ' "${WHEELS[@]}")"
if [ ! -f "$tree/.made" ] || [ "$(cat "$tree/.made")" != "$stamp" ]; then
    rm -rf "$tree" "$cache/unpacked"
    mkdir -p "$tree/bin" "$tree/include" "$tree/lib64" "$tree/nvvm/libdevice" "$cache/unpacked"
    for w in "$cache"/wheels/*.whl; do
        python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist()
                           if "/include/" in n or "/bin/" in n or "/libdevice/" in n
                           or n.endswith((".a", "libcudart.so.12"))])' "$w" "$cache/unpacked"
    done
    u=$cache/unpacked/nvidia
    cp -r "$u/cuda_runtime/include/." "$u/cuda_nvcc/include/." "$u/cublas/include/." "$tree/include/"
    cp "$u/cuda_nvcc/bin/ptxas" "$tree/bin/"
    chmod +x "$tree/bin/ptxas" # zipfile keeps no modes
    cp "$u/cuda_nvcc/nvvm/libdevice/libdevice.10.bc" "$tree/nvvm/libdevice/"
    cp "$u"/cuda_runtime/lib/* "$tree/lib64/"
    ln -sf libcudart.so.12 "$tree/lib64/libcudart.so"
    mkdir -p "$tree/nccl"
    cp -r "$u/nccl/include" "$tree/nccl/"
    cat >"$tree/bin/nvcc" <<EOF
#!/bin/sh
# Not a compiler: answers CMake's questions about this tree (scripts/ci/cuda12.sh).
case "\$1" in
--version) echo "Cuda compilation tools, release ${CUDA_VERSION%.*}, V$CUDA_VERSION" ;;
-v) echo '#\$ TOP=$tree'; echo '#\$ NVVMIR_LIBRARY_DIR=$tree/nvvm/libdevice' ;;
*) echo "nvcc: a stand-in for CMake's toolkit detection; clang compiles here" >&2 ;;
esac
EOF
    cat >"$tree/bin/fatbinary" <<EOF
#!/bin/sh
# clang's fatbinary call (--image=profile=sm_NN|compute_NN,file=F) in the
# syntax of CUDA 13's fatbinary (--image3=kind=elf|ptx,sm=NN,file=F).
set -- "\$@" --end--
while [ "\$1" != --end-- ]; do
    a=\$1
    shift
    case \$a in
    --image=profile=sm_*,file=*) sm=\${a#--image=profile=sm_}
        set -- "\$@" "--image3=kind=elf,sm=\${sm%%,*},file=\${sm#*,file=}" ;;
    --image=profile=compute_*,file=*) sm=\${a#--image=profile=compute_}
        set -- "\$@" "--image3=kind=ptx,sm=\${sm%%,*},file=\${sm#*,file=}" ;;
    *) set -- "\$@" "\$a" ;;
    esac
done
shift
exec "$real_fatbinary" "\$@"
EOF
    chmod +x "$tree/bin/nvcc" "$tree/bin/fatbinary"
    rm -rf "$cache/unpacked"
    echo "$stamp" >"$tree/.made"
fi
grep -q "define CUDA_VERSION 12090" "$tree/include/cuda.h" ||
    { echo "cuda12: $tree/include/cuda.h is not CUDA 12.9's" >&2; exit 1; }
t_tree=$(( $(date +%s) - t0 ))

# Configure and build. nvcc of CUDA 13 must not be found: the PATH leaves it out.
t1=$(date +%s)
# A build folder configured with another toolkit starts afresh (CMake keeps its first one).
if [ -f "$build/CMakeCache.txt" ] &&
    ! grep -q "FIND_PACKAGE_MESSAGE_DETAILS_CUDAToolkit:INTERNAL=\[$tree/include\]" "$build/CMakeCache.txt"; then
    rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi
path_no_cuda=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v '/cuda' | paste -sd: -)
PATH=$path_no_cuda CUDAToolkit_ROOT=$tree cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DSW_WERROR=ON -DSW_CUDA=ON -DCMAKE_CUDA_COMPILER="$CLANG" -DCMAKE_CUDA_ARCHITECTURES=75 \
    -DCUDAToolkit_ROOT="$tree" -DSW_NCCL_INCLUDE="$tree/nccl/include" >"$build.cmake.log" 2>&1 ||
    { tail -30 "$build.cmake.log"; exit 1; }
grep -q "FIND_PACKAGE_MESSAGE_DETAILS_CUDAToolkit:INTERNAL=\[$tree/include\].*\[v$CUDA_VERSION" \
    "$build/CMakeCache.txt" || { echo "cuda12: CMake did not take the CUDA 12 tree" >&2; exit 1; }
PATH=$path_no_cuda cmake --build "$build" -j "$(nproc)" --target shardwire shardwire-node \
    test_cuda_ops test_cuda_model test_cuda_spec test_cuda_cluster test_cuda_handover test_cuda_kv \
    test_cuda_fatal bench_gpu \
    >"$build.build.log" 2>&1 || { grep -E "error|warning" "$build.build.log" | head -40; exit 1; }
t_build=$(( $(date +%s) - t1 ))

# The programs carry sm_75 code (the fatbin's ELF image for arch 75).
python3 - "$build/bin/shardwire-node" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
archs, at = set(), 0
while True:  # fatbin containers: magic 0xBA55ED50, version 1, header size, payload size
    at = data.find(struct.pack("<IHH", 0xBA55ED50, 1, 16), at)
    if at < 0:
        break
    end = at + 16 + struct.unpack_from("<Q", data, at + 8)[0]
    p = at + 16
    while p + 32 <= end:  # entries: kind (1 PTX, 2 ELF), version, header size, payload size, ..., arch
        kind, _, hsize, psize = struct.unpack_from("<HHIQ", data, p)
        arch = struct.unpack_from("<I", data, p + 28)[0]
        archs.add(("ELF" if kind == 2 else "PTX") + " sm_%d" % arch)
        if hsize == 0:
            break
        p += hsize + psize
    at = end
print("cuda12: device code in shardwire-node:", ", ".join(sorted(archs)) or "none")
sys.exit(0 if "ELF sm_75" in archs else 1)
EOF

# Here, without a GPU or driver, the CUDA 12 runtime starts and says why it cannot run. The
# backend names a missing driver from /proc/driver/nvidia/version before it quotes the
# runtime, so a stand-in file (SW_NVIDIA_PROC) makes it quote the runtime's own error.
proc=$build/nvidia-version
echo "NVRM version: none (scripts/ci/cuda12.sh: no driver here)" >"$proc"
out=$(SW_NVIDIA_PROC=$proc "$build/bin/shardwire" generate \
      --model "${SW_TEST_MODEL:-$here/models/SmolLM2-135M-Instruct.Q4_1.gguf}" \
      -p hi -n 1 --backend cuda 2>&1 || true)
echo "cuda12: shardwire generate --backend cuda here: $(echo "$out" | grep -m1 'cuda:0')"
echo "$out" | grep -q "cuda:0: the NVIDIA driver cannot run this build (CUDA driver version is insufficient" ||
    { echo "$out" | tail -5; echo "cuda12: expected the runtime's one line about the driver" >&2; exit 1; }
echo "cuda12: passed (tree $t_tree s, build $t_build s: $build)"
