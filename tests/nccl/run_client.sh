#!/bin/sh
# run_client.sh <mpirun> <ranks> <preload> <client> [args...]: the NCCL client
# under mpirun, every rank (not mpirun itself) with LD_PRELOAD=<preload>. The
# ids travel through a fresh temporary directory. Any rank's non-zero exit is a
# FAIL line (the ctest matches rank 0's summary, which alone would miss it).
set -eu
mpirun=$1 ranks=$2 preload=$3 client=$4
shift 4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0
"$mpirun" --bind-to none --oversubscribe -np "$ranks" -x LD_PRELOAD="$preload" "$client" "$dir/id" "$@" || status=$?
if [ "$status" -ne 0 ]; then
  echo "FAIL: $mpirun exited with status $status (a rank failed)"
  exit "$status"
fi
