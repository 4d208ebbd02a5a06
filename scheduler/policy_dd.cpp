// "antdt-dd" (dedicated clusters, docs/scheduler.md): local batches in
// proportion to each rank's measured speed, Σ b_i = B exactly, gradient
// accumulation above the micro-batch cap, hysteresis, and `defer` while a
// rank has transient spikes or computes in bursts (whose speed is then its
// sustained one).
#include "scheduler/policy_config.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

namespace antdt::sched {
namespace {

struct DdOptions {
  double threshold = 0.1;          // a change needs some b_i to move by more than this fraction of itself
  std::uint64_t interval = 20;     // steps between batch changes; also how long defer outlives the last transient
  std::uint64_t warmup = 5;        // steps of statistics before the first change
  // From this step on, before the warm-up ends, one early split when it moves
  // some rank's batch by more than kEarlyMove (0: none). A rank at a third of
  // the others' speed costs two thirds of every warm-up step under the even
  // split; the full split at `warmup` may still correct it, whatever `interval`.
  std::uint64_t early_split = 2;
  std::uint32_t staleness = 1;     // bound of defer
  bool defer_transients = true;
  // Defer also while a rank the Monitor calls slow (deterministic or
  // persistent) has a jitter (RankStats) above this; 0: never. A rank stalled
  // in bursts (a CPU quota, a co-tenant) gets a fair batch on average, yet
  // under wait every step pays its slowest stall; the Monitor does not call it
  // transient, because its per-sample EWMA stays high. Measured on
  // Fashion-MNIST (docs/torch.md): a rank throttled to a third of its share is
  // above 2 in 92-97% of its 16-step stretches, the healthy ranks in none.
  double jitter = 2.0;
};

// The move (of a rank's batch, as a fraction of it) that an early split needs:
// a rank at 2/3 of the others' speed or slower. Smaller imbalances wait for
// the warm-up's statistics, whose first steps may carry one-time costs.
constexpr double kEarlyMove = 0.5;

class DdPolicy final : public Policy {
 public:
  explicit DdPolicy(const DdOptions& options) : options_(options) {}

  std::string_view name() const noexcept override { return "antdt-dd"; }
  std::string reason() const override { return reason_; }

  std::optional<std::vector<RankPlan>> decide(const PolicyContext& ctx, const MonitorView& monitor) override {
    const std::size_t n = static_cast<std::size_t>(ctx.world_size);
    const bool early = options_.early_split > 0 && ctx.step >= options_.early_split && ctx.step < options_.warmup &&
                       !early_done_;
    if ((ctx.step < options_.warmup && !early) || ctx.plans.size() != n) return std::nullopt;
    if (trusted_.size() != n) trusted_.assign(n, 0.0);

    // Speeds: samples per second of compute. A transient rank's current figure
    // is a spike that will pass, so it keeps the speed it had before. A bursty
    // rank's is its sustained speed: its EWMA swings with every stall, and a
    // split taken at a high point overloads it (more stalls, a low figure,
    // a small batch, then a high figure again: its batch swung between 6 and
    // 27 of 128 on Fashion-MNIST, docs/torch.md).
    if (last_bursty_.size() != n) last_bursty_.assign(n, std::nullopt);
    speeds_.assign(n, 0.0);
    bool any_transient = false, any_bursty = false;
    // detail() costs O(Monitor window) a rank, so only ranks the Monitor calls
    // slow are looked at, every few steps; defer outlives it by `interval`.
    const bool look_for_bursts = options_.defer_transients && options_.jitter > 0 &&
                                 ctx.step % std::min<std::uint64_t>(4, options_.interval) == 0;
    std::size_t known = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const RankStats st = monitor.rank(static_cast<int>(i));
      const bool transient = st.cls == StragglerClass::transient;
      any_transient = any_transient || transient;
      const bool slow = st.cls == StragglerClass::deterministic || st.cls == StragglerClass::persistent;
      if (look_for_bursts && slow && monitor.detail(static_cast<int>(i)).jitter > options_.jitter) {
        any_bursty = true;
        last_bursty_[i] = ctx.step;
      }
      // Bursty until `interval` steps after the last look that found it so:
      // one look may fall between its stalls.
      const bool bursty = last_bursty_[i] && ctx.step < *last_bursty_[i] + options_.interval;
      const double measured = bursty && st.sustained_samples_per_s > 0 ? st.sustained_samples_per_s : st.samples_per_s;
      if (!transient && measured > 0) trusted_[i] = measured;
      speeds_[i] = trusted_[i];
      if (speeds_[i] > 0) ++known;
    }
    if (known == 0) return std::nullopt;
    if (known < n) {
      // Ranks without data yet count as typical ones (the median speed).
      scratch_.clear();
      for (double s : speeds_) {
        if (s > 0) scratch_.push_back(s);
      }
      auto mid = scratch_.begin() + static_cast<std::ptrdiff_t>(scratch_.size() / 2);
      std::nth_element(scratch_.begin(), mid, scratch_.end());
      for (double& s : speeds_) {
        if (s <= 0) s = *mid;
      }
    }

    const std::uint64_t hi = ctx.max_local_batch == 0 ? ctx.global_batch : ctx.max_local_batch;
    const std::vector<std::uint64_t> target = split_batch(ctx.global_batch, speeds_, ctx.min_local_batch, hi);

    std::vector<std::uint64_t> batches(n);
    for (std::size_t i = 0; i < n; ++i) batches[i] = ctx.plans[i].local_batch;
    bool moved = false;
    double largest_move = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double current = static_cast<double>(batches[i]);
      const double delta = std::abs(static_cast<double>(target[i]) - current);
      const double fraction = delta / std::max(current, 1.0);
      largest_move = std::max(largest_move, fraction);
      if (delta >= 1 && fraction > options_.threshold) moved = true;
    }
    if (early) {
      // Batches only: the Monitor's classes (transient, bursty) need the warm-up's steps.
      if (largest_move <= kEarlyMove) return std::nullopt;
      early_done_ = true;
      reason_ = cat("early split at step ", ctx.step, ": largest batch move ", std::lround(largest_move * 100), "% > ",
                    std::lround(kEarlyMove * 100), "%");
      return plans_for(target, ctx.plans[0].late, ctx.plans[0].staleness, ctx.micro_batch_cap);
    }
    const bool may_change = !changed_at_ || ctx.step >= *changed_at_ + options_.interval;
    const bool rebalance = moved && may_change;
    if (rebalance) batches = target;

    // One late policy for every rank (the arbiter needs one per step): defer
    // while some rank spikes, back to wait `interval` steps after the last one.
    LatePolicy late = ctx.plans[0].late;
    if (options_.defer_transients && (any_transient || any_bursty)) {
      late = LatePolicy::defer;
      last_transient_ = ctx.step;
      cause_ = any_transient ? "transient stragglers" : "a rank computing in bursts";
    } else if (late == LatePolicy::defer && ctx.step >= last_transient_ + options_.interval) {
      late = LatePolicy::wait;
    }

    std::vector<RankPlan> plans = plans_for(batches, late, options_.staleness, ctx.micro_batch_cap);
    if (std::equal(plans.begin(), plans.end(), ctx.plans.begin(), ctx.plans.end())) return std::nullopt;
    if (rebalance) changed_at_ = ctx.step;
    reason_ = rebalance ? cat("rebalance: largest batch move ", std::lround(largest_move * 100), "% > ",
                              std::lround(options_.threshold * 100), "%; late ", late == LatePolicy::defer ? "defer" : "wait")
                        : late == LatePolicy::defer ? cat("late policy defer (", cause_, ")")
                                                    : std::string("late policy wait");
    return plans;
  }

 private:
  // One plan per rank: its batch, and the one late policy and bound of the step.
  static std::vector<RankPlan> plans_for(const std::vector<std::uint64_t>& batches, LatePolicy late,
                                         std::uint32_t staleness, std::uint64_t micro_batch_cap) {
    std::vector<RankPlan> plans(batches.size());
    for (std::size_t i = 0; i < batches.size(); ++i) {
      plans[i] = plan_for_batch(batches[i], micro_batch_cap);
      plans[i].late = late;
      plans[i].staleness = staleness;
    }
    return plans;
  }

  DdOptions options_;
  std::vector<double> trusted_;   // per rank: last speed measured while not transient
  std::vector<std::optional<std::uint64_t>> last_bursty_;  // per rank: last step a look found it bursty
  std::vector<double> speeds_, scratch_;
  std::optional<std::uint64_t> changed_at_;  // the early split does not count: the warm-up's end may correct it
  bool early_done_ = false;
  std::uint64_t last_transient_ = 0;
  std::string cause_;             // of the latest defer
  std::string reason_;
};

}  // namespace

std::unique_ptr<Policy> make_dd_policy(std::string_view config_json) {
  PolicyConfigReader reader("antdt-dd", config_json);
  DdOptions o;
  o.threshold = reader.number("threshold", o.threshold, 0, 10);
  o.interval = reader.integer("interval", o.interval, 1, 1'000'000'000);
  o.warmup = reader.integer("warmup", o.warmup, 0, 1'000'000'000);
  o.early_split = reader.integer("early_split", o.early_split, 0, 1'000'000'000);
  o.staleness = static_cast<std::uint32_t>(reader.integer("staleness", o.staleness, 1, 1024));
  o.defer_transients = reader.boolean("defer_transients", o.defer_transients);
  o.jitter = reader.number("jitter", o.jitter, 0, 1000);
  // Every rank's p90 is at least its median: a bound of 1 or less would defer always.
  if (o.jitter > 0 && o.jitter <= 1) reader.bad("jitter", "0 (off) or a number above 1");
  reader.finish();
  return std::make_unique<DdPolicy>(o);
}

}  // namespace antdt::sched
