// The Controller (DESIGN §9, docs/scheduler.md): runs a Policy over the
// Monitor's statistics after every step and hands each rank the plan of each
// step it is about to run.
//
// Agreement rule. A rank asks plan_for(rank, s) before it starts step s. A new
// decision made after step t takes effect at E = 1 + the highest step any rank
// has asked a plan for (and never before t + 1): no rank has run, or been told
// the plan of, a step >= E under the old plans, so every rank runs every step
// under one plan set, and a rank asking again for a step gets the same plan.
// Decisions not yet in effect are replaced by newer ones (nobody saw them).
//
// Lost ranks. rank_lost(r, E): rank r's process is gone for good from step E
// on (the coordinator's first step of a communicator generation without it).
// From E on every plan_for answer gives r nothing and spreads the policy's
// global batch over the other ranks in proportion to the policy's own local
// batches (bsp: equal shares; antdt-dd: its speed ratios), so that Σ local
// batch = B over the survivors whatever the policy; steps before E keep
// their plans (the agreement rule). The policy is not told: it goes on
// deciding for every rank, and whatever it gives a lost rank is moved.
//
// Orders. A plan's restart flag stays set for that rank until
// rank_restarted(rank) says its new process is up; from then on its plans
// carry no restart. A resplit order is given to one plan_for answer only (the
// coordinator carries it out when it answers); later answers for the same
// step have it cleared, and every other field is the same.
//
// Thread-safe: on_step() and plan_for() may run on different threads.
#pragma once

#include <antdt/scheduler.hpp>

#include "collectives/telemetry/monitor.hpp"
#include "collectives/telemetry/step_timer.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace antdt {
struct Config;
}

namespace antdt::sched {

struct ControllerOptions {
  int world_size = 1;
  std::uint64_t global_batch = 1;       // B
  std::uint64_t min_local_batch = 0;    // per-rank bounds on local batches (0 / 0: 0 .. B)
  std::uint64_t max_local_batch = 0;    // 0: B
  std::uint64_t micro_batch_cap = 0;    // 0: no cap
  // Record the step's records into the Monitor and evaluate it in on_step().
  // False when the Monitor is fed elsewhere (e.g. by the partial arbiter).
  bool feed_monitor = true;

  // ANTDT_POLICY_CONFIG's common keys (min_local_batch, max_local_batch,
  // micro_batch_cap) applied to `options`; the rest of the object, as text,
  // is the policy's configuration. ConfigError naming ANTDT_POLICY_CONFIG for a
  // malformed value.
  struct Split;
  static Split split_config(ControllerOptions options, std::string_view policy_config_json);
};

struct ControllerOptions::Split {
  ControllerOptions options;
  std::string policy_config;  // JSON object text
};

struct Decision {
  std::uint64_t effective_step = 0;  // first step the plans apply to
  std::vector<RankPlan> plans;       // one per rank, orders included
  std::string reason;
  std::uint64_t decided_after = 0;   // the step whose records led to it
};

struct ControllerStats {
  std::uint64_t steps = 0;              // on_step() calls
  std::uint64_t decisions = 0;          // decisions made (including superseded ones)
  std::uint64_t superseded = 0;         // decisions replaced before taking effect
  std::uint64_t restarts_ordered = 0;
  std::uint64_t resplits_delivered = 0;
  double last_decide_s = 0;             // wall time of the last on_step(), seconds
  double max_decide_s = 0;
  double total_decide_s = 0;
  // The same in CPU time of the calling thread: what a step costs without the
  // waits of a loaded machine (preemption) in it.
  double last_decide_cpu_s = 0;
  double max_decide_cpu_s = 0;
  double total_decide_cpu_s = 0;
};

class Controller {
 public:
  // InvalidArgument naming the problem: null policy, world_size < 1 or not the
  // Monitor's size, global_batch == 0, bounds that no split can meet.
  Controller(telemetry::Monitor& monitor, std::unique_ptr<Policy> policy, const ControllerOptions& options);
  // ANTDT_POLICY / ANTDT_POLICY_CONFIG from `cfg` (make_policy; split_config).
  static std::unique_ptr<Controller> from_config(telemetry::Monitor& monitor, const Config& cfg, int world_size,
                                                 std::uint64_t global_batch);

  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // After step `step` closed: feeds the records (when feed_monitor), asks the
  // policy, and returns the decision if it made one. Records may be empty (the
  // statistics then come from whoever feeds the Monitor).
  std::optional<Decision> on_step(std::uint64_t step, std::span<const telemetry::StepRecord> records);
  // The plan of `rank` for step `step` (see the agreement rule above).
  // InvalidArgument for a rank out of range or a step older than the plans kept.
  RankPlan plan_for(int rank, std::uint64_t step);
  // The rank's new process is up: its pending restart order is done.
  void rank_restarted(int rank);
  // The rank is gone for good from step `from_step` on (see "Lost ranks" above).
  // InvalidArgument when that would leave no rank; no-op when it is lost already.
  void rank_lost(int rank, std::uint64_t from_step);
  // A lost rank came back after all (started again by a launcher that did not
  // say it would): it has plans again from `from_step` on. No-op when not lost.
  void rank_back(int rank, std::uint64_t from_step);
  bool lost_at(int rank, std::uint64_t step) const;

  // The newest plans (possibly not in effect yet) and the step they apply from.
  std::vector<RankPlan> latest_plans() const;
  std::uint64_t latest_effective_step() const;
  // The highest step any rank has asked a plan for (0 before any).
  std::uint64_t highest_asked() const;
  std::vector<int> restarting() const;
  ControllerStats stats() const;
  const Policy& policy() const noexcept { return *policy_; }
  const ControllerOptions& options() const noexcept { return options_; }
  telemetry::Monitor& monitor() noexcept { return monitor_; }

 private:
  class View;
  struct Throughput {
    double compute_ewma = 0;
    double per_sample_ewma = 0;
    // Samples and compute seconds, each step's weighted by kSustainedDecay^age
    // (RankStats::sustained_samples_per_s is their ratio).
    double samples_decayed = 0, compute_decayed = 0;
    std::uint64_t steps = 0;
  };
  struct PlanSet {
    std::vector<RankPlan> plans;
    std::uint64_t decided_after = 0;
  };

  void check_plans(const std::vector<RankPlan>& plans, std::string_view who) const;
  // `plans` with the ranks lost by `step` given nothing and their share spread (see "Lost ranks").
  std::vector<RankPlan> without_lost_locked(const std::vector<RankPlan>& plans, std::uint64_t step) const;
  std::uint64_t min_asked_locked() const;
  void prune_locked();

  telemetry::Monitor& monitor_;
  std::unique_ptr<Policy> policy_;
  ControllerOptions options_;
  std::mutex decide_mu_;                       // one on_step() at a time; guards throughput_ and the policy
  mutable std::mutex mu_;                      // guards the plans and the rank bookkeeping below
  std::map<std::uint64_t, PlanSet> history_;   // effective step -> plans (orders included)
  std::vector<std::uint64_t> asked_;           // per rank: highest step asked (+1; 0 = never)
  std::uint64_t highest_asked_ = 0;
  bool any_asked_ = false;
  std::vector<bool> restart_pending_;          // per rank
  // Per rank: the step ranges [from, to) without it (to = UINT64_MAX: still lost).
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> lost_spans_;
  bool lost_at_locked(std::size_t rank, std::uint64_t step) const;
  std::vector<std::uint64_t> resplit_given_;   // per rank: effective step whose resplit order went out (+1)
  std::vector<Throughput> throughput_;         // per rank, from the records on_step() saw
  ControllerStats stats_;
};

}  // namespace antdt::sched
