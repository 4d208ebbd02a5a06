// antdt_reduce_perf: nccl-tests' reduce_perf for antdt communicators.
// Launch one process per rank (mpirun, or ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT);
// rank 0 prints the table. Exits non-zero when a result is wrong or on error.
//
// As in nccl-tests, "size" is each rank's input, algbw = size / time and
// busbw = algbw (factor 1). The root (-r) receives the reduction; only its
// result is checked.
#include "perf_common.hpp"

#include <antdt/comm.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

using antdt::Communicator;
using antdt::DataType;
using antdt::ReduceOp;
namespace perf = antdt::perf;

constexpr const char* kToolName = "antdt_reduce_perf";

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op, perf::Totals& totals) {
  const std::size_t width = antdt::dtype_size(dtype);
  const bool is_root = comm.rank() == opts.root;
  // At least one element, so that buffers are never null even for count 0.
  const std::size_t capacity = std::max<std::size_t>(opts.sweep.max_bytes / width, 1) * width;
  const perf::ReducePattern pattern(dtype, op, comm.size());
  std::vector<std::byte> input(capacity);
  std::vector<std::byte> result(capacity);
  std::vector<std::byte> expected(capacity);
  pattern.fill_input(comm.rank(), input);
  pattern.fill_expected(expected);

  for (const std::size_t size : opts.sizes) {
    const std::size_t count = size / width;
    const std::size_t bytes = count * width;
    const std::span<std::byte> in(input.data(), bytes);
    const std::span<std::byte> out(result.data(), bytes);
    const std::span<const std::byte> want(expected.data(), bytes);

    const perf::RowLabel row{kToolName, dtype, op, bytes};
    // Only the root receives the reduction: the other ranks have nothing to check.
    const std::span<std::byte> checked = is_root ? out : std::span<std::byte>{};
    const std::span<const std::byte> checked_want = is_root ? want : std::span<const std::byte>{};
    // Out of place: the input never changes, so every iteration does the same work.
    const auto oop = perf::measure(
        comm, opts, row,
        {.name = "out-of-place",
         .call = [&] { comm.reduce(input.data(), result.data(), count, dtype, op, opts.root); },
         .result = checked,
         .expected = checked_want});
    // In place (send == recv on every rank): repeated reductions of the check
    // data would grow without bound (sum, prod), so time on data that reduces
    // to itself, then check once.
    const auto ip = perf::measure(
        comm, opts, row,
        {.name = "in-place",
         .call = [&] { comm.reduce(result.data(), result.data(), count, dtype, op, opts.root); },
         .prepare_timing = [&] { pattern.fill_repeatable(comm.rank(), out); },
         .result = checked,
         .expected = checked_want,
         .restore_inputs = [&] { std::copy(in.begin(), in.end(), out.begin()); }});

    perf::finish_row(comm, totals, bytes, count, dtype, perf::op_label(op), opts.root, 1.0, oop, ip);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return perf::tool_main(argc, argv, {kToolName, "Reduce bandwidth and correctness, nccl-tests style (reduce_perf options)", true, true},
                         run_sweep);
}
