// "antdt-nd" (non-dedicated clusters, docs/scheduler.md): equal local batches
// (dynamic sharding balances the data: fast ranks fetch more shards), `drop`
// while there are stragglers (backup workers: a late rank's samples go back to
// the DDS), re-split of a slow rank's shard, and restart of a persistent
// or deterministic straggler (at most max_restarts_in_flight at once, a
// cooldown between two).
#include "scheduler/policy_config.hpp"

#include "core/error.hpp"
#include "collectives/telemetry/monitor.hpp"

#include <algorithm>

namespace antdt::sched {
namespace {

struct NdOptions {
  std::uint64_t warmup = 5;              // steps of statistics before the first action
  std::uint64_t interval = 20;           // drop outlives the last straggler by this many steps
  bool resplit = true;
  double resplit_slowness = 1.5;         // re-split a straggler's shard while its slowness is above this
  std::uint64_t resplit_interval = 1;    // steps between two re-splits of one rank
  bool restart = true;
  // A rank slow from its first step is, on a shared cluster, a bad placement
  // like a persistent one; with `drop` its work would be lost at every step.
  bool restart_deterministic = true;
  std::uint64_t restart_cooldown = 5;    // steps between two restart orders
  // 0: one per 128 ranks, at least one. With 5% stragglers on 1024 ranks a
  // single restart at a time (every 100 steps) left nd at 0.889 efficiency in
  // antdt-sim; 8 at a time every 5 steps reached 0.928 (docs/scheduler.md).
  std::uint64_t max_restarts_in_flight = 0;
};

class NdPolicy final : public Policy {
 public:
  explicit NdPolicy(const NdOptions& options) : options_(options) {}

  std::string_view name() const noexcept override { return "antdt-nd"; }
  std::string reason() const override { return reason_; }

  std::optional<std::vector<RankPlan>> decide(const PolicyContext& ctx, const MonitorView& monitor) override {
    const std::size_t n = static_cast<std::size_t>(ctx.world_size);
    if (ctx.step < options_.warmup || ctx.plans.size() != n) return std::nullopt;
    if (resplit_at_.size() != n) resplit_at_.assign(n, std::nullopt);
    if (recovering_.size() != n) recovering_.assign(n, 0);

    std::vector<RankPlan> plans(ctx.plans.begin(), ctx.plans.end());
    bool any_slow = false;
    std::size_t resplits = 0;
    int restart_rank = -1;
    double restart_slowness = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const int rank = static_cast<int>(i);
      const RankStats st = monitor.rank(rank);
      if (!telemetry::is_slow(st.cls)) {
        recovering_[i] = 0;
        continue;
      }
      any_slow = true;
      const bool restarting =
          std::find(ctx.restarting.begin(), ctx.restarting.end(), rank) != ctx.restarting.end();
      if (restarting) continue;
      if (options_.resplit && st.slowness > options_.resplit_slowness &&
          (!resplit_at_[i] || ctx.step >= *resplit_at_[i] + options_.resplit_interval)) {
        plans[i].resplit = true;
        resplit_at_[i] = ctx.step;
        ++resplits;
      }
      // A restarted rank's history says "persistent" until its new records
      // show otherwise: it is not restarted again before it was seen well.
      const bool restartable = st.cls == StragglerClass::persistent ||
                               (options_.restart_deterministic && st.cls == StragglerClass::deterministic);
      if (restartable && !recovering_[i] && st.slowness > restart_slowness) {
        restart_rank = rank;
        restart_slowness = st.slowness;
      }
    }
    const bool may_restart = options_.restart && restart_rank >= 0 &&
                             ctx.restarting.size() < max_restarts_in_flight(n) &&
                             (!restarted_at_ || ctx.step >= *restarted_at_ + options_.restart_cooldown);
    if (may_restart) {
      plans[static_cast<std::size_t>(restart_rank)].restart = true;
      recovering_[static_cast<std::size_t>(restart_rank)] = 1;
      restarted_at_ = ctx.step;
    }

    // One late policy for every rank (the arbiter needs one per step).
    LatePolicy late = plans[0].late;
    if (any_slow) {
      late = LatePolicy::drop;
      last_slow_ = ctx.step;
    } else if (late == LatePolicy::drop && ctx.step >= last_slow_ + options_.interval) {
      late = LatePolicy::wait;
    }
    for (RankPlan& p : plans) p.late = late;

    if (std::equal(plans.begin(), plans.end(), ctx.plans.begin(), ctx.plans.end())) return std::nullopt;
    reason_ = cat("late ", late == LatePolicy::drop ? "drop" : "wait", "; ", resplits, " re-split(s)",
                  may_restart ? cat("; restart rank ", restart_rank, " (slowness ", restart_slowness, ")")
                              : std::string());
    return plans;
  }

 private:
  NdOptions options_;
  std::vector<std::optional<std::uint64_t>> resplit_at_;  // per rank: step of its last re-split order
  std::uint64_t max_restarts_in_flight(std::size_t n) const noexcept {
    if (options_.max_restarts_in_flight > 0) return options_.max_restarts_in_flight;
    return std::max<std::uint64_t>(1, n / 128);
  }

  std::vector<std::uint8_t> recovering_;                  // per rank: restart ordered, not seen well since
  std::optional<std::uint64_t> restarted_at_;
  std::uint64_t last_slow_ = 0;
  std::string reason_;
};

}  // namespace

std::unique_ptr<Policy> make_nd_policy(std::string_view config_json) {
  PolicyConfigReader reader("antdt-nd", config_json);
  NdOptions o;
  o.warmup = reader.integer("warmup", o.warmup, 0, 1'000'000'000);
  o.interval = reader.integer("interval", o.interval, 1, 1'000'000'000);
  o.resplit = reader.boolean("resplit", o.resplit);
  o.resplit_slowness = reader.number("resplit_slowness", o.resplit_slowness, 1, 100);
  o.resplit_interval = reader.integer("resplit_interval", o.resplit_interval, 1, 1'000'000'000);
  o.restart = reader.boolean("restart", o.restart);
  o.restart_deterministic = reader.boolean("restart_deterministic", o.restart_deterministic);
  o.restart_cooldown = reader.integer("restart_cooldown", o.restart_cooldown, 0, 1'000'000'000);
  o.max_restarts_in_flight = reader.integer("max_restarts_in_flight", o.max_restarts_in_flight, 0, 1'000'000);
  reader.finish();
  return std::make_unique<NdPolicy>(o);
}

}  // namespace antdt::sched
