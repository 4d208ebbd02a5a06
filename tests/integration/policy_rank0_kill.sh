#!/usr/bin/env bash
# kill -9 of rank 0 during partial steps, with the arbiter in an antdt-coordinator
# apart (docs/partial.md#where-the-arbiter-runs): Agent training on the real
# engine (antdt_policy_perf, antdt-dd, every rank spiking so that steps run as
# partial AllReduces with defer) under `antdt-run --restarts 1`. The job must
# complete: antdt-run exits 0 (rank 0 restarted and rejoined), --check finds
# the replicas consistent and every sample in the model (once; a batch of the
# killed rank twice when it died between its step and its commit), and the
# coordinator reports every sample committed once and the epoch completed. With the arbiter in rank 0 the same
# run fails (every survivor loses the arbiter).
#
# usage: policy_rank0_kill.sh ANTDT_RUN ANTDT_COORDINATOR ANTDT_POLICY_PERF
#   VICTIM=<rank> (default 0) and KILL_DELAY_S=<s> (default 0.5, after the partial steps started) vary the fault.
set -euo pipefail
run_bin="$1" coordinator_bin="$2" tool="$3"
work=$(mktemp -d)
coordinator_pid=""
cleanup() {
  [[ -n "$coordinator_pid" ]] && kill "$coordinator_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "policy_rank0_kill: FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }

steps=300 batch=128
export ANTDT_SECRET=0123456789abcdef0123456789abcdef UCX_WARN_UNUSED_ENV_VARS=n ANTDT_TIMEOUT_MS=20000
# A rank killed while UCX's shared memory writes its message into a peer's FIFO
# blocks that peer's FIFO for good: the partial steps going on past the kill
# need ANTDT_UCX_SHM=safe (docs/configuration.md#dead-ranks).
export ANTDT_UCX_SHM=safe
export ANTDT_POLICY=antdt-dd
# A coordinator on a free port (a port taken meanwhile: try another).
for attempt in 1 2 3 4 5; do
  port=$((30000 + RANDOM % 20000))
  ANTDT_MAX_RESTARTS=1 ANTDT_WORLD_SIZE=4 ANTDT_DEBUG=info "$coordinator_bin" --listen "127.0.0.1:$port" \
    --dataset-size $((steps * batch)) --epochs 1 --global-batch "$batch" --shard-size 32 >"$work/coordinator.log" 2>&1 &
  coordinator_pid=$!
  sleep 0.3
  kill -0 "$coordinator_pid" 2>/dev/null && break
  coordinator_pid=""
done
[[ -n "$coordinator_pid" ]] || fail "antdt-coordinator did not start"
export ANTDT_COORDINATOR="127.0.0.1:$port"

ANTDT_INJECT="rank=*:spike_p=0.1,spike_x=5,spike_len=1" timeout 120 "$run_bin" -n 4 --restarts 1 -- \
  "$tool" --steps "$steps" --global-batch "$batch" --sample-ms 0.3 --check --killed 1 >"$work/run.log" 2>&1 &
run_pid=$!

# Rank 0 once partial steps run (its communicator and the arbiter's group are made by then).
victim=""
for ((i = 0; i < 200; i++)); do
  [[ -z "$victim" ]] || break
  sleep 0.05
  grep -q "arbiter host: all 4 ranks of a communicator connected" "$work/coordinator.log" || continue
  for p in $(pgrep -f -- "$tool" || true); do
    if { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "ANTDT_RANK=${VICTIM:-0}"; then victim=$p; fi
  done
done
[[ -n "$victim" ]] || fail "no partial steps with the arbiter in the coordinator within 10 s"
sleep "${KILL_DELAY_S:-0.5}"
kill -9 "$victim" 2>/dev/null || fail "rank ${VICTIM:-0} (pid $victim) ended before it could be killed"
echo "policy_rank0_kill: killed rank ${VICTIM:-0} (pid $victim) during partial steps"

status=0
wait "$run_pid" || status=$?
((status == 0)) || fail "antdt-run exited $status"
grep -q "rank ${VICTIM:-0} was killed by signal 9" "$work/run.log" || fail "antdt-run did not see the rank killed"
# Every sample in the model once, or a batch more: rank 0 killed after its
# contribution was applied but before its commit (--killed 1 reports it).
grep -Eq "^  antdt-dd +[0-9]+ +[0-9]+ .* yes$" "$work/run.log" || fail "the run's row is missing or inconsistent"
for ((i = 0; i < 100; i++)); do
  grep -q "1 epoch(s) completed" "$work/coordinator.log" && break
  sleep 0.1
done
grep -q "; $((steps * batch)) samples committed, 1 epoch(s) completed" "$work/coordinator.log" ||
  fail "the coordinator did not report every sample committed and the epoch completed"
grep -E "^  antdt-dd |trained twice" "$work/run.log"
echo "policy_rank0_kill: PASS"
