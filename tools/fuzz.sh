#!/usr/bin/env bash
# Fuzzes every target of tests/fuzz for a bounded time (docs/fuzzing.md).
#   tools/fuzz.sh <libFuzzer build dir> [seconds per target, default 20]
# The build must be configured with -DANTDT_FUZZ=ON (clang). Each target starts
# from a scratch copy of its seed corpus (tests/fuzz/<target>/), so the
# committed corpus is not changed; crash inputs land in <build>/fuzz-artifacts/.
# Prints the executions of each target and their total; exits non-zero on the
# first crash, leak or timeout.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:?usage: tools/fuzz.sh <libFuzzer build dir> [seconds per target]}"
seconds="${2:-20}"
work="$build/fuzz-work"
artifacts="$build/fuzz-artifacts"
rm -rf "$work"
mkdir -p "$work" "$artifacts"

total=0
for corpus in "$repo"/tests/fuzz/*/; do
  target="$(basename "$corpus")"
  binary="$build/tests/fuzz/antdt_fuzz_$target"
  [[ -x "$binary" ]] || { echo "fuzz.sh: $binary is missing (configure with -DANTDT_FUZZ=ON)" >&2; exit 1; }
  mkdir -p "$work/$target"
  cp "$corpus"/* "$work/$target/"
  log="$work/$target.log"
  if ! "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$artifacts/$target-" "$work/$target" >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "fuzz.sh: $target FAILED (input saved under $artifacts)" >&2
    exit 1
  fi
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  total=$((total + ${runs:-0}))
  printf 'fuzz.sh: %-20s %10s executions in %ss, no crash\n' "$target" "${runs:-?}" "$seconds"
done
printf 'fuzz.sh: %d executions in all, no crash\n' "$total"
