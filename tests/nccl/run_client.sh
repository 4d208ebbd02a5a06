#!/bin/sh
# run_client.sh <mpirun> <ranks> <preload> <client> [args...]: the NCCL client
# under mpirun, every rank (not mpirun itself) with LD_PRELOAD=<preload>. The
# ids travel through a fresh temporary directory.
set -eu
mpirun=$1 ranks=$2 preload=$3 client=$4
shift 4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$mpirun" --bind-to none --oversubscribe -np "$ranks" -x LD_PRELOAD="$preload" "$client" "$dir/id" "$@"
