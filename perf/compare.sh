#!/usr/bin/env bash
# Runs antdt_allreduce_perf and the Open MPI baseline (mpi_allreduce_perf)
# interleaved, several launches each with the same options, and prints the
# median busbw per size for both and their ratio (antdt / MPI). Machines here
# are noisy: medians of interleaved launches are the numbers to quote.
#
# usage: perf/compare.sh [-np N] [-r launches] [--bin DIR] [-- perf options]
#   -np N        ranks (default 2)
#   -r launches  launches of each tool (default 3)
#   --bin DIR    a build directory (perf/ and perf/baselines/ below it) or an
#                install bin directory (default: the build-* directory next to
#                this script that has both tools, else PATH)
#   perf options are passed to both tools (default: -b 8 -e 64M); only float
#   and double sum are comparable (the baseline's subset).
set -euo pipefail

ranks=2
launches=3
bin=""
perf_args=()
while (($#)); do
  case "$1" in
    -np) ranks="$2"; shift 2 ;;
    -r) launches="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --) shift; perf_args=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#perf_args[@]})) || perf_args=(-b 8 -e 64M)

find_tool() {  # find_tool <name> <build subdir>
  local name="$1" sub="$2" dir
  if [[ -n "$bin" ]]; then
    for dir in "$bin/$sub" "$bin"; do
      [[ -x "$dir/$name" ]] && { echo "$dir/$name"; return; }
    done
  else
    for dir in "$(dirname "$0")"/../build*/"$sub"; do
      [[ -x "$dir/$name" ]] && { echo "$dir/$name"; return; }
    done
    command -v "$name" && return
  fi
  echo "compare.sh: cannot find $name (use --bin)" >&2
  exit 2
}
antdt_tool=$(find_tool antdt_allreduce_perf perf)
mpi_tool=$(find_tool mpi_allreduce_perf perf/baselines)

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export UCX_WARN_UNUSED_ENV_VARS=n
mpirun_cmd=(mpirun --bind-to none --oversubscribe -np "$ranks")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "# compare.sh: $ranks ranks, $launches interleaved launches each, options: ${perf_args[*]}"
echo "# antdt: ${mpirun_cmd[*]} $antdt_tool ${perf_args[*]}"
echo "# mpi:   ${mpirun_cmd[*]} $mpi_tool ${perf_args[*]}"
for ((i = 0; i < launches; i++)); do
  "${mpirun_cmd[@]}" "$antdt_tool" "${perf_args[@]}" >"$work/antdt.$i" ||
    { echo "compare.sh: antdt_allreduce_perf failed:" >&2; cat "$work/antdt.$i" >&2; exit 1; }
  "${mpirun_cmd[@]}" "$mpi_tool" "${perf_args[@]}" >"$work/mpi.$i" ||
    { echo "compare.sh: mpi_allreduce_perf failed:" >&2; cat "$work/mpi.$i" >&2; exit 1; }
done

# Table rows: size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
awk '
  function median(list,   n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) { t = v[i] + 0; for (j = i - 1; j >= 1 && v[j] + 0 > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  function ratio(a, b) { return b > 0 ? sprintf("%6.2f", a / b) : "   N/A" }
  FNR == 1 { tool = (FILENAME ~ /\/antdt\.[0-9]+$/) ? "antdt" : "mpi" }
  /^#/ || NF < 13 { next }
  {
    size = $1
    if (!(size in seen)) { seen[size] = 1; order[++rows] = size }
    oop[tool, size] = oop[tool, size] " " $8
    ip[tool, size] = ip[tool, size] " " $12
  }
  END {
    printf "# median busbw (GB/s); ratio = antdt / mpi\n"
    printf "# %10s  %9s  %9s  %6s  %9s  %9s  %6s\n", "size", "antdt oop", "mpi oop", "ratio", "antdt ip", "mpi ip", "ratio"
    for (r = 1; r <= rows; r++) {
      s = order[r]
      a = median(oop["antdt", s]); m = median(oop["mpi", s])
      ai = median(ip["antdt", s]); mi = median(ip["mpi", s])
      printf "  %10s  %9.2f  %9.2f  %s  %9.2f  %9.2f  %s\n", s, a, m, ratio(a, m), ai, mi, ratio(ai, mi)
    }
  }' "$work"/antdt.* "$work"/mpi.*
