// antdt_cpu_kernel_bench: GB/s of the CPU reduction kernels (core/dtype.hpp)
// on one core (or on -t threads at once, each with its own buffers, their
// GB/s summed: with -t 2 -b 64M -d f32, the reduce column is B, the memory
// traffic of two threads' a[i] += b[i], whose quarter issue 15 takes as the
// floor of a 2-rank 64 MiB AllReduce, docs/benchmarks.md), beside a memcpy of
// the same bytes measured in the same run:
//   - reduce:   a op= b (reduce_inplace; the host AllReduce, ReduceScatter and
//               Reduce kernel), op sum;
//   - weighted: acc += w * b (accumulate_weighted; push-pull's servers).
// Traffic counted: 3 x bytes for the kernels (read a, read b, write a; the
// weighted accumulator is f32 for f16/bf16, so it moves more), 2 x bytes for
// the copy. The ratio against the copy says whether a kernel runs at memory
// speed. A build where the kernels do not vectorize (as before 2026-11-30,
// docs/collectives.md#cpu-kernels) shows up as a low ratio, most of all at
// cache-resident sizes.
//
// Links the static library: the kernels are internal (the shared library
// exports only the public API).
#include "perf_common.hpp"

#include "core/dtype.hpp"

#include <antdt/comm.hpp>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

using antdt::DataType;
using Clock = std::chrono::steady_clock;

constexpr const char* kTool = "antdt_cpu_kernel_bench";
// Each timed sample touches at least this many bytes, so small (cache-resident)
// sizes are timed over many repetitions instead of one call of a few µs.
constexpr std::size_t kSampleBytes = std::size_t{64} << 20;

// Small integers in every element: repeated a += b stays finite in every
// float type and wraps harmlessly in the integer ones.
void fill(DataType t, std::vector<std::byte>& buffer, std::int64_t value) {
  const std::size_t size = antdt::dtype_size(t);
  for (std::size_t i = 0; i + size <= buffer.size(); i += size) antdt::perf::store_integer(t, value, buffer.data() + i);
}

// Median seconds of one `op` over `iters` samples of `reps` calls each. With
// threads running it at once, they meet at `sync` first.
template <class Op>
double seconds_per_call(int warmup, int iters, std::size_t reps, std::barrier<>* sync, Op&& op) {
  for (int i = 0; i < warmup; ++i) op();
  if (sync) sync->arrive_and_wait();
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    for (std::size_t r = 0; r < reps; ++r) op();
    samples.push_back(std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(reps));
  }
  return antdt::perf::median(std::move(samples));
}

struct Row {
  double copy_gbs = 0, reduce_gbs = 0, weighted_gbs = 0;
};

Row measure(DataType t, std::size_t bytes, int warmup, int iters, std::barrier<>* sync) {
  const std::size_t esize = antdt::dtype_size(t);
  const std::size_t count = bytes / esize;
  const std::size_t used = count * esize;
  const std::size_t acc_bytes = count * antdt::dtype_size(antdt::weighted_sum_type(t));
  std::vector<std::byte> a(used), b(used), c(used), acc(acc_bytes);
  fill(t, a, 1);
  fill(t, b, 2);
  fill(antdt::weighted_sum_type(t), acc, 0);
  const std::size_t reps = std::max<std::size_t>(1, kSampleBytes / std::max<std::size_t>(used, 1));

  const double copy_s = seconds_per_call(warmup, iters, reps, sync, [&] { std::memcpy(c.data(), b.data(), used); });
  const double reduce_s = seconds_per_call(warmup, iters, reps, sync, [&] {
    antdt::reduce_inplace(t, antdt::ReduceOp::sum, std::span(a.data(), used), std::span<const std::byte>(b.data(), used));
  });
  const double weighted_s = seconds_per_call(
      warmup, iters, reps, sync, [&] { antdt::accumulate_weighted(t, acc.data(), b.data(), count, 1.0, false); });
  const double n = static_cast<double>(used);
  return Row{2 * n / copy_s / 1e9, 3 * n / reduce_s / 1e9,
             (2 * static_cast<double>(acc_bytes) + n) / weighted_s / 1e9};
}

// measure() on `threads` threads at once, each with its own buffers; GB/s summed.
Row measure_on_threads(DataType t, std::size_t bytes, int warmup, int iters, int threads) {
  if (threads == 1) return measure(t, bytes, warmup, iters, nullptr);
  std::barrier<> sync(threads);
  std::vector<Row> rows(static_cast<std::size_t>(threads));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
  {
    std::vector<std::jthread> workers;
    for (int i = 0; i < threads; ++i)
      workers.emplace_back([&, i] {
        try {
          rows[static_cast<std::size_t>(i)] = measure(t, bytes, warmup, iters, &sync);
        } catch (...) {
          errors[static_cast<std::size_t>(i)] = std::current_exception();
          sync.arrive_and_drop();
        }
      });
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  Row sum;
  for (const Row& r : rows) {
    sum.copy_gbs += r.copy_gbs;
    sum.reduce_gbs += r.reduce_gbs;
    sum.weighted_gbs += r.weighted_gbs;
  }
  return sum;
}

int run(int argc, char** argv) {
  CLI::App app{"GB/s of the CPU reduction kernels on one core, beside memcpy"};
  std::string sizes_text = "256K,64M";
  std::string dtypes_text = "f32,f64,f16,bf16,i32";
  int warmup = 2;
  int iters = 9;
  int threads = 1;
  app.add_option("-b,--bytes", sizes_text, "comma-separated bytes per buffer (K/M/G suffixes)")->capture_default_str();
  app.add_option("-d,--dtypes", dtypes_text, "comma-separated data types")->capture_default_str();
  app.add_option("-w,--warmup", warmup, "untimed calls")->check(CLI::Range(0, 1000))->capture_default_str();
  app.add_option("-n,--iters", iters, "timed samples (the median is shown)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("-t,--threads", threads, "threads at once, each with its own buffers (GB/s summed)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::vector<std::size_t> sizes;
  for (std::size_t start = 0; start <= sizes_text.size();) {
    const std::size_t comma = std::min(sizes_text.find(',', start), sizes_text.size());
    sizes.push_back(antdt::perf::parse_size(std::string_view(sizes_text).substr(start, comma - start)));
    start = comma + 1;
  }
  const std::vector<DataType> dtypes = antdt::perf::parse_dtype_list(dtypes_text);

  std::printf("# %s: %d thread(s), GB/s summed; median of %d samples, each at least %zu MiB of calls\n", kTool,
              threads, iters, kSampleBytes >> 20);
  std::printf("# GB/s: 3 x bytes for reduce (a += b) and weighted (acc += w*b; acc is f32 for f16/bf16), "
              "2 x bytes for memcpy\n");
  std::printf("# %6s %12s %10s %10s %7s %10s %7s\n", "dtype", "bytes", "memcpy", "reduce", "/copy", "weighted",
              "/copy");
  for (DataType t : dtypes) {
    for (std::size_t bytes : sizes) {
      const Row row = measure_on_threads(t, bytes, warmup, iters, threads);
      std::printf("  %6s %12zu %10.2f %10.2f %7.2f %10.2f %7.2f\n", std::string(antdt::perf::dtype_label(t)).c_str(),
                  bytes, row.copy_gbs, row.reduce_gbs, row.reduce_gbs / row.copy_gbs, row.weighted_gbs,
                  row.weighted_gbs / row.copy_gbs);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return 1;
  }
}
