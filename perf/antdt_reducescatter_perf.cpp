// antdt_reducescatter_perf: nccl-tests' reduce_scatter_perf for antdt communicators.
// Launch one process per rank (mpirun, or ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT);
// rank 0 prints the table. Exits non-zero when a result is wrong or on error.
//
// As in nccl-tests, "size" is each rank's input (nranks blocks; each rank
// receives one block of the reduction), algbw = size / time and
// busbw = algbw * (n-1)/n.
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

constexpr const char* kToolName = "antdt_reducescatter_perf";

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op, perf::Totals& totals) {
  const std::size_t width = antdt::dtype_size(dtype);
  const auto nranks = static_cast<std::size_t>(comm.size());
  const auto rank = static_cast<std::size_t>(comm.rank());
  const perf::ReducePattern pattern(dtype, op, comm.size());
  const std::size_t max_block = opts.sweep.max_bytes / width / nranks;
  // At least one element per block, so that buffers are never null even for count 0.
  const std::size_t block_capacity = std::max<std::size_t>(max_block, 1) * width;
  const std::size_t capacity = block_capacity * nranks;
  std::vector<std::byte> input(capacity);
  std::vector<std::byte> work(capacity);  // in place: input and result share it
  std::vector<std::byte> result(block_capacity);
  std::vector<std::byte> expected(capacity);
  pattern.fill_input(comm.rank(), input);
  pattern.fill_expected(expected);

  for (const std::size_t size : opts.sizes) {
    const std::size_t block_count = size / width / nranks;
    const std::size_t block_bytes = block_count * width;
    const std::size_t bytes = block_bytes * nranks;
    // This rank's block of the reduction over the whole input.
    const std::span<const std::byte> want(expected.data() + rank * block_bytes, block_bytes);
    const std::span<std::byte> out(result.data(), block_bytes);
    const std::span<std::byte> own_block(work.data() + rank * block_bytes, block_bytes);

    const perf::RowLabel row{kToolName, dtype, op, bytes};
    // Out of place: the input never changes, so every iteration does the same work.
    const auto oop = perf::measure(
        comm, opts, row,
        {.name = "out-of-place",
         .call = [&] { comm.reduce_scatter(input.data(), result.data(), block_count, dtype, op); },
         .result = out,
         .expected = want});
    // In place (the result lands on this rank's block of the input). Repeated
    // reductions of the check data would grow without bound (sum, prod), so
    // time on data that reduces to itself, then check once.
    const auto ip = perf::measure(
        comm, opts, row,
        {.name = "in-place",
         .call = [&] { comm.reduce_scatter(work.data(), own_block.data(), block_count, dtype, op); },
         .prepare_timing = [&] { pattern.fill_repeatable(comm.rank(), std::span(work.data(), bytes)); },
         .result = own_block,
         .expected = want,
         .restore_inputs = [&] { std::memcpy(work.data(), input.data(), bytes); }});

    const double factor = perf::gather_busbw_factor(comm.size());
    perf::finish_row(comm, totals, bytes, block_count * nranks, dtype, perf::op_label(op), -1, factor, oop, ip);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return perf::tool_main(argc, argv, {kToolName, "ReduceScatter bandwidth and correctness, nccl-tests style (reduce_scatter_perf options)", true, false},
                         run_sweep);
}
