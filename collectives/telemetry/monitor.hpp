// The Monitor (DESIGN §8): aggregates every rank's StepRecords where the
// arbiter runs, keeps window statistics per rank, classifies each rank as
// healthy, leader, transient, persistent or deterministic straggler, and
// derives the expected step time and a grace period for partial collectives.
// docs/monitor.md has the formulas and the reasons for them.
//
// Cost: record() is O(1); evaluate() is O(nranks) (nth_element for the
// median), allocation-free once warm. Thread-safe: every member locks.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/telemetry/step_stats.hpp"
#include "collectives/telemetry/step_timer.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace antdt {
struct Config;
}

namespace antdt::telemetry {

// The public enum (include/antdt/comm.hpp): one definition for the API, the
// Monitor and the wire.
using antdt::StragglerClass;
inline std::string_view to_string(StragglerClass c) noexcept { return straggler_class_name(c); }
// True for the three straggler kinds.
constexpr bool is_slow(StragglerClass c) noexcept {
  return c == StragglerClass::transient || c == StragglerClass::persistent || c == StragglerClass::deterministic;
}

struct MonitorConfig {
  std::size_t window = 64;      // samples in each window (median, p99; transient memory)
  double alpha = 0.3;           // EWMA weight of the newest step
  double theta = 1.5;           // slow when z > theta, leader when z < 1/theta
  std::uint32_t short_steps = 10;  // W_short: longer slow runs are not transient
  double grace_margin = 2.0;    // grace = margin * arrival spread estimate

  static MonitorConfig from(const Config& cfg);
};

struct WindowSummary {
  double last = 0, ewma = 0, median = 0, p99 = 0;
};

// Records the jitter looks at. Short, so that a lasting change of speed (a
// rank slowing down for good) reads as jitter for about half of it only (the
// median moves once half the records are new), while a rank that stalls
// every few steps shows in every such stretch (Fashion-MNIST, a rank under a
// third of its CPU share: 92-97% of 16-step stretches above 2; docs/torch.md).
inline constexpr std::size_t kJitterSteps = 16;

struct RankSummary {
  int rank = -1;
  StragglerClass cls = StragglerClass::healthy;
  double slowness = 1;           // z at the last evaluation
  std::uint64_t steps = 0;       // records with compute
  std::uint64_t transient_episodes = 0;
  WindowSummary compute_s, wait_s, transfer_s, samples_per_s;
  // How bursty the rank's compute is: p90 ÷ median of its compute time per
  // sample (per step for a rank that reports no samples) over its last
  // kJitterSteps records (fewer when the window is smaller). 1 for a steady
  // rank, whatever its speed or batch; 0 before short_steps records.
  double jitter = 0;
};

class Monitor {
 public:
  // InvalidArgument for nranks < 1 or a configuration out of range.
  Monitor(int nranks, const MonitorConfig& cfg);

  // Adds one rank's step (InvalidArgument when the rank is out of range).
  // Steps of one rank should arrive in order; late ones are welcome.
  void record(const StepRecord& r);
  // One classification pass over every rank; the arbiter calls it once per
  // closed step. Ranks without a record since the last pass keep their state.
  void evaluate();
  // record() each, then evaluate().
  void record_step(std::span<const StepRecord> records);

  StragglerClass classify(int rank) const;
  double slowness(int rank) const;
  RankSummary summary(int rank) const;
  // Ranks in each class, indexed by StragglerClass.
  std::vector<std::size_t> class_counts() const;

  // Seconds. Expected step = median over ranks of EWMA(compute) + median of
  // EWMA(transfer): a step without waiting. Grace: see docs/monitor.md.
  double expected_step() const;
  // Seconds: the median over ranks of EWMA(transfer), the data-moving part of a step.
  double expected_transfer() const;
  // Seconds: grace_margin x the measured spread of healthy ranks' compute, with
  // no floor (grace() assumes at least a fraction of the compute time).
  double measured_jitter() const;
  double grace() const;

  // Text table naming every non-healthy rank (at most max_rows of them) with
  // its class and statistics, after one line of totals.
  std::string summary_table(std::size_t max_rows = 32) const;

  int nranks() const noexcept { return nranks_; }
  std::uint64_t evaluations() const;
  const MonitorConfig& config() const noexcept { return cfg_; }

 private:
  struct RankState {
    RankState(std::size_t window, double alpha)
        : compute(window, alpha), wait(window, alpha), transfer(window, alpha), throughput(window, alpha),
          work(std::min(window, kJitterSteps), alpha) {}
    StepStats compute, wait, transfer, throughput;
    StepStats work;              // compute per sample (per step without samples), last kJitterSteps, for jitter
    double per_sample_ewma = 0;  // EWMA of compute / samples
    double last_per_sample = 0;
    bool has_samples = false;    // reported samples > 0 at least once
    bool fresh = false;          // a compute record since the last evaluation
    // Classification state, counted in this rank's evaluated steps.
    std::uint64_t steps = 0;
    std::uint64_t slow_run = 0, normal_run = 0, fast_run = 0;
    bool slow_from_start = false;    // slow at its first step, not yet normal for a while since
    bool had_normal_period = false;  // more than short_steps consecutive normal steps, ever
    std::optional<std::uint64_t> transient_end;  // step at which the last short slow run ended
    std::uint64_t transient_episodes = 0;
    double z = 1;
    StragglerClass cls = StragglerClass::healthy;
  };

  void record_locked(const StepRecord& r);
  void evaluate_locked();
  void advance(RankState& s, double z) const noexcept;
  StragglerClass class_of(const RankState& s) const noexcept;
  double metric(const RankState& s) const noexcept;
  double median_ewma_locked(StepStats RankState::*stats) const;
  double grace_locked() const;
  double expected_step_locked() const;
  RankSummary summary_locked(int rank) const;
  std::size_t index(int rank) const;  // InvalidArgument when out of range
  const RankState& state(int rank) const;

  int nranks_;
  MonitorConfig cfg_;
  mutable std::mutex mu_;
  std::vector<RankState> ranks_;
  std::size_t ranks_with_samples_ = 0;
  std::size_t ranks_with_data_ = 0;
  std::uint64_t evaluations_ = 0;
  StepStats spread_;                     // per evaluation: p99 - median of healthy ranks' compute
  mutable std::vector<double> scratch_;  // nranks (or window) doubles, reused by every pass
};

}  // namespace antdt::telemetry
