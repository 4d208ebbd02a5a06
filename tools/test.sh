#!/usr/bin/env bash
# The project's test command: installs missing packages (tools/setup.sh), configures a
# fresh build in ./build with warnings as errors, builds everything and runs
# every test. GPU tests skip on machines without a GPU.
#   ANTDT_BUILD_DIR  build directory (default: <repo>/build)
#   ANTDT_JOBS       parallel build and test jobs (default: nproc)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ANTDT_BUILD_DIR:-$repo/build}"
jobs="${ANTDT_JOBS:-$(nproc)}"

"$repo/tools/setup.sh"

# mpirun in containers: running as root, and more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# UCX warns about UCX_* variables it does not know (ours set some per test).
export UCX_WARN_UNUSED_ENV_VARS=n
if [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

set -x
cmake --fresh -S "$repo" -B "$build" -G Ninja -DANTDT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 300
