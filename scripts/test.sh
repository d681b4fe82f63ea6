#!/usr/bin/env bash
# The test command: installs what is missing, builds with warnings as errors,
# fetches the default model and runs the default CTest suite (everything but
# the slow and cuda labels). Exits non-zero on any failure. When nvcc is
# found the CUDA backend is compiled too, for one GPU architecture
# ($SW_CUDA_ARCH, default 75) to keep the build short; SW_CUDA=OFF skips it.
#
#   bash scripts/test.sh              # default suite
#   SW_TEST_LABELS=slow bash scripts/test.sh   # only the slow suite
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/scripts/deps.sh"
bash "$here/scripts/fetch_model.sh" >/dev/null
SW_BUILD_DIR=${SW_BUILD_DIR:-$here/build} bash "$here/scripts/build.sh" -DSW_WERROR=ON \
    -DSW_CUDA="${SW_CUDA:-AUTO}" -DCMAKE_CUDA_ARCHITECTURES="${SW_CUDA_ARCH:-75}"
cd "${SW_BUILD_DIR:-$here/build}"
if [ -n "${SW_TEST_LABELS:-}" ]; then
    ctest --output-on-failure -j 2 -L "$SW_TEST_LABELS"
else
    ctest --output-on-failure -j 2 -LE 'slow|cuda'
fi
