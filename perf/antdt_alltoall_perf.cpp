// antdt_alltoall_perf: nccl-tests' alltoall_perf for antdt communicators.
// Launch one process per rank (mpirun, or ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT);
// rank 0 prints the table. Exits non-zero when a result is wrong or on error.
//
// As in nccl-tests, "size" is each rank's send buffer (nranks blocks, block j
// for rank j), algbw = size / time and busbw = algbw * (n-1)/n.
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

constexpr const char* kToolName = "antdt_alltoall_perf";

// Element i of the block that rank `source` sends to rank `destination`: a
// small integer (exact in every datatype) that differs between the blocks of
// every (source, destination) pair of up to 101 ranks, so a block delivered
// to the wrong place is caught.
std::int64_t block_value(std::size_t source, std::size_t destination, std::size_t nranks, std::size_t i) noexcept {
  return static_cast<std::int64_t>((7 * (i % 101) + 13 * ((source * nranks + destination) % 101)) % 101) + 1;
}

// One rank's send buffer (`from_rank`) or the receive buffer it expects
// (!from_rank), for blocks of `block_count` elements.
void fill_blocks(DataType dtype, std::size_t rank, std::size_t nranks, std::size_t block_count, bool from_rank,
                 std::span<std::byte> out) {
  const std::size_t width = antdt::dtype_size(dtype);
  for (std::size_t peer = 0; peer < nranks; ++peer) {
    std::byte* block = out.data() + peer * block_count * width;
    for (std::size_t i = 0; i < block_count; ++i) {
      const std::int64_t value =
          from_rank ? block_value(rank, peer, nranks, i) : block_value(peer, rank, nranks, i);
      perf::store_integer(dtype, value, block + i * width);
    }
  }
}

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp /*no reduction*/,
               perf::Totals& totals) {
  const std::size_t width = antdt::dtype_size(dtype);
  const auto nranks = static_cast<std::size_t>(comm.size());
  const auto rank = static_cast<std::size_t>(comm.rank());
  const std::size_t max_block = opts.sweep.max_bytes / width / nranks;
  // At least one element per block, so that buffers are never null even for count 0.
  const std::size_t capacity = std::max<std::size_t>(max_block, 1) * width * nranks;
  std::vector<std::byte> input(capacity);
  std::vector<std::byte> result(capacity);
  std::vector<std::byte> expected(capacity);

  for (const std::size_t size : opts.sizes) {
    const std::size_t block_count = size / width / nranks;
    const std::size_t bytes = block_count * width * nranks;
    const std::span<std::byte> in(input.data(), bytes);
    const std::span<std::byte> out(result.data(), bytes);
    fill_blocks(dtype, rank, nranks, block_count, /*from_rank=*/true, in);
    fill_blocks(dtype, rank, nranks, block_count, /*from_rank=*/false, std::span(expected.data(), bytes));
    const std::span<const std::byte> want(expected.data(), bytes);

    const perf::RowLabel row{kToolName, dtype, std::nullopt, bytes};
    const auto oop = perf::measure(comm, opts, row,
                                   {.name = "out-of-place",
                                    .call = [&] { comm.alltoall(input.data(), result.data(), block_count, dtype); },
                                    .result = out,
                                    .expected = want});
    // In place: the blocks are exchanged within one buffer.
    auto place_input = [&] { std::memcpy(out.data(), in.data(), bytes); };
    const auto ip = perf::measure(comm, opts, row,
                                  {.name = "in-place",
                                   .call = [&] { comm.alltoall(result.data(), result.data(), block_count, dtype); },
                                   .prepare_timing = place_input,
                                   .result = out,
                                   .expected = want,
                                   .restore_inputs = place_input});

    const double factor = perf::gather_busbw_factor(comm.size());
    perf::finish_row(comm, totals, bytes, block_count * nranks, dtype, "none", -1, factor, oop, ip);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return perf::tool_main(argc, argv, {kToolName, "AlltoAll bandwidth and correctness, nccl-tests style (alltoall_perf options)", false, false},
                         run_sweep);
}
