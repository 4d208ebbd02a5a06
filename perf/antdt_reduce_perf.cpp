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

    // Out of place: the input never changes, so every iteration does the same work.
    auto out_of_place = [&] { comm.reduce(input.data(), result.data(), count, dtype, op, opts.root); };
    for (int i = 0; i < opts.warmup_iters; ++i) out_of_place();
    comm.barrier();
    const double oop_us = perf::time_per_iteration_us(opts.iters, out_of_place);
    std::optional<std::uint64_t> oop_wrong;
    if (opts.check) {
      perf::poison(out, want);
      out_of_place();
      perf::CheckResult check;
      if (is_root) check = perf::count_wrong(dtype, out, want);
      perf::report_wrong(kToolName, comm, dtype, op, bytes, "out-of-place", check);
      oop_wrong = check.wrong;
    }

    // In place (send == recv on every rank): repeated reductions of the check
    // data would grow without bound (sum, prod), so time on data that reduces
    // to itself, then check once.
    auto in_place = [&] { comm.reduce(result.data(), result.data(), count, dtype, op, opts.root); };
    pattern.fill_repeatable(comm.rank(), out);
    for (int i = 0; i < opts.warmup_iters; ++i) in_place();
    comm.barrier();
    const double ip_us = perf::time_per_iteration_us(opts.iters, in_place);
    std::optional<std::uint64_t> ip_wrong;
    if (opts.check) {
      std::copy(in.begin(), in.end(), out.begin());
      in_place();
      perf::CheckResult check;
      if (is_root) check = perf::count_wrong(dtype, out, want);
      perf::report_wrong(kToolName, comm, dtype, op, bytes, "in-place", check);
      ip_wrong = check.wrong;
    }

    perf::finish_row(comm, totals, bytes, count, dtype, perf::op_label(op), opts.root, 1.0, {oop_us, oop_wrong},
                     {ip_us, ip_wrong});
  }
}

}  // namespace

int main(int argc, char** argv) {
  return perf::tool_main(argc, argv, {kToolName, "Reduce bandwidth and correctness, nccl-tests style (reduce_perf options)", true, true},
                         [](Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op,
                            perf::Totals& totals) {
                           run_sweep(comm, opts, dtype, op, totals);
                         });
}
