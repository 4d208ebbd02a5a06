#!/usr/bin/env bash
# The NCCL-API path against native antdt (docs/nccl.md, issue targets in
# docs/benchmarks.md "NCCL API"), every figure a median of interleaved launches:
#  1. AllReduce f32 sum, 8 B (latency) and 64 MiB (busbw): antdt_allreduce_perf
#     (native API) and nccl_allreduce_perf (nccl.h) through LD_PRELOAD=libantdt_nccl.so,
#     alternating launch by launch; prints the medians, shim - native at 8 B and
#     shim / native at 64 MiB.
#  2. The straggler loop through the NCCL API (compute + ncclAllReduce of 1 MiB):
#     one rank 3x slower, then 10% 5x spikes on every rank; ANTDT_NCCL_LATE=wait
#     and defer alternating; prints median steps/s and defer / wait.
#  3. Passthrough overhead: one process calling ncclAllReduce (8 B) on the test
#     stand-in NCCL (build/tests/nccl), directly and behind the shim in passthrough
#     mode, alternating; prints the median added time per call and what it is of a
#     10 ms step (target <= 1%). On a GPU the same runs on the real NCCL (gpu-check.sh).
#
# usage: perf/nccl_compare.sh [build-dir] [ranks] [launches] [steps]
#   defaults: build 4 5 200
set -euo pipefail
build=${1:-build} ranks=${2:-4} launches=${3:-5} steps=${4:-200}
shim=$build/collectives/api/nccl/libantdt_nccl.so
native=$build/perf/antdt_allreduce_perf
nccl=$build/perf/nccl_allreduce_perf
for f in "$shim" "$native" "$nccl"; do
  [[ -e "$f" ]] || { echo "nccl_compare.sh: $f is missing (build the tree first)" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export UCX_WARN_UNUSED_ENV_VARS=n
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() { mpirun --bind-to none --oversubscribe -np "$ranks" "$@"; }
through_shim() {  # through_shim [mpirun -x options...] -- tool args: nccl_allreduce_perf preloaded
  local opts=() id
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  id=$(mktemp -u "$dir/id.XXXXXX")  # a fresh id file per launch (also from a pipeline's subshell)
  # The native tool learns its local rank from mpirun and binds to its share of
  # the cores (ANTDT_BIND=auto); an NCCL program's communicator only knows its NCCL
  # rank, so the shim is told the same (docs/nccl.md#binding): both run bound alike.
  run -x LD_PRELOAD="$shim" "${opts[@]}" sh -c \
    'ANTDT_LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK ANTDT_LOCAL_SIZE=$OMPI_COMM_WORLD_LOCAL_SIZE exec "$0" "$@"' \
    "$nccl" "$id" "$@"
}
here=$(cd "$(dirname "$0")" && pwd)
median() { awk "$(<"$here/median.awk")"' {list = list " " $1} END {print median(list)}'; }  # of stdin's lines
# Column of the row of <bytes> in a table whose first column is the size in bytes.
column_at() { awk -v b="$1" -v c="$2" '$1 == b {print $c; exit}'; }

small=8 large=$((64 << 20))
echo "# AllReduce f32 sum, $ranks ranks, $launches interleaved launches each"
for ((i = 1; i <= launches; i++)); do
  run "$native" -b $small -e $small -n 2000 -w 200 >"$dir/native_small.$i"
  through_shim -- -b $small -e $small -n 2000 -w 200 >"$dir/shim_small.$i"
  run "$native" -b $large -e $large -n 10 -w 2 >"$dir/native_large.$i"
  through_shim -- -b $large -e $large -n 10 -w 2 >"$dir/shim_large.$i"
done
# antdt_allreduce_perf: size count type op root time algbw busbw (out of place) ...;
# nccl_allreduce_perf: size count time algbw busbw.
native_us=$(for f in "$dir"/native_small.*; do column_at $small 6 <"$f"; done | median)
shim_us=$(for f in "$dir"/shim_small.*; do column_at $small 3 <"$f"; done | median)
native_bw=$(for f in "$dir"/native_large.*; do column_at $large 8 <"$f"; done | median)
shim_bw=$(for f in "$dir"/shim_large.*; do column_at $large 5 <"$f"; done | median)
printf "%-34s %12s %12s %14s\n" "" native shim "shim vs native"
printf "%-34s %12s %12s %+13.2f us (target <= +0.5)\n" "8 B time (us, median)" "$native_us" "$shim_us" \
  "$(awk -v a="$shim_us" -v b="$native_us" 'BEGIN {print a - b}')"
printf "%-34s %12s %12s %13.3fx (target >= 0.95)\n" "64 MiB busbw (GB/s, median)" "$native_bw" "$shim_bw" \
  "$(awk -v a="$shim_bw" -v b="$native_bw" 'BEGIN {print (b > 0) ? a / b : 0}')"

echo
echo "# Straggler loop through the NCCL API: $ranks ranks, $steps steps, 10 ms compute, 1 MiB gradient"
straggler() {  # straggler <label> <loop options...>: wait and defer alternating, medians, ratio
  local label=$1
  shift
  : >"$dir/wait" && : >"$dir/defer"
  for ((i = 1; i <= launches; i++)); do
    for late in wait defer; do
      through_shim -x ANTDT_NCCL_LATE=$late -- -S "$steps" -c 10 -B 262144 "$@" 2>"$dir/stderr.$late.$i" |
        awk '/steps\/s/ {for (k = 1; k < NF; ++k) if ($(k + 1) == "steps/s") {print $k; break}}' >>"$dir/$late"
    done
  done
  local w d
  w=$(median <"$dir/wait") d=$(median <"$dir/defer")
  printf "%-34s wait %8s  defer %8s steps/s  defer/wait %.3f\n" "$label" "$w" "$d" \
    "$(awk -v a="$d" -v b="$w" 'BEGIN {print (b > 0) ? a / b : 0}')"
  # The Monitor's summary of the last defer launch: the class it gives each slow rank.
  grep -h "antdt monitor:\|deterministic\|transient\|persistent" "$dir/stderr.defer.$launches" | sed 's/^/    /' | head -4
}
straggler "rank $((ranks - 1)) 3x slower" -r $((ranks - 1)) -x 3
straggler "10% 5x spikes on every rank" -p 0.1 -k 5

standin=$build/tests/nccl/libantdt_nccl_standin.so
if [[ -e "$standin" ]]; then
  echo
  echo "# Passthrough overhead per ncclAllReduce call (8 B, stand-in NCCL, 1 process), $launches launches each"
  : >"$dir/direct" && : >"$dir/behind"
  for ((i = 1; i <= launches; i++)); do
    LD_PRELOAD="$standin" "$nccl" "$(mktemp -u "$dir/id.XXXXXX")" -G -b 8 -e 8 -n 200000 -w 1000 |
      column_at 8 3 >>"$dir/direct"
    ANTDT_NCCL_MODE=passthrough ANTDT_NCCL_LIBRARY="$standin" ANTDT_NCCL_QUIET=1 ANTDT_NCCL_REPORT=0 LD_PRELOAD="$shim" \
      "$nccl" "$(mktemp -u "$dir/id.XXXXXX")" -G -b 8 -e 8 -n 200000 -w 1000 | column_at 8 3 >>"$dir/behind"
  done
  direct=$(median <"$dir/direct") behind=$(median <"$dir/behind")
  printf "%-34s direct %6s us  behind the shim %6s us  +%.2f us per call = %.4f%% of a 10 ms step\n" \
    "stand-in ncclAllReduce" "$direct" "$behind" "$(awk -v a="$behind" -v b="$direct" 'BEGIN {print a - b}')" \
    "$(awk -v a="$behind" -v b="$direct" 'BEGIN {print (a - b) / 10000 * 100}')"
fi
