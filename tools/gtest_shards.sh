#!/usr/bin/env bash
# Runs a googletest binary as N parallel shards (GTEST_TOTAL_SHARDS), each one
# process, and fails when any shard fails, printing that shard's output.
# tools/test.sh uses it for the sanitizer builds, where starting an
# instrumented process per test (as ctest does) costs more than the tests.
#   tools/gtest_shards.sh <shards> <gtest binary> [gtest arguments...]
set -uo pipefail
shards="${1:?usage: tools/gtest_shards.sh <shards> <gtest binary> [args...]}"
binary="${2:?usage: tools/gtest_shards.sh <shards> <gtest binary> [args...]}"
shift 2
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
pids=()
for ((i = 0; i < shards; ++i)); do
  GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX="$i" "$binary" --gtest_brief=1 "$@" >"$logs/$i.log" 2>&1 &
  pids+=("$!")
done
failed=0
for ((i = 0; i < shards; ++i)); do
  if wait "${pids[i]}"; then
    echo "gtest_shards.sh: shard $i/$shards: $(grep -E '^\[==========\] .* ran' "$logs/$i.log" | tail -1)," \
         "$(grep -E '^\[  PASSED  \]' "$logs/$i.log" | tail -1)"
  else
    echo "gtest_shards.sh: shard $i/$shards of $binary FAILED; its output:" >&2
    cat "$logs/$i.log" >&2
    failed=1
  fi
done
exit "$failed"
