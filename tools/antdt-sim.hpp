// antdt-sim's engine (docs/scheduler.md#simulator): a discrete-event
// simulation of data-parallel training with thousands of virtual ranks that
// drives the REAL Monitor, Controller (with its policy) and Dds.
//
// Model, per step s (steps are numbered 0, 1, ... as in Controller::plan_for):
//   - every rank that is free when the step opens asks its plan
//     (Controller::plan_for), fetches its local batch from the Dds and
//     computes for  per_sample_s x samples x factor_r(s) x noise_r(s)
//     (+ pass_overhead_s per micro-batch);
//   - factor_r(s): 1 for healthy ranks; `slow_factor` for deterministic
//     stragglers; `spike_x` while a spike lasts for transient ones (a spike
//     starts with probability spike_p and lasts spike_len steps); and
//     `persistent_factor` from step `onset` on for persistent ones. A restart
//     (RankPlan::restart) takes the rank away for restart_delay_s and brings
//     it back healthy (a new node);
//   - the step closes like the partial arbiter (docs/partial.md): with `wait`
//     (and for the first `warmup` steps) when every computing rank arrived;
//     otherwise when the quorum arrived plus the Monitor's grace, never
//     waiting for ranks the Monitor classes deterministic or persistent;
//   - a late contribution is included in a later step when `defer` and its
//     lateness is within the staleness bound, else dropped: its samples go back
//     to the Dds. The late rank fetches the results it missed (α + n·β each)
//     and contributes to the step open then;
//   - the result costs a ring AllReduce among the participants:
//     2(p-1)/p · n · β + 2(p-1) · α;
//   - the closed step's records go to Controller::on_step().
// Everything is a pure function of the scenario (seeded hashes), so a run is
// reproducible. The checks a run makes are listed in Result::violations.
#pragma once

#include <antdt/scheduler.hpp>

#include "core/error.hpp"
#include "scheduler/controller.hpp"
#include "scheduler/dds.hpp"
#include "collectives/telemetry/monitor.hpp"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <limits>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

namespace antdt::sim {

enum class Kind : std::uint8_t { healthy = 0, deterministic = 1, transient = 2, persistent = 3 };

inline std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::healthy: return "healthy";
    case Kind::deterministic: return "deterministic";
    case Kind::transient: return "transient";
    case Kind::persistent: return "persistent";
  }
  return "?";
}

inline Kind parse_kind(std::string_view text) {
  for (Kind k : {Kind::deterministic, Kind::transient, Kind::persistent}) {
    if (text == kind_name(k)) return k;
  }
  raise<InvalidArgument>("straggler kind '", text, "' is invalid: expected deterministic, transient or persistent");
}

struct Scenario {
  int ranks = 32;
  std::uint64_t steps = 200;
  std::uint64_t batch_per_rank = 32;     // B = ranks x batch_per_rank
  double per_sample_s = 5e-3;            // a healthy rank's compute per sample
  double pass_overhead_s = 0;            // extra compute per micro-batch pass
  double noise = 0.02;                   // compute x (1 + noise x u), u uniform in [-1, 1)
  double gradient_bytes = 25e6;          // n of the α-β model
  double alpha_s = 2e-6;                 // latency per message
  double beta_s_per_byte = 1.0 / 25e9;   // inverse bandwidth
  // Stragglers: round(fraction x ranks) ranks chosen by the seed, kinds
  // assigned in turn from `kinds`.
  double straggler_fraction = 0.05;
  std::vector<Kind> kinds{Kind::deterministic, Kind::transient, Kind::persistent};
  double slow_factor = 3;                // deterministic
  double spike_p = 0.05, spike_x = 5;    // transient
  std::uint32_t spike_len = 3;
  std::uint64_t onset = 50;              // persistent
  double persistent_factor = 4;
  double restart_delay_s = 5;
  // Partial-collective arbiter.
  double quorum = 0.5;
  std::uint64_t warmup = 5;              // steps closed as BSP while the Monitor learns
  double grace_s = 0;                    // 0: the Monitor's grace (at least 1 ms)
  // Data.
  std::uint64_t dataset = 0;             // samples; 0: 40 global batches
  std::uint64_t shard_size = 256;
  std::uint64_t steal_min = 8;           // DDS end-of-epoch work stealing (DdsOptions::steal_min)
  std::uint64_t seed = 1;
};

inline double ring_allreduce_s(int participants, double bytes, double alpha_s, double beta_s_per_byte) {
  if (participants <= 1) return 0;
  const double p = participants;
  return 2.0 * (p - 1) / p * bytes * beta_s_per_byte + 2.0 * (p - 1) * alpha_s;
}

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from (seed, stream, rank, step).
inline double unit(std::uint64_t seed, std::uint64_t stream, int rank, std::uint64_t step) {
  std::uint64_t h = splitmix64(seed ^ splitmix64(stream));
  h = splitmix64(h ^ static_cast<std::uint64_t>(rank));
  h = splitmix64(h ^ step);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

// Which rank straggles how, and its compute factor at each step.
class ComputeModel {
 public:
  // Keeps a reference to `sc`, which must outlive the model.
  explicit ComputeModel(const Scenario& sc) : sc_(sc), kinds_(static_cast<std::size_t>(sc.ranks), Kind::healthy) {
    ANTDT_CHECK_ARG(sc.ranks >= 1, "ranks must be >= 1");
    ANTDT_CHECK_ARG(sc.straggler_fraction >= 0 && sc.straggler_fraction <= 1, "straggler fraction ",
                    sc.straggler_fraction, " is outside [0, 1]");
    const auto count = static_cast<std::size_t>(std::llround(sc.straggler_fraction * sc.ranks));
    if (count == 0) return;
    ANTDT_CHECK_ARG(!sc.kinds.empty(), "no straggler kinds given");
    // A seeded choice of `count` ranks: sort by a hash of (seed, rank).
    std::vector<int> order(static_cast<std::size_t>(sc.ranks));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return unit(sc.seed, 1, a, 0) < unit(sc.seed, 1, b, 0);
    });
    for (std::size_t i = 0; i < count; ++i) {
      kinds_[static_cast<std::size_t>(order[i])] = sc.kinds[i % sc.kinds.size()];
    }
  }

  Kind kind(int r) const { return kinds_[static_cast<std::size_t>(r)]; }
  std::size_t count(Kind k) const { return static_cast<std::size_t>(std::count(kinds_.begin(), kinds_.end(), k)); }

  bool in_spike(int r, std::uint64_t step) const {
    const std::uint64_t first = step + 1 >= sc_.spike_len ? step + 1 - sc_.spike_len : 0;
    for (std::uint64_t t = first; t <= step; ++t) {
      if (unit(sc_.seed, 2, r, t) < sc_.spike_p) return true;
    }
    return false;
  }

  // The rank's hardware factor at `step` (a restart does not change it; see compute_s).
  double factor(int r, std::uint64_t step) const {
    switch (kind(r)) {
      case Kind::healthy: return 1;
      case Kind::deterministic: return sc_.slow_factor;
      case Kind::transient: return in_spike(r, step) ? sc_.spike_x : 1;
      case Kind::persistent: return step >= sc_.onset ? sc_.persistent_factor : 1;
    }
    return 1;
  }

  double noise(int r, std::uint64_t step) const { return 1 + sc_.noise * (2 * unit(sc_.seed, 3, r, step) - 1); }

  // Compute time of `samples` samples in `passes` micro-batches; `cured`: the
  // rank was restarted onto a healthy node.
  double compute_s(int r, std::uint64_t step, std::uint64_t samples, std::uint32_t passes, bool cured) const {
    if (samples == 0) return 0;
    const double f = cured ? 1.0 : factor(r, step);
    return (sc_.per_sample_s * static_cast<double>(samples) + sc_.pass_overhead_s * passes) * f * noise(r, step);
  }

  // Samples per second of compute the rank delivers alone over steps [0, steps)
  // (DESIGN §14's standalone rate), its hardware as simulated (no restart).
  double standalone_samples_per_s(int r, std::uint64_t steps) const {
    double sum = 0;
    for (std::uint64_t s = 0; s < steps; ++s) sum += factor(r, s) * noise(r, s);
    return static_cast<double>(steps) / (sc_.per_sample_s * sum);
  }

 private:
  const Scenario& sc_;
  std::vector<Kind> kinds_;
};

struct Result {
  std::string policy;
  std::uint64_t steps = 0;
  double sim_time_s = 0;
  std::uint64_t committed = 0;              // samples in results
  std::uint64_t given_back = 0;             // samples of dropped contributions (and of the end of the run)
  std::uint64_t contributions = 0, deferred = 0, dropped = 0;
  double samples_per_s = 0;
  double standalone_samples_per_s = 0;      // Σ over ranks
  double efficiency = 0;
  double bsp_theory = 0;                    // n / Σ_s max_r c_r(s) / Σ_r standalone (equal batches)
  std::uint64_t decisions = 0, restarts = 0, resplits = 0, resplit_samples = 0;
  double decide_mean_s = 0, decide_max_s = 0;          // Controller::on_step wall time per step
  double decide_cpu_mean_s = 0, decide_cpu_max_s = 0;  // the same in thread CPU time
  std::uint64_t epochs_completed = 0;
  std::uint64_t min_batch = 0, max_batch = 0;  // over ranks and steps
  std::vector<std::string> violations;
};

class Simulation {
 public:
  Simulation(const Scenario& sc, std::string policy, std::string policy_config)
      : sc_(sc), model_(sc_), policy_(std::move(policy)), policy_config_(std::move(policy_config)) {
    ANTDT_CHECK_ARG(sc.batch_per_rank >= 1, "batch per rank must be >= 1");
    ANTDT_CHECK_ARG(sc.steps >= 1, "steps must be >= 1");
    ANTDT_CHECK_ARG(sc.quorum > 0 && sc.quorum <= 1, "quorum ", sc.quorum, " is outside (0, 1]");
  }

  Simulation(const Simulation&) = delete;  // model_ refers to this object's sc_
  Simulation& operator=(const Simulation&) = delete;

  // One line per step (times, participants, DDS progress) to `log`; null: none.
  void set_step_log(std::FILE* log) { step_log_ = log; }

  Result run() {
    const int n = sc_.ranks;
    const std::size_t nr = static_cast<std::size_t>(n);
    const std::uint64_t global = sc_.batch_per_rank * static_cast<std::uint64_t>(n);
    telemetry::Monitor monitor(n, telemetry::MonitorConfig{});
    sched::ControllerOptions options;
    options.world_size = n;
    options.global_batch = global;
    const auto split = sched::ControllerOptions::split_config(options, policy_config_);
    sched::Controller controller(monitor, make_policy(policy_, split.policy_config), split.options);

    const std::uint64_t dataset = sc_.dataset != 0 ? sc_.dataset : 40 * global;
    sched::DdsOptions dds_options;
    dds_options.world_size = n;
    dds_options.shard_size = sc_.shard_size;
    dds_options.seed = sc_.seed;
    dds_options.steal_min = sc_.steal_min;
    sched::Dds dds(sched::Dataset::samples(dataset), dds_options);

    Result res;
    res.policy = policy_;
    res.min_batch = global;
    ranks_.assign(nr, RankSim{});
    commits_.clear();

    double open = 0;
    std::vector<telemetry::StepRecord> records;
    std::vector<std::pair<double, int>> order;
    std::vector<double> on_time_arrivals;
    for (std::uint64_t s = 0; s < sc_.steps; ++s) {
      // Restarted ranks come back healthy.
      for (int r = 0; r < n; ++r) {
        RankSim& rk = ranks_[static_cast<std::size_t>(r)];
        if (rk.down && rk.down_until <= open) {
          rk.down = false;
          rk.cured = true;
          controller.rank_restarted(r);
        }
      }
      // Every rank's plan for the step: Σ b = B, and the coordinator's orders.
      plans_.assign(nr, RankPlan{});
      std::uint64_t sum = 0;
      for (int r = 0; r < n; ++r) {
        RankPlan& p = plans_[static_cast<std::size_t>(r)];
        p = controller.plan_for(r, s);
        sum += p.local_batch;
        res.min_batch = std::min(res.min_batch, p.local_batch);
        res.max_batch = std::max(res.max_batch, p.local_batch);
        if (p.resplit) {
          ++res.resplits;
          res.resplit_samples += dds.resplit(r);
        }
      }
      if (sum != global) violation(res, cat("step ", s, ": local batches add up to ", sum, ", not ", global));
      const LatePolicy late = plans_[0].late;
      const std::uint32_t staleness = plans_[0].staleness;
      const bool bsp_step = late == LatePolicy::wait || s < sc_.warmup;

      for (int r = 0; r < n; ++r) {
        RankSim& rk = ranks_[static_cast<std::size_t>(r)];
        if (!rk.down && !rk.inflight) start(r, s, open, dds, res);
      }

      // When the step closes. Ranks without data this step (the DDS said wait)
      // do not take part: they wait for samples, they do not arrive.
      double close = open;
      on_time_arrivals.clear();
      double waited_max = open;
      double first_late = std::numeric_limits<double>::infinity();
      for (int r = 0; r < n; ++r) {
        const RankSim& rk = ranks_[static_cast<std::size_t>(r)];
        if (!rk.inflight) continue;
        if (bsp_step) {
          close = std::max(close, rk.arrive);
        } else if (rk.target == s) {
          on_time_arrivals.push_back(rk.arrive);
          const StragglerClass cls = monitor.classify(r);
          if (cls != StragglerClass::deterministic && cls != StragglerClass::persistent) {
            waited_max = std::max(waited_max, rk.arrive);
          }
        } else {
          first_late = std::min(first_late, rk.arrive);
        }
      }
      if (!bsp_step && !on_time_arrivals.empty()) {
        std::sort(on_time_arrivals.begin(), on_time_arrivals.end());
        const auto quorum = static_cast<std::size_t>(std::ceil(sc_.quorum * static_cast<double>(on_time_arrivals.size())));
        const std::size_t q = std::clamp<std::size_t>(quorum, 1, on_time_arrivals.size());
        const double t_q = on_time_arrivals[q - 1];
        const double grace = sc_.grace_s > 0 ? sc_.grace_s : std::max(monitor.grace(), 1e-3);
        close = std::max(t_q, std::min(t_q + grace, waited_max));
      } else if (!bsp_step && std::isfinite(first_late)) {
        close = std::max(open, first_late);  // only late work in flight: the step ends with the first of it
      }

      // Late contributions arriving while the step is open, in arrival order.
      records.clear();
      std::size_t participants = 0;
      order.clear();
      for (int r = 0; r < n; ++r) {
        const RankSim& rk = ranks_[static_cast<std::size_t>(r)];
        if (rk.inflight && rk.target < s && rk.arrive <= close) order.emplace_back(rk.arrive, r);
      }
      std::sort(order.begin(), order.end());
      for (const auto& [arrive, r] : order) {
        RankSim& rk = ranks_[static_cast<std::size_t>(r)];
        const std::uint64_t lateness = s - rk.target;
        const bool include = bsp_step || (late == LatePolicy::defer && lateness <= staleness);
        settle(r, s, include, close, dds, res, records);
        if (include) {
          ++participants;
          ++res.deferred;
        } else {
          ++res.dropped;
        }
        // It fetches the results it missed, then works on the open step.
        const double free = arrive + static_cast<double>(lateness) * (sc_.alpha_s + sc_.gradient_bytes * sc_.beta_s_per_byte);
        if (!bsp_step && free <= close && !rk.down) {
          start(r, s, free, dds, res);
        }
      }
      // On-time contributions.
      for (int r = 0; r < n; ++r) {
        RankSim& rk = ranks_[static_cast<std::size_t>(r)];
        if (rk.inflight && rk.target == s && rk.arrive <= close) {
          settle(r, s, true, close, dds, res, records);
          ++participants;
        }
      }
      const double transfer = ring_allreduce_s(static_cast<int>(participants), sc_.gradient_bytes, sc_.alpha_s,
                                               sc_.beta_s_per_byte);
      for (telemetry::StepRecord& rec : records) {
        rec.transfer_s = transfer;
        rec.step_s = close + transfer - rec.t_begin;
      }
      open = close + transfer;
      if (controller.on_step(s, records)) ++res.decisions;
      if (step_log_ != nullptr) {
        const sched::DdsProgress pr = dds.progress();
        std::size_t in_flight = 0;
        for (const RankSim& rk : ranks_) in_flight += rk.inflight ? 1 : 0;
        std::fprintf(step_log_,
                     "step %llu open %.4f close %.4f participants %zu on-time %zu in-flight %zu late-policy %d "
                     "epoch %u committed %llu leased %llu unassigned %llu\n",
                     static_cast<unsigned long long>(s), open, close, participants, on_time_arrivals.size(), in_flight,
                     static_cast<int>(late), pr.epoch, static_cast<unsigned long long>(pr.committed),
                     static_cast<unsigned long long>(pr.leased), static_cast<unsigned long long>(pr.unassigned));
      }
      const sched::ControllerStats cs = controller.stats();
      res.decide_max_s = std::max(res.decide_max_s, cs.last_decide_s);
      res.decide_cpu_max_s = std::max(res.decide_cpu_max_s, cs.last_decide_cpu_s);
    }
    // The run ends: contributions still in flight give their samples back.
    for (int r = 0; r < n; ++r) {
      if (ranks_[static_cast<std::size_t>(r)].inflight) {
        std::vector<telemetry::StepRecord> unused;
        settle(r, sc_.steps, false, open, dds, res, unused);
      }
    }
    const sched::ControllerStats cs = controller.stats();
    res.decide_mean_s = cs.steps ? cs.total_decide_s / static_cast<double>(cs.steps) : 0;
    res.decide_cpu_mean_s = cs.steps ? cs.total_decide_cpu_s / static_cast<double>(cs.steps) : 0;
    res.restarts = cs.restarts_ordered;
    res.steps = sc_.steps;
    res.sim_time_s = open;
    res.samples_per_s = open > 0 ? static_cast<double>(res.committed) / open : 0;
    std::vector<double> standalone(nr);
    for (int r = 0; r < n; ++r) standalone[static_cast<std::size_t>(r)] = model_.standalone_samples_per_s(r, sc_.steps);
    res.standalone_samples_per_s = std::accumulate(standalone.begin(), standalone.end(), 0.0);
    res.efficiency = res.standalone_samples_per_s > 0 ? res.samples_per_s / res.standalone_samples_per_s : 0;
    // BSP theory: every step lasts as long as its slowest rank's compute.
    double bsp_time = 0;
    for (std::uint64_t s = 0; s < sc_.steps; ++s) {
      double worst = 0;
      for (int r = 0; r < n; ++r) worst = std::max(worst, model_.factor(r, s) * model_.noise(r, s));
      bsp_time += worst * sc_.per_sample_s * static_cast<double>(sc_.batch_per_rank);
    }
    res.bsp_theory = static_cast<double>(global * sc_.steps) / bsp_time / res.standalone_samples_per_s;

    // Exactly once per epoch: every finished epoch had each sample committed once.
    const sched::DdsProgress progress = dds.progress();
    res.epochs_completed = progress.epochs_completed;
    for (std::size_t e = 0; e < commits_.size(); ++e) {
      const auto ones = static_cast<std::uint64_t>(std::count(commits_[e].begin(), commits_[e].end(), 1));
      if (e < progress.epoch && ones != dataset) {
        violation(res, cat("epoch ", e, " finished with ", ones, " of ", dataset, " samples committed once"));
      }
    }
    if (progress.committed + progress.leased + progress.unassigned != progress.epoch_samples) {
      violation(res, "DDS progress does not add up");
    }
    if (progress.leased != 0) violation(res, cat(progress.leased, " samples still leased at the end"));
    return res;
  }

 private:
  struct Lease {
    std::uint64_t id = 0;
    std::uint32_t epoch = 0;
    std::vector<std::uint64_t> samples;
  };
  struct RankSim {
    bool inflight = false;
    std::uint64_t target = 0;
    double start = 0, arrive = 0, compute = 0;
    std::uint64_t samples = 0;
    std::vector<Lease> leases;
    bool down = false, cured = false;
    double down_until = 0;
  };

  void violation(Result& res, std::string what) {
    if (res.violations.size() < 20) res.violations.push_back(std::move(what));
  }

  // Rank r starts its contribution to `target` at time t (or restarts when told).
  void start(int r, std::uint64_t target, double t, sched::Dds& dds, Result& res) {
    RankSim& rk = ranks_[static_cast<std::size_t>(r)];
    const RankPlan& plan = plans_[static_cast<std::size_t>(r)];
    if (plan.restart) {
      rk.down = true;
      rk.down_until = t + sc_.restart_delay_s;
      return;
    }
    rk.leases.clear();
    rk.samples = 0;
    while (rk.samples < plan.local_batch) {
      sched::Batch b = dds.fetch(r, plan.local_batch - rk.samples);
      if (b.status != sched::FetchStatus::ok) break;
      rk.samples += b.samples.size();
      rk.leases.push_back(Lease{b.lease, b.epoch, std::move(b.samples)});
    }
    if (rk.samples == 0) return;  // no data now: it waits for samples instead of arriving
    rk.compute = model_.compute_s(r, target, rk.samples, plan.micro_batches, rk.cured);
    rk.start = t;
    rk.arrive = t + rk.compute;
    rk.target = target;
    rk.inflight = true;
    ++res.contributions;
  }

  // The contribution of rank r ends: its samples are committed (in a result) or given back.
  void settle(int r, std::uint64_t step, bool include, double close, sched::Dds& dds, Result& res,
              std::vector<telemetry::StepRecord>& records) {
    RankSim& rk = ranks_[static_cast<std::size_t>(r)];
    for (Lease& l : rk.leases) {
      if (include) {
        if (!dds.commit(l.id)) violation(res, cat("lease ", l.id, " of rank ", r, " was not open at commit"));
        if (commits_.size() <= l.epoch) commits_.resize(l.epoch + 1);
        auto& counts = commits_[l.epoch];
        if (counts.empty()) counts.assign(dds.dataset().size(), 0);
        for (std::uint64_t id : l.samples) {
          if (++counts[id] > 1) violation(res, cat("sample ", id, " committed twice in epoch ", l.epoch));
        }
        res.committed += l.samples.size();
      } else {
        if (!dds.give_back(l.id)) violation(res, cat("lease ", l.id, " of rank ", r, " was not open at give-back"));
        res.given_back += l.samples.size();
      }
    }
    rk.leases.clear();
    rk.inflight = false;
    telemetry::StepRecord rec;
    rec.rank = r;
    rec.step = step;
    rec.t_begin = rk.start;
    rec.compute_s = rk.compute;
    rec.samples = rk.samples;
    rec.wait_s = std::max(0.0, close - rk.arrive);
    records.push_back(rec);
  }

  Scenario sc_;          // a copy: the caller's scenario may be a temporary
  ComputeModel model_;   // refers to sc_
  std::string policy_, policy_config_;
  std::vector<RankSim> ranks_;
  std::vector<RankPlan> plans_;
  std::vector<std::vector<std::uint8_t>> commits_;  // per epoch, per sample: times committed
  std::FILE* step_log_ = nullptr;
};

inline Result simulate(const Scenario& sc, const std::string& policy, const std::string& policy_config = "{}") {
  return Simulation(sc, policy, policy_config).run();
}

}  // namespace antdt::sim
