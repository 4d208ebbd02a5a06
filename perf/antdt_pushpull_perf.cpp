// antdt_pushpull_perf: push-pull (parameter-server mode) rounds, nccl-tests style.
// Launch one process per rank (mpirun, or ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT);
// rank 0 prints the table. Exits non-zero when a result is wrong or on error.
//
// One timed iteration is one synchronous round of a single key of `size`
// bytes: every rank pushes its tensor (weight 1) and pulls the aggregate (-o
// sum or avg). Every rank serves a shard: the key's partitions
// (ANTDT_PS_PARTITION_BYTES, default 4 MiB) are spread by range over all ranks.
// Out of place pulls into another buffer, in place into the pushed one.
//
// algbw = size / time. busbw = algbw * 2(n-1)/n: with the partitions spread
// evenly, each rank sends (n-1)/n of the tensor to the other servers on push
// and receives as much on pull, the traffic of a ring allreduce, so the
// column compares with antdt_allreduce_perf's. A key of one partition (size
// up to the partition size) has one server, which moves (n-1) x size each way:
// busbw then shows what that imbalance costs (docs/collectives.md#push-pull).
#include "perf_common.hpp"

#include <antdt/comm.hpp>
#include <antdt/pushpull.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

using antdt::Communicator;
using antdt::DataType;
using antdt::ReduceOp;
namespace perf = antdt::perf;

constexpr const char* kToolName = "antdt_pushpull_perf";
constexpr std::uint64_t kKey = 1;

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op, perf::Totals& totals) {
  if (op != ReduceOp::sum && op != ReduceOp::avg)
    throw antdt::InvalidArgument(std::string(kToolName) + ": -o must be sum or avg (a pull returns the sum or the "
                                 "weighted average), not " + std::string(perf::op_label(op)));
  const std::size_t width = antdt::dtype_size(dtype);
  const std::size_t max_count = opts.sweep.max_bytes / width;
  const std::size_t capacity = std::max<std::size_t>(max_count, 1) * width;
  const perf::ReducePattern pattern(dtype, op, comm.size());
  std::vector<std::byte> input(capacity), result(capacity), work(capacity), expected(capacity);
  pattern.fill_input(comm.rank(), input);
  pattern.fill_expected(expected);

  for (const std::size_t size : opts.sizes) {
    const std::size_t count = size / width;
    const std::size_t bytes = count * width;
    const antdt::PushPullKey key{kKey, count, dtype};
    antdt::PushPull pp(comm, std::span(&key, 1));
    const std::span<const std::byte> want(expected.data(), bytes);

    auto out_of_place = [&] {
      pp.push(kKey, input.data());
      pp.pull(kKey, result.data(), op);
    };
    for (int i = 0; i < opts.warmup_iters; ++i) out_of_place();
    comm.barrier();
    const double oop_us = perf::time_per_iteration_us(opts.iters, out_of_place);
    std::optional<std::uint64_t> oop_wrong;
    if (opts.check) {
      perf::poison(std::span(result.data(), bytes), want);
      out_of_place();
      const auto check = perf::count_wrong(dtype, std::span(result.data(), bytes), want);
      perf::report_wrong(kToolName, comm, dtype, op, bytes, "out-of-place", check);
      oop_wrong = check.wrong;
    }

    // In place: repeated rounds of the check data would grow without bound
    // (sum), so time on data whose aggregate is itself, then check once.
    auto in_place = [&] {
      pp.push(kKey, work.data());
      pp.pull(kKey, work.data(), op);
    };
    pattern.fill_repeatable(comm.rank(), std::span(work.data(), bytes));
    for (int i = 0; i < opts.warmup_iters; ++i) in_place();
    comm.barrier();
    const double ip_us = perf::time_per_iteration_us(opts.iters, in_place);
    std::optional<std::uint64_t> ip_wrong;
    if (opts.check) {
      std::memcpy(work.data(), input.data(), bytes);
      in_place();
      const auto check = perf::count_wrong(dtype, std::span(work.data(), bytes), want);
      perf::report_wrong(kToolName, comm, dtype, op, bytes, "in-place", check);
      ip_wrong = check.wrong;
    }
    perf::finish_row(comm, totals, bytes, count, dtype, perf::op_label(op), -1,
                     perf::allreduce_busbw_factor(comm.size()), {oop_us, oop_wrong}, {ip_us, ip_wrong});
  }
}

}  // namespace

int main(int argc, char** argv) {
  return perf::tool_main(argc, argv,
                         {kToolName, "Push-pull (parameter server) round bandwidth and correctness, nccl-tests style",
                          true, false},
                         [](Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op,
                            perf::Totals& totals) { run_sweep(comm, opts, dtype, op, totals); });
}
