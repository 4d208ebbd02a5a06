#!/usr/bin/env bash
# Compares scheduling policies on the real engine (docs/scheduler.md, "Real-engine
# benchmark"): antdt_policy_perf under antdt-run with 4 ranks, the policies
# interleaved (bsp, antdt-dd, antdt-nd, bsp, ...) so that load on the machine
# hits them alike, N launches each; prints every run's row, then the medians
# and each policy's throughput ratio to bsp.
#
#   perf/policy_compare.sh [-b BUILD_DIR] [-n LAUNCHES] [-s STEPS] [-r RANKS] [-p "bsp antdt-dd antdt-nd"]
#                          [-c 'POLICY=JSON']... [-t SECONDS] [-l LOG_DIR] SCENARIO [-- tool options]
#
# SCENARIO: a  one rank (2) 3x slower from the start:      ANTDT_INJECT=rank=2:slow=3
#           b  rank 2 4x slower from 30% of the run on, first incarnation only (a restart moves it
#              off the bad node): ANTDT_INJECT=rank=2:slow=4,from_step=<0.3 STEPS>,incarnation=0
#           any other text is used as ANTDT_INJECT itself.
# -c sets ANTDT_POLICY_CONFIG for one policy (default {}). -t: a launch still running after SECONDS
# (default 300) is stopped and counted as not finished. Logs of every run go to LOG_DIR. Exits 1 when
# a launch failed or did not finish (the others are still run and summarised).
set -euo pipefail

build=""
launches=3
steps=300
ranks=4
policies="bsp antdt-dd antdt-nd"
logdir=""
limit=300
declare -A config=()
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while getopts "b:n:s:r:p:c:t:l:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    n) launches=$OPTARG ;;
    s) steps=$OPTARG ;;
    r) ranks=$OPTARG ;;
    p) policies=$OPTARG ;;
    c) config[${OPTARG%%=*}]=${OPTARG#*=} ;;
    t) limit=$OPTARG ;;
    l) logdir=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || usage
scenario=$1
shift
[[ ${1:-} == "--" ]] && shift

here=$(cd "$(dirname "$0")" && pwd)
if [[ -z $build ]]; then
  for d in "$here/../build" "$here/../build-"*; do
    [[ -x $d/perf/antdt_policy_perf ]] && build=$d && break
  done
fi
run_bin=$build/tools/antdt-run
tool=$build/perf/antdt_policy_perf
[[ -x $run_bin && -x $tool ]] || { echo "policy_compare.sh: no antdt-run / antdt_policy_perf under '$build' (use -b)" >&2; exit 2; }

case $scenario in
  a) inject="rank=2:slow=3" ;;
  b) inject="rank=2:slow=4,from_step=$((steps * 3 / 10)),incarnation=0" ;;
  *) inject=$scenario ;;
esac
logdir=${logdir:-$(mktemp -d "${TMPDIR:-/tmp}/policy_compare.XXXXXX")}
mkdir -p "$logdir"

echo "# scenario $scenario: ANTDT_INJECT=$inject, $ranks ranks, $steps global batches, $launches launches per policy"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg); logs in $logdir"
declare -A rates=() effs=() walls=() restarts=()
failed=0
for ((i = 1; i <= launches; ++i)); do
  for p in $policies; do
    log=$logdir/$p.$i.log
    status=0
    env ANTDT_POLICY="$p" ANTDT_POLICY_CONFIG="${config[$p]:-{\}}" ANTDT_INJECT="$inject" \
        UCX_WARN_UNUSED_ENV_VARS=n timeout "$limit" "$run_bin" -n "$ranks" --restarts 4 -- \
        "$tool" --steps "$steps" --label "$p" "$@" >"$log" 2>&1 || status=$?
    row=$(grep -E "^  $p " "$log" | tail -1 || true)
    if [[ $status -ne 0 || -z $row ]]; then
      why="failed (exit $status)"
      [[ $status -eq 124 ]] && why="did not finish within $limit s"
      echo "  $p: $why    [launch $i; log $log]"
      failed=1
      continue
    fi
    echo "$row    [launch $i, load $(cut -d' ' -f1 /proc/loadavg)]"
    read -r _ _ _ wall rate eff rs _ <<<"$row"
    rates[$p]+="$rate "
    effs[$p]+="$eff "
    walls[$p]+="$wall "
    restarts[$p]+="$rs "
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "#"
echo "# medians over $launches launches (load average after: $(cut -d' ' -f1-3 /proc/loadavg))"
printf "# %-10s %8s %10s %10s %8s %8s\n" policy "wall s" samples/s efficiency restarts "vs bsp"
base=""
[[ -n ${rates[bsp]:-} ]] && base=$(median <<<"${rates[bsp]}")
for p in $policies; do
  if [[ -z ${rates[$p]:-} ]]; then
    printf "  %-10s %s\n" "$p" "no launch finished"
    continue
  fi
  rate=$(median <<<"${rates[$p]}")
  ratio="n/a"
  [[ -n $base ]] && ratio=$(awk -v a="$rate" -v b="$base" 'BEGIN {printf "%.2f", a / b}')
  printf "  %-10s %8.3f %10.1f %10.3f %8s %8s\n" "$p" "$(median <<<"${walls[$p]}")" "$rate" \
    "$(median <<<"${effs[$p]}")" "$(median <<<"${restarts[$p]}")" "$ratio"
done
exit $failed
