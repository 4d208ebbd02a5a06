// antdt_allreduce_perf: nccl-tests' all_reduce_perf for antdt communicators.
// Launch one process per rank (mpirun, or ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT);
// rank 0 prints the table. Exits non-zero when a result is wrong or on error.
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

constexpr const char* kToolName = "antdt_allreduce_perf";

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op, perf::Totals& totals) {
  const std::size_t width = antdt::dtype_size(dtype);
  const std::size_t max_count = opts.sweep.max_bytes / width;
  // At least one element, so that buffers are never null even for count 0.
  const std::size_t capacity = std::max<std::size_t>(max_count, 1) * width;
  const perf::ReducePattern pattern(dtype, op, comm.size());
  std::vector<std::byte> input(capacity);
  std::vector<std::byte> result(capacity);
  std::vector<std::byte> expected;
  pattern.fill_input(comm.rank(), input);
  if (opts.check) {
    expected.resize(capacity);
    pattern.fill_expected(expected);
  }
  const double busbw_factor = perf::allreduce_busbw_factor(comm.size());

  for (const std::size_t size : opts.sizes) {
    const std::size_t count = size / width;
    const std::size_t bytes = count * width;
    const std::span<std::byte> in(input.data(), bytes);
    const std::span<std::byte> out(result.data(), bytes);
    const std::span<const std::byte> want = opts.check ? std::span<const std::byte>(expected.data(), bytes)
                                                       : std::span<const std::byte>{};

    const perf::RowLabel row{kToolName, dtype, op, bytes};
    // Out of place: the input never changes, so every iteration does the same work.
    const auto oop = perf::measure(comm, opts, row,
                                   {.name = "out-of-place",
                                    .call = [&] { comm.allreduce(input.data(), result.data(), count, dtype, op); },
                                    .result = out,
                                    .expected = want});
    // In place: repeated reductions of the check data would grow without bound
    // (sum, prod), so time on data that reduces to itself, then check once.
    const auto ip = perf::measure(comm, opts, row,
                                  {.name = "in-place",
                                   .call = [&] { comm.allreduce(result.data(), result.data(), count, dtype, op); },
                                   .prepare_timing = [&] { pattern.fill_repeatable(comm.rank(), out); },
                                   .result = out,
                                   .expected = want,
                                   .restore_inputs = [&] { std::copy(in.begin(), in.end(), out.begin()); }});

    totals.max_faults_per_call = std::max(
        totals.max_faults_per_call, perf::max_over_ranks(comm, std::max(oop.faults_per_call, ip.faults_per_call)));
    perf::finish_row(comm, totals, bytes, count, dtype, perf::op_label(op), -1, busbw_factor, oop, ip);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return perf::tool_main(argc, argv, {kToolName, "AllReduce bandwidth and correctness, nccl-tests style (all_reduce_perf options)", true, false},
                         run_sweep);
}
