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

struct Totals {
  std::uint64_t wrong = 0;
  perf::BandwidthSummary bandwidth;
};

void report_wrong(const Communicator& comm, DataType dtype, ReduceOp op, std::size_t bytes, const char* placement,
                  const perf::CheckResult& check) {
  if (check.wrong == 0) return;
  std::fprintf(stderr,
               "%s: rank %d: %s %s %zu bytes %s: %llu wrong elements; first at index %zu: got %g, expected %g\n",
               kToolName, comm.rank(), std::string(perf::dtype_label(dtype)).c_str(),
               std::string(perf::op_label(op)).c_str(), bytes, placement,
               static_cast<unsigned long long>(check.wrong), check.first_wrong, check.first_got,
               check.first_expected);
}

// Every byte differs from the expected result, so an element the collective
// failed to write cannot pass the check by accident.
void poison(std::span<std::byte> out, std::span<const std::byte> expected) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = ~expected[i];
}

double busbw_factor(int nranks) noexcept { return nranks <= 0 ? 0.0 : static_cast<double>(nranks - 1) / nranks; }

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op, Totals& totals) {
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

    // Out of place: the input never changes, so every iteration does the same work.
    auto out_of_place = [&] { comm.reduce_scatter(input.data(), result.data(), block_count, dtype, op); };
    for (int i = 0; i < opts.warmup_iters; ++i) out_of_place();
    comm.barrier();
    const double oop_us = perf::time_per_iteration_us(opts.iters, out_of_place);
    std::optional<std::uint64_t> oop_wrong;
    if (opts.check) {
      poison(out, want);
      out_of_place();
      const auto check = perf::count_wrong(dtype, out, want);
      report_wrong(comm, dtype, op, bytes, "out-of-place", check);
      oop_wrong = check.wrong;
    }

    // In place (the result lands on this rank's block of the input). Repeated
    // reductions of the check data would grow without bound (sum, prod), so
    // time on data that reduces to itself, then check once.
    auto in_place = [&] { comm.reduce_scatter(work.data(), own_block.data(), block_count, dtype, op); };
    pattern.fill_repeatable(comm.rank(), std::span(work.data(), bytes));
    for (int i = 0; i < opts.warmup_iters; ++i) in_place();
    comm.barrier();
    const double ip_us = perf::time_per_iteration_us(opts.iters, in_place);
    std::optional<std::uint64_t> ip_wrong;
    if (opts.check) {
      std::memcpy(work.data(), input.data(), bytes);
      in_place();
      const auto check = perf::count_wrong(dtype, own_block, want);
      report_wrong(comm, dtype, op, bytes, "in-place", check);
      ip_wrong = check.wrong;
    }

    // The slowest rank's time is the collective's time; wrong counts add up.
    const double factor = busbw_factor(comm.size());
    const auto oop = perf::make_measurement(bytes, perf::max_over_ranks(comm, oop_us), factor,
                                            oop_wrong ? std::optional(perf::sum_over_ranks(comm, *oop_wrong))
                                                      : std::nullopt);
    const auto ip = perf::make_measurement(bytes, perf::max_over_ranks(comm, ip_us), factor,
                                           ip_wrong ? std::optional(perf::sum_over_ranks(comm, *ip_wrong))
                                                    : std::nullopt);
    totals.wrong += oop.wrong.value_or(0) + ip.wrong.value_or(0);
    totals.bandwidth.add(oop);
    totals.bandwidth.add(ip);
    if (comm.rank() == 0) {
      std::fputs(perf::table_row(bytes, block_count * nranks, dtype, perf::op_label(op), -1, oop, ip).c_str(), stdout);
      std::fflush(stdout);
    }
  }
}

int run(Communicator& comm, const perf::ResolvedOptions& opts) {
  const bool printer = comm.rank() == 0;
  const auto ranks = perf::gather_rank_info(comm);
  if (printer) {
    std::fputs(perf::header_line(kToolName, comm.size(), opts, comm.transport_name()).c_str(), stdout);
    std::fputs(perf::rank_lines(ranks, comm.transport_name()).c_str(), stdout);
    std::fputs(perf::table_header().c_str(), stdout);
    std::fflush(stdout);
  }
  Totals totals;
  for (const DataType dtype : opts.dtypes)
    for (const ReduceOp op : opts.ops) run_sweep(comm, opts, dtype, op, totals);
  if (printer) {
    std::fputs(perf::table_footer(totals.wrong, totals.bandwidth.average()).c_str(), stdout);
    std::fflush(stdout);
  }
  return totals.wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ReduceScatter bandwidth and correctness, nccl-tests style (reduce_scatter_perf options)", kToolName};
  perf::PerfOptions options;
  perf::add_common_options(app, options, /*with_op=*/true, /*with_root=*/false);
  perf::ResolvedOptions resolved;
  const bool printer_hint = perf::launcher_rank_hint() == 0;
  try {
    app.parse(argc, argv);
    resolved = perf::resolve(app, options);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments: let one of them explain.
    if (printer_hint) return app.exit(e);
    return e.get_exit_code();
  } catch (const antdt::Error& e) {
    if (printer_hint) std::fprintf(stderr, "%s: %s\n", kToolName, e.what());
    return 2;
  }

  std::optional<Communicator> comm;
  try {
    comm.emplace(Communicator::from_env());
    return run(*comm, resolved);
  } catch (const std::exception& e) {
    const int rank = comm ? comm->rank() : perf::launcher_rank_hint();
    std::fprintf(stderr, "%s: rank %d: error: %s\n", kToolName, rank, e.what());
    // Peers blocked in a collective with us fail fast instead of timing out.
    if (comm) comm->abort(std::string(kToolName) + ": rank " + std::to_string(rank) + " failed: " + e.what());
    return 1;
  }
}
