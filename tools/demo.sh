#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains a small CNN on
# Fashion-MNIST with 4 ranks on this machine, one rank slowed by real contention
# (a cgroup CPU quota: a third of its share), under plain DDP on gloo and under
# antdt's policies bsp, antdt-dd and antdt-nd, plus the no-straggler ceiling
# (tools/fashion_mnist_demo.sh; docs/torch.md). Prints the table (time to the
# target accuracy, final accuracy, samples/s, efficiency) and where the plots are.
# About 8 minutes; `tools/demo.sh --full` trains 4 epochs instead of 1.
#
# `tools/demo.sh --synthetic` runs the earlier synthetic demo instead:
#   1. the straggler benchmark: a synthetic data-parallel training loop (20 ms of
#      compute per step) in which one rank is 3x slower (ANTDT_INJECT), run with
#      the late policies wait (BSP), drop and defer side by side; it prints
#      throughput, straggler efficiency and the class the Monitor gave each rank,
#      and fails if the ranks did not apply the same results (docs/benchmarks.md);
#   2. the scheduler on the real engine: the same straggler under BSP and under
#      the antdt-dd policy (batch sizes rebalanced by the Controller through the
#      Agent API, ranks started by antdt-run; docs/scheduler.md);
#   3. the nccl-tests style AllReduce table.
#   ANTDT_DEMO_RANKS   ranks (default 4)
#   ANTDT_DEMO_STEPS   results per policy in the straggler benchmark (default 100)
#   ANTDT_DEMO_INJECT  the straggler scenario (default: rank 2 three times slower)
#   ANTDT_BUILD_DIR    build directory (default: <repo>/build)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ANTDT_BUILD_DIR:-$repo/build}"
ranks="${ANTDT_DEMO_RANKS:-4}"
steps="${ANTDT_DEMO_STEPS:-100}"
inject="${ANTDT_DEMO_INJECT:-rank=2:slow=3}"

"$repo/tools/setup.sh"
if [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if [[ "${1:-}" != "--synthetic" ]]; then
  targets=(antdt-run antdt_python)
  # The torch.distributed backend "antdt" (built when Torch is found): without
  # it the antdt runs would fall back to gloo for DDP's own process group.
  if cmake --build "$build" --target help | grep -q '^antdt_torch_ext:'; then targets+=(antdt_torch_ext); fi
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
  exec "$repo/tools/fashion_mnist_demo.sh" --build "$build" "$@"
fi
cmake --build "$build" -j "$(nproc)" --target antdt_straggler_perf antdt_allreduce_perf antdt_policy_perf antdt-run

# mpirun in containers: running as root, and more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export UCX_WARN_UNUSED_ENV_VARS=n
# A rank 3x slower arrives 2-3 steps late: defer with staleness 3 still counts
# its contributions (with the default bound of 1 they are dropped, as with drop).
set -x
mpirun -np "$ranks" --bind-to none -x ANTDT_INJECT="$inject" \
  "$build/perf/antdt_straggler_perf" --compute-ms 20 --steps "$steps" --policies wait,drop,defer --staleness 3
"$repo/perf/policy_compare.sh" -b "$build" -r "$ranks" -n 1 -s 150 -p "bsp antdt-dd" "$inject"
mpirun -np "$ranks" --bind-to none "$build/perf/antdt_allreduce_perf" -b 8 -e 16M -f 8 -n 10 -w 3
