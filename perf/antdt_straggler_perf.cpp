// antdt_straggler_perf: a synthetic data-parallel training loop with injected
// stragglers (ANTDT_INJECT), running the late-rank policies side by side in one
// launch and printing throughput, straggler efficiency (DESIGN §14) and each
// rank's class as the Monitor saw it. docs/benchmarks.md describes the method.
//
// Launch one process per rank (mpirun, or ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT);
// rank 0 prints. Exits non-zero on any error, and when the ranks did not all
// apply the same sequence of results (checked with a running hash per rank).
#include "perf_common.hpp"

#include <antdt/comm.hpp>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/inject.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using antdt::Communicator;
using antdt::DataType;
using antdt::Fate;
using antdt::LatePolicy;
using antdt::ReduceOp;
using antdt::Injector;
namespace perf = antdt::perf;
using Clock = std::chrono::steady_clock;

constexpr const char* kToolName = "antdt_straggler_perf";

struct Options {
  double compute_ms = 20;
  int steps = 100;
  std::string policies = "wait,drop,defer";
  std::string bytes = "1M";
  int batch = 32;
  unsigned staleness = 1;
  int standalone_steps = 10;
};

struct Resolved {
  double compute_seconds = 0.02;
  std::uint64_t steps = 100;
  std::vector<LatePolicy> policies;
  std::size_t count = 0;  // f32 elements of the gradient
  int batch = 32;
  std::uint32_t staleness = 1;
  std::uint64_t standalone_steps = 10;
};

std::string_view policy_name(LatePolicy p) noexcept {
  switch (p) {
    case LatePolicy::wait: return "wait";
    case LatePolicy::drop: return "drop";
    case LatePolicy::defer: return "defer";
  }
  return "?";
}

std::vector<LatePolicy> parse_policies(std::string_view text) {
  std::vector<LatePolicy> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view name = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (name == "wait") out.push_back(LatePolicy::wait);
    else if (name == "drop") out.push_back(LatePolicy::drop);
    else if (name == "defer") out.push_back(LatePolicy::defer);
    else antdt::raise<antdt::InvalidArgument>("--policies: unknown policy '", name, "' (accepted: wait, drop, defer)");
  }
  if (out.empty()) antdt::raise<antdt::InvalidArgument>("--policies: name at least one of wait, drop, defer");
  return out;
}

Resolved resolve(const Options& o) {
  Resolved r;
  ANTDT_CHECK_ARG(o.compute_ms >= 0 && o.compute_ms <= 60000, "--compute-ms must be in [0, 60000], got ",
                  o.compute_ms);
  ANTDT_CHECK_ARG(o.steps >= 1, "--steps must be at least 1, got ", o.steps);
  ANTDT_CHECK_ARG(o.batch >= 1, "--batch must be at least 1, got ", o.batch);
  ANTDT_CHECK_ARG(o.standalone_steps >= 1, "--standalone-steps must be at least 1, got ", o.standalone_steps);
  r.compute_seconds = o.compute_ms / 1e3;
  r.steps = static_cast<std::uint64_t>(o.steps);
  r.policies = parse_policies(o.policies);
  const std::size_t bytes = perf::parse_size(o.bytes);
  r.count = std::max<std::size_t>(bytes / sizeof(float), 1);
  r.batch = o.batch;
  r.staleness = o.staleness;
  r.standalone_steps = static_cast<std::uint64_t>(o.standalone_steps);
  return r;
}

// A chained hash of every result applied, 8 bytes at a time (cheap next to the
// step): equal on two ranks only if they applied the same results, bit for
// bit, in the same order (barring a 2^-64 collision).
std::uint64_t chain_hash(std::uint64_t h, std::span<const std::byte> bytes) noexcept {
  constexpr std::uint64_t kPrime = 0x100000001b3ULL;
  std::size_t i = 0;
  for (; i + sizeof(std::uint64_t) <= bytes.size(); i += sizeof(std::uint64_t)) {
    std::uint64_t word;
    std::memcpy(&word, bytes.data() + i, sizeof word);
    h = (h ^ word) * kPrime;
    h ^= h >> 29;
  }
  for (; i < bytes.size(); ++i) h = (h ^ static_cast<std::uint64_t>(bytes[i])) * kPrime;
  return h;
}

std::uint64_t reduce_u64(Communicator& comm, std::uint64_t value, ReduceOp op) {
  comm.allreduce(&value, &value, 1, DataType::u64, op);
  return value;
}

double reduce_f64(Communicator& comm, double value, ReduceOp op) {
  comm.allreduce(&value, &value, 1, DataType::f64, op);
  return value;
}

// Samples/s of this rank alone for `steps` steps of the loop: the planned
// compute of those steps (compute_factor is a pure function of the step) plus
// the per-step overhead of the sleep, measured over a few standalone steps.
struct Standalone {
  double overhead_seconds = 0;  // measured sleep overshoot per step
  double samples_per_second(const Injector& inj, const Resolved& opts, std::uint64_t steps) const {
    double seconds = 0;
    for (std::uint64_t s = 1; s <= steps; ++s) seconds += opts.compute_seconds * inj.compute_factor(s) + overhead_seconds;
    return seconds > 0 ? static_cast<double>(opts.batch) * static_cast<double>(steps) / seconds : 0;
  }
};

Standalone measure_standalone(const Injector& inj, const Resolved& opts) {
  double planned = 0;
  const auto start = Clock::now();
  for (std::uint64_t s = 1; s <= opts.standalone_steps; ++s) planned += inj.simulate_compute(opts.compute_seconds, s);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return Standalone{std::max(0.0, (elapsed - planned) / static_cast<double>(opts.standalone_steps))};
}

// BSP with these compute times: every step lasts as long as its slowest rank's.
double bsp_efficiency(const std::vector<Injector>& all, const Resolved& opts) {
  double bsp_seconds = 0;
  std::vector<double> alone(all.size(), 0.0);
  for (std::uint64_t s = 1; s <= opts.steps; ++s) {
    double slowest = 0;
    for (std::size_t r = 0; r < all.size(); ++r) {
      const double c = opts.compute_seconds * all[r].compute_factor(s);
      alone[r] += c;
      slowest = std::max(slowest, c);
    }
    bsp_seconds += slowest;
  }
  if (bsp_seconds <= 0) return 1;
  double standalone_rate = 0;
  for (const double seconds : alone) standalone_rate += 1 / seconds;
  return static_cast<double>(all.size()) / bsp_seconds / standalone_rate;
}

// A gradient whose values depend on rank and position, filled once; each step
// changes a few elements (cheap: the compute phase is the sleep, as in the
// standalone measurement).
void fill_gradient(std::vector<float>& g, int rank) {
  for (std::size_t i = 0; i < g.size(); ++i) {
    g[i] = static_cast<float>((static_cast<std::uint64_t>(rank) * 31 + i) % 97) * 0.125f;
  }
}

void touch_gradient(std::vector<float>& g, int rank, std::uint64_t step) {
  const float v = static_cast<float>((static_cast<std::uint64_t>(rank) * 7 + step) % 1024) * 0.25f;
  for (std::size_t i = static_cast<std::size_t>(step % 16); i < g.size(); i += g.size() / 8 + 1) g[i] = v;
}

// What one rank did in a phase.
struct RankCounts {
  std::uint64_t computed = 0;  // steps computed (each one contribution)
  std::uint64_t included = 0;  // contributions in their own step's result
  std::uint64_t deferred = 0;  // contributions in a later step's result
  std::uint64_t dropped = 0;   // contributions reported dropped
  std::uint64_t fetched = 0;   // weight-0 calls that fetched a missed result
  double compute_s = 0;        // time computing
  double call_s = 0;           // time in partial_allreduce calls with a contribution
  static constexpr std::size_t kFields = 7;
};

struct PhaseResult {
  LatePolicy policy = LatePolicy::wait;
  std::uint64_t results = 0;    // results every rank applied
  double wall_seconds = 0;      // max over ranks
  std::uint64_t samples = 0;    // included or deferred into a result, all ranks
  std::uint64_t dropped = 0;    // contributions reported dropped, all ranks
  bool consistent = false;
  std::vector<antdt::StragglerClass> classes;
  std::vector<RankCounts> ranks;
};

// Every rank's counts, on every rank.
std::vector<RankCounts> gather_counts(Communicator& comm, const RankCounts& mine) {
  const std::size_t n = static_cast<std::size_t>(comm.size());
  // Counts travel as doubles (exact below 2^53).
  std::vector<double> table(n * RankCounts::kFields, 0.0);
  double* row = &table[static_cast<std::size_t>(comm.rank()) * RankCounts::kFields];
  row[0] = static_cast<double>(mine.computed);
  row[1] = static_cast<double>(mine.included);
  row[2] = static_cast<double>(mine.deferred);
  row[3] = static_cast<double>(mine.dropped);
  row[4] = static_cast<double>(mine.fetched);
  row[5] = mine.compute_s;
  row[6] = mine.call_s;
  comm.allreduce(std::span(table), ReduceOp::sum);
  std::vector<RankCounts> out(n);
  const auto count = [](double v) { return static_cast<std::uint64_t>(v); };
  for (std::size_t r = 0; r < n; ++r) {
    const double* v = &table[r * RankCounts::kFields];
    out[r] = RankCounts{count(v[0]), count(v[1]), count(v[2]), count(v[3]), count(v[4]), v[5], v[6]};
  }
  return out;
}

class Trainer {
 public:
  Trainer(Communicator& comm, const Injector& inj, const Resolved& opts)
      : comm_(comm), inj_(inj), opts_(opts), gradient_(opts.count), result_(opts.count) {
    fill_gradient(gradient_, comm_.rank());
  }

  PhaseResult run_phase(LatePolicy policy) {
    hash_ = 0xcbf29ce484222325ULL;
    applied_ = 0;
    run_over_ = false;
    RankCounts counts;
    antdt::PartialOptions weighted;
    weighted.policy = policy;
    weighted.weight = opts_.batch;
    weighted.samples = static_cast<std::uint64_t>(opts_.batch);
    weighted.staleness = opts_.staleness;
    antdt::PartialOptions catch_up = weighted;
    catch_up.weight = 0;
    catch_up.samples = 0;

    comm_.barrier();
    const auto start = Clock::now();
    std::uint64_t behind = 0;
    // Every rank applies the same results, so all stop after the same one.
    while (applied_ < opts_.steps && !run_over_) {
      antdt::PartialResult r;
      if (behind > 0) {
        // Results this rank missed: fetched without computing those steps.
        r = call(catch_up);
        ++counts.fetched;
      } else {
        ++counts.computed;
        const auto compute_start = Clock::now();
        inj_.simulate_compute(opts_.compute_seconds, counts.computed);
        touch_gradient(gradient_, comm_.rank(), counts.computed);
        counts.compute_s += std::chrono::duration<double>(Clock::now() - compute_start).count();
        r = call(weighted, &counts.call_s);
        if (r.fate == Fate::included) ++counts.included;
        if (r.fate == Fate::deferred) ++counts.deferred;
        if (r.fate == Fate::dropped) ++counts.dropped;
      }
      behind = r.steps_behind;
    }
    // Every rank has stopped computing; fetch what the others closed since.
    behind = comm_.partial_finish().steps_behind;
    for (; behind > 0; ++counts.fetched) behind = call(catch_up).steps_behind;
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();

    PhaseResult out;
    out.policy = policy;
    out.classes.reserve(static_cast<std::size_t>(comm_.size()));
    for (int r = 0; r < comm_.size(); ++r) out.classes.push_back(comm_.straggler_class(r));
    // Plain collectives from here on: the phases are separated by them.
    const std::uint64_t min_hash = reduce_u64(comm_, hash_, ReduceOp::min);
    const std::uint64_t max_hash = reduce_u64(comm_, hash_, ReduceOp::max);
    const std::uint64_t min_results = reduce_u64(comm_, applied_, ReduceOp::min);
    const std::uint64_t max_results = reduce_u64(comm_, applied_, ReduceOp::max);
    out.consistent = min_hash == max_hash && min_results == max_results;
    out.results = max_results;
    out.wall_seconds = reduce_f64(comm_, wall, ReduceOp::max);
    out.ranks = gather_counts(comm_, counts);
    for (const RankCounts& c : out.ranks) {
      out.samples += (c.included + c.deferred) * static_cast<std::uint64_t>(opts_.batch);
      out.dropped += c.dropped;
    }
    return out;
  }

 private:
  // One partial step; the result it returns is applied (hashed) in order.
  // `call_seconds`, when given, accumulates the time spent in the library.
  antdt::PartialResult call(const antdt::PartialOptions& opts, double* call_seconds = nullptr) {
    const auto start = Clock::now();
    const antdt::PartialResult r =
        comm_.partial_allreduce(gradient_.data(), result_.data(), opts_.count, DataType::f32, ReduceOp::avg, opts);
    if (call_seconds != nullptr) *call_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    // Step 0: the others ended the run while this call was late and no result was left for it.
    if (r.step == 0) {
      run_over_ = true;
      return r;
    }
    // Step numbers run on across phases: each result must follow the last one applied.
    if (last_step_ != 0 && r.step != last_step_ + 1) {
      antdt::raise<antdt::InternalError>("rank ", comm_.rank(), " got the result of step ", r.step,
                                         " after applying step ", last_step_, " (results must come in order)");
    }
    last_step_ = r.step;
    ++applied_;
    hash_ = chain_hash(hash_, std::as_bytes(std::span(&r.step, 1)));
    hash_ = chain_hash(hash_, std::as_bytes(std::span<const float>(result_)));
    return r;
  }

  Communicator& comm_;
  const Injector& inj_;
  const Resolved& opts_;
  std::vector<float> gradient_, result_;
  std::uint64_t hash_ = 0;
  std::uint64_t applied_ = 0;    // results applied in this phase
  std::uint64_t last_step_ = 0;  // the step of the last result applied, over all phases
  bool run_over_ = false;        // a call found the phase ended by the other ranks
};

// "2:deterministic 3:leader", or "all healthy".
std::string class_summary(const std::vector<antdt::StragglerClass>& classes) {
  std::string out;
  for (std::size_t r = 0; r < classes.size(); ++r) {
    if (classes[r] == antdt::StragglerClass::healthy) continue;
    if (!out.empty()) out += ' ';
    out += std::to_string(r) + ":" + std::string(antdt::straggler_class_name(classes[r]));
  }
  return out.empty() ? "all healthy" : out;
}

int run(Communicator& comm, const Resolved& opts) {
  const bool printer = comm.rank() == 0;
  const antdt::Config& cfg = antdt::config();
  const Injector inj = Injector::from_config(cfg, comm.rank(), comm.size());

  // Standalone throughput: every rank at once, no communication.
  comm.barrier();
  const Standalone standalone = measure_standalone(inj, opts);
  const double my_standalone = standalone.samples_per_second(inj, opts, opts.steps);
  std::vector<double> standalone_rates(static_cast<std::size_t>(comm.size()), 0.0);
  standalone_rates[static_cast<std::size_t>(comm.rank())] = my_standalone;
  comm.allreduce(std::span(standalone_rates), ReduceOp::sum);
  double standalone_total = 0;
  for (const double rate : standalone_rates) standalone_total += rate;

  std::vector<Injector> all_ranks;
  for (int r = 0; r < comm.size(); ++r) all_ranks.push_back(Injector::from_config(cfg, r, comm.size()));
  const double bsp_theory = bsp_efficiency(all_ranks, opts);

  if (printer) {
    std::printf("# %s: %d ranks over %s, %" PRIu64 " results per policy, compute %.1f ms x ANTDT_INJECT per step, "
                "%zu-byte f32 avg gradient, batch %d, staleness %u, ANTDT_RESULT_CACHE %zu\n",
                kToolName, comm.size(), std::string(comm.transport_name()).c_str(), opts.steps,
                opts.compute_seconds * 1e3, opts.count * sizeof(float), opts.batch, opts.staleness, cfg.result_cache);
    std::printf("# ANTDT_INJECT: %s\n", cfg.inject ? cfg.inject->text.c_str() : "(unset: nobody is slowed)");
    std::printf("# standalone samples/s per rank:");
    for (const double rate : standalone_rates) std::printf(" %.1f", rate);
    std::printf(" (sum %.1f)\n", standalone_total);
    std::printf("# BSP theoretical efficiency for this scenario: %.3f\n#\n", bsp_theory);
    std::printf("# %7s %9s %10s %10s %8s %8s  %s\n", "policy", "steps/s", "samples/s", "efficiency", "vs wait",
                "dropped", "classes (Monitor, end of phase)");
    std::fflush(stdout);
  }

  Trainer trainer(comm, inj, opts);
  std::optional<double> wait_rate;
  bool all_consistent = true;
  std::vector<PhaseResult> phases;
  for (const LatePolicy policy : opts.policies) {
    PhaseResult p = trainer.run_phase(policy);
    const double steps_per_s = static_cast<double>(p.results) / p.wall_seconds;
    const double samples_per_s = static_cast<double>(p.samples) / p.wall_seconds;
    if (policy == LatePolicy::wait && !wait_rate) wait_rate = samples_per_s;
    all_consistent = all_consistent && p.consistent;
    if (printer) {
      char speedup[32] = "n/a";
      if (wait_rate && *wait_rate > 0) std::snprintf(speedup, sizeof speedup, "%.2f", samples_per_s / *wait_rate);
      std::printf("  %7s %9.2f %10.1f %10.3f %8s %8" PRIu64 "  %s\n", std::string(policy_name(policy)).c_str(),
                  steps_per_s, samples_per_s, samples_per_s / standalone_total, speedup, p.dropped,
                  class_summary(p.classes).c_str());
      std::fflush(stdout);
    }
    phases.push_back(std::move(p));
  }
  if (printer) {
    std::printf("#\n# per rank: contributions computed = included + deferred + dropped; fetched = missed results "
                "fetched with weight 0;\n#   compute ms / call ms: mean per computed step (call: partial_allreduce with a contribution)\n");
    std::printf("# %7s %4s %-13s %8s %8s %8s %8s %8s %10s %10s\n", "policy", "rank", "class", "computed",
                "included", "deferred", "dropped", "fetched", "compute ms", "call ms");
    for (const PhaseResult& p : phases) {
      for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        const RankCounts& c = p.ranks[r];
        const double per_step = c.computed > 0 ? 1e3 / static_cast<double>(c.computed) : 0;
        std::printf("# %7s %4zu %-13s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %10.2f %10.2f\n",
                    std::string(policy_name(p.policy)).c_str(), r,
                    std::string(antdt::straggler_class_name(p.classes[r])).c_str(), c.computed, c.included,
                    c.deferred, c.dropped, c.fetched, c.compute_s * per_step, c.call_s * per_step);
      }
      std::printf("# %7s %" PRIu64 " results in %.2f s\n", std::string(policy_name(p.policy)).c_str(), p.results,
                  p.wall_seconds);
    }
    std::printf("# consistent: %s\n", all_consistent ? "yes" : "no");
    std::fflush(stdout);
  }
  if (!all_consistent && printer) {
    std::fprintf(stderr, "%s: the ranks applied different results (hashes or result counts differ)\n", kToolName);
  }
  return all_consistent ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Synthetic data-parallel training with injected stragglers (ANTDT_INJECT): the partial-AllReduce "
               "late policies side by side",
               kToolName};
  Options options;
  app.add_option("-t,--compute-ms", options.compute_ms, "base compute time per step in ms (x ANTDT_INJECT's factor)")
      ->capture_default_str();
  app.add_option("-s,--steps", options.steps, "results each policy's phase runs to")->capture_default_str();
  app.add_option("-p,--policies", options.policies, "late policies to run, in order: wait, drop, defer (comma list)")
      ->capture_default_str();
  app.add_option("-b,--bytes", options.bytes, "gradient size in bytes (f32; K/M/G suffixes)")->capture_default_str();
  app.add_option("--batch", options.batch, "local batch: each contribution's weight and samples")
      ->capture_default_str();
  app.add_option("--staleness", options.staleness, "defer: how many steps late a contribution may still count")
      ->capture_default_str();
  app.add_option("--standalone-steps", options.standalone_steps,
                 "steps of the no-communication loop that measure each rank's sleep overhead")
      ->capture_default_str();
  Resolved resolved;
  const bool printer_hint = perf::launcher_rank_hint() == 0;
  try {
    app.parse(argc, argv);
    resolved = resolve(options);
  } catch (const CLI::ParseError& e) {
    if (printer_hint) return app.exit(e);
    return e.get_exit_code();
  } catch (const antdt::Error& e) {
    if (printer_hint) std::fprintf(stderr, "%s: %s\n", kToolName, e.what());
    return 2;
  }

  // A rank k times slower falls about k steps behind, a 5x spike about 5: keep
  // enough results for the scenarios here unless the user chose (before the
  // configuration is first read).
  ::setenv("ANTDT_RESULT_CACHE", "16", /*overwrite=*/0);
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
