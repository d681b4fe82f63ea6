#!/usr/bin/env bash
# The test command: installs what is missing, fetches the data the suite
# needs (scripts/fetch_test_data.sh: the models and the tokenizer conformance
# data, cached), builds with warnings as errors and runs the default CTest
# suite (everything but the slow, big and cuda labels): on a fresh clone it ends
# "skipped: nothing". Exits non-zero on any failure. Every run ends
# with one line listing what was skipped (whole tests and parts of tests) and
# why; with SW_TEST_STRICT=1 (what .ci/run sets) any skip is a failure.
#
#   bash scripts/test.sh                        # default suite
#   SW_TEST_LABELS=slow bash scripts/test.sh    # only the slow suite
#   SW_TEST_LABELS=big bash scripts/test.sh     # only the big-model tests (~17 GB of models)
#   SW_TEST_STRICT=1 bash scripts/test.sh       # a skip fails the run
#   SW_CTEST_ARGS="-R test_relay" bash scripts/test.sh   # extra ctest arguments
#   bash scripts/test.sh -DSW_SANITIZE=ON       # arguments go to cmake's configure step
#
# When nvcc is found the CUDA backend is compiled too, for one GPU
# architecture ($SW_CUDA_ARCH, default 75) to keep the build short
# (SW_CUDA=OFF or -DSW_CUDA=OFF skips it); its tests have the cuda label.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/scripts/deps.sh"
SW_TEST_VOCAB_DIR=$(bash "$here/scripts/fetch_test_data.sh" "${SW_TEST_LABELS:-}")
export SW_TEST_VOCAB_DIR
build=${SW_BUILD_DIR:-$here/build}
SW_BUILD_DIR=$build bash "$here/scripts/build.sh" -DSW_WERROR=ON -DSW_CUDA="${SW_CUDA:-AUTO}" \
    -DCMAKE_CUDA_ARCHITECTURES="${SW_CUDA_ARCH:-75}" "$@"
cd "$build"
skipped=Testing/skipped.txt
mkdir -p Testing
rm -f "$skipped"
labels=(-LE 'slow|big|cuda')
[ -n "${SW_TEST_LABELS:-}" ] && labels=(-L "$SW_TEST_LABELS")
read -r -a extra <<<"${SW_CTEST_ARGS:-}"
rc=0
ctest --output-on-failure -j 2 "${labels[@]}" "${extra[@]}" || rc=$?
if [ -s "$skipped" ]; then
    echo "skipped ($(wc -l <"$skipped")): $(sort "$skipped" | paste -sd ';' | sed 's/;/; /g')"
else
    echo "skipped: nothing"
fi
exit $rc
