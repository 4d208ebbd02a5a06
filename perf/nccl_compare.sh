#!/bin/sh
# The NCCL-API path against native antdt (docs/nccl.md), PROVISIONAL on a busy machine:
#  1. AllReduce at the same sizes: antdt_allreduce_perf (native API) and
#     nccl_allreduce_perf (nccl.h) through LD_PRELOAD=libantdt_nccl.so, interleaved.
#  2. The straggler loop through the NCCL API (compute + ncclAllReduce), one rank 3x
#     slower, then 10% 5x spikes on every rank: ANTDT_NCCL_LATE=defer vs wait.
#   perf/nccl_compare.sh [build-dir] [ranks] [steps]
set -eu
build=${1:-build} ranks=${2:-2} steps=${3:-100}
shim=$build/collectives/api/nccl/libantdt_nccl.so
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 UCX_WARN_UNUSED_ENV_VARS=n
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() { mpirun --bind-to none --oversubscribe -np "$ranks" "$@"; }
n=0
nccl() {  # nccl [env...] -- args: the nccl.h tool through the shim
  n=$((n + 1))
  run -x LD_PRELOAD="$shim" "$@" "$build/perf/nccl_allreduce_perf" "$dir/id$n" ${ARGS}
}
for round in 1 2; do
  echo "== round $round: native antdt_allreduce_perf"
  run "$build/perf/antdt_allreduce_perf" -b 8 -e 64M -f 8 -n 20 -w 5
  echo "== round $round: nccl_allreduce_perf through libantdt_nccl.so"
  ARGS="-b 8 -e 67108864 -f 8 -n 20 -w 5" nccl
done
for case in "-r $((ranks - 1)) -x 3" "-p 0.1 -k 5"; do
  for late in wait defer; do
    echo "== straggler loop ($case), ANTDT_NCCL_LATE=$late"
    if [ "$late" = defer ]; then
      ARGS="-S $steps -c 10 -B 262144 $case" nccl -x ANTDT_NCCL_LATE=defer || echo "(failed: see docs/nccl.md#antdt_nccl_latedefer)"
    else
      ARGS="-S $steps -c 10 -B 262144 $case" nccl || true
    fi
  done
done
