#!/usr/bin/env bash
# The GPU check in one command: builds shardwire with CUDA, makes the test
# models, runs `ctest -L cuda -LE cudaemu` (the real GPU's tests, not the
# emulation's) and the GPU benchmark, and prints one table.
# Meant for a machine with an NVIDIA GPU and nvcc that reaches no package
# registry and may lack libzmq, protobuf-c, libsodium and jansson: it works
# from what travels with the checkout.
#
#   bash scripts/gpu_check.sh --prepare   # here (apt and the models at hand):
#                                         #   gpu-debs/   the Debian packages of the dependencies
#                                         #   gpu-models/ SmolLM2 cut to 4 layers (real tokenizer, 26 MB)
#   bash scripts/gpu_check.sh             # on the GPU machine, with gpu-debs/ and gpu-models/
#
# Both folders are git-ignored (.gitignore); copy them along with the checkout
# (for this workplace's device tool: carry ["gpu-debs", "gpu-models"]). The
# other models are made on the spot by shardwire-mkmodel: random weights in
# the shapes and tensor types of Qwen2.5-Coder-1.5B/0.5B Q4_K_M and
# SmolLM2-135M Q4_1, plus two 4-layer models with the remaining types, and
# the miniatures of Gemma 3 (sliding windows, GEGLU) and Qwen3-MoE (experts).
#
# Takes about 5 minutes on one GPU (build 1-2, tests 2, benchmark 1), plus the
# sanitizers (compute-sanitizer's memcheck, racecheck and synccheck on
# test_cuda_ops and test_cuda_model with the smallest model, when
# compute-sanitizer is there: tens of minutes without a budget). Strict: a test
# or a part of one that skips (cuBLAS or NCCL missing, a model absent, the
# two-GPU parts on a machine with one GPU, compute-sanitizer missing or out of
# time) fails the check; every skip is a row of the table. SW_TEST_STRICT=0
# lists the skips and fails only on errors. SW_GPU_SANITIZERS=0 leaves the
# sanitizers out (a skip).
#
# A time budget for a lent machine (SW_GPU_BUDGET_S, seconds from the start;
# 0, the default, is none): the steps run in the order build, models, tests,
# benchmark, sanitizers; the tests and the benchmark are stopped at the
# budget, and each sanitizer run gets an equal share of what is left (one
# that runs out is a row "out of time", a skip). The table comes out in any
# case once the build and the models are done (neither has a budget).
# docs/testing.md ("A real GPU") gives the command for this workplace's
# device tool: one call of 10 minutes, logs back in $OUT.
#
# Environment: SW_GPU_ARCH (default: the GPU's compute capability),
# SW_GPU_BUILD (default build-gpu), SW_GPU_WORK (default /tmp/sw_gpu_check), SW_GPU_FORCE_DEBS=1
# (use gpu-debs/ even when the system has the libraries: a dry run of that path),
# SW_GPU_BUDGET_S (above). With $OUT set (the device tool), the table goes to
# $OUT/gpu_check.md and every log into $OUT/gpu_check_logs.tar.gz (two files:
# the tool brings back at most 8).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
t_start=$(date +%s)
work=${SW_GPU_WORK:-/tmp/sw_gpu_check}
log_dir=$work/logs
build=${SW_GPU_BUILD:-$here/build-gpu}
mkdir -p "$work" "$log_dir"
budget=${SW_GPU_BUDGET_S:-0}
# seconds left of the budget (a large number without one)
left() {
    if [ "$budget" -gt 0 ]; then echo $(( budget - ($(date +%s) - t_start) )); else echo 999999; fi
}
# seconds for a step that must leave $1 seconds of the budget (at least 1: timeout 0 is none)
upto() {
    local t=$(( $(left) - $1 ))
    if [ $t -lt 1 ]; then t=1; fi
    echo $t
}
# With $OUT (the device tool): the logs in one archive there, whatever happens after this point.
s_pack() {
    [ -n "${OUT:-}" ] && [ -d "$OUT" ] && tar -czf "$OUT/gpu_check_logs.tar.gz" -C "$work" logs 2>/dev/null
    return 0
}
trap s_pack EXIT

# The libraries shardwire links (DIRECT) and what they need in turn (the rest:
# apt-cache depends --recurse of libcurl4 and libmicrohttpd12, without libc).
DIRECT=(libzmq5 libsodium23 libprotobuf-c1 libprotoc32 libprotobuf32 libjansson4 libcurl4
        libmicrohttpd12)
DEBS=("${DIRECT[@]}" libzmq3-dev libsodium-dev libprotobuf-c-dev protobuf-c-compiler libjansson-dev
      libcurl4-openssl-dev libmicrohttpd-dev libpgm-5.3-0 libnorm1 libbsd0 libmd0 pkgconf
      pkgconf-bin libpkgconf3 libbrotli1 libcom-err2 libdb5.3 libffi8 libgmp10 libgnutls30
      libgssapi-krb5-2 libhogweed6 libidn2-0 libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0
      libldap-2.5-0 libnettle8 libnghttp2-14 libp11-kit0 libpsl5 librtmp1 libsasl2-2
      libsasl2-modules-db libssh2-1 libssl3 libtasn1-6 libunistring2 libzstd1 zlib1g)

if [ "${1:-}" = "--prepare" ]; then
    mkdir -p gpu-debs gpu-models
    (cd gpu-debs && apt-get download "${DEBS[@]}" >/dev/null)
    echo "gpu_check: $(ls gpu-debs | wc -l) packages in gpu-debs/ ($(du -sh gpu-debs | cut -f1))"
    src=${SW_MODELS_DIR:-$here/models}/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -f "$src" ] || { echo "gpu_check: $src is missing (bash scripts/fetch_model.sh)" >&2; exit 1; }
    SW_BUILD_DIR=${SW_BUILD_DIR:-$here/build} bash scripts/build.sh >/dev/null
    "${SW_BUILD_DIR:-$here/build}/bin/shardwire-mkmodel" --from "$src" --layers 4 --embd-type q4_0 \
        -o gpu-models/smollm2-4layers.gguf
    echo "gpu_check: gpu-models/smollm2-4layers.gguf ($(du -sh gpu-models | cut -f1))"
    echo "gpu_check: now run 'bash scripts/gpu_check.sh' on the GPU machine with gpu-debs/ and gpu-models/"
    exit 0
fi

# The machine's CUDA libraries, found where an image keeps them (the toolkit,
# or pip's nvidia-* packages): cuBLAS and NCCL are opened at run time, and the
# NCCL header decides at build time whether NCCL is used at all.
nccl_inc=
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $(python3 - <<'PY' 2>/dev/null
import glob, site, sys
for p in site.getsitepackages() + [site.getusersitepackages()]:
    for d in sorted(glob.glob(p + "/nvidia/**/lib", recursive=True)):
        print(d)
PY
); do
    if ls "$d"/libcublas.so.* "$d"/libnccl.so.* >/dev/null 2>&1; then
        export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    if [ -z "$nccl_inc" ] && [ -f "$d/../include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
        nccl_inc=$(cd "$d/../include" && pwd)
    fi
done
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap \
    --format=csv,noheader || echo "gpu_check: nvidia-smi not found"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc >/dev/null || { echo "gpu_check: nvcc not found" >&2; exit 1; }
# The driver, the newest CUDA runtime it accepts, and the runtime this build
# links (statically): a runtime newer than the driver accepts cannot start
# (docs/deploy.md, "CUDA and driver versions").
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
driver_cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1 || true)
runtime=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
echo "gpu_check: driver ${driver:-?} (accepts CUDA up to ${driver_cuda:-?}), runtime CUDA ${runtime:-?} (nvcc)"

# ---- 1. dependencies: the system's, else the .deb files unpacked into a prefix
have_deps() {
    command -v pkg-config >/dev/null && command -v protoc-c >/dev/null &&
        pkg-config --exists libzmq libsodium jansson libprotobuf-c libcurl libmicrohttpd 2>/dev/null
}
cmake_extra=()
[ -n "$nccl_inc" ] && cmake_extra+=(-DSW_NCCL_INCLUDE="$nccl_inc")
if [ -n "${SW_GPU_FORCE_DEBS:-}" ] || ! have_deps; then
    [ -d gpu-debs ] || { echo "gpu_check: dependencies missing and no gpu-debs/ (run --prepare)" >&2; exit 1; }
    prefix=$work/deps
    rm -rf "$prefix"
    mkdir -p "$prefix"
    lib=$prefix/usr/lib/x86_64-linux-gnu
    for f in gpu-debs/*.deb; do
        pkg=$(dpkg-deb -f "$f" Package)
        dpkg -x "$f" "$prefix"
        # A library the system already has (libssl, zlib, ...) is the system's:
        # ours would shadow it through LD_LIBRARY_PATH for every program here.
        case " ${DIRECT[*]} " in *" $pkg "*) continue ;; esac
        for so in $(dpkg-deb -c "$f" | awk '{print $6}' | grep -E '\.so\.[0-9]' || true); do
            base=$(basename "$so")
            # grep without -q reads all of ldconfig's output: with -q it could
            # stop early and pipefail would see ldconfig's SIGPIPE as a miss.
            if ldconfig -p 2>/dev/null | grep "^[[:space:]]*$base " >/dev/null; then
                rm -f "$prefix/${so#./}"
            fi
        done
    done
    # Dynamic linking only: drop the static-link requirements (libzmq's lists
    # krb5, openpgm, norm and libbsd, whose .pc files are not needed).
    sed -i '/^Requires.private/d; /^Libs.private/d' "$lib"/pkgconfig/*.pc
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$prefix/usr/bin:$PATH
    export PKG_CONFIG_SYSROOT_DIR=$prefix
    export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$prefix/usr/share/pkgconfig
    pc=$(command -v pkg-config || echo "$prefix/usr/bin/pkgconf")
    cmake_extra+=(-DPKG_CONFIG_EXECUTABLE="$pc")
    have_deps || { echo "gpu_check: the unpacked packages do not provide every dependency" >&2; exit 1; }
    echo "gpu_check: dependencies from gpu-debs/ in $prefix"
fi

# ---- 2. build (this GPU's architecture only, to save time)
arch=${SW_GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
                      head -1 | tr -d '.[:space:]' || true)}
arch=${arch:-native}
t0=$(date +%s)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSW_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    "${cmake_extra[@]}" >"$log_dir/gpu_check_cmake.log" 2>&1 ||
    { tail -30 "$log_dir/gpu_check_cmake.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target shardwire shardwire-node shardwire-relay \
    shardwire-mkmodel test_cuda_model test_cuda_spec test_cuda_cluster test_cuda_ops test_cuda_handover \
    test_cuda_kv bench_gpu bench_rows \
    >"$log_dir/gpu_check_build.log" 2>&1 || { tail -40 "$log_dir/gpu_check_build.log"; exit 1; }
t_build=$(( $(date +%s) - t0 ))
bin=$build/bin

# ---- 3. models
t0=$(date +%s)
m=$work/models
mkdir -p "$m"
smol=$m/smollm2-4layers.gguf
if [ -f gpu-models/smollm2-4layers.gguf ]; then
    cp gpu-models/smollm2-4layers.gguf "$smol"
elif [ -f "${SW_MODELS_DIR:-$here/models}/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    "$bin/shardwire-mkmodel" --from "${SW_MODELS_DIR:-$here/models}/SmolLM2-135M-Instruct.Q4_1.gguf" \
        --layers 4 --embd-type q4_0 -o "$smol"
else
    echo "gpu_check: no gpu-models/smollm2-4layers.gguf (run --prepare)" >&2
    exit 1
fi
"$bin/shardwire-mkmodel" --from "$smol" --layers 2 -o "$m/smollm2-2layers.gguf"
for p in qwen2.5-1.5b qwen2.5-0.5b smollm2-135m tiny-float tiny-qwen3 gemma3-mini qwen3moe-mini; do
    [ -f "$m/$p.gguf" ] || "$bin/shardwire-mkmodel" --synth "$p" -o "$m/$p.gguf"
done
t_models=$(( $(date +%s) - t0 ))

# ---- 4. the cuda tests
export SW_CUDA_TEST_MODELS="$smol:$m/tiny-float.gguf:$m/tiny-qwen3.gguf:$m/qwen2.5-0.5b.gguf:$m/qwen2.5-1.5b.gguf"
export SW_CUDA_TOKENIZER_MODELS="$smol"
export SW_CUDA_DRAFT_MODEL="$m/smollm2-2layers.gguf"
export SW_CUDA_ARCH_MODELS="$m/gemma3-mini.gguf:$m/qwen3moe-mini.gguf"
export SW_TEST_MODEL="$smol"
t0=$(date +%s)
set +e
# Strict: a test or a part of one that skips (no second GPU, no cuBLAS, no
# NCCL) fails the check instead of counting as passed.
(cd "$build" && SW_TEST_STRICT=${SW_TEST_STRICT:-1} timeout -k 5 "$(upto 60)" \
    ctest -L cuda -LE cudaemu --output-on-failure --timeout 900 -V) \
    >"$log_dir/gpu_check_tests.log" 2>&1
tests_rc=$?
[ $tests_rc = 124 ] && echo "gpu_check: the tests ran out of the time budget ($budget s)" |
    tee -a "$log_dir/gpu_check_tests.log"
set -e
t_tests=$(( $(date +%s) - t0 ))
n_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)

# ---- 5. the benchmark
t0=$(date +%s)
set +e
timeout -k 5 "$(upto 30)" \
    "$bin/bench_gpu" --cpu-threads "$(nproc)" --draft "$m/qwen2.5-0.5b.gguf" "$m/qwen2.5-1.5b.gguf" \
    "$m/qwen2.5-0.5b.gguf" "$m/smollm2-135m.gguf" >"$log_dir/gpu_check_bench.log" 2>&1
bench_rc=$?
# What rounds of R rows can give with GPU stages at the seed's 172 ms round trip (the
# acceptance is the real pair's, measured by scripts/bench/bench_wan.py on the CPU: the synthetic
# models' own drafts mean nothing).
timeout -k 5 "$(upto 30)" \
    "$bin/bench_rows" --backend cuda:0 --rtt-ms 172 --accept 0.84 --max-rows 64 \
    --draft "$m/qwen2.5-0.5b.gguf" "$m/qwen2.5-1.5b.gguf" >>"$log_dir/gpu_check_bench.log" 2>&1 ||
    bench_rc=1
set -e
t_bench=$(( $(date +%s) - t0 ))

# ---- 6. compute-sanitizer: memcheck, racecheck, synccheck on the op and model tests
# (the smallest model with K-quants and the miniatures: the tools slow kernels 10-100x).
# Under a budget each run gets an equal share of what is left (less 30 s for the table).
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
san_rows=()
san_fail=0 # a sanitizer found an error
san_skip=0 # a sanitizer did not run or ran out of time (strict: a failure)
t0=$(date +%s)
if [ "${SW_GPU_SANITIZERS:-1}" = 0 ]; then
    san_rows+=("| compute-sanitizer | skipped (SW_GPU_SANITIZERS=0) |")
    san_skip=1
elif [ -z "$san" ]; then
    san_rows+=("| compute-sanitizer | skipped: not found (it comes with the CUDA Toolkit) |")
    san_skip=1
else
    runs_left=6
    for tool in memcheck racecheck synccheck; do
        for t in test_cuda_ops test_cuda_model; do
            slice=$(( ($(left) - 30) / runs_left ))
            runs_left=$((runs_left - 1))
            if [ ! -x "$bin/$t" ]; then
                san_rows+=("| $tool $t | skipped: $bin/$t not built |")
                san_skip=1
                continue
            fi
            if [ $slice -lt 20 ]; then
                san_rows+=("| $tool $t | skipped: out of time (budget $budget s) |")
                san_skip=1
                continue
            fi
            set +e
            SW_CUDA_TEST_MODELS="$m/tiny-qwen3.gguf" SW_CUDA_TEST_QUICK=1 SW_CUDA_TEST_SEEDS=1 \
                SW_TEST_STRICT=0 timeout -k 10 "$slice" \
                "$san" --tool "$tool" --error-exitcode 99 --print-limit 20 "$bin/$t" \
                >"$log_dir/gpu_check_${tool}_$t.log" 2>&1
            rc=$?
            set -e
            summary=$(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' \
                      "$log_dir/gpu_check_${tool}_$t.log" | tail -1 | sed 's/^========= //' || true)
            errors=$(grep -c '^========= \(Invalid\|Race\|Barrier\|Program hit\|Error\)' \
                     "$log_dir/gpu_check_${tool}_$t.log" || true)
            if [ $rc -eq 0 ]; then
                san_rows+=("| $tool $t | passed (${summary:-no errors}) |")
            elif [ $rc -eq 77 ]; then # the test skipped as a whole (its log says why)
                san_rows+=("| $tool $t | skipped by the test: $(grep -m1 -i 'skip' \
                           "$log_dir/gpu_check_${tool}_$t.log" | tr '|' '/' || true) |")
                san_skip=1
            elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
                # stopped at its share of the budget: not a pass; errors seen before count
                san_rows+=("| $tool $t | out of time after $slice s (${errors} error lines before; budget $budget s) |")
                san_skip=1
                if [ "$errors" -gt 0 ]; then san_fail=1; fi
            else
                san_rows+=("| $tool $t | FAILED (exit $rc: ${summary:-see the log}) |")
                san_fail=1
            fi
        done
    done
fi
t_san=$(( $(date +%s) - t0 ))

# ---- 7. one table
status() { grep -E "^ *[0-9]+/[0-9]+ Test +#[0-9]+: $1 " "$log_dir/gpu_check_tests.log" |
           sed -E 's/.*(Passed|Failed|\*\*\*[A-Za-z]+|Not Run|Skipped).*/\1/' | head -1; }
s_table() {
echo "## shardwire GPU check ($(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true))"
echo
echo "| check | result |"
echo "|---|---|"
echo "| driver / runtime | ${driver:-?} (up to CUDA ${driver_cuda:-?}) / CUDA ${runtime:-?} |"
# every test of `ctest -L cuda -LE cudaemu` (built above: one it lacks would be "Not Run")
for t in test_cuda_model test_cuda_spec test_cuda_cluster test_cuda_ops test_cuda_handover test_cuda_kv; do
    echo "| $t | $(status $t) |"
done
if [ "${n_gpus:-0}" -lt 2 ]; then
    echo "| two-GPU parts | skipped: ${n_gpus:-0} GPU visible (each test recorded its parts; strict fails) |"
else
    echo "| two-GPU parts | ran on $n_gpus GPUs |"
fi
# every part a test left out, as it recorded it (SW_TEST_SKIP_LOG)
skipped=$build/Testing/skipped.txt
if [ -s "$skipped" ]; then
    sed 's/|/\\|/g; s/^/| skipped | /; s/$/ |/' "$skipped"
fi
printf '%s\n' "${san_rows[@]}"
# The tests' own rows ("| what | result |"), in order, without repeats of the same row;
# the "paths of ..." rows say what ran (cuBLAS, NCCL or peer copies, graphs).
grep -E '^[0-9]+: \|' "$log_dir/gpu_check_tests.log" | sed -E 's/^[0-9]+: //' | awk '!seen[$0]++' || true
echo "| build / models / tests / sanitizers / benchmark | ${t_build} s / ${t_models} s / ${t_tests} s / ${t_san} s / ${t_bench} s (total $(( $(date +%s) - t_start )) s) |"
echo
grep -vE '^(bench_gpu|shardwire)' "$log_dir/gpu_check_bench.log" || true
}
echo
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    s_table | tee "$OUT/gpu_check.md"
    echo "logs: $log_dir/ (and in \$OUT/gpu_check_logs.tar.gz)"
else
    s_table
    echo "logs: $log_dir/gpu_check_{tests,bench,build}.log, $log_dir/gpu_check_<tool>_<test>.log"
fi
san_rc=$san_fail
[ "${SW_TEST_STRICT:-1}" != 0 ] && [ $san_skip = 1 ] && san_rc=1
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $san_rc -eq 0 ] ||
    { echo "gpu_check: FAILED (tests $tests_rc, bench $bench_rc, sanitizers $san_rc)"; exit 1; }
if [ "${SW_TEST_STRICT:-1}" != 0 ]; then
    echo "gpu_check: all cuda tests passed"
else
    echo "gpu_check: no test failed and no sanitizer found an error (SW_TEST_STRICT=0: the skips are the table's rows)"
fi
