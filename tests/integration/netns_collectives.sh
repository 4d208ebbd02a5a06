#!/usr/bin/env bash
# The collectives and the partial AllReduce across 2 nodes x 2 ranks, the
# nodes being network namespaces with host names of their own
# (tools/netns-nodes.sh): ranks 0, 1 on node 0 and 2, 3 on node 1, launched
# with the launcher-neutral variables (ANTDT_RANK, ANTDT_WORLD_SIZE,
# ANTDT_ROOT at node 0's address, ANTDT_SECRET). Runs
#   the collectives test with ANTDT_ALGO=hierarchical (every AllReduce,
#   ReduceScatter, AllGather(v) and Broadcast through the hierarchy) and with
#   auto (the selection table over two real nodes: the large calls
#   hierarchical, the small ones flat), both at ANTDT_DEBUG=TRACE so that each
#   call's selection line shows which algorithm ran,
#   the partial AllReduce invariants (every rank, and steps with a rank left out).
# Exits 77 (ctest: skipped) with the reason when namespaces cannot be made.
#
# usage: netns_collectives.sh <tools/netns-nodes.sh> <antdt_mpi_collectives_test> <antdt_mpi_partial_test>
set -euo pipefail
nodes_script="$1" collectives="$2" partial="$3"

if [[ -z "${ANTDTNET_EXEC:-}" ]]; then
  exec "$nodes_script" -n 2 -- "$0" "$@"
fi

# launch <label> <env...> -- <program> [args]: four ranks, two per node; fails when any rank fails.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
launch() {
  local label="$1" envs=() r pids=() status=0 port secret
  shift
  while [[ "$1" != "--" ]]; do envs+=("$1"); shift; done
  shift
  port=$((20000 + RANDOM % 20000))
  secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  echo "== $label: 2 nodes x 2 ranks (${envs[*]:-defaults})"
  local started=$SECONDS
  for r in 0 1 2 3; do
    $ANTDTNET_EXEC $((r / 2)) -- env ANTDT_RANK=$r ANTDT_WORLD_SIZE=4 ANTDT_ROOT="$ANTDTNET_IP_0:$port" \
      ANTDT_SECRET="$secret" UCX_WARN_UNUSED_ENV_VARS=n "${envs[@]}" "$@" >"$work/rank$r" 2>&1 &
    pids+=($!)
  done
  for r in 0 1 2 3; do
    if ! wait "${pids[$r]}"; then
      status=1
      echo "rank $r (node $((r / 2))) FAILED"
    fi
    sed "s/^/[node$((r / 2)) rank $r] /" "$work/rank$r" | tail -5
  done
  echo "-- $label: $((SECONDS - started)) s"
  return $status
}

# selected <mode> <kinds...>: the selection lines (ANTDT_DEBUG=TRACE) of the
# last launch. all: every call of these kinds on every rank ran
# hierarchically; some: each kind ran hierarchically at least once and flat at
# least once (the table's threshold between them).
selected() {
  local mode="$1" kind r lines hier flat status=0
  shift
  for kind in "$@"; do
    for r in 0 1 2 3; do
      lines=$(grep -E "\] $kind of [0-9]+ x " "$work/rank$r" || true)
      hier=$(grep -c ": hierarchical (row" <<<"$lines" || true)
      flat=$(grep -vc ": hierarchical (row" <<<"$lines" || true)
      [[ -z "$lines" ]] && flat=0
      if [[ "$mode" == all ]] && { ((hier == 0)) || ((flat > 0)); }; then
        echo "rank $r: $kind: $hier calls hierarchical, $flat not (ANTDT_ALGO=hierarchical)"
        status=1
      elif [[ "$mode" == some ]] && { ((hier == 0)) || ((flat == 0)); }; then
        echo "rank $r: $kind: $hier calls hierarchical, $flat flat (auto must choose both by size)"
        status=1
      fi
    done
    echo "   $kind on rank 0: $(grep -cE "\] $kind of [0-9]+ x .*: hierarchical \(row" "$work/rank0" || true) calls hierarchical"
  done
  return $status
}

failed=0
launch "collectives, hierarchical" ANTDT_ALGO=hierarchical ANTDT_TIMEOUT_MS=30000 ANTDT_DEBUG=TRACE -- "$collectives" || failed=1
selected all allreduce reduce_scatter allgather allgatherv broadcast || failed=1
launch "collectives, auto" ANTDT_TIMEOUT_MS=30000 ANTDT_DEBUG=TRACE -- "$collectives" || failed=1
# (the test's AllGatherV calls are all small: flat under auto)
selected some allreduce reduce_scatter allgather broadcast || failed=1
launch "partial AllReduce" ANTDT_TIMEOUT_MS=30000 -- "$partial" 20 || failed=1
if ((failed)); then
  echo "netns_collectives: FAILED" >&2
  exit 1
fi
echo "netns_collectives: all passed across 2 namespace nodes"
