#!/usr/bin/env bash
# A collective across "nodes" on this machine (tools/netns-nodes.sh: network
# namespaces with host names of their own, veth through a bridge), in one go
# and interleaved: antdt's flat algorithm (ANTDT_ALGO=ring: the ring, or for
# Broadcast the chain), antdt's hierarchical one (ANTDT_ALGO=hierarchical) and
# Open MPI over TCP (btl tcp,self, launched into the namespaces by mpirun
# through an rsh agent that enters them). Prints the median time and busbw per
# size and the ratios hierarchical / flat and hierarchical / Open MPI (of busbw,
# taken from the median times: the tools print busbw with two decimals).
#
# usage: perf/netns_compare.sh [-n NODES] [-p RANKS_PER_NODE] [-r LAUNCHES] [--rate RATE] [--bin DIR]
#                              [--collective NAME] [-- perf options]
#   -n NODES      2 or 4 (default 2)       -p RANKS   ranks per node (default 2)
#   -r LAUNCHES   launches of each (default 3)
#   --rate RATE   tbf limit on every node's link (e.g. 5gbit; default none)
#   --bin DIR     the build directory (default: build next to this script)
#   --collective NAME  allreduce (default), reducescatter, allgather, broadcast: antdt_<NAME>_perf
#                 against mpi_allreduce_perf or mpi_collective_perf -C NAME (sizes as nccl-tests')
#   perf options  passed to every tool (default: -b 1M -e 64M -f 8 -n 5 -w 2 -c 0)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=2 per_node=2 launches=3 rate="" bin="$here/../build" collective=allreduce perf_args=()
while (($#)); do
  case "$1" in
    -n) nodes="$2"; shift 2 ;;
    -p) per_node="$2"; shift 2 ;;
    -r) launches="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --collective) collective="$2"; shift 2 ;;
    --) shift; perf_args=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "netns_compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#perf_args[@]})) || perf_args=(-b 1M -e 64M -f 8 -n 5 -w 2 -c 0)
case "$collective" in
  allreduce) mpi_name=mpi_allreduce_perf mpi_args=() ;;
  reducescatter|allgather|broadcast) mpi_name=mpi_collective_perf mpi_args=(-C "$collective") ;;
  *) echo "netns_compare.sh: --collective takes allreduce, reducescatter, allgather or broadcast" >&2; exit 2 ;;
esac
antdt_tool=$(readlink -f "$bin/perf/antdt_${collective}_perf")
mpi_tool=$(readlink -f "$bin/perf/baselines/$mpi_name")
[[ -x "$antdt_tool" && -x "$mpi_tool" ]] || { echo "netns_compare.sh: build antdt_${collective}_perf and $mpi_name in $bin" >&2; exit 2; }

if [[ -z "${ANTDTNET_EXEC:-}" ]]; then
  net_args=(-n "$nodes")
  [[ -n "$rate" ]] && net_args+=(--rate "$rate")
  exec "$here/../tools/netns-nodes.sh" "${net_args[@]}" -- "$0" -n "$nodes" -p "$per_node" -r "$launches" \
    --bin "$bin" --collective "$collective" -- "${perf_args[@]}"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ranks=$((nodes * per_node))
export UCX_WARN_UNUSED_ENV_VARS=n OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# antdt: every rank started in its node with the launcher-neutral variables; rank 0 prints.
run_antdt() {  # run_antdt <out> <env...>
  local out="$1" r pids=() port secret
  shift
  port=$((20000 + RANDOM % 20000))
  secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  for ((r = 0; r < ranks; r++)); do
    $ANTDTNET_EXEC $((r / per_node)) -- env ANTDT_RANK=$r ANTDT_WORLD_SIZE=$ranks \
      ANTDT_ROOT="$ANTDTNET_IP_0:$port" ANTDT_SECRET="$secret" "$@" "$antdt_tool" "${perf_args[@]}" \
      >"$out.rank$r" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || { cat "$out.rank$r" >&2; return 1; }; done
  mv "$out.rank0" "$out"
}

# Open MPI: mpirun in node 0; the other nodes' daemons through an rsh agent that enters them.
cat >"$work/agent.sh" <<'EOF'
#!/usr/bin/env bash
host="$1"; shift
exec $ANTDTNET_EXEC "${host##*node}" -- /bin/sh -c "$*"
EOF
chmod +x "$work/agent.sh"
hosts=""
for ((i = 0; i < nodes; i++)); do
  var="ANTDTNET_HOST_$i"
  hosts+="${hosts:+,}${!var}:$per_node"
done
run_mpi() {
  $ANTDTNET_EXEC 0 -- mpirun --mca plm_rsh_agent "$work/agent.sh" -x ANTDTNET_EXEC --mca oob_tcp_if_include eth0 \
    --mca btl_tcp_if_include eth0 --mca btl tcp,self --mca pml ob1 --bind-to none -H "$hosts" -np "$ranks" \
    "$mpi_tool" "${mpi_args[@]}" "${perf_args[@]}" >"$1" 2>&1
}

echo "# netns_compare.sh: $collective, $nodes nodes x $per_node ranks${rate:+, links at $rate}, $launches interleaved launches each, load $(cut -d" " -f1-3 /proc/loadavg)"
echo "# options: ${perf_args[*]}"
for ((i = 0; i < launches; i++)); do
  run_antdt "$work/flat.$i" ANTDT_ALGO=ring || { echo "netns_compare.sh: the flat algorithm failed" >&2; exit 1; }
  run_antdt "$work/hier.$i" ANTDT_ALGO=hierarchical || { echo "netns_compare.sh: hierarchical failed" >&2; exit 1; }
  run_mpi "$work/mpi.$i" || { cat "$work/mpi.$i" >&2; echo "netns_compare.sh: Open MPI failed" >&2; exit 1; }
done

awk "$(<"$here/median.awk")"'
  function ratio(a, b) { return b > 0 ? sprintf("%6.2f", a / b) : "   N/A" }
  FNR == 1 { tool = FILENAME; sub(/^.*\//, "", tool); sub(/\.[0-9]+$/, "", tool) }
  /^#/ || NF < 13 { next }
  { if (!($1 in seen)) { seen[$1] = 1; order[++rows] = $1 }; t[tool, $1] = t[tool, $1] " " $6; bw[tool, $1] = bw[tool, $1] " " $8 }
  END {
    # busbw is proportional to 1 / time at one size: ratios come from the times, whose
    # precision the tools print in full (their busbw column has two decimals).
    printf "# median time (us) and busbw (GB/s), out of place; the ratios (of busbw) are inverse ratios of the median times\n"
    printf "# %10s  %10s  %10s  %10s  %7s  %7s  %7s  %9s  %9s\n", "size", "flat us", "hier us", "mpi us",
           "flat", "hier", "mpi", "hier/flat", "hier/mpi"
    for (r = 1; r <= rows; r++) {
      s = order[r]; f = median(t["flat", s]); h = median(t["hier", s]); m = median(t["mpi", s])
      printf "  %10s  %10.0f  %10.0f  %10.0f  %7.2f  %7.2f  %7.2f  %9s  %9s\n", s, f, h, m, median(bw["flat", s]),
             median(bw["hier", s]), median(bw["mpi", s]), ratio(f, h), ratio(m, h)
    }
  }' "$work"/flat.* "$work"/hier.* "$work"/mpi.*
