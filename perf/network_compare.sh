#!/usr/bin/env bash
# The network path (docs/benchmarks.md#network-path), in one go and interleaved,
# on this machine: ucx_perftest tag_bw over TCP (server and client on localhost;
# and two pairs at once in opposite directions: four processes on the cores,
# a reference, not a ceiling of a 2-rank ring, docs/benchmarks.md), an antdt collective over UCX/TCP with antdt's
# shared memory off (UCX_TLS=tcp,self ANTDT_SHM_MAX_BYTES=0
# ANTDT_SHM_BULK_BYTES=0), and, for AllReduce, Open MPI over TCP (--mca pml
# ob1 --mca btl tcp,self), for each rank count. Prints medians of busbw (GB/s
# of 1e9 bytes, out of place) and the ratios issue 15 states its targets in:
# 2 ranks 64 MiB antdt / tag_bw >= 0.70; antdt / Open MPI >= 2 at 1 and 64 MiB.
#
# usage: perf/network_compare.sh [-r LAUNCHES] [--ranks "2 4"] [--bin DIR] [--collective NAME]
#                                [--variant NAME:VAR=VALUE[,VAR=VALUE...]]... [--tag-bytes N] [-- perf options]
#   -r LAUNCHES        launches of each (default 5)
#   --ranks LIST       rank counts (default "2 4")
#   --bin DIR          the build directory (default: build next to this script)
#   --collective NAME  allreduce (default), reducescatter, allgather, broadcast (antdt_<NAME>_perf;
#                      Open MPI runs for allreduce only: mpi_allreduce_perf is the baseline there is)
#   --variant          antdt once more with these variables as well, e.g. iov:ANTDT_UCX_SPLIT_BYTES=0
#                      (the transport's one-IOV-message path) or chunk1m:ANTDT_CHUNK_BYTES=1M;
#                      printed with antdt / variant
#   --tag-bytes N      ucx_perftest message size (default 4194304)
#   perf options       passed to antdt and Open MPI (default: -b 1M -e 64M -f 64 -n 10 -w 3 -c 0)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
launches=5 ranks_list="2 4" bin="$here/../build" collective=allreduce tag_bytes=4194304 perf_args=()
variants=()
while (($#)); do
  case "$1" in
    -r) launches="$2"; shift 2 ;;
    --ranks) ranks_list="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --collective) collective="$2"; shift 2 ;;
    --variant) variants+=("$2"); shift 2 ;;
    --tag-bytes) tag_bytes="$2"; shift 2 ;;
    --) shift; perf_args=("$@"); break ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "network_compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#perf_args[@]})) || perf_args=(-b 1M -e 64M -f 64 -n 10 -w 3 -c 0)
antdt_tool="$bin/perf/antdt_${collective}_perf"
mpi_tool=""
[[ "$collective" == allreduce ]] && mpi_tool="$bin/perf/baselines/mpi_allreduce_perf"
[[ -x "$antdt_tool" ]] || { echo "network_compare.sh: no $antdt_tool (build it, or use --bin)" >&2; exit 2; }
[[ -z "$mpi_tool" || -x "$mpi_tool" ]] || { echo "network_compare.sh: no $mpi_tool (build it, or use --bin)" >&2; exit 2; }
command -v ucx_perftest >/dev/null || { echo "network_compare.sh: ucx_perftest is not installed" >&2; exit 2; }
for v in "${variants[@]}"; do
  [[ "$v" =~ ^[A-Za-z0-9_]+:[A-Z_0-9]+=.* ]] || { echo "network_compare.sh: --variant takes NAME:VAR=VALUE[,...], not '$v'" >&2; exit 2; }
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export UCX_WARN_UNUSED_ENV_VARS=n
antdt_env=(UCX_TLS=tcp,self ANTDT_SHM_MAX_BYTES=0 ANTDT_SHM_BULK_BYTES=0)
work=$(mktemp -d)
mkdir "$work/logs"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# ucx_perftest tag_bw pairs over TCP on localhost, run at once; each server
# exits after its client. Prints the mean bandwidth of the pairs in GB/s
# (ucx_perftest reports MB/s of 2^20 bytes).
tag_bw() {  # tag_bw <pairs> <log name>
  local pairs="$1" log="$work/logs/$2" p port ports=() servers=() clients=() failed=0 try
  for ((p = 0; p < pairs; p++)); do
    port=$((20000 + RANDOM % 40000))
    UCX_TLS=tcp,self ucx_perftest -p "$port" >"$log.server$p" 2>&1 &
    servers+=($!)
    ports+=("$port")
  done
  for ((p = 0; p < pairs; p++)); do
    (for try in 1 2 3 4 5; do  # retried while the server is not listening yet
       sleep 0.3
       UCX_TLS=tcp,self ucx_perftest localhost -p "${ports[$p]}" -t tag_bw -s "$tag_bytes" -n 200 -w 20 \
         >"$log.client$p" 2>&1 && grep -q '^Final:' "$log.client$p" && exit 0
     done
     exit 1) &
    clients+=($!)
  done
  for p in "${clients[@]}"; do wait "$p" || failed=1; done
  kill "${servers[@]}" 2>/dev/null || true  # each has exited after its client, unless that never came
  wait "${servers[@]}" 2>/dev/null || true
  ((failed == 0)) || { echo "network_compare.sh: ucx_perftest failed:" >&2; cat "$log".* >&2; return 1; }
  cat "$log".client* | awk '/^Final:/ {s += $7 * 1048576 / 1e9; n++} END {printf "%.4f\n", n ? s / n : 0}'
}
run_tool() {  # run_tool <out> <np> <tool> [mpirun options...] -- [env...]
  local out="$1" np="$2" tool="$3" mpi_opts=() envs=()
  shift 3
  while (($#)) && [[ "$1" != -- ]]; do mpi_opts+=("$1"); shift; done
  (($#)) && shift
  envs=("$@")
  env "${envs[@]}" mpirun --bind-to none --oversubscribe -np "$np" "${mpi_opts[@]}" "$tool" "${perf_args[@]}" >"$out" 2>&1 ||
    { echo "network_compare.sh: $(basename "$tool") on $np ranks failed:" >&2; cat "$out" >&2; return 1; }
}

echo "# network_compare.sh: $collective over TCP, ranks $ranks_list, $launches interleaved launches each, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# antdt: ${antdt_env[*]} mpirun -np N $antdt_tool ${perf_args[*]}"
[[ -n "$mpi_tool" ]] && echo "# mpi:   mpirun -np N --mca pml ob1 --mca btl tcp,self $mpi_tool ${perf_args[*]}"
for v in "${variants[@]}"; do echo "# variant ${v%%:*}: antdt with ${v#*:}"; done
echo "# tag_bw: UCX_TLS=tcp,self ucx_perftest localhost -t tag_bw -s $tag_bytes -n 200 -w 20 (and two such pairs at once)"
for ((i = 0; i < launches; i++)); do
  tag_bw 1 "one.$i" >"$work/tagbw.$i"
  tag_bw 2 "two.$i" >"$work/bothways.$i"
  for np in $ranks_list; do
    run_tool "$work/antdt.$np.$i" "$np" "$antdt_tool" -- "${antdt_env[@]}"
    for v in "${variants[@]}"; do
      IFS=, read -r -a extra <<<"${v#*:}"
      run_tool "$work/var-${v%%:*}.$np.$i" "$np" "$antdt_tool" -- "${antdt_env[@]}" "${extra[@]}"
    done
    if [[ -n "$mpi_tool" ]]; then run_tool "$work/mpi.$np.$i" "$np" "$mpi_tool" --mca pml ob1 --mca btl tcp,self --; fi
  done
done

variant_names=""
for v in "${variants[@]}"; do variant_names+="${variant_names:+ }var-${v%%:*}"; done
awk -v variants="$variant_names" -v with_mpi="${mpi_tool:+1}" -v tag_bytes="$tag_bytes" "$(<"$here/median.awk")"'
  function ratio(a, b) { return b > 0 ? sprintf("%9.2f", a / b) : "      N/A" }
  FNR == 1 {
    name = FILENAME; sub(/^.*\//, "", name)
    n = split(name, part, ".")
    tool = part[1]; np = n == 3 ? part[2] : ""
  }
  tool == "tagbw" || tool == "bothways" { bw[tool] = bw[tool] " " $1; next }
  /^#/ || NF < 13 { next }
  {
    key = np SUBSEP $1
    if (!(key in seen)) { seen[key] = 1; order[++rows] = key }
    busbw[tool, key] = busbw[tool, key] " " $8
  }
  END {
    t = median(bw["tagbw"]); b = median(bw["bothways"]); share = t > 0 ? 100 * b / t : 0
    printf "# ucx_perftest tag_bw %d B over TCP: %.2f GB/s (median); two pairs at once: %.2f GB/s per direction (%.0f%%)\n",
           tag_bytes, t, b, share
    nv = split(variants, vname, " ")
    printf "# %5s  %10s  %8s", "ranks", "size", "antdt"
    for (v = 1; v <= nv; v++) printf "  %10s", substr(vname[v], 5)
    if (with_mpi) printf "  %8s  %9s", "mpi", "antdt/mpi"
    printf "  %12s  %13s", "antdt/tag_bw", "antdt/2-way"
    for (v = 1; v <= nv; v++) printf "  %11s", "/" substr(vname[v], 5)
    printf "\n"
    for (r = 1; r <= rows; r++) {
      key = order[r]; split(key, k, SUBSEP)
      a = median(busbw["antdt", key])
      printf "  %5s  %10s  %8.2f", k[1], k[2], a
      for (v = 1; v <= nv; v++) printf "  %10.2f", median(busbw[vname[v], key])
      if (with_mpi) { m = median(busbw["mpi", key]); printf "  %8.2f  %s", m, ratio(a, m) }
      printf "     %s      %s", ratio(a, t), ratio(a, b)
      for (v = 1; v <= nv; v++) printf "  %s", ratio(a, median(busbw[vname[v], key]))
      printf "\n"
    }
    printf "# targets (issue 15): 2 ranks 64 MiB antdt/tag_bw >= 0.70; antdt/mpi >= 2 at 1 and 64 MiB, 2 and 4 ranks\n"
  }' "$work"/tagbw.* "$work"/bothways.* "$work"/antdt.* $(ls "$work" | grep -E '^(var-|mpi\.)' | sed "s|^|$work/|")
