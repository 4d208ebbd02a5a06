#!/usr/bin/env bash
# A slow link as a straggler (issue 15, docs/benchmarks.md "A slow link"): 2
# namespace nodes x 2 ranks (tools/netns-nodes.sh), every link at FAST except
# node 1's at SLOW (default a tenth), and antdt_straggler_perf's late policies
# (wait = BSP, defer) in one launch each, with the flat ring (ANTDT_ALGO=ring)
# and the hierarchical AllReduce (ANTDT_ALGO=hierarchical), launches
# interleaved. Prints every launch's rows (samples/s and the Monitor's classes
# at the end of each phase), then the medians and the ratios to flat BSP.
#
# usage: perf/slowlink_compare.sh [-r LAUNCHES] [--fast RATE] [--slow RATE] [--bin DIR] [-- tool options]
#   -r LAUNCHES  launches of each algorithm (default 3)
#   --fast RATE  tbf rate of node 0's link (default 1gbit)
#   --slow RATE  tbf rate of node 1's link (default 100mbit)
#   --bin DIR    the build directory (default: build next to this script)
#   tool options antdt_straggler_perf's (default: -s 60 -p wait,defer)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
launches=3 fast=1gbit slow=100mbit bin="$here/../build" tool_args=()
while (($#)); do
  case "$1" in
    -r) launches="$2"; shift 2 ;;
    --fast) fast="$2"; shift 2 ;;
    --slow) slow="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --) shift; tool_args=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "slowlink_compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#tool_args[@]})) || tool_args=(-s 60 -p wait,defer)
tool=$(readlink -f "$bin/perf/antdt_straggler_perf")
[[ -x "$tool" ]] || { echo "slowlink_compare.sh: build antdt_straggler_perf in $bin" >&2; exit 2; }

if [[ -z "${ANTDTNET_EXEC:-}" ]]; then
  exec "$here/../tools/netns-nodes.sh" -n 2 --rate "$fast" --slow "1:$slow" -- "$0" -r "$launches" --fast "$fast" \
    --slow "$slow" --bin "$bin" -- "${tool_args[@]}"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ranks=4 per_node=2
export UCX_WARN_UNUSED_ENV_VARS=n

# Every rank started in its node with the launcher-neutral variables; rank 0 prints.
run() {  # run <out> <env...>
  local out="$1" r pids=() port secret
  shift
  port=$((20000 + RANDOM % 20000))
  secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  for ((r = 0; r < ranks; r++)); do
    $ANTDTNET_EXEC $((r / per_node)) -- env ANTDT_RANK=$r ANTDT_WORLD_SIZE=$ranks \
      ANTDT_ROOT="$ANTDTNET_IP_0:$port" ANTDT_SECRET="$secret" "$@" "$tool" "${tool_args[@]}" \
      >"$out.rank$r" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || { cat "$out.rank$r" >&2; return 1; }; done
  mv "$out.rank0" "$out"
}

echo "# slowlink_compare.sh: 2 nodes x 2 ranks, node 0's link $fast, node 1's $slow; $launches interleaved launches;" \
  "load $(cut -d" " -f1-3 /proc/loadavg)"
echo "# antdt_straggler_perf ${tool_args[*]}"
for ((i = 0; i < launches; i++)); do
  for algo in ring hierarchical; do
    run "$work/$algo.$i" ANTDT_ALGO=$algo || { echo "slowlink_compare.sh: $algo failed" >&2; exit 1; }
    echo "# launch $((i + 1)), ANTDT_ALGO=$algo:"
    awk '/^ +(wait|drop|defer) +[0-9]/ { printf "#   %-6s %9s samples/s  %s\n", $1, $3, substr($0, index($0, $7)) }' "$work/$algo.$i"
  done
done

awk "$(<"$here/median.awk")"'
  function ratio(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "N/A" }
  FNR == 1 { algo = FILENAME; sub(/^.*\//, "", algo); sub(/\.[0-9]+$/, "", algo) }
  /^ +(wait|drop|defer) +[0-9]/ { key = algo " " $1; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
                                  v[key] = v[key] " " $3 }
  END {
    base = median(v["ring wait"])
    printf "# median samples/s; ratio to BSP over the flat ring (ring wait)\n# %-22s %10s %8s\n", "algorithm, policy",
           "samples/s", "vs BSP"
    for (k = 1; k <= n; k++) { m = median(v[order[k]]); printf "  %-22s %10.1f %8s\n", order[k], m, ratio(m, base) }
  }' "$work"/ring.* "$work"/hierarchical.*
