#!/usr/bin/env bash
# The project's test command (what CI runs, .ci/run): installs missing packages
# (tools/setup.sh), then runs these stages, each in a fresh build directory and
# each printing its time (docs/testing.md, "Sanitizers" and "CI stages"):
#   1. main      build everything (gcc, warnings as errors), run every test
#   2. asan      clang-14 ASan+UBSan build with libFuzzer coverage (no CUDA, perf,
#                torch, Python): unit + mpirun tests, fuzz-corpus replays, the
#                mismatch test repeated 300 times (ctest asan.mismatch_repeat300)
#   3. fuzz      every fuzz target of that build for ANTDT_FUZZ_SECONDS
#   4. tsan      clang-14 TSan build (no CUDA, perf, MPI): unit tests
#                (ANTDT_TSAN_STAGE=0 skips it)
# GPU tests skip on machines without a GPU.
#   ANTDT_BUILD_DIR        main build directory (default: <repo>/build); the
#                          others are <it>-asan and <it>-tsan
#   ANTDT_JOBS             parallel build and test jobs (default: nproc)
#   ANTDT_SKIP_SANITIZERS  0 (default): run stages 2-4; 1 stops after stage 1
#   ANTDT_FUZZ_SECONDS     seconds per fuzz target in stage 3 (default 20)
#   ANTDT_TSAN_STAGE       0 skips stage 4 (default 1)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ANTDT_BUILD_DIR:-$repo/build}"
jobs="${ANTDT_JOBS:-$(nproc)}"

"$repo/tools/setup.sh"

# mpirun in containers: running as root, and more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# UCX warns about UCX_* variables it does not know (ours set some per test).
export UCX_WARN_UNUSED_ENV_VARS=n
if [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

started=$SECONDS
stage_start=0
stage() { stage_start=$SECONDS; echo "=== test.sh: stage $1"; }
stage_done() {
  echo "=== test.sh: stage $1 took $((SECONDS - stage_start)) s (total $((SECONDS - started)) s)"
}

stage main
flaky='^(integration\.partial_kill|integration\.policy\.rank0_kill_external|integration\.agent\.kill\.survivors)$'
(set -x
 cmake --fresh -S "$repo" -B "$build" -G Ninja -DANTDT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
 cmake --build "$build" -j "$jobs"
 ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 300 -E "$flaky"
 # Tests whose intermittent failures were found and fixed on 2026-12-06
 # (docs/testing.md#known-intermittent-failures), retried until CI has shown
 # them clean: they run once more after a failure and fail CI only when they
 # fail twice; ctest prints the first failure too.
 ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 300 -R "$flaky" --repeat until-pass:2)
stage_done main

if [[ "${ANTDT_SKIP_SANITIZERS:-0}" == 1 ]]; then
  echo "=== test.sh: sanitizer and fuzz stages skipped (ANTDT_SKIP_SANITIZERS=1; docs/testing.md)"
  exit 0
fi

# The sanitizer stages build only what they run (no CUDA, perf tools, torch,
# Python, NCCL shim): the unit-test binary, the mpirun test programs, the fuzz
# targets. Both use clang-14 (about half gcc's compile time here, and libFuzzer);
# warnings are gated by the gcc main stage, so clang's own set does not stop them.
sanitizer_build_args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DANTDT_WITH_CUDA=OFF -DANTDT_BUILD_PERF=OFF
                      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14)
mpi_programs=(antdt_mpi_collectives_test antdt_mpi_partial_test antdt_mpi_pushpull_test antdt_fault_probe
              antdt_agent_trainer)
# Run by the main stage, or need targets the sanitizer builds leave out.
not_in_sanitizer_stages='^(Architecture|Nccl|nccl|perf)\.'
# The every-dtype/op/size AllReduce check at 3-5 ranks and the forced
# hierarchical one: pure arithmetic at several minutes each when instrumented
# and oversubscribed (np3 took 335 s on 2 loaded cores), no error path that
# np1/np2 and the main stage do not already run. Left out of the asan stage.
heavy_mpi_checks='^mpi\.collectives\.(np[345]|hierarchical\.np4)$'

# ASan+UBSan, with libFuzzer's coverage (ANTDT_FUZZ=ON): one build serves the
# unit tests, the mpirun tests, the mismatch test 300 times (ctest
# asan.mismatch_repeat300, issue 16 item 6) and then the fuzz stage. Every
# finding fails the test; LeakSanitizer stays on.
stage asan
(set -x
 export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
 cmake --fresh -S "$repo" -B "$build-asan" "${sanitizer_build_args[@]}" -DANTDT_SANITIZE=address -DANTDT_FUZZ=ON
 cmake --build "$build-asan" -j "$jobs" --target antdt_unit_tests "${mpi_programs[@]}" antdt_fuzz_targets
 # The unit tests as one process per shard, not one per test as ctest runs
 # them: an instrumented process start per test made ctest about 7x slower
 # (226 tests in 536 s, against all 832 in 280 s in one process).
 "$repo/tools/gtest_shards.sh" "$jobs" "$build-asan/tests/antdt_unit_tests"
 ctest --test-dir "$build-asan" --output-on-failure -j "$jobs" --timeout 900 -L 'mpi|asan|fuzz' \
   -E "$not_in_sanitizer_stages|$heavy_mpi_checks")
stage_done asan

# libFuzzer: every target for ANTDT_FUZZ_SECONDS from its seed corpus.
stage fuzz
(set -x
 "$repo/tools/fuzz.sh" "$build-asan" "${ANTDT_FUZZ_SECONDS:-20}")
stage_done fuzz

if [[ "${ANTDT_TSAN_STAGE:-1}" != 1 ]]; then
  echo "=== test.sh: tsan stage skipped (ANTDT_TSAN_STAGE=0; docs/testing.md)"
  echo "=== test.sh: all stages passed in $((SECONDS - started)) s"
  exit 0
fi

# TSan: UCX's memory hooks confuse it (UCX_MEM_EVENTS=no); the suppressions
# file lists UCX-internal reports only (tools/tsan.supp says why each). The
# unit tests run as one process per shard, as in the asan stage.
stage tsan
(set -x
 export UCX_MEM_EVENTS=no
 export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$repo/tools/tsan.supp"
 cmake --fresh -S "$repo" -B "$build-tsan" "${sanitizer_build_args[@]}" -DANTDT_SANITIZE=thread -DANTDT_WITH_MPI=OFF
 cmake --build "$build-tsan" -j "$jobs" --target antdt_unit_tests
 "$repo/tools/gtest_shards.sh" "$jobs" "$build-tsan/tests/antdt_unit_tests")
stage_done tsan
echo "=== test.sh: all stages passed in $((SECONDS - started)) s"
