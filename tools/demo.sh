#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a multi-rank AllReduce
# on this machine with mpirun, printing the nccl-tests style table.
#   ANTDT_DEMO_RANKS   ranks (default 4)
#   ANTDT_BUILD_DIR    build directory (default: <repo>/build)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ANTDT_BUILD_DIR:-$repo/build}"
ranks="${ANTDT_DEMO_RANKS:-4}"

"$repo/tools/setup.sh"
if [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target antdt_allreduce_perf

# mpirun in containers: running as root, and more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export UCX_WARN_UNUSED_ENV_VARS=n
set -x
mpirun -np "$ranks" --bind-to none "$build/perf/antdt_allreduce_perf" -b 8 -e 64M -f 4 -n 10 -w 3
