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

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, perf::Totals& totals) {
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

    auto out_of_place = [&] { comm.broadcast(input.data(), result.data(), count, dtype, opts.root); };
    for (int i = 0; i < opts.warmup_iters; ++i) out_of_place();
    comm.barrier();
    const double oop_us = perf::time_per_iteration_us(opts.iters, out_of_place);
    std::optional<std::uint64_t> oop_wrong;
    if (opts.check) {
      perf::poison(out, want);
      out_of_place();
      const auto check = perf::count_wrong(dtype, out, want);
      perf::report_wrong(kToolName, comm, dtype, std::nullopt, bytes, "out-of-place", check);
      oop_wrong = check.wrong;
    }

    // In place: the root sends from, and every rank receives into, one buffer.
    auto in_place = [&] { comm.broadcast(result.data(), result.data(), count, dtype, opts.root); };
    auto reset = [&] {
      if (is_root)
        std::memcpy(out.data(), want.data(), bytes);
      else
        perf::poison(out, want);
    };
    reset();
    for (int i = 0; i < opts.warmup_iters; ++i) in_place();
    comm.barrier();
    const double ip_us = perf::time_per_iteration_us(opts.iters, in_place);
    std::optional<std::uint64_t> ip_wrong;
    if (opts.check) {
      reset();
      in_place();
      const auto check = perf::count_wrong(dtype, out, want);
      perf::report_wrong(kToolName, comm, dtype, std::nullopt, bytes, "in-place", check);
      ip_wrong = check.wrong;
    }

    perf::finish_row(comm, totals, bytes, count, dtype, "none", opts.root, 1.0, {oop_us, oop_wrong},
                     {ip_us, ip_wrong});
  }
}

}  // namespace

int main(int argc, char** argv) {
  return perf::tool_main(argc, argv, {kToolName, "Broadcast bandwidth and correctness, nccl-tests style (broadcast_perf options)", false, true},
                         [](Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op,
                            perf::Totals& totals) {
                           (void)op;  // no reduction in this collective
                           run_sweep(comm, opts, dtype, totals);
                         });
}
