// gloo_allreduce_perf: the Gloo AllReduce baseline for antdt_allreduce_perf.
//
// Gloo's ring_chunked (gloo::AllreduceRingChunked) or halving_doubling
// (gloo::AllreduceHalvingDoubling) algorithm over its TCP transport, with a
// FileStore rendezvous. Same options as mpi_allreduce_perf (-b -e -f -i -n -w
// -c -d -o, plus -a algorithm), same input pattern for sum ((rank + 1) *
// (i % 7 + 1), exact in float and double), same table. Rank 0 prints; the exit
// code is non-zero when any element is wrong.
//
// Gloo's algorithms reduce in place: the out-of-place column copies the input
// into the result buffer and reduces that (the copy is timed, as it is what an
// out-of-place call costs with Gloo); the in-place column is the algorithm alone.
//
// Launch one process per rank: mpirun (OMPI_COMM_WORLD_RANK/SIZE) or
// ANTDT_RANK/ANTDT_WORLD_SIZE. The rendezvous directory is ANTDT_GLOO_STORE_DIR,
// else /tmp/gloo_allreduce_perf.<job> keyed by the launcher's job id; rank 0
// removes it at the end. ANTDT_GLOO_HOSTNAME picks the address to listen on
// (default 127.0.0.1: one node); ANTDT_TIMEOUT_MS bounds every wait (30 s).
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* kToolName = "gloo_allreduce_perf";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "8", "1K", "64M", "2G" -> bytes.
std::size_t parse_size(const std::string& text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [next, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || next == text.data()) throw UsageError("bad size '" + text + "' (expected 8, 1K, 64M, 2G)");
  unsigned shift = 0;
  if (next != end) {
    if (next + 1 != end) throw UsageError("bad size '" + text + "' (expected 8, 1K, 64M, 2G)");
    switch (std::tolower(static_cast<unsigned char>(*next))) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      default: throw UsageError("bad size suffix in '" + text + "' (K, M or G)");
    }
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) throw UsageError("size '" + text + "' is too large");
  return static_cast<std::size_t>(value << shift);
}

enum class Algorithm { ring_chunked, halving_doubling };

struct Options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{64} << 20;
  std::size_t step_factor = 2;  // multiply when > 1
  std::size_t step_bytes = 0;   // otherwise add
  int iters = 20;
  int warmup_iters = 5;
  bool check = true;
  bool is_double = false;
  Algorithm algorithm = Algorithm::ring_chunked;
};

std::string_view algorithm_name(Algorithm a) {
  return a == Algorithm::ring_chunked ? "ring_chunked" : "halving_doubling";
}

// The sweep, min to max inclusive, as nccl-tests walks it.
std::vector<std::size_t> sweep_sizes(const Options& opts) {
  std::vector<std::size_t> sizes;
  for (std::size_t size = opts.min_bytes;;) {
    sizes.push_back(size);
    std::size_t next = 0;
    if (opts.step_factor > 1) {
      if (size > opts.max_bytes / opts.step_factor) break;
      next = std::max<std::size_t>(size * opts.step_factor, 1);
    } else {
      if (size > opts.max_bytes - opts.step_bytes) break;
      next = size + opts.step_bytes;
    }
    if (next > opts.max_bytes) break;
    size = next;
  }
  return sizes;
}

// The first of `names` that the launcher set, as an int.
std::optional<int> env_int(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    int parsed = 0;
    const auto [next, ec] = std::from_chars(value, value + std::strlen(value), parsed);
    if (ec != std::errc{} || *next != '\0') throw UsageError(std::string(name) + "='" + value + "' is not an integer");
    return parsed;
  }
  return std::nullopt;
}

std::string store_directory() {
  if (const char* dir = std::getenv("ANTDT_GLOO_STORE_DIR"); dir != nullptr && *dir != '\0') return dir;
  // Every rank of one launch sees the same job id, and no other launch does, so
  // a crashed run's leftovers are never read.
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID", "ANTDT_ROOT"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    std::string key(value);
    for (char& c : key)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
    return "/tmp/gloo_allreduce_perf." + key;
  }
  throw UsageError("no job id to key the rendezvous directory: set ANTDT_GLOO_STORE_DIR (a fresh directory per launch)");
}

// ---------------------------------------------------------------------------
class Job {
 public:
  Job(int rank, int size, std::chrono::milliseconds timeout, const std::string& store_dir)
      : rank_(rank), size_(size), store_dir_(store_dir) {
    std::error_code ignored;
    std::filesystem::create_directories(store_dir_, ignored);  // every rank tries; one wins
    gloo::transport::tcp::attr attr;
    const char* host = std::getenv("ANTDT_GLOO_HOSTNAME");
    attr.hostname = host != nullptr && *host != '\0' ? host : "127.0.0.1";
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout);
    gloo::rendezvous::FileStore store(store_dir_);
    context->connectFullMesh(store, device_);
    context_ = context;
    barrier();
  }
  ~Job() {
    // The store is read only while connecting: after the barrier every rank is past it.
    if (rank_ == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(store_dir_, ignored);
    }
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::shared_ptr<gloo::Context>& context() const { return context_; }

  void barrier() { gloo::BarrierAllToAll(context_).run(); }

  template <class T>
  void allreduce_small(std::vector<T>& values, const gloo::ReductionFunction<T>* fn) {
    gloo::AllreduceRing<T>(context_, {values.data()}, static_cast<int>(values.size()), fn).run();
  }

 private:
  int rank_;
  int size_;
  std::string store_dir_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
};

// ---------------------------------------------------------------------------
// Input and expected values are small integers: exact in float and double.
template <class T>
void fill_input(std::vector<T>& buffer, int rank) {
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<T>((rank + 1) * static_cast<int>(i % 7 + 1));
}

template <class T>
std::uint64_t count_wrong(const T* values, std::size_t count, int nranks, std::size_t& first) {
  const double ranks_total = static_cast<double>(nranks) * (nranks + 1) / 2.0;
  std::uint64_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (static_cast<double>(values[i]) != ranks_total * static_cast<double>(i % 7 + 1)) {
      if (wrong == 0) first = i;
      ++wrong;
    }
  }
  return wrong;
}

template <class T>
std::unique_ptr<gloo::Algorithm> make_allreduce(Job& job, Algorithm algorithm, T* data, std::size_t count) {
  const std::vector<T*> ptrs{data};
  if (algorithm == Algorithm::ring_chunked)
    return std::make_unique<gloo::AllreduceRingChunked<T>>(job.context(), ptrs, static_cast<int>(count));
  return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(job.context(), ptrs, static_cast<int>(count));
}

template <class Run>
double time_per_iteration_us(int iters, Run&& run) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) run();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
}

std::string columns(double time_us, std::size_t bytes, int nranks, bool check, std::uint64_t wrong, double& busbw) {
  const double algbw = time_us > 0 ? static_cast<double>(bytes) / 1.0e3 / time_us : 0.0;
  busbw = nranks > 0 ? algbw * 2.0 * (nranks - 1) / nranks : 0.0;
  std::array<char, 32> time_text{};
  std::array<char, 32> wrong_text{};
  const char* time_format = time_us >= 10000.0 ? "%7.0f" : time_us >= 100.0 ? "%7.1f" : "%7.2f";
  std::snprintf(time_text.data(), time_text.size(), time_format, time_us);
  if (check)
    std::snprintf(wrong_text.data(), wrong_text.size(), "%llu", static_cast<unsigned long long>(wrong));
  else
    std::snprintf(wrong_text.data(), wrong_text.size(), "N/A");
  std::array<char, 128> out{};
  std::snprintf(out.data(), out.size(), "  %7s  %6.2f  %6.2f  %5s", time_text.data(), algbw, busbw, wrong_text.data());
  return out.data();
}

void print_rank_lines(Job& job) {
  // An allgather through AllReduce(max): each rank fills only its own slot
  // (pid, then the host name).
  constexpr std::size_t kSlotWords = 8;
  std::vector<std::int64_t> slots(static_cast<std::size_t>(job.size()) * kSlotWords, 0);
  std::int64_t* mine = slots.data() + static_cast<std::size_t>(job.rank()) * kSlotWords;
  mine[0] = static_cast<std::int64_t>(::getpid());
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) std::strcpy(host.data(), "?");
  std::memcpy(mine + 1, host.data(), std::min(std::strlen(host.data()), (kSlotWords - 1) * sizeof(std::int64_t) - 1));
  job.allreduce_small(slots, gloo::ReductionFunction<std::int64_t>::max);
  if (job.rank() != 0) return;
  std::printf("# Using ranks\n");
  for (int r = 0; r < job.size(); ++r) {
    const std::int64_t* slot = slots.data() + static_cast<std::size_t>(r) * kSlotWords;
    std::array<char, kSlotWords * sizeof(std::int64_t)> name{};
    std::memcpy(name.data(), slot + 1, (kSlotWords - 1) * sizeof(std::int64_t));
    std::printf("#  Rank %2d Pid %6lld on %10s transport gloo-tcp\n", r, static_cast<long long>(slot[0]), name.data());
  }
  std::printf("#\n");
}

template <class T>
int run(Job& job, const Options& opts) {
  const std::size_t width = sizeof(T);
  const std::size_t max_count = opts.max_bytes / width;
  if (max_count > static_cast<std::size_t>(INT_MAX)) throw UsageError("maxbytes exceeds Gloo's int element count");
  const int nranks = job.size();
  std::vector<T> input(std::max<std::size_t>(max_count, 1));
  std::vector<T> result(input.size(), T{0});
  fill_input(input, job.rank());
  const char* type_name = opts.is_double ? "double" : "float";

  if (job.rank() == 0) {
    std::printf("# Collective test starting: %s (%s)\n", kToolName, std::string(algorithm_name(opts.algorithm)).c_str());
    std::printf("# nRanks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d "
                "transport: gloo-tcp\n#\n",
                nranks, opts.min_bytes, opts.max_bytes, opts.step_factor > 1 ? opts.step_factor : opts.step_bytes,
                opts.step_factor > 1 ? "factor" : "bytes", opts.warmup_iters, opts.iters, opts.check ? 1 : 0);
  }
  print_rank_lines(job);
  if (job.rank() == 0) {
    std::printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "",
                "", "", "", "");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type",
                "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }

  std::uint64_t wrong_total = 0;
  double busbw_total = 0;
  int rows = 0;
  for (const std::size_t size : sweep_sizes(opts)) {
    const std::size_t count = size / width;
    const std::size_t bytes = count * width;
    // Built once per size, outside the timed loop, as a Gloo user would keep it.
    const auto algorithm = make_allreduce<T>(job, opts.algorithm, result.data(), count);
    std::vector<double> times(2, 0.0);
    std::vector<std::uint64_t> wrong(2, 0);
    std::size_t first = 0;

    // Out of place: copy the input in, reduce in place.
    auto out_of_place = [&] {
      std::copy_n(input.begin(), count, result.begin());
      algorithm->run();
    };
    for (int i = 0; i < opts.warmup_iters; ++i) out_of_place();
    job.barrier();
    times[0] = time_per_iteration_us(opts.iters, out_of_place);
    if (opts.check) {
      out_of_place();
      wrong[0] = count_wrong(result.data(), count, nranks, first);
      if (wrong[0] > 0)
        std::fprintf(stderr, "%s: rank %d: %zu bytes out-of-place: %llu wrong elements, first at %zu\n", kToolName,
                     job.rank(), bytes, static_cast<unsigned long long>(wrong[0]), first);
    }
    // In place, on zeros so that repeated sums stay bounded; checked once on the input.
    std::fill_n(result.begin(), count, T{0});
    for (int i = 0; i < opts.warmup_iters; ++i) algorithm->run();
    job.barrier();
    times[1] = time_per_iteration_us(opts.iters, [&] { algorithm->run(); });
    if (opts.check) {
      std::copy_n(input.begin(), count, result.begin());
      algorithm->run();
      wrong[1] = count_wrong(result.data(), count, nranks, first);
      if (wrong[1] > 0)
        std::fprintf(stderr, "%s: rank %d: %zu bytes in-place: %llu wrong elements, first at %zu\n", kToolName,
                     job.rank(), bytes, static_cast<unsigned long long>(wrong[1]), first);
    }
    // The slowest rank's time is the collective's time; wrong counts add up.
    job.allreduce_small(times, gloo::ReductionFunction<double>::max);
    job.allreduce_small(wrong, gloo::ReductionFunction<std::uint64_t>::sum);
    double busbw[2] = {0, 0};
    const std::string oop = columns(times[0], bytes, nranks, opts.check, wrong[0], busbw[0]);
    const std::string ip = columns(times[1], bytes, nranks, opts.check, wrong[1], busbw[1]);
    wrong_total += wrong[0] + wrong[1];
    busbw_total += busbw[0] + busbw[1];
    rows += 2;
    if (job.rank() == 0) {
      std::printf("%12zu  %12zu  %8s  %6s  %6d%s%s\n", bytes, count, type_name, "sum", -1, oop.c_str(), ip.c_str());
      std::fflush(stdout);
    }
  }
  if (job.rank() == 0) {
    std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong_total),
                wrong_total == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g \n#\n", rows > 0 ? busbw_total / rows : 0.0);
    std::fflush(stdout);
  }
  job.barrier();
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Gloo AllReduce baseline, nccl-tests style (the options of mpi_allreduce_perf, plus -a)", kToolName};
  std::string min_bytes = "8", max_bytes = "64M", step_bytes, datatype = "float", op = "sum", algorithm = "ring_chunked";
  int step_factor = 2, check = 1;
  Options opts;
  app.add_option("-b,--minbytes", min_bytes, "smallest size in bytes, K/M/G suffixes")->capture_default_str();
  app.add_option("-e,--maxbytes", max_bytes, "largest size in bytes")->capture_default_str();
  app.add_option("-f,--stepfactor", step_factor, "multiply the size between rows")->capture_default_str();
  app.add_option("-i,--stepbytes", step_bytes, "add bytes between rows (when -f is not given or is 1)");
  app.add_option("-n,--iters", opts.iters, "timed iterations per size")->capture_default_str();
  app.add_option("-w,--warmup_iters", opts.warmup_iters, "untimed iterations per size")->capture_default_str();
  app.add_option("-c,--check", check, "check results (0/1)")->capture_default_str();
  app.add_option("-d,--datatype", datatype, "float or double")->capture_default_str();
  app.add_option("-o,--op", op, "sum (the only op of this baseline)")->capture_default_str();
  app.add_option("-a,--algorithm", algorithm, "ring_chunked or halving_doubling")->capture_default_str();

  int rank = 0;
  try {
    rank = env_int({"OMPI_COMM_WORLD_RANK", "ANTDT_RANK", "PMIX_RANK"}).value_or(0);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      // Every rank parses the same arguments: let one of them explain.
      return rank == 0 ? app.exit(e) : e.get_exit_code();
    }
    opts.min_bytes = parse_size(min_bytes);
    opts.max_bytes = parse_size(max_bytes);
    if (step_factor < 1) throw UsageError("-f stepfactor must be >= 1");
    const bool factor_given = app.count("--stepfactor") > 0;
    if (!step_bytes.empty()) opts.step_bytes = parse_size(step_bytes);
    // As in nccl-tests, a factor > 1 wins; -i alone (or with -f 1) steps by bytes.
    if (factor_given) {
      opts.step_factor = static_cast<std::size_t>(step_factor);
      if (step_factor <= 1 && step_bytes.empty()) opts.step_bytes = std::size_t{1} << 20;
    } else {
      opts.step_factor = step_bytes.empty() ? 2 : 1;
    }
    if (opts.step_factor <= 1 && opts.step_bytes == 0) throw UsageError("the size sweep never advances: -f > 1 or -i > 0");
    if (opts.min_bytes > opts.max_bytes) throw UsageError("minbytes is larger than maxbytes");
    if (opts.iters < 1) throw UsageError("-n iters must be >= 1");
    if (opts.warmup_iters < 0) throw UsageError("-w warmup iters must be >= 0");
    if (check != 0 && check != 1) throw UsageError("-c check must be 0 or 1");
    opts.check = check == 1;
    if (datatype == "float" || datatype == "f32") opts.is_double = false;
    else if (datatype == "double" || datatype == "f64") opts.is_double = true;
    else throw UsageError("-d: this baseline supports float and double, not '" + datatype + "'");
    if (op != "sum") throw UsageError("-o: this baseline supports sum only, not '" + op + "'");
    if (algorithm == "ring_chunked") opts.algorithm = Algorithm::ring_chunked;
    else if (algorithm == "halving_doubling") opts.algorithm = Algorithm::halving_doubling;
    else throw UsageError("-a: ring_chunked or halving_doubling, not '" + algorithm + "'");
  } catch (const UsageError& e) {
    if (rank == 0) std::fprintf(stderr, "%s: %s\n", kToolName, e.what());
    return 2;
  }

  try {
    const int size = env_int({"OMPI_COMM_WORLD_SIZE", "ANTDT_WORLD_SIZE"}).value_or(1);
    if (size < 1 || rank < 0 || rank >= size)
      throw UsageError("rank " + std::to_string(rank) + " is not in a job of " + std::to_string(size) + " ranks");
    const auto timeout = std::chrono::milliseconds(env_int({"ANTDT_TIMEOUT_MS"}).value_or(30000));
    Job job(rank, size, timeout, store_directory());
    return opts.is_double ? run<double>(job, opts) : run<float>(job, opts);
  } catch (const std::exception& e) {
    // Peers waiting on this rank fail by Gloo's timeout.
    std::fprintf(stderr, "%s: rank %d: error: %s\n", kToolName, rank, e.what());
    return 1;
  }
}
