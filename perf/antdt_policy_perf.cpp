// antdt_policy_perf: a synthetic data-parallel trainer on the real engine and
// the Agent API, to measure a scheduling policy (ANTDT_POLICY) end to end:
// the coordinator's Controller plans every step, the DDS hands out the data,
// the Monitor sees the ranks' reports, and antdt-nd's restarts go through the
// launcher. Run it under tools/antdt-run (restarts need it):
//
//   ANTDT_POLICY=antdt-dd ANTDT_INJECT="rank=2:slow=3" antdt-run -n 4 --restarts 4 -- antdt_policy_perf
//
// Each step: the plan, the plan's local batch from the DDS, "compute" = a
// sleep of batch x per-sample time x this rank's ANTDT_INJECT factor for the
// step (split into the plan's micro-batches), a gradient AllReduce weighted
// by the batch (a plain allreduce for `wait` steps, partial_allreduce with the
// plan's late policy otherwise), the batch settled by its fate, the step
// reported. The run ends when the DDS has served the dataset (steps x B
// samples) once. Rank 0 prints one row (docs/scheduler.md, "Real-engine
// benchmark") and a per-rank table; efficiency is as in antdt_straggler_perf
// (DESIGN §14): samples/s over the sum of every rank's standalone samples/s
// under its injected schedule (that of its first incarnation: a restart's
// cure is not credited to the capacity).
#include <antdt/agent.hpp>
#include <antdt/comm.hpp>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/inject.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

using antdt::Communicator;
using antdt::DataType;
using antdt::Fate;
using antdt::LatePolicy;
using antdt::ReduceOp;
using antdt::Injector;
using Clock = std::chrono::steady_clock;

constexpr const char* kToolName = "antdt_policy_perf";

struct Options {
  std::uint64_t steps = 300;         // global batches in the dataset
  std::uint64_t global_batch = 128;  // B
  double sample_ms = 0.625;          // compute per sample (32 samples: 20 ms)
  std::string bytes = "1M";
  std::uint64_t shard_size = 32;    // a local batch: the epoch's tail is short
  bool check = false;
  std::uint64_t killed = 0;  // ranks a fault test kills: each may have its last batch trained twice
  std::string label;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::size_t parse_bytes(const std::string& text) {
  std::size_t pos = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &pos);
  } catch (const std::exception&) {
    antdt::raise<antdt::InvalidArgument>("--bytes: '", text, "' is not a size (e.g. 4096, 64K, 1M)");
  }
  const std::string suffix = text.substr(pos);
  if (suffix == "K" || suffix == "k") value <<= 10;
  else if (suffix == "M" || suffix == "m") value <<= 20;
  else if (!suffix.empty()) antdt::raise<antdt::InvalidArgument>("--bytes: unknown suffix in '", text, "' (K or M)");
  if (value < sizeof(float) || value > (std::size_t{1} << 30))
    antdt::raise<antdt::InvalidArgument>("--bytes must be in [4, 1G], got '", text, "'");
  return static_cast<std::size_t>(value);
}

// What this rank did (its current incarnation), gathered at the end.
struct RankCounts {
  double incarnation = 0;
  double computed = 0;      // steps with a contribution (possibly empty: weight 0)
  double skipped = 0;       // steps whose result this rank had already fetched (it was late)
  double included = 0;
  double deferred = 0;
  double dropped = 0;
  double fetched = 0;       // samples fetched from the DDS
  double committed = 0;     // samples whose lease was committed
  double compute_s = 0;     // sleeping as compute
  double overshoot_s = 0;   // sleep beyond the planned time (the machine's overhead)
  double comm_s = 0;        // in collectives (partial_finish and catch-up included)
  double agent_s = 0;       // in Agent calls (plan, fetch, report, settle)
  double partial_steps = 0; // steps run with partial_allreduce
  static constexpr std::size_t kFields = 13;
  std::array<double, kFields> pack() const {
    return {incarnation, computed, skipped, included, deferred, dropped, fetched,
            committed,   compute_s, overshoot_s, comm_s, agent_s, partial_steps};
  }
  static RankCounts unpack(const double* v) {
    return RankCounts{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12]};
  }
};

class Trainer {
 public:
  Trainer(antdt::Agent& agent, const Options& opts, std::size_t count)
      : agent_(agent), opts_(opts), count_(count), gradient_(count + 1), send_(count + 1), result_(count + 1) {
    const antdt::Config& cfg = antdt::config();
    injector_ = Injector::from_config(cfg, agent_.rank(), agent_.size());
    for (std::size_t i = 0; i < count_; ++i)
      gradient_[i] = static_cast<float>((static_cast<std::uint64_t>(agent_.rank()) * 31 + i) % 97) * 0.125f;
    counts_.incarnation = agent_.incarnation();
  }

  // The training loop; returns the process's exit code (the restart code when ordered).
  int run() {
    const auto start = Clock::now();
    for (;;) {
      auto t = Clock::now();
      const antdt::StepPlan plan = agent_.next_step();
      counts_.agent_s += seconds_since(t);
      if (agent_.should_exit()) {
        finish_run();
        std::fprintf(stderr, "%s: rank %d (incarnation %d) ordered to restart at step %" PRIu64 "\n", kToolName,
                     agent_.rank(), agent_.incarnation(), plan.step);
        return agent_.exit_code();
      }
      if (plan.stop) {
        finish_run();
        last_step_ = plan.step - 1;
        break;
      }
      // A late rank fetched this step's result already (with the results it missed).
      if (plan.step <= done_through_) {
        ++counts_.skipped;
        continue;
      }
      if (run_open_ && (plan.rebuild || plan.late != run_policy_ || plan.staleness != run_staleness_)) finish_run();
      if (plan.rebuild || comm_ == nullptr) {
        comm_ = &agent_.communicator();
        if (plan.rebuild) resync();
      }
      if (plan.step != done_through_ + 1) {
        antdt::raise<antdt::InternalError>("rank ", agent_.rank(), " is at step ", plan.step, " but applied the results "
                                           "through step ", done_through_, " (steps and results must match)");
      }
      step(plan);
    }
    wall_s_ = seconds_since(start);
    return 0;
  }

  int finish_and_print() {
    Communicator& comm = agent_.communicator();
    const int n = comm.size();
    // Every replica must hold the same model.
    std::array<double, 2> low = model_, high = model_;
    comm.allreduce(std::span<double>(low), ReduceOp::min);
    comm.allreduce(std::span<double>(high), ReduceOp::max);
    const bool consistent = low == high;
    std::vector<double> table(static_cast<std::size_t>(n) * RankCounts::kFields, 0.0);
    const auto mine = counts_.pack();
    std::copy(mine.begin(), mine.end(),
              table.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(comm.rank()) * RankCounts::kFields));
    comm.allreduce(std::span<double>(table), ReduceOp::sum);
    if (comm.rank() != 0) return consistent ? 0 : 1;

    const antdt::Config& cfg = antdt::config();
    std::vector<RankCounts> ranks;
    for (int r = 0; r < n; ++r) ranks.push_back(RankCounts::unpack(&table[static_cast<std::size_t>(r) * RankCounts::kFields]));
    // Standalone capacity of each rank over the run's steps with the nominal
    // batch B/n, under its first incarnation's schedule, plus its measured
    // sleep overshoot per computed step.
    const double nominal = static_cast<double>(opts_.global_batch) / n;
    const double per_sample = opts_.sample_ms / 1e3;
    const std::uint64_t steps = std::max<std::uint64_t>(last_step_, 1);
    double capacity = 0, bsp_seconds = 0;
    std::vector<double> capacities;
    std::vector<double> slowest(steps, 0.0);
    for (int r = 0; r < n; ++r) {
      const Injector first = cfg.inject ? Injector(*cfg.inject, r, n, 0) : Injector();
      const RankCounts& c = ranks[static_cast<std::size_t>(r)];
      const double overhead = c.computed > 0 ? c.overshoot_s / c.computed : 0;
      double seconds = 0;
      for (std::uint64_t s = 1; s <= steps; ++s) {
        const double step_s = nominal * per_sample * first.compute_factor(s) + overhead;
        seconds += step_s;
        slowest[s - 1] = std::max(slowest[s - 1], step_s);
      }
      capacities.push_back(seconds > 0 ? nominal * static_cast<double>(steps) / seconds : 0);
      capacity += capacities.back();
    }
    for (const double s : slowest) bsp_seconds += s;
    const double bsp_theory = bsp_seconds > 0 ? static_cast<double>(opts_.global_batch) * static_cast<double>(steps) /
                                                    bsp_seconds / capacity
                                              : 0;
    double restarts = 0;
    for (const RankCounts& c : ranks) restarts += c.incarnation;
    const double samples = model_[0];
    const double rate = wall_s_ > 0 ? samples / wall_s_ : 0;
    const std::string label = opts_.label.empty() ? cfg.policy : opts_.label;

    std::printf("# %s: %d ranks, ANTDT_POLICY=%s ANTDT_POLICY_CONFIG=%s, B=%" PRIu64 ", %.3f ms per sample, %zu-byte "
                "f32 gradient, dataset %" PRIu64 " samples\n",
                kToolName, n, cfg.policy.c_str(), cfg.policy_config.c_str(), opts_.global_batch, opts_.sample_ms,
                count_ * sizeof(float), opts_.steps * opts_.global_batch);
    std::printf("# ANTDT_INJECT: %s\n", cfg.inject ? cfg.inject->text.c_str() : "(unset)");
    std::printf("# standalone samples/s per rank:");
    for (const double c : capacities) std::printf(" %.1f", c);
    std::printf(" (sum %.1f); BSP theoretical efficiency %.3f\n", capacity, bsp_theory);
    std::printf("# per rank (last incarnation): steps computed / skipped (results fetched while late), contributions "
                "included / deferred / dropped,\n#   samples fetched / committed, mean batch, seconds computing / in "
                "collectives / in Agent calls, steps on partial_allreduce\n");
    std::printf("# %4s %3s %6s %6s %6s %6s %6s %8s %8s %6s %8s %8s %8s %7s\n", "rank", "inc", "comp", "skip", "incl",
                "defer", "drop", "fetched", "commit", "batch", "comp s", "coll s", "agent s", "partial");
    for (int r = 0; r < n; ++r) {
      const RankCounts& c = ranks[static_cast<std::size_t>(r)];
      std::printf("# %4d %3.0f %6.0f %6.0f %6.0f %6.0f %6.0f %8.0f %8.0f %6.1f %8.2f %8.2f %8.2f %7.0f\n", r,
                  c.incarnation, c.computed, c.skipped, c.included, c.deferred, c.dropped, c.fetched, c.committed,
                  c.computed > 0 ? c.fetched / c.computed : 0, c.compute_s, c.comm_s, c.agent_s, c.partial_steps);
    }
    std::printf("# %-10s %6s %9s %8s %10s %10s %8s %10s\n", "policy", "steps", "samples", "wall s", "samples/s",
                "efficiency", "restarts", "consistent");
    std::printf("  %-10s %6" PRIu64 " %9.0f %8.3f %10.1f %10.3f %8.0f %10s\n", label.c_str(), last_step_, samples,
                wall_s_, rate, rate / capacity, restarts, consistent ? "yes" : "no");
    std::fflush(stdout);
    if (!consistent) std::fprintf(stderr, "%s: inconsistent: the ranks' models differ\n", kToolName);
    if (opts_.check && !row_consistent(ranks, samples)) return 1;
    return consistent ? 0 : 1;
  }

 private:
  // --check: the row adds up. Every sample of the dataset is in exactly one
  // applied result; the run took at least dataset / B steps; no rank
  // committed more than it fetched; the per-rank counts add up.
  bool row_consistent(const std::vector<RankCounts>& ranks, double samples) const {
    const double expected = static_cast<double>(opts_.steps * opts_.global_batch);
    bool ok = true;
    const auto fail = [&](const std::string& what) {
      std::fprintf(stderr, "%s: inconsistent: %s\n", kToolName, what.c_str());
      ok = false;
    };
    // A rank killed after its contribution was applied but before the
    // coordinator had its commit: the survivors' models hold that batch, and
    // the DDS serves it again (it was never committed), so it is trained
    // twice. Commits stay exactly once; at most one batch per kill.
    const double replay_bound = static_cast<double>(opts_.killed * opts_.global_batch);
    if (samples > expected && samples - expected <= replay_bound) {
      std::printf("# trained twice: %.0f samples (a killed rank's batch applied before its commit; --killed %" PRIu64
                  ")\n", samples - expected, opts_.killed);
    } else if (samples != expected) {
      fail("the model counted " + std::to_string(samples) + " samples, expected " + std::to_string(expected));
    }
    if (last_step_ < opts_.steps)
      fail("the run ended after " + std::to_string(last_step_) + " steps, fewer than the " +
           std::to_string(opts_.steps) + " the dataset needs");
    double committed = 0;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const RankCounts& c = ranks[r];
      committed += c.committed;
      if (c.committed > c.fetched) fail("rank " + std::to_string(r) + " committed more samples than it fetched");
      if (c.included + c.deferred + c.dropped > c.computed)
        fail("rank " + std::to_string(r) + " has more fates than computed steps");
      if (c.incarnation == 0 && c.computed + c.skipped != static_cast<double>(last_step_))
        fail("rank " + std::to_string(r) + " ran " + std::to_string(c.computed + c.skipped) + " steps, not " +
             std::to_string(last_step_));
    }
    if (committed > expected) fail("the ranks committed " + std::to_string(committed) + " samples, more than the dataset");
    return ok;
  }

  void step(const antdt::StepPlan& plan) {
    Communicator& comm = *comm_;
    auto t = Clock::now();
    const antdt::SampleBatch batch = agent_.next_samples();
    counts_.agent_s += seconds_since(t);
    const std::uint64_t n = batch.size();
    counts_.fetched += static_cast<double>(n);
    ++counts_.computed;

    // Compute: the plan's micro-batches, each a sleep for its samples.
    const double factor = injector_.compute_factor(plan.step);
    const std::uint64_t passes = std::max<std::uint32_t>(plan.micro_batches, 1);
    const std::uint64_t per_pass = plan.micro_batch > 0 ? plan.micro_batch : n;
    double planned = 0;
    const auto compute_start = Clock::now();
    std::uint64_t left = n;
    for (std::uint64_t p = 0; p < passes && left > 0; ++p) {
      const std::uint64_t samples = p + 1 == passes ? left : std::min(left, per_pass);
      left -= samples;
      const double seconds = static_cast<double>(samples) * opts_.sample_ms / 1e3 * factor;
      planned += seconds;
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    }
    const double compute_s = seconds_since(compute_start);
    counts_.compute_s += compute_s;
    counts_.overshoot_s += std::max(0.0, compute_s - planned);
    if (n == 0 && !batch.finished) {
      // No data now (the epoch's rest is leased to other ranks): a data
      // loader would wait for it; wait as long as a healthy step computes
      // rather than spin through empty steps, which would leave a slow rank
      // more steps behind than the result cache holds.
      std::this_thread::sleep_for(
          std::chrono::duration<double>(static_cast<double>(plan.local_batch) * opts_.sample_ms / 1e3));
    }
    // The gradient of this step: it changes a little with the step.
    gradient_[plan.step % count_] = static_cast<float>(plan.step % 1024) * 0.25f;

    t = Clock::now();
    Fate fate = Fate::included;
    // The weighted average as Σ b_i g_i and Σ b_i in one sum (their ratio):
    // the last element counts the samples in the result on every rank, also
    // for results a late rank fetched (PartialResult::total_weight is not
    // filled in for those).
    const float weight = static_cast<float>(n);
    for (std::size_t i = 0; i < count_; ++i) send_[i] = weight * gradient_[i];
    send_[count_] = weight;
    if (plan.late == LatePolicy::wait) {
      comm.allreduce(send_.data(), result_.data(), count_ + 1, DataType::f32, ReduceOp::sum);
      apply();
      done_through_ = plan.step;
    } else {
      if (!run_open_) {
        run_open_ = true;
        run_policy_ = plan.late;
        run_staleness_ = plan.staleness;
      }
      ++counts_.partial_steps;
      antdt::PartialOptions o;
      o.policy = plan.late;
      o.staleness = plan.staleness;
      // An empty batch arrives with weight 0: it cannot close a step on its
      // own (so it never makes a rank with data late), and a step in which no
      // rank had samples closes empty once every rank arrived
      // (docs/partial.md).
      o.weight = static_cast<double>(n);
      o.samples = n;
      const antdt::PartialResult r = partial_call(o);
      fate = n == 0 ? Fate::none : r.fate;
      catch_up(r.steps_behind);
    }
    const double comm_s = seconds_since(t);
    counts_.comm_s += comm_s;
    if (fate == Fate::included) counts_.included += n > 0 ? 1 : 0;
    if (fate == Fate::deferred) ++counts_.deferred;
    if (fate == Fate::dropped) ++counts_.dropped;

    t = Clock::now();
    agent_.report_step({.compute_s = compute_s, .samples = n, .fate = fate, .transfer_s = comm_s});
    if (n > 0) {
      const bool used = fate == Fate::included || fate == Fate::deferred;
      if (agent_.settle(fate) && used) counts_.committed += static_cast<double>(n);
    }
    counts_.agent_s += seconds_since(t);
  }

  // One partial_allreduce of the open run; its result is applied in order.
  antdt::PartialResult partial_call(const antdt::PartialOptions& o) {
    const antdt::PartialResult r =
        comm_->partial_allreduce(send_.data(), result_.data(), count_ + 1, DataType::f32, ReduceOp::sum, o);
    if (r.step == 0) {
      // The others ended the run before this call and this rank held every
      // result: it called for a step no plan of theirs ran, which the
      // per-step agreement rules out.
      antdt::raise<antdt::InternalError>("rank ", agent_.rank(), ": partial_allreduce for step ", done_through_ + 1,
                                         " found the run ended by the other ranks");
    }
    apply();
    ++done_through_;
    return r;
  }

  // The results this rank missed, from its cache (no messages).
  void catch_up(std::uint64_t behind) {
    antdt::PartialOptions o;
    o.policy = run_policy_;
    o.staleness = run_staleness_;
    o.weight = 0;
    for (; behind > 0; behind = partial_call(o).steps_behind) {}
  }

  // Ends a run of partial steps (before plain steps, a rebuild, an exit or the end).
  void finish_run() {
    if (!run_open_) return;
    const auto t = Clock::now();
    catch_up(comm_->partial_finish().steps_behind);
    run_open_ = false;
    counts_.comm_s += seconds_since(t);
  }

  // Applies the result in result_: Σ b_i g_i (count_ elements), then Σ b_i.
  void apply() {
    const double samples = result_[count_];
    if (samples > 0) {
      const float inverse = static_cast<float>(1.0 / samples);
      for (std::size_t i = 0; i < count_; ++i) result_[i] *= inverse;
    }
    model_[0] += samples;
    model_[1] += static_cast<double>(result_[0]) + static_cast<double>(result_[count_ - 1]);
  }

  // After a rebuild: the lowest rank that was not restarted broadcasts the model.
  void resync() {
    const bool fresh = agent_.incarnation() > 0 && !resynced_;
    std::array<std::int32_t, 2> source{fresh ? agent_.size() : agent_.rank(), 0};
    comm_->allreduce(std::span<std::int32_t>(source.data(), 1), ReduceOp::min);
    std::array<double, 3> state{model_[0], model_[1], static_cast<double>(done_through_)};
    comm_->broadcast(std::span<double>(state), source[0]);
    model_ = {state[0], state[1]};
    done_through_ = static_cast<std::uint64_t>(state[2]);
    resynced_ = true;
  }

  antdt::Agent& agent_;
  const Options& opts_;
  std::size_t count_;
  Injector injector_;
  std::vector<float> gradient_, send_, result_;
  Communicator* comm_ = nullptr;
  std::array<double, 2> model_{0, 0};  // samples in the applied results; a checksum of them
  std::uint64_t done_through_ = 0;     // the last step whose result this rank applied
  bool run_open_ = false;              // inside a run of partial steps
  LatePolicy run_policy_ = LatePolicy::wait;
  std::uint32_t run_staleness_ = 1;
  bool resynced_ = false;
  std::uint64_t last_step_ = 0;
  double wall_s_ = 0;
  RankCounts counts_;
};

int rank_hint() {
  const char* v = std::getenv("ANTDT_RANK");
  return v != nullptr ? std::atoi(v) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Synthetic data-parallel training on the Agent API: a scheduling policy (ANTDT_POLICY) measured on "
               "the real engine with injected stragglers (ANTDT_INJECT); run under antdt-run",
               kToolName};
  Options opts;
  app.add_option("-s,--steps", opts.steps, "global batches in the dataset (one epoch)")->capture_default_str();
  app.add_option("-B,--global-batch", opts.global_batch, "samples per step over all ranks")->capture_default_str();
  app.add_option("--sample-ms", opts.sample_ms, "compute per sample in ms (x ANTDT_INJECT's factor)")
      ->capture_default_str();
  app.add_option("-b,--bytes", opts.bytes, "gradient size in bytes (f32; K/M suffixes)")->capture_default_str();
  app.add_option("--shard-size", opts.shard_size, "DDS samples per shard (0: ANTDT_DDS_SHARD_SIZE)")
      ->capture_default_str();
  app.add_option("--label", opts.label, "name in the row (default: ANTDT_POLICY)");
  app.add_flag("--check", opts.check, "exit 1 unless the model counted every sample exactly once");
  app.add_option("--killed", opts.killed,
                 "with --check: ranks a fault test kills; each may leave up to one global batch trained twice "
                 "(applied before its commit), which is reported instead of failed")
      ->capture_default_str();
  std::size_t bytes = 0;
  try {
    app.parse(argc, argv);
    bytes = parse_bytes(opts.bytes);
    ANTDT_CHECK_ARG(opts.steps >= 1, "--steps must be at least 1, got ", opts.steps);
    ANTDT_CHECK_ARG(opts.global_batch >= 1, "--global-batch must be at least 1, got ", opts.global_batch);
    ANTDT_CHECK_ARG(opts.sample_ms >= 0 && opts.sample_ms <= 10000, "--sample-ms must be in [0, 10000], got ",
                    opts.sample_ms);
  } catch (const CLI::ParseError& e) {
    if (rank_hint() == 0) return app.exit(e);
    return e.get_exit_code();
  } catch (const antdt::Error& e) {
    if (rank_hint() == 0) std::fprintf(stderr, "%s: %s\n", kToolName, e.what());
    return 2;
  }
  // A rank k times slower falls about k steps behind under drop/defer, and
  // far more at the epoch's end, where ranks without data run empty steps in
  // a few ms each while it computes: keep enough results (64 x the gradient
  // per rank) unless the user chose, before the configuration is read.
  ::setenv("ANTDT_RESULT_CACHE", "64", /*overwrite=*/0);
  try {
    antdt::AgentOptions agent_options;
    agent_options.dataset_size = opts.steps * opts.global_batch;
    agent_options.epochs = 1;
    agent_options.global_batch = opts.global_batch;
    agent_options.shard_size = opts.shard_size;
    antdt::Agent agent = antdt::Agent::from_env(agent_options);
    Trainer trainer(agent, opts, std::max<std::size_t>(bytes / sizeof(float), 1));
    const int code = trainer.run();
    if (code != 0) return code;
    const int result = trainer.finish_and_print();
    agent.close();
    return result;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: error: %s\n", kToolName, rank_hint(), e.what());
    return 1;
  }
}
