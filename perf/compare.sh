#!/usr/bin/env bash
# Runs antdt_allreduce_perf, the Open MPI baseline (mpi_allreduce_perf) and,
# when it was built, the Gloo baseline (gloo_allreduce_perf) interleaved,
# several launches each with the same options, and prints the median busbw
# per size for each and the ratios antdt / MPI and antdt / Gloo, then, for
# sizes up to 64 KiB, the median times and the same ratios of time (latency).
# Machines here are noisy: medians of interleaved launches are the numbers to
# quote.
#
# usage: perf/compare.sh [-np N] [-r launches] [--bin DIR] [--base DIR] [--gloo ALGO|none] [-- perf options]
#   -np N        ranks (default 2)
#   -r launches  launches of each tool (default 3)
#   --bin DIR    a build directory (perf/ and perf/baselines/ below it) or an
#                install bin directory (default: the build-* directory next to
#                this script that has the tools, else PATH)
#   --base DIR   another antdt build (same layout as --bin): its
#                antdt_allreduce_perf runs interleaved too, and a third table
#                gives antdt / base per size (a before/after check of a change)
#   --gloo ALGO  Gloo algorithm: ring_chunked (default) or halving_doubling;
#                none leaves Gloo out (it is also left out when not built)
#   perf options are passed to every tool (default: -b 8 -e 64M); only float
#   and double sum are comparable (the baselines' subset).
set -euo pipefail

ranks=2
launches=3
bin=""
base_dir=""
gloo_algo=ring_chunked
perf_args=()
while (($#)); do
  case "$1" in
    -np) ranks="$2"; shift 2 ;;
    -r) launches="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --base) base_dir="$2"; shift 2 ;;
    --gloo) gloo_algo="$2"; shift 2 ;;
    --) shift; perf_args=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#perf_args[@]})) || perf_args=(-b 8 -e 64M)

find_tool() {  # find_tool <name> <build subdir> [optional]
  local name="$1" sub="$2" optional="${3:-}" dir
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
  [[ -n "$optional" ]] && return
  echo "compare.sh: cannot find $name (use --bin)" >&2
  exit 2
}
antdt_tool=$(find_tool antdt_allreduce_perf perf)
mpi_tool=$(find_tool mpi_allreduce_perf perf/baselines)
base_tool=""
if [[ -n "$base_dir" ]]; then
  for dir in "$base_dir/perf" "$base_dir"; do
    [[ -x "$dir/antdt_allreduce_perf" ]] && { base_tool="$dir/antdt_allreduce_perf"; break; }
  done
  [[ -n "$base_tool" ]] || { echo "compare.sh: no antdt_allreduce_perf in --base $base_dir" >&2; exit 2; }
fi
gloo_tool=""
case "$gloo_algo" in
  none) ;;
  ring_chunked|halving_doubling) gloo_tool=$(find_tool gloo_allreduce_perf perf/baselines optional) ;;
  *) echo "compare.sh: --gloo takes ring_chunked, halving_doubling or none, not '$gloo_algo'" >&2; exit 2 ;;
esac

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export UCX_WARN_UNUSED_ENV_VARS=n
mpirun_cmd=(mpirun --bind-to none --oversubscribe -np "$ranks")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "# compare.sh: $ranks ranks, $launches interleaved launches each, options: ${perf_args[*]}"
echo "# antdt: ${mpirun_cmd[*]} $antdt_tool ${perf_args[*]}"
echo "# mpi:   ${mpirun_cmd[*]} $mpi_tool ${perf_args[*]}"
if [[ -n "$gloo_tool" ]]; then
  echo "# gloo:  ${mpirun_cmd[*]} $gloo_tool ${perf_args[*]} -a $gloo_algo"
else
  [[ "$gloo_algo" == none ]] && why="--gloo none" || why="gloo_allreduce_perf not built"
  echo "# gloo:  not run ($why)"
fi
[[ -n "$base_tool" ]] && echo "# base:  ${mpirun_cmd[*]} $base_tool ${perf_args[*]}"
for ((i = 0; i < launches; i++)); do
  "${mpirun_cmd[@]}" "$antdt_tool" "${perf_args[@]}" >"$work/antdt.$i" ||
    { echo "compare.sh: antdt_allreduce_perf failed:" >&2; cat "$work/antdt.$i" >&2; exit 1; }
  if [[ -n "$base_tool" ]]; then
    "${mpirun_cmd[@]}" "$base_tool" "${perf_args[@]}" >"$work/base.$i" ||
      { echo "compare.sh: the base antdt_allreduce_perf failed:" >&2; cat "$work/base.$i" >&2; exit 1; }
  fi
  "${mpirun_cmd[@]}" "$mpi_tool" "${perf_args[@]}" >"$work/mpi.$i" ||
    { echo "compare.sh: mpi_allreduce_perf failed:" >&2; cat "$work/mpi.$i" >&2; exit 1; }
  if [[ -n "$gloo_tool" ]]; then
    # A fresh rendezvous directory per launch.
    ANTDT_GLOO_STORE_DIR="$work/gloo-store.$i" "${mpirun_cmd[@]}" -x ANTDT_GLOO_STORE_DIR \
      "$gloo_tool" "${perf_args[@]}" -a "$gloo_algo" >"$work/gloo.$i" ||
      { echo "compare.sh: gloo_allreduce_perf failed:" >&2; cat "$work/gloo.$i" >&2; exit 1; }
  fi
done

# Table rows: size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
gloo_files=()
[[ -n "$gloo_tool" ]] && gloo_files=("$work"/gloo.*)
base_files=()
[[ -n "$base_tool" ]] && base_files=("$work"/base.*)
awk -v with_gloo="${gloo_tool:+1}" -v with_base="${base_tool:+1}" "$(<"$(dirname "$0")/median.awk")"'
  function ratio(a, b) { return b > 0 ? sprintf("%6.2f", a / b) : "   N/A" }
  FNR == 1 { tool = FILENAME; sub(/^.*\//, "", tool); sub(/\.[0-9]+$/, "", tool) }
  /^#/ || NF < 13 { next }
  {
    size = $1
    if (!(size in seen)) { seen[size] = 1; order[++rows] = size }
    oop[tool, size] = oop[tool, size] " " $8
    ip[tool, size] = ip[tool, size] " " $12
    oop_t[tool, size] = oop_t[tool, size] " " $6
    ip_t[tool, size] = ip_t[tool, size] " " $10
  }
  END {
    printf "# median busbw (GB/s); ratio = antdt / baseline (> 1: antdt is faster)\n"
    if (with_gloo) {
      printf "# %10s  %9s  %9s  %9s  %6s  %6s  %9s  %9s  %9s  %6s  %6s\n", "size", "antdt oop", "mpi oop", "gloo oop",
             "/mpi", "/gloo", "antdt ip", "mpi ip", "gloo ip", "/mpi", "/gloo"
    } else {
      printf "# %10s  %9s  %9s  %6s  %9s  %9s  %6s\n", "size", "antdt oop", "mpi oop", "ratio", "antdt ip", "mpi ip", "ratio"
    }
    for (r = 1; r <= rows; r++) {
      s = order[r]
      a = median(oop["antdt", s]); m = median(oop["mpi", s])
      ai = median(ip["antdt", s]); mi = median(ip["mpi", s])
      if (with_gloo) {
        g = median(oop["gloo", s]); gi = median(ip["gloo", s])
        printf "  %10s  %9.2f  %9.2f  %9.2f  %s  %s  %9.2f  %9.2f  %9.2f  %s  %s\n", s, a, m, g, ratio(a, m), ratio(a, g),
               ai, mi, gi, ratio(ai, mi), ratio(ai, gi)
      } else {
        printf "  %10s  %9.2f  %9.2f  %s  %9.2f  %9.2f  %s\n", s, a, m, ratio(a, m), ai, mi, ratio(ai, mi)
      }
    }
    # Latency, where busbw rounds to 0: time ratios (antdt / baseline, < 1: antdt is faster).
    printf "#\n# median time (us); ratio = antdt / baseline (< 1: antdt is faster)\n"
    if (with_gloo)
      printf "# %10s  %9s  %9s  %9s  %6s  %6s  %9s  %9s  %9s  %6s  %6s\n", "size", "antdt oop", "mpi oop", "gloo oop",
             "/mpi", "/gloo", "antdt ip", "mpi ip", "gloo ip", "/mpi", "/gloo"
    else
      printf "# %10s  %9s  %9s  %6s  %9s  %9s  %6s\n", "size", "antdt oop", "mpi oop", "ratio", "antdt ip", "mpi ip", "ratio"
    for (r = 1; r <= rows; r++) {
      s = order[r]
      if (s + 0 > 65536) continue
      a = median(oop_t["antdt", s]); m = median(oop_t["mpi", s])
      ai = median(ip_t["antdt", s]); mi = median(ip_t["mpi", s])
      if (with_gloo) {
        g = median(oop_t["gloo", s]); gi = median(ip_t["gloo", s])
        printf "  %10s  %9.2f  %9.2f  %9.2f  %s  %s  %9.2f  %9.2f  %9.2f  %s  %s\n", s, a, m, g, ratio(a, m), ratio(a, g),
               ai, mi, gi, ratio(ai, mi), ratio(ai, gi)
      } else {
        printf "  %10s  %9.2f  %9.2f  %s  %9.2f  %9.2f  %s\n", s, a, m, ratio(a, m), ai, mi, ratio(ai, mi)
      }
    }
    if (with_base) {
      printf "#\n# antdt against the --base build: median busbw (GB/s), median time (us); ratio = antdt / base\n"
      printf "# %10s  %9s  %9s  %6s  %9s  %9s  %6s  %9s  %9s  %6s\n", "size", "antdt oop", "base oop", "ratio",
             "antdt ip", "base ip", "ratio", "antdt us", "base us", "ratio"
      for (r = 1; r <= rows; r++) {
        s = order[r]
        a = median(oop["antdt", s]); b = median(oop["base", s])
        ai = median(ip["antdt", s]); bi = median(ip["base", s])
        at = median(oop_t["antdt", s]); bt = median(oop_t["base", s])
        printf "  %10s  %9.2f  %9.2f  %s  %9.2f  %9.2f  %s  %9.2f  %9.2f  %s\n", s, a, b, ratio(a, b), ai, bi,
               ratio(ai, bi), at, bt, ratio(at, bt)
      }
    }
  }' "$work"/antdt.* "$work"/mpi.* "${gloo_files[@]}" "${base_files[@]}"
