#!/bin/sh
# Passthrough forwards every call exactly once, with its arguments: the client's
# calls as the stand-in records them when it is the NCCL (preloaded directly)
# must equal what it records behind the shim in passthrough mode.
#   check_passthrough.sh <libantdt_nccl.so> <stand-in .so> <client>
set -eu
shim=$1 standin=$2 client=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The stand-in does no work, so the client's own checks fail: only the call log matters.
NCCL_STANDIN_LOG=$dir/direct.log LD_PRELOAD=$standin "$client" "$dir/id-a" >/dev/null 2>&1 || true
# (ANTDT_NCCL_REPORT=0: no exit report, whose AllGather the direct run would lack; see check_passthrough_report.sh)
NCCL_STANDIN_LOG=$dir/shim.log ANTDT_NCCL_MODE=passthrough ANTDT_NCCL_LIBRARY=$standin ANTDT_NCCL_REPORT=0 LD_PRELOAD=$shim \
  "$client" "$dir/id-b" >/dev/null 2>"$dir/shim.err" || true
calls=$(wc -l <"$dir/direct.log")
[ "$calls" -ge 100 ] || { echo "the direct run recorded only $calls calls"; exit 1; }
kinds=$(cut -d' ' -f1 "$dir/direct.log" | sort -u | wc -l)
if ! cmp -s "$dir/direct.log" "$dir/shim.log"; then
  echo "passthrough changed the calls (direct < > through the shim):"
  diff "$dir/direct.log" "$dir/shim.log" | head -40
  exit 1
fi
grep -q "libantdt_nccl passthrough" "$dir/shim.err" || { echo "no passthrough summary at exit"; cat "$dir/shim.err"; exit 1; }
echo "passthrough: $calls calls of $kinds functions forwarded unchanged, each once"
