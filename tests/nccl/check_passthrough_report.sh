#!/bin/sh
# Passthrough's cross-rank straggler report: the client's step loop with rank
# <slow> 3x slower runs through the shim in passthrough mode on the stand-in
# NCCL (whose AllGather really gathers, through files); at ncclCommFinalize the
# ranks exchange their step times and rank 0 prints the Monitor's summary,
# which must class rank <slow> deterministic and no other rank slow.
#   check_passthrough_report.sh <mpirun> <ranks> <slow> <libantdt_nccl.so> <stand-in .so> <client>
set -eu
mpirun=$1 ranks=$2 slow=$3 shim=$4 standin=$5 client=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/gather"
"$mpirun" --bind-to none --oversubscribe -np "$ranks" -x ANTDT_NCCL_MODE=passthrough -x ANTDT_NCCL_LIBRARY="$standin" \
  -x NCCL_STANDIN_GATHER_DIR="$dir/gather" -x ANTDT_NCCL_QUIET=1 -x LD_PRELOAD="$shim" \
  "$client" "$dir/id" steps 80 "$slow" >"$dir/out" 2>&1 ||
  { echo "FAIL: a rank failed (mpirun then kills the others, maybe before rank 0's report)"; cat "$dir/out"; exit 1; }
cat "$dir/out" | grep "libantdt_nccl passthrough\|^ *[0-9]\+  [a-z]" || true
grep -q "libantdt_nccl passthrough: antdt monitor: $ranks ranks" "$dir/out" ||
  { echo "FAIL: no cross-rank report of $ranks ranks"; cat "$dir/out"; exit 1; }
grep -Eq "^ +$slow +deterministic" "$dir/out" || { echo "FAIL: rank $slow is not classed deterministic"; exit 1; }
if grep -E "^ +[0-9]+ +(deterministic|persistent|transient)" "$dir/out" | grep -Ev "^ +$slow " >/dev/null; then
  echo "FAIL: a rank other than $slow is classed slow"
  exit 1
fi
echo "passthrough report: rank $slow of $ranks named deterministic"
