// antdt_allgather_perf: nccl-tests' all_gather_perf for antdt communicators.
// Launch one process per rank (mpirun, or ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT);
// rank 0 prints the table. Exits non-zero when a result is wrong or on error.
//
// As in nccl-tests, "size" is the gathered result (size()/nranks bytes from
// each rank), algbw = size / time and busbw = algbw * (n-1)/n.
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

constexpr const char* kToolName = "antdt_allgather_perf";

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp /*no reduction*/,
               perf::Totals& totals) {
  const std::size_t width = antdt::dtype_size(dtype);
  const auto nranks = static_cast<std::size_t>(comm.size());
  const auto rank = static_cast<std::size_t>(comm.rank());
  // Blocks differ from rank to rank (the min/max pattern's values depend on the
  // rank), so a block gathered into the wrong place is caught.
  const perf::ReducePattern pattern(dtype, ReduceOp::max, comm.size());
  const std::size_t max_block = opts.sweep.max_bytes / width / nranks;
  // At least one element per block, so that buffers are never null even for count 0.
  const std::size_t block_capacity = std::max<std::size_t>(max_block, 1) * width;
  std::vector<std::byte> input(block_capacity);
  std::vector<std::byte> result(block_capacity * nranks);
  std::vector<std::byte> expected(result.size());

  for (const std::size_t size : opts.sizes) {
    const std::size_t block_count = size / width / nranks;
    const std::size_t block_bytes = block_count * width;
    const std::size_t bytes = block_bytes * nranks;
    pattern.fill_input(comm.rank(), std::span(input.data(), block_bytes));
    for (std::size_t r = 0; r < nranks; ++r)
      pattern.fill_input(static_cast<int>(r), std::span(expected.data() + r * block_bytes, block_bytes));
    const std::span<std::byte> out(result.data(), bytes);
    const std::span<const std::byte> want(expected.data(), bytes);
    std::byte* const own_block = result.data() + rank * block_bytes;

    const perf::RowLabel row{kToolName, dtype, std::nullopt, bytes};
    const auto oop = perf::measure(comm, opts, row,
                                   {.name = "out-of-place",
                                    .call = [&] { comm.allgather(input.data(), result.data(), block_count, dtype); },
                                    .result = out,
                                    .expected = want});
    // In place: this rank's block already sits at its place in the result.
    auto place_own_block = [&] { std::memcpy(own_block, input.data(), block_bytes); };
    const auto ip = perf::measure(comm, opts, row,
                                  {.name = "in-place",
                                   .call = [&] { comm.allgather(own_block, result.data(), block_count, dtype); },
                                   .prepare_timing = place_own_block,
                                   .result = out,
                                   .expected = want,
                                   .restore_inputs = place_own_block});

    const double factor = perf::gather_busbw_factor(comm.size());
    perf::finish_row(comm, totals, bytes, block_count * nranks, dtype, "none", -1, factor, oop, ip);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return perf::tool_main(argc, argv, {kToolName, "AllGather bandwidth and correctness, nccl-tests style (all_gather_perf options)", false, false},
                         run_sweep);
}
