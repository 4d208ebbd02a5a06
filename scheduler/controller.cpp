// The Controller: the policy's driver and the keeper of the step-agreement
// rule (scheduler/controller.hpp, docs/scheduler.md).
#include "scheduler/controller.hpp"

#include "core/config.hpp"
#include "core/error.hpp"
#include "scheduler/policy_config.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <limits>

namespace antdt::sched {
namespace {

// Plans kept at most, however far behind the slowest rank's questions are (a
// rank that never asks again must not make the history grow without bound).
constexpr std::size_t kMaxHistory = 4096;

// Weight of a step one step older in the sustained speed: a memory of about
// 64 steps, the Monitor's window. A rank under a CPU quota stalls once per
// period, every few steps; over 64 of them its stalls average out, where an
// EWMA of weight 0.3 swings by a third with each one (docs/scheduler.md).
constexpr double kSustainedDecay = 1.0 - 1.0 / 64;

std::uint64_t json_count(const nlohmann::json& object, const char* key, std::uint64_t fallback) {
  const auto it = object.find(key);
  if (it == object.end()) return fallback;
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0)) {
    raise<ConfigError>("ANTDT_POLICY_CONFIG is invalid: \"", key, "\" is ", it->dump(),
                       ", expected an integer >= 0 (samples)");
  }
  return it->get<std::uint64_t>();
}

const char* late_name(LatePolicy p) {
  switch (p) {
    case LatePolicy::wait: return "wait";
    case LatePolicy::drop: return "drop";
    case LatePolicy::defer: return "defer";
  }
  return "?";
}

double thread_cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

ControllerOptions::Split ControllerOptions::split_config(ControllerOptions options,
                                                         std::string_view policy_config_json) {
  nlohmann::json object = parse_policy_config(policy_config_json);
  options.min_local_batch = json_count(object, "min_local_batch", options.min_local_batch);
  options.max_local_batch = json_count(object, "max_local_batch", options.max_local_batch);
  options.micro_batch_cap = json_count(object, "micro_batch_cap", options.micro_batch_cap);
  object.erase("min_local_batch");
  object.erase("max_local_batch");
  object.erase("micro_batch_cap");
  return Split{options, object.dump()};
}

// The policy's view of the Monitor plus the Controller's own speed figures.
// Used only inside on_step(), under decide_mu_.
class Controller::View final : public MonitorView {
 public:
  explicit View(const Controller& c) : c_(c) {}
  int nranks() const noexcept override { return c_.options_.world_size; }
  RankStats rank(int r) const override {
    ANTDT_CHECK_ARG(r >= 0 && r < nranks(), "MonitorView: rank ", r, " is out of range [0, ", nranks(), ")");
    const Throughput& t = c_.throughput_[static_cast<std::size_t>(r)];
    RankStats s;
    s.rank = r;
    s.cls = c_.monitor_.classify(r);
    s.slowness = c_.monitor_.slowness(r);
    s.compute_ewma_s = t.compute_ewma;
    s.samples_per_s = t.per_sample_ewma > 0 ? 1.0 / t.per_sample_ewma : 0.0;
    s.sustained_samples_per_s = t.compute_decayed > 0 ? t.samples_decayed / t.compute_decayed : 0.0;
    s.steps = t.steps;
    return s;
  }
  RankStats detail(int r) const override {
    RankStats s = rank(r);
    const telemetry::RankSummary summary = c_.monitor_.summary(r);
    s.compute_median_s = summary.compute_s.median;
    s.jitter = summary.jitter;
    if (s.steps == 0) {
      // Fed elsewhere: the Monitor's own compute figures.
      s.compute_ewma_s = summary.compute_s.ewma;
      s.steps = summary.steps;
    }
    return s;
  }
  double expected_step_s() const override { return c_.monitor_.expected_step(); }

 private:
  const Controller& c_;
};

Controller::Controller(telemetry::Monitor& monitor, std::unique_ptr<Policy> policy, const ControllerOptions& options)
    : monitor_(monitor), policy_(std::move(policy)), options_(options) {
  ANTDT_CHECK_ARG(policy_ != nullptr, "Controller: no policy");
  ANTDT_CHECK_ARG(options_.world_size >= 1, "Controller: world size ", options_.world_size, " is not positive");
  ANTDT_CHECK_ARG(options_.world_size == monitor_.nranks(), "Controller: world size ", options_.world_size,
                  " differs from the Monitor's ", monitor_.nranks(), " ranks");
  ANTDT_CHECK_ARG(options_.global_batch > 0, "Controller: the global batch must be positive");
  if (options_.max_local_batch == 0) options_.max_local_batch = options_.global_batch;
  const auto n = static_cast<std::uint64_t>(options_.world_size);
  ANTDT_CHECK_ARG(options_.min_local_batch <= options_.max_local_batch, "Controller: min_local_batch ",
                  options_.min_local_batch, " is above max_local_batch ", options_.max_local_batch);
  ANTDT_CHECK_ARG(options_.min_local_batch == 0 || options_.global_batch / options_.min_local_batch >= n,
                  "Controller: ", n, " ranks of at least min_local_batch=", options_.min_local_batch,
                  " samples exceed the global batch ", options_.global_batch);
  ANTDT_CHECK_ARG(options_.global_batch / n + (options_.global_batch % n != 0 ? 1 : 0) <= options_.max_local_batch,
                  "Controller: ", n, " ranks of at most max_local_batch=", options_.max_local_batch,
                  " samples cannot make the global batch ", options_.global_batch);

  const std::size_t ranks = static_cast<std::size_t>(options_.world_size);
  asked_.assign(ranks, 0);
  restart_pending_.assign(ranks, false);
  lost_spans_.assign(ranks, {});
  resplit_given_.assign(ranks, 0);
  throughput_.assign(ranks, Throughput{});

  PolicyContext ctx;
  ctx.world_size = options_.world_size;
  ctx.global_batch = options_.global_batch;
  ctx.min_local_batch = options_.min_local_batch;
  ctx.max_local_batch = options_.max_local_batch;
  ctx.micro_batch_cap = options_.micro_batch_cap;
  std::vector<RankPlan> plans = policy_->initial(ctx);
  check_plans(plans, "initial plans");
  for (std::size_t r = 0; r < ranks; ++r) {
    // Orders in the first plans would have nothing to act on.
    plans[r].restart = false;
    plans[r].resplit = false;
  }
  history_.emplace(0, PlanSet{std::move(plans), 0});
}

std::unique_ptr<Controller> Controller::from_config(telemetry::Monitor& monitor, const Config& cfg, int world_size,
                                                    std::uint64_t global_batch) {
  ControllerOptions options;
  options.world_size = world_size;
  options.global_batch = global_batch;
  ControllerOptions::Split split = ControllerOptions::split_config(options, cfg.policy_config);
  return std::make_unique<Controller>(monitor, make_policy(cfg.policy, split.policy_config), split.options);
}

void Controller::check_plans(const std::vector<RankPlan>& plans, std::string_view who) const {
  const std::string_view name = policy_->name();
  ANTDT_CHECK_ARG(plans.size() == static_cast<std::size_t>(options_.world_size), "policy '", name, "' ", who,
                  ": ", plans.size(), " plans for ", options_.world_size, " ranks");
  std::uint64_t sum = 0;
  for (std::size_t r = 0; r < plans.size(); ++r) {
    const RankPlan& p = plans[r];
    ANTDT_CHECK_ARG(p.local_batch >= options_.min_local_batch && p.local_batch <= options_.max_local_batch,
                    "policy '", name, "' ", who, ": rank ", r, " local batch ", p.local_batch, " is outside [",
                    options_.min_local_batch, ", ", options_.max_local_batch, "]");
    ANTDT_CHECK_ARG(p.micro_batches >= 1, "policy '", name, "' ", who, ": rank ", r, " has 0 micro-batches");
    const std::uint64_t m = p.micro_batches;
    ANTDT_CHECK_ARG(p.local_batch == 0 ? p.micro_batch == 0
                                       : p.micro_batch * m >= p.local_batch && p.micro_batch * (m - 1) < p.local_batch,
                    "policy '", name, "' ", who, ": rank ", r, " micro-batches ", m, " x ", p.micro_batch,
                    " do not cover its local batch ", p.local_batch, " with a non-empty last pass");
    ANTDT_CHECK_ARG(options_.micro_batch_cap == 0 || p.micro_batch <= options_.micro_batch_cap, "policy '", name,
                    "' ", who, ": rank ", r, " micro-batch ", p.micro_batch, " is above the cap ",
                    options_.micro_batch_cap);
    ANTDT_CHECK_ARG(p.late == plans[0].late && p.staleness == plans[0].staleness, "policy '", name, "' ", who,
                    ": rank ", r, " has late policy ", late_name(p.late), "/", p.staleness, " but rank 0 has ",
                    late_name(plans[0].late), "/", plans[0].staleness,
                    " (one late policy per step for every rank: the partial arbiter needs it)");
    ANTDT_CHECK_ARG(p.late != LatePolicy::defer || p.staleness >= 1, "policy '", name, "' ", who,
                    ": defer with staleness 0");
    sum += p.local_batch;
  }
  ANTDT_CHECK_ARG(sum == options_.global_batch, "policy '", name, "' ", who, ": local batches add up to ", sum,
                  ", not the global batch ", options_.global_batch);
}

std::optional<Decision> Controller::on_step(std::uint64_t step, std::span<const telemetry::StepRecord> records) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_s();
  std::lock_guard decide_lock(decide_mu_);

  if (options_.feed_monitor && !records.empty()) monitor_.record_step(records);
  const double alpha = monitor_.config().alpha;
  for (const telemetry::StepRecord& rec : records) {
    ANTDT_CHECK_ARG(rec.rank >= 0 && rec.rank < options_.world_size, "Controller::on_step: record of rank ",
                    rec.rank, " is out of range [0, ", options_.world_size, ")");
    if (rec.samples == 0 || !(rec.compute_s > 0)) continue;  // a catch-up step did no work
    Throughput& t = throughput_[static_cast<std::size_t>(rec.rank)];
    const double per_sample = rec.compute_s / static_cast<double>(rec.samples);
    if (t.steps == 0) {
      t.compute_ewma = rec.compute_s;
      t.per_sample_ewma = per_sample;
    } else {
      t.compute_ewma = alpha * rec.compute_s + (1 - alpha) * t.compute_ewma;
      t.per_sample_ewma = alpha * per_sample + (1 - alpha) * t.per_sample_ewma;
    }
    t.samples_decayed = kSustainedDecay * t.samples_decayed + static_cast<double>(rec.samples);
    t.compute_decayed = kSustainedDecay * t.compute_decayed + rec.compute_s;
    ++t.steps;
  }

  // The policy sees the newest plans without their orders (those are the
  // Controller's business once given) and the ranks still restarting.
  std::vector<RankPlan> current;
  std::vector<int> restarting;
  std::uint64_t since = 0;
  {
    std::lock_guard lock(mu_);
    const auto& latest = *history_.rbegin();
    since = latest.first;
    current = latest.second.plans;
    for (std::size_t r = 0; r < restart_pending_.size(); ++r) {
      if (restart_pending_[r]) restarting.push_back(static_cast<int>(r));
    }
  }
  for (RankPlan& p : current) {
    p.restart = false;
    p.resplit = false;
  }
  PolicyContext ctx;
  ctx.world_size = options_.world_size;
  ctx.global_batch = options_.global_batch;
  ctx.min_local_batch = options_.min_local_batch;
  ctx.max_local_batch = options_.max_local_batch;
  ctx.micro_batch_cap = options_.micro_batch_cap;
  ctx.step = step;
  ctx.plans_since = since;
  ctx.plans = current;
  ctx.restarting = restarting;

  const View view(*this);
  std::optional<std::vector<RankPlan>> plans = policy_->decide(ctx, view);
  std::optional<Decision> decision;
  if (plans) {
    check_plans(*plans, cat("decision after step ", step));
    std::lock_guard lock(mu_);
    std::uint64_t effective = step + 1;
    if (any_asked_) effective = std::max(effective, highest_asked_ + 1);
    // Decisions not yet in effect at `effective` were never handed out.
    for (auto it = history_.lower_bound(effective); it != history_.end();) {
      it = history_.erase(it);
      ++stats_.superseded;
    }
    for (std::size_t r = 0; r < plans->size(); ++r) {
      if ((*plans)[r].restart && !restart_pending_[r]) {
        restart_pending_[r] = true;
        ++stats_.restarts_ordered;
      }
    }
    history_.emplace(effective, PlanSet{*plans, step});
    ++stats_.decisions;
    decision = Decision{effective, std::move(*plans), policy_->reason(), step};
  }

  std::lock_guard lock(mu_);
  prune_locked();  // O(ranks): once per step, not per question
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = thread_cpu_s() - cpu_start;
  ++stats_.steps;
  stats_.last_decide_cpu_s = cpu;
  stats_.max_decide_cpu_s = std::max(stats_.max_decide_cpu_s, cpu);
  stats_.total_decide_cpu_s += cpu;
  stats_.last_decide_s = seconds;
  stats_.max_decide_s = std::max(stats_.max_decide_s, seconds);
  stats_.total_decide_s += seconds;
  return decision;
}

RankPlan Controller::plan_for(int rank, std::uint64_t step) {
  std::lock_guard lock(mu_);
  ANTDT_CHECK_ARG(rank >= 0 && rank < options_.world_size, "Controller::plan_for: rank ", rank,
                  " is out of range [0, ", options_.world_size, ")");
  auto it = history_.upper_bound(step);
  ANTDT_CHECK_ARG(it != history_.begin(), "Controller::plan_for: step ", step, " of rank ", rank,
                  " is older than the plans kept (from step ", history_.begin()->first, ")");
  --it;
  const auto r = static_cast<std::size_t>(rank);
  bool any_lost = false;
  for (std::size_t other = 0; other < lost_spans_.size() && !any_lost; ++other) any_lost = lost_at_locked(other, step);
  RankPlan plan = any_lost ? without_lost_locked(it->second.plans, step)[r] : it->second.plans[r];
  plan.restart = restart_pending_[r] && !lost_at_locked(r, step);
  if (plan.resplit) {
    if (resplit_given_[r] == it->first + 1) {
      plan.resplit = false;
    } else {
      resplit_given_[r] = it->first + 1;
      ++stats_.resplits_delivered;
    }
  }
  asked_[r] = std::max(asked_[r], step + 1);
  if (!any_asked_ || step > highest_asked_) highest_asked_ = step;
  any_asked_ = true;
  return plan;
}

void Controller::rank_restarted(int rank) {
  std::lock_guard lock(mu_);
  ANTDT_CHECK_ARG(rank >= 0 && rank < options_.world_size, "Controller::rank_restarted: rank ", rank,
                  " is out of range [0, ", options_.world_size, ")");
  restart_pending_[static_cast<std::size_t>(rank)] = false;
}

void Controller::rank_lost(int rank, std::uint64_t from_step) {
  std::lock_guard lock(mu_);
  ANTDT_CHECK_ARG(rank >= 0 && rank < options_.world_size, "Controller::rank_lost: rank ", rank,
                  " is out of range [0, ", options_.world_size, ")");
  ANTDT_CHECK_ARG(from_step >= 1, "Controller::rank_lost: steps start at 1");
  constexpr auto open = std::numeric_limits<std::uint64_t>::max();
  auto& spans = lost_spans_[static_cast<std::size_t>(rank)];
  if (!spans.empty() && spans.back().second == open) return;  // lost already
  int lost = 0;
  for (const auto& other : lost_spans_) lost += !other.empty() && other.back().second == open ? 1 : 0;
  ANTDT_CHECK_ARG(lost + 1 < options_.world_size, "Controller::rank_lost: rank ", rank, " is the last rank left");
  spans.emplace_back(from_step, open);
  restart_pending_[static_cast<std::size_t>(rank)] = false;  // nothing left to restart
  // A rank that never asks again must not hold back the pruning of old plans.
  asked_[static_cast<std::size_t>(rank)] = open;
}

void Controller::rank_back(int rank, std::uint64_t from_step) {
  std::lock_guard lock(mu_);
  ANTDT_CHECK_ARG(rank >= 0 && rank < options_.world_size, "Controller::rank_back: rank ", rank,
                  " is out of range [0, ", options_.world_size, ")");
  auto& spans = lost_spans_[static_cast<std::size_t>(rank)];
  if (spans.empty() || spans.back().second != std::numeric_limits<std::uint64_t>::max()) return;
  spans.back().second = std::max(from_step, spans.back().first);
  asked_[static_cast<std::size_t>(rank)] = spans.back().second;  // it asks from there on
}

bool Controller::lost_at(int rank, std::uint64_t step) const {
  std::lock_guard lock(mu_);
  ANTDT_CHECK_ARG(rank >= 0 && rank < options_.world_size, "Controller::lost_at: rank ", rank,
                  " is out of range [0, ", options_.world_size, ")");
  return lost_at_locked(static_cast<std::size_t>(rank), step);
}

bool Controller::lost_at_locked(std::size_t rank, std::uint64_t step) const {
  for (const auto& span : lost_spans_[rank])
    if (span.first <= step && step < span.second) return true;
  return false;
}

std::vector<RankPlan> Controller::without_lost_locked(const std::vector<RankPlan>& plans, std::uint64_t step) const {
  std::vector<RankPlan> out = plans;
  const std::size_t n = out.size();
  auto lost = [&](std::size_t r) { return lost_at_locked(r, step); };
  const std::uint64_t B = options_.global_batch;
  const std::uint64_t cap = options_.max_local_batch;
  std::uint64_t weight_sum = 0;
  std::size_t survivors = 0;
  for (std::size_t r = 0; r < n; ++r)
    if (!lost(r)) {
      weight_sum += plans[r].local_batch;
      ++survivors;
    }
  // Shares in proportion to the policy's local batches (equal ones when the
  // survivors had none), rounded down; the remainder goes one sample at a time
  // to the largest fractional parts (ties: the lower rank), as far as the cap allows.
  std::vector<std::uint64_t> share(n, 0);
  std::vector<std::pair<double, std::size_t>> remainders;
  std::uint64_t given = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (lost(r)) continue;
    const double exact = weight_sum > 0 ? static_cast<double>(B) * static_cast<double>(plans[r].local_batch) /
                                              static_cast<double>(weight_sum)
                                        : static_cast<double>(B) / static_cast<double>(survivors);
    share[r] = std::min<std::uint64_t>(cap, static_cast<std::uint64_t>(exact));
    given += share[r];
    remainders.emplace_back(exact - static_cast<double>(share[r]), r);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  while (given < B) {
    bool any = false;
    for (const auto& entry : remainders) {
      const std::size_t r = entry.second;
      if (given == B) break;
      if (share[r] >= cap) continue;
      ++share[r];
      ++given;
      any = true;
    }
    if (!any) break;  // every survivor at max_local_batch: B cannot be met (the constructor's bound was for all ranks)
  }
  for (std::size_t r = 0; r < n; ++r) {
    RankPlan& p = out[r];
    const std::uint64_t b = lost(r) ? 0 : share[r];
    if (b == p.local_batch) continue;
    p.local_batch = b;
    if (b == 0) {
      p.micro_batches = 1;
      p.micro_batch = 0;
      continue;
    }
    // The policy's number of passes where it still fits, under the cap.
    std::uint64_t mb = (b + p.micro_batches - 1) / std::max<std::uint32_t>(1, p.micro_batches);
    if (options_.micro_batch_cap > 0) mb = std::min(mb, options_.micro_batch_cap);
    mb = std::max<std::uint64_t>(1, mb);
    p.micro_batch = mb;
    p.micro_batches = static_cast<std::uint32_t>((b + mb - 1) / mb);
  }
  return out;
}

std::uint64_t Controller::min_asked_locked() const {
  // asked_ holds step + 1; a rank that never asked holds 0 and keeps everything.
  const std::uint64_t m = *std::min_element(asked_.begin(), asked_.end());
  return m == 0 ? 0 : m - 1;
}

void Controller::prune_locked() {
  // An entry is no longer needed once the next one applies to every step any
  // rank can still ask for (ranks ask in increasing step order).
  const std::uint64_t oldest_needed = min_asked_locked();
  while (history_.size() > 1) {
    const auto second = std::next(history_.begin());
    if (second->first > oldest_needed && history_.size() <= kMaxHistory) break;
    history_.erase(history_.begin());
  }
}

std::vector<RankPlan> Controller::latest_plans() const {
  std::lock_guard lock(mu_);
  return history_.rbegin()->second.plans;
}

std::uint64_t Controller::latest_effective_step() const {
  std::lock_guard lock(mu_);
  return history_.rbegin()->first;
}

std::uint64_t Controller::highest_asked() const {
  std::lock_guard lock(mu_);
  return highest_asked_;
}

std::vector<int> Controller::restarting() const {
  std::lock_guard lock(mu_);
  std::vector<int> out;
  for (std::size_t r = 0; r < restart_pending_.size(); ++r) {
    if (restart_pending_[r]) out.push_back(static_cast<int>(r));
  }
  return out;
}

ControllerStats Controller::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace antdt::sched
