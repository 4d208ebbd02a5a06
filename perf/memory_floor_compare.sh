#!/usr/bin/env bash
# Inside one node: the shared-memory AllReduce against the machine's memory
# floor (issue 15; docs/benchmarks.md, "Inside one node: the memory floor"),
# in one go and interleaved. B is the memory traffic of two threads' a[i] +=
# b[i] (antdt_cpu_kernel_bench -t 2 -d f32: 3 x bytes per pass, both threads
# summed); a 2-rank AllReduce of S bytes must at least read both inputs and
# write both results, 4 S in all, so its busbw (S per call) is at most B/4.
# Prints the medians of B, of the AllReduce's busbw out of place and in
# place, and busbw / (B/4) (the target: >= 0.80).
#
# usage: perf/memory_floor_compare.sh [-r LAUNCHES] [-s BYTES] [--bin DIR]
#   -r LAUNCHES  launches of each, interleaved (default 5)
#   -s BYTES     the vector (default 64M; K/M/G suffixes as the perf tools take them)
#   --bin DIR    the build directory (default: build next to this script)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
launches=5 size=64M bin="$here/../build"
while (($#)); do
  case "$1" in
    -r) launches="$2"; shift 2 ;;
    -s) size="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "memory_floor_compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
kernel="$bin/perf/antdt_cpu_kernel_bench" allreduce="$bin/perf/antdt_allreduce_perf"
for tool in "$kernel" "$allreduce"; do
  [[ -x "$tool" ]] || { echo "memory_floor_compare.sh: no $tool (build it, or use --bin)" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 UCX_WARN_UNUSED_ENV_VARS=n
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
b_list=() oop_list=() ip_list=()
echo "# memory_floor_compare.sh: $launches interleaved launches; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# B:         $kernel -t 2 -b $size -d f32 -n 5 (the reduce column)"
echo "# allreduce: mpirun -np 2 $allreduce -b $size -e $size -n 10 -w 3 -c 0"
for ((i = 1; i <= launches; ++i)); do
  b=$("$kernel" -t 2 -b "$size" -d f32 -n 5 | awk '!/^#/ {print $4; exit}')
  read -r oop ip < <(mpirun -np 2 "$allreduce" -b "$size" -e "$size" -n 10 -w 3 -c 0 | awk '!/^#/ && NF >= 12 {print $8, $12; exit}')
  [[ -n "$b" && -n "${oop:-}" ]] || { echo "memory_floor_compare.sh: launch $i printed no figures" >&2; exit 1; }
  echo "  launch $i: B $b GB/s, allreduce busbw $oop / $ip GB/s (out of place / in place)"
  b_list+=("$b") oop_list+=("$oop") ip_list+=("$ip")
done
B=$(printf '%s\n' "${b_list[@]}" | median)
oop=$(printf '%s\n' "${oop_list[@]}" | median)
ip=$(printf '%s\n' "${ip_list[@]}" | median)
awk -v B="$B" -v o="$oop" -v i="$ip" 'BEGIN {
  printf "# medians: B %.2f GB/s, floor B/4 %.2f GB/s; busbw %.2f / %.2f GB/s; busbw / (B/4) %.2f / %.2f (target >= 0.80)\n",
         B, B / 4, o, i, o / (B / 4), i / (B / 4) }'
