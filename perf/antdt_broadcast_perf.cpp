// antdt_broadcast_perf: nccl-tests' broadcast_perf for antdt communicators.
// Launch one process per rank (mpirun, or ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT);
// rank 0 prints the table. Exits non-zero when a result is wrong or on error.
//
// As in nccl-tests, "size" is the root's (-r) message, algbw = size / time and
// busbw = algbw (factor 1). Every rank's result is checked.
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

constexpr const char* kToolName = "antdt_broadcast_perf";

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp /*no reduction*/,
               perf::Totals& totals) {
  const std::size_t width = antdt::dtype_size(dtype);
  const bool is_root = comm.rank() == opts.root;
  // At least one element, so that buffers are never null even for count 0.
  const std::size_t capacity = std::max<std::size_t>(opts.sweep.max_bytes / width, 1) * width;
  // The root's data (the min/max pattern of rank `root`): never all zeros or
  // ones, so a rank that received nothing is caught.
  const perf::ReducePattern pattern(dtype, ReduceOp::max, comm.size());
  std::vector<std::byte> expected(capacity);
  pattern.fill_input(opts.root, expected);
  std::vector<std::byte> input(capacity);
  if (is_root) input = expected;
  std::vector<std::byte> result(capacity);

  for (const std::size_t size : opts.sizes) {
    const std::size_t count = size / width;
    const std::size_t bytes = count * width;
    const std::span<std::byte> out(result.data(), bytes);
    const std::span<const std::byte> want(expected.data(), bytes);

    const perf::RowLabel row{kToolName, dtype, std::nullopt, bytes};
    const auto oop = perf::measure(
        comm, opts, row,
        {.name = "out-of-place",
         .call = [&] { comm.broadcast(input.data(), result.data(), count, dtype, opts.root); },
         .result = out,
         .expected = want});
    // In place: the root sends from, and every rank receives into, one buffer.
    // The check poisons it everywhere; the root then puts its message back.
    auto place_root_message = [&] {
      if (is_root) std::memcpy(out.data(), want.data(), bytes);
    };
    auto poison_and_place_root_message = [&] {
      perf::poison(out, want);
      place_root_message();
    };
    const auto ip = perf::measure(
        comm, opts, row,
        {.name = "in-place",
         .call = [&] { comm.broadcast(result.data(), result.data(), count, dtype, opts.root); },
         .prepare_timing = poison_and_place_root_message,
         .result = out,
         .expected = want,
         .restore_inputs = place_root_message});

    perf::finish_row(comm, totals, bytes, count, dtype, "none", opts.root, 1.0, oop, ip);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return perf::tool_main(argc, argv, {kToolName, "Broadcast bandwidth and correctness, nccl-tests style (broadcast_perf options)", false, true},
                         run_sweep);
}
