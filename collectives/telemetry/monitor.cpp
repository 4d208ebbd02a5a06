// Monitor (collectives/telemetry/monitor.hpp); the formulas are explained in docs/monitor.md.
#include "collectives/telemetry/monitor.hpp"

#include "core/config.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace antdt::telemetry {
namespace {

// Even when the measured arrival spread is zero the grace period assumes at
// least this fraction of the median compute time: clocks, scheduling and
// network jitter exist even when a window of steps happened not to show them.
constexpr double kMinSpreadFraction = 0.05;

// The lower median of values[0, n): the ceil(n/2)-th smallest. With an even
// count it is the smaller middle value, so with two ranks the faster one is
// the reference and a straggler among two is still found (a leader among two
// is not: two ranks cannot tell which one is off). Reorders `values`.
double lower_median(std::vector<double>& values) {
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>((values.size() - 1) / 2);
  std::nth_element(values.begin(), mid, values.end());
  return *mid;
}

// ceil(q*n), at least 1, tolerant of rounding in q*n (0.99 * 100 is not exactly 99).
std::size_t nearest_rank(double q, std::size_t n) {
  const double exact = q * static_cast<double>(n);
  auto rank = static_cast<std::size_t>(exact);
  if (exact - static_cast<double>(rank) > 1e-9) ++rank;
  return std::clamp<std::size_t>(rank, 1, n);
}

std::string format_ms(double seconds) {
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%.3f", seconds * 1e3);
  return buf.data();
}

}  // namespace

MonitorConfig MonitorConfig::from(const Config& cfg) {
  MonitorConfig m;
  m.window = cfg.monitor_window;
  m.alpha = cfg.monitor_alpha;
  m.theta = cfg.monitor_theta;
  m.short_steps = static_cast<std::uint32_t>(cfg.monitor_short_steps);
  m.grace_margin = cfg.monitor_grace_margin;
  return m;
}

Monitor::Monitor(int nranks, const MonitorConfig& cfg) : nranks_(nranks), cfg_(cfg), spread_(cfg.window, cfg.alpha) {
  ANTDT_CHECK_ARG(nranks >= 1, "Monitor: nranks must be at least 1, got ", nranks);
  ANTDT_CHECK_ARG(cfg.theta > 1 && std::isfinite(cfg.theta), "Monitor: theta must be a number > 1, got ", cfg.theta);
  ANTDT_CHECK_ARG(cfg.short_steps >= 1, "Monitor: short_steps must be at least 1, got ", cfg.short_steps);
  ANTDT_CHECK_ARG(cfg.grace_margin > 0 && std::isfinite(cfg.grace_margin),
                  "Monitor: grace_margin must be a number > 0, got ", cfg.grace_margin);
  // (window and alpha are checked by StepStats, above.)
  ranks_.reserve(static_cast<std::size_t>(nranks));
  for (int i = 0; i < nranks; ++i) ranks_.emplace_back(cfg.window, cfg.alpha);
  scratch_.reserve(std::max(static_cast<std::size_t>(nranks), cfg.window));
}

std::size_t Monitor::index(int rank) const {
  ANTDT_CHECK_ARG(rank >= 0 && rank < nranks_, "Monitor: rank ", rank, " is out of range [0, ", nranks_, ")");
  return static_cast<std::size_t>(rank);
}

const Monitor::RankState& Monitor::state(int rank) const { return ranks_[index(rank)]; }

void Monitor::record(const StepRecord& r) {
  std::lock_guard lock(mu_);
  record_locked(r);
}

void Monitor::record_step(std::span<const StepRecord> records) {
  std::lock_guard lock(mu_);
  for (const StepRecord& r : records) record_locked(r);
  evaluate_locked();
}

void Monitor::record_locked(const StepRecord& r) {
  RankState& s = ranks_[index(r.rank)];
  s.wait.add(r.wait_s);
  s.transfer.add(r.transfer_s);
  // A step without samples from a rank that reports samples did no work (a
  // late rank catching up on results): its compute time says nothing.
  if (r.samples == 0 && s.has_samples) return;
  if (s.compute.empty()) ++ranks_with_data_;
  s.compute.add(r.compute_s);
  const double per_sample = r.samples > 0 ? r.compute_s / static_cast<double>(r.samples) : r.compute_s;
  s.work.add(per_sample);
  if (r.samples > 0) {
    if (!s.has_samples) {
      s.has_samples = true;
      ++ranks_with_samples_;
      s.per_sample_ewma = per_sample;
    } else {
      s.per_sample_ewma = cfg_.alpha * per_sample + (1 - cfg_.alpha) * s.per_sample_ewma;
    }
    s.last_per_sample = per_sample;
    if (r.step_s > 0) s.throughput.add(static_cast<double>(r.samples) / r.step_s);
  }
  s.fresh = true;
}

// Compute per sample when every rank reports samples (batches may differ),
// else plain compute time.
double Monitor::metric(const RankState& s) const noexcept {
  return ranks_with_samples_ == ranks_.size() ? s.per_sample_ewma : s.compute.ewma();
}

void Monitor::evaluate() {
  std::lock_guard lock(mu_);
  evaluate_locked();
}

void Monitor::evaluate_locked() {
  ++evaluations_;
  if (ranks_with_data_ == 0) return;
  const bool per_sample = ranks_with_samples_ == ranks_.size();

  scratch_.clear();
  for (const RankState& s : ranks_) {
    if (!s.compute.empty()) scratch_.push_back(metric(s));
  }
  const double reference = lower_median(scratch_);

  // Healthy ranks' compute of this step, for the arrival spread.
  scratch_.clear();
  for (RankState& s : ranks_) {
    if (s.compute.empty()) continue;
    const bool fresh = s.fresh;
    s.z = reference > 0 ? metric(s) / reference : 1.0;
    if (fresh) {
      advance(s, s.z);
      s.fresh = false;
    }
    s.cls = class_of(s);
    if (fresh && reference > 0 && (s.cls == StragglerClass::healthy || s.cls == StragglerClass::leader)) {
      const double instant = (per_sample ? s.last_per_sample : s.compute.last()) / reference;
      if (instant <= cfg_.theta) scratch_.push_back(s.compute.last());
    }
  }
  if (scratch_.size() >= 2) {
    // p99 by nearest rank, then the lower median among the values below it.
    const std::size_t n = scratch_.size();
    const auto p99 = scratch_.begin() + static_cast<std::ptrdiff_t>(nearest_rank(0.99, n) - 1);
    std::nth_element(scratch_.begin(), p99, scratch_.end());
    const auto mid = scratch_.begin() + static_cast<std::ptrdiff_t>((n - 1) / 2);
    std::nth_element(scratch_.begin(), mid, p99);
    spread_.add(*p99 - *mid);
  }
}

void Monitor::advance(RankState& s, double z) const noexcept {
  const bool slow = z > cfg_.theta;
  const bool fast = z < 1 / cfg_.theta;
  if (slow) {
    if (s.steps == 0) s.slow_from_start = true;
    ++s.slow_run;
    s.normal_run = 0;
    s.fast_run = 0;
  } else {
    if (s.slow_run > 0) {
      // A short slow run is a transient episode, except in the start-up
      // regime of a rank slow from its first step (a deterministic rank's
      // brief dip, or the first steps' own noise).
      const bool startup = s.slow_from_start && !s.had_normal_period;
      if (s.slow_run <= cfg_.short_steps && !startup) {
        s.transient_end = s.steps;
        ++s.transient_episodes;
      }
      s.slow_run = 0;
    }
    if (++s.normal_run > cfg_.short_steps) {
      s.had_normal_period = true;
      s.slow_from_start = false;
    }
    s.fast_run = fast ? s.fast_run + 1 : 0;
  }
  ++s.steps;
}

StragglerClass Monitor::class_of(const RankState& s) const noexcept {
  if (s.steps == 0) return StragglerClass::healthy;
  if (s.slow_from_start && !s.had_normal_period) return StragglerClass::deterministic;
  if (s.slow_run > 0) {
    if (s.slow_run > cfg_.short_steps) {
      return s.had_normal_period ? StragglerClass::persistent : StragglerClass::deterministic;
    }
    return StragglerClass::transient;
  }
  if (s.transient_end && s.steps - *s.transient_end < cfg_.window) return StragglerClass::transient;
  if (s.fast_run > cfg_.short_steps || s.fast_run == s.steps) return StragglerClass::leader;
  return StragglerClass::healthy;
}

StragglerClass Monitor::classify(int rank) const {
  std::lock_guard lock(mu_);
  return state(rank).cls;
}

double Monitor::slowness(int rank) const {
  std::lock_guard lock(mu_);
  return state(rank).z;
}

std::uint64_t Monitor::evaluations() const {
  std::lock_guard lock(mu_);
  return evaluations_;
}

std::vector<std::size_t> Monitor::class_counts() const {
  std::lock_guard lock(mu_);
  std::vector<std::size_t> counts(5, 0);
  for (const RankState& s : ranks_) ++counts[static_cast<std::size_t>(s.cls)];
  return counts;
}

RankSummary Monitor::summary(int rank) const {
  std::lock_guard lock(mu_);
  return summary_locked(rank);
}

RankSummary Monitor::summary_locked(int rank) const {
  const RankState& s = state(rank);
  const auto window = [this](const StepStats& st) {
    return WindowSummary{st.last(), st.ewma(), st.median(scratch_), st.quantile(0.99, scratch_)};
  };
  RankSummary out;
  out.rank = rank;
  out.cls = s.cls;
  out.slowness = s.z;
  out.steps = s.compute.count();
  out.transient_episodes = s.transient_episodes;
  out.compute_s = window(s.compute);
  out.wait_s = window(s.wait);
  out.transfer_s = window(s.transfer);
  out.samples_per_s = window(s.throughput);
  if (s.work.size() >= cfg_.short_steps && s.work.size() >= 2) {
    const double median = s.work.median(scratch_);
    if (median > 0) out.jitter = s.work.quantile(0.9, scratch_) / median;
  }
  return out;
}

double Monitor::median_ewma_locked(StepStats RankState::*stats) const {
  scratch_.clear();
  for (const RankState& s : ranks_) {
    if (!(s.*stats).empty()) scratch_.push_back((s.*stats).ewma());
  }
  return scratch_.empty() ? 0 : lower_median(scratch_);
}

double Monitor::expected_step_locked() const {
  return median_ewma_locked(&RankState::compute) + median_ewma_locked(&RankState::transfer);
}

double Monitor::expected_step() const {
  std::lock_guard lock(mu_);
  return expected_step_locked();
}

double Monitor::expected_transfer() const {
  std::lock_guard lock(mu_);
  return median_ewma_locked(&RankState::transfer);
}

double Monitor::measured_jitter() const {
  std::lock_guard lock(mu_);
  return cfg_.grace_margin * (spread_.empty() ? 0 : spread_.median(scratch_));
}

double Monitor::grace_locked() const {
  const double compute = median_ewma_locked(&RankState::compute);
  const double spread = spread_.empty() ? 0 : spread_.median(scratch_);
  return cfg_.grace_margin * std::max(spread, kMinSpreadFraction * compute);
}

double Monitor::grace() const {
  std::lock_guard lock(mu_);
  return grace_locked();
}

std::string Monitor::summary_table(std::size_t max_rows) const {
  std::lock_guard lock(mu_);
  std::array<std::size_t, 5> counts{};
  for (const RankState& s : ranks_) ++counts[static_cast<std::size_t>(s.cls)];
  std::string out = cat("antdt monitor: ", nranks_, " ranks, ", evaluations_, " steps evaluated; expected step ",
                        format_ms(expected_step_locked()), " ms, grace ", format_ms(grace_locked()), " ms; ");
  for (std::size_t c = 0; c < counts.size(); ++c) {
    out += cat(c == 0 ? "" : ", ", to_string(static_cast<StragglerClass>(c)), " ", counts[c]);
  }
  out += '\n';
  const std::size_t flagged = static_cast<std::size_t>(nranks_) - counts[0];
  if (flagged == 0) return out;

  std::array<char, 256> line{};
  std::snprintf(line.data(), line.size(), "%6s  %-13s %7s  %10s %10s %10s %7s  %10s %10s  %10s\n", "rank", "class",
                "z", "compute ms", "c.p50 ms", "c.p99 ms", "jitter", "wait ms", "xfer ms", "samples/s");
  out += line.data();
  std::size_t rows = 0;
  for (int rank = 0; rank < nranks_ && rows < max_rows; ++rank) {
    if (ranks_[static_cast<std::size_t>(rank)].cls == StragglerClass::healthy) continue;
    const RankSummary r = summary_locked(rank);
    std::snprintf(line.data(), line.size(), "%6d  %-13s %7.2f  %10.3f %10.3f %10.3f %7.2f  %10.3f %10.3f  %10.1f\n",
                  rank, std::string(to_string(r.cls)).c_str(), r.slowness, r.compute_s.ewma * 1e3,
                  r.compute_s.median * 1e3, r.compute_s.p99 * 1e3, r.jitter, r.wait_s.ewma * 1e3,
                  r.transfer_s.ewma * 1e3, r.samples_per_s.ewma);
    out += line.data();
    ++rows;
  }
  if (flagged > rows) out += cat("  ... and ", flagged - rows, " more non-healthy ranks\n");
  return out;
}

}  // namespace antdt::telemetry
