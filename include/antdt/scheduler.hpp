// AntDT comm — scheduler policies (docs/scheduler.md).
//
// The Controller (DESIGN §9) turns the Monitor's per-rank statistics into a
// plan per rank: its local batch, gradient-accumulation micro-batches, what
// happens to its contribution when it is late, and one-off orders (restart the
// rank, re-split its data shard). A Policy decides the plans. Three are built
// in: "bsp", "antdt-dd" and "antdt-nd"; a program registers its own by name
// with register_policy() and selects it with ANTDT_POLICY=<name>; its
// ANTDT_POLICY_CONFIG (a JSON object) reaches the factory as text.
//
// Every decision takes effect at a step boundary that all ranks agree on; the
// Controller enforces that, a Policy only says what the plans should be.
#pragma once

#include <antdt/comm.hpp>
#include <antdt/export.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace antdt {

// What one rank does from the step its plan takes effect on.
struct RankPlan {
  std::uint64_t local_batch = 0;     // samples per step on this rank (all its micro-batches together)
  std::uint32_t micro_batches = 1;   // gradient-accumulation passes per step, >= 1
  std::uint64_t micro_batch = 0;     // samples per pass: ceil(local_batch / micro_batches); the last pass
                                     // takes local_batch - (micro_batches - 1) * micro_batch
  LatePolicy late = LatePolicy::wait;  // what a late contribution of this rank becomes (docs/partial.md)
  std::uint32_t staleness = 1;       // defer: steps late a contribution may still be included
  bool restart = false;              // order: exit with the restart code before running the step
  bool resplit = false;              // order: the coordinator cuts this rank's DOING shard for faster ranks

  bool operator==(const RankPlan&) const = default;
};

// One rank's statistics as the Monitor sees them (docs/monitor.md).
struct RankStats {
  int rank = -1;
  StragglerClass cls = StragglerClass::healthy;
  double slowness = 1;             // z: compute time per sample / the lower median over ranks
  double compute_ewma_s = 0;       // EWMA of the step's compute time, seconds
  double compute_median_s = 0;     // median over the Monitor's window (MonitorView::detail only; else 0)
  double jitter = 0;               // p90 ÷ median of compute per sample, last 16 steps: 1 steady, 3 a rank
                                   // stalled in bursts (detail only; 0 before enough steps)
  double samples_per_s = 0;        // standalone speed: samples per second of compute (EWMA); 0 before data
  double sustained_samples_per_s = 0;  // samples ÷ seconds of compute, both summed over about the last 64
                                       // steps (exponentially weighted): the rate a rank keeps up across its
                                       // stalls, where the EWMA follows each one; 0 before data
  std::uint64_t steps = 0;         // steps with a compute record
};

// Read-only view of the Monitor, valid during one Policy::decide() call.
class ANTDT_API MonitorView {
 public:
  virtual ~MonitorView();
  virtual int nranks() const noexcept = 0;
  // Every field but compute_median_s and jitter, O(1). InvalidArgument for a rank out of range.
  virtual RankStats rank(int r) const = 0;
  // Every field, O(Monitor window).
  virtual RankStats detail(int r) const = 0;
  // Seconds of a step in which nobody waits (Monitor::expected_step).
  virtual double expected_step_s() const = 0;
};

// One rank's step, timed outside an antdt communicator (the NCCL shim's
// passthrough mode times the real NCCL's calls).
struct StepTimes {
  double compute_s = 0;     // from the end of the previous step's collective to this step's
  double collective_s = 0;  // inside the step's collective
  std::uint64_t samples = 1;
};

// The Monitor (docs/monitor.md) run over step times gathered elsewhere:
// steps[r] are rank r's steps in order; step s is evaluated for the ranks that
// have it. Returns the summary a communicator prints at exit (which ranks are
// slow, their class). ANTDT_MONITOR_* variables apply. InvalidArgument when
// `steps` is empty.
ANTDT_API std::string monitor_summary(std::span<const std::vector<StepTimes>> steps);

// Everything a Policy knows about the job besides the statistics.
struct PolicyContext {
  int world_size = 0;
  std::uint64_t global_batch = 0;       // B: the plans' local batches must add up to it
  std::uint64_t min_local_batch = 0;    // per-rank bounds on local_batch
  std::uint64_t max_local_batch = 0;
  std::uint64_t micro_batch_cap = 0;    // most samples per pass (0: no cap, one pass)
  std::uint64_t step = 0;               // the step whose records were just evaluated
  std::uint64_t plans_since = 0;        // the step from which `plans` apply (0: the initial plans)
  std::span<const RankPlan> plans;      // the latest plans, one per rank (orders already cleared)
  std::span<const int> restarting;      // ranks ordered to restart that have not come back yet
};

// A scheduling policy. decide() runs on the coordinator after every step's
// records were evaluated, one call at a time.
class ANTDT_API Policy {
 public:
  virtual ~Policy();
  virtual std::string_view name() const noexcept = 0;
  // The plans of the first steps. Default: equal_plans(ctx).
  virtual std::vector<RankPlan> initial(const PolicyContext& ctx);
  // New plans for every rank, or nullopt to keep the current ones. Orders
  // (restart, resplit) are carried out once; plans without them keep running.
  // A returned vector must have world_size plans whose local batches add up to
  // global_batch (the Controller checks: InvalidArgument naming the policy).
  virtual std::optional<std::vector<RankPlan>> decide(const PolicyContext& ctx, const MonitorView& monitor) = 0;
  // Short text saying why the last decide() returned plans (for logs).
  virtual std::string reason() const { return {}; }
};

// Builds a policy from its JSON configuration (an object, as text; "{}" when
// none was given). Raises ConfigError naming ANTDT_POLICY_CONFIG and the key
// for a configuration it does not accept.
using PolicyFactory = std::function<std::unique_ptr<Policy>(std::string_view config_json)>;

// Registers (or replaces) the policy `name` ([A-Za-z0-9_.-]+, not a built-in
// name). InvalidArgument otherwise. Thread-safe.
ANTDT_API void register_policy(std::string name, PolicyFactory factory);
// The registered names, built-ins first.
ANTDT_API std::vector<std::string> registered_policies();
// A new policy by name. ConfigError naming ANTDT_POLICY and the registered
// names when `name` is unknown; the factory's errors otherwise.
ANTDT_API std::unique_ptr<Policy> make_policy(std::string_view name, std::string_view config_json);

// Helpers for policies.
// `total` split in proportion to `weights` (>= 0, not all 0), each share
// clamped to [lo, hi], adding up to `total` exactly: largest-remainder
// rounding, ties to the lower index. InvalidArgument when n*lo > total or
// n*hi < total.
ANTDT_API std::vector<std::uint64_t> split_batch(std::uint64_t total, std::span<const double> weights,
                                                 std::uint64_t lo, std::uint64_t hi);
// Equal local batches (split_batch with equal weights) under ctx's bounds, one
// pass each unless the micro-batch cap asks for more, LatePolicy::wait.
ANTDT_API std::vector<RankPlan> equal_plans(const PolicyContext& ctx);
// A plan for `local_batch` samples: micro_batches = ceil(local_batch / cap)
// (1 when cap is 0 or local_batch is 0) and the matching micro_batch.
ANTDT_API RankPlan plan_for_batch(std::uint64_t local_batch, std::uint64_t micro_batch_cap);

}  // namespace antdt
