#!/usr/bin/env bash
# Fetches the tokenizer conformance data (llama.cpp's models/ggml-vocab-*.gguf
# with their .inp/.out test strings and expected ids, 12 vocabularies) into
# $SW_MODELS_DIR/vocab (models/vocab by default) and prints that folder.
#
# These are the files ../shared/testdata/vocab holds on the team's machines
# (byte-identical): tests/CMakeLists.txt uses that folder when it exists and
# this one otherwise, so a fresh clone anywhere can run the conformance test.
# They come from the llama-cpp-python 0.3.36 sdist on PyPI (vendor/llama.cpp/
# models/), the same release scripts/ref/ builds the reference from; the sdist
# and every extracted file are checked against the sha256 sums below. Cached:
# a second call only re-checks the hashes.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
dir=${SW_MODELS_DIR:-$here/models}/vocab

sdist="llama_cpp_python-0.3.36.tar.gz"
sdist_sha="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# name -> sha256 of ggml-vocab-<name>.gguf (the .inp/.out files are checked by the test itself)
declare -A vocab_sha=(
    [command-r]=a2f8cfea952ef7c391a6d92a1c309d0bd32e36384d9b9230569a7425732f27d9
    [deepseek-coder]=91cb1379f2e33af1c4866b194622b7a0e12e8f0c9dba7ba2f10d55978730bec1
    [deepseek-llm]=867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76
    [falcon]=9f0bf8b0733680398b72e652e90f260f43782f326e75545fc0e49611a5ba35ad
    [gpt-2]=cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac
    [llama-bpe]=97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e
    [llama-spm]=16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69
    [mpt]=59dc382612866d1fc6c11ea531318d327598f3412d9c8f8600607cdf3030898f
    [phi-3]=967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326
    [qwen2]=44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c
    [refact]=ac3ceda902fed91ccf74312b305d9b86c37e4f8e35fa9cc6ef3ce34fca7d4678
    [starcoder]=fedb892b4e1bd3c1f2fcdae356440b14fb458f4264d586e5c987ed93df4e174d
)

check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

complete() {
    for name in "${!vocab_sha[@]}"; do
        check "$dir/ggml-vocab-$name.gguf" "${vocab_sha[$name]}" || return 1
        [ -f "$dir/ggml-vocab-$name.gguf.inp" ] && [ -f "$dir/ggml-vocab-$name.gguf.out" ] || return 1
    done
}

if complete; then
    echo "$dir"
    exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch_vocab: downloading the llama-cpp-python 0.3.36 sdist (77 MB) from PyPI" >&2
python3 -m pip download --quiet --no-deps --no-binary=:all: -d "$tmp" llama-cpp-python==0.3.36 >&2 || {
    echo "fetch_vocab: pip could not download llama-cpp-python==0.3.36: check the network access to PyPI" >&2
    exit 1
}
if ! check "$tmp/$sdist" "$sdist_sha"; then
    echo "fetch_vocab: $sdist is missing or has the wrong sha256 (expected $sdist_sha): refusing it" >&2
    exit 1
fi
members=()
for name in "${!vocab_sha[@]}"; do
    for ext in "" .inp .out; do
        members+=("llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-$name.gguf$ext")
    done
done
tar -xzf "$tmp/$sdist" -C "$tmp" "${members[@]}"
for name in "${!vocab_sha[@]}"; do
    f="$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-$name.gguf"
    if ! check "$f" "${vocab_sha[$name]}"; then
        echo "fetch_vocab: $(basename "$f") in the sdist has the wrong sha256: refusing it" >&2
        exit 1
    fi
    mv -f "$f" "$f.inp" "$f.out" "$dir/"
done
echo "$dir"
