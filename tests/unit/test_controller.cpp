// The Controller and its policies (scheduler/controller.hpp, docs/scheduler.md):
// batch splits against independent references, clamps, micro-batches,
// hysteresis under noise, Monitor classes -> late policies, restart orders,
// the step-agreement rule (threads asking plans while decisions are made),
// the registry and configuration errors.
#include <antdt/scheduler.hpp>

#include "core/config.hpp"
#include "core/error.hpp"
#include "scheduler/controller.hpp"
#include "collectives/telemetry/monitor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace antdt::sched {
namespace {

std::uint64_t sum_of(const std::vector<std::uint64_t>& v) { return std::accumulate(v.begin(), v.end(), std::uint64_t{0}); }
std::uint64_t sum_batches(const std::vector<RankPlan>& plans) {
  std::uint64_t s = 0;
  for (const RankPlan& p : plans) s += p.local_batch;
  return s;
}

// ---------------------------------------------------------------------------
// split_batch / plan_for_batch
// ---------------------------------------------------------------------------

TEST(SplitBatch, LargestRemainderWithTiesToTheLowerIndex) {
  const std::vector<double> equal{1, 1, 1};
  EXPECT_EQ(split_batch(10, equal, 0, 10), (std::vector<std::uint64_t>{4, 3, 3}));
  EXPECT_EQ(split_batch(11, equal, 0, 11), (std::vector<std::uint64_t>{4, 4, 3}));
  // 7 * (1,2,4)/7 = 1,2,4 exactly.
  EXPECT_EQ(split_batch(7, std::vector<double>{1, 2, 4}, 0, 7), (std::vector<std::uint64_t>{1, 2, 4}));
  // 10 * (1,1,2)/4 = 2.5, 2.5, 5: one extra sample, to the lower index of the tie.
  EXPECT_EQ(split_batch(10, std::vector<double>{1, 1, 2}, 0, 10), (std::vector<std::uint64_t>{3, 2, 5}));
  // 100 * (0.7, 0.2, 0.1) with remainders .0: exact.
  EXPECT_EQ(split_batch(100, std::vector<double>{7, 2, 1}, 0, 100), (std::vector<std::uint64_t>{70, 20, 10}));
}

TEST(SplitBatch, RandomWeightsMatchTheProportionalReference) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> w(0.01, 10.0);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + rng() % 64;
    const std::uint64_t total = rng() % 5000;
    std::vector<double> weights(n);
    for (double& x : weights) x = w(rng);
    const std::vector<std::uint64_t> b = split_batch(total, weights, 0, total);
    ASSERT_EQ(sum_of(b), total);
    const double wsum = std::accumulate(weights.begin(), weights.end(), 0.0);
    // Largest remainder: each share is the floor or the ceiling of its exact value.
    std::size_t ceilings = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double exact = static_cast<double>(total) * weights[i] / wsum;
      ASSERT_GE(static_cast<double>(b[i]), std::floor(exact) - 1e-6) << "trial " << trial << " rank " << i;
      ASSERT_LE(static_cast<double>(b[i]), std::ceil(exact) + 1e-6) << "trial " << trial << " rank " << i;
      if (static_cast<double>(b[i]) > exact + 1e-9) ++ceilings;
    }
    // Exactly total - sum(floors) shares were rounded up.
    std::uint64_t floors = 0;
    for (std::size_t i = 0; i < n; ++i) {
      floors += static_cast<std::uint64_t>(std::floor(static_cast<double>(total) * weights[i] / wsum + 1e-9));
    }
    ASSERT_EQ(ceilings, total - floors) << "trial " << trial;
  }
}

TEST(SplitBatch, ClampsRedistributeTheRest) {
  // 30 by (100, 1, 1) with at most 12 each: the fast rank is capped, the rest split evenly.
  EXPECT_EQ(split_batch(30, std::vector<double>{100, 1, 1}, 0, 12), (std::vector<std::uint64_t>{12, 9, 9}));
  // 30 by (1, 100, 100) with at least 5 each: the slow rank is raised, the rest split the remainder.
  EXPECT_EQ(split_batch(30, std::vector<double>{1, 100, 100}, 5, 30), (std::vector<std::uint64_t>{5, 13, 12}));
  // A weight of 0 gets the lower bound.
  EXPECT_EQ(split_batch(10, std::vector<double>{0, 1}, 2, 10), (std::vector<std::uint64_t>{2, 8}));
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> w(0.0, 5.0);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + rng() % 40;
    const std::uint64_t lo = rng() % 8, hi = lo + 1 + rng() % 40;
    const std::uint64_t total = lo * n + rng() % ((hi - lo) * n + 1);
    std::vector<double> weights(n);
    for (double& x : weights) x = w(rng) + 0.001;
    const std::vector<std::uint64_t> b = split_batch(total, weights, lo, hi);
    ASSERT_EQ(sum_of(b), total);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_GE(b[i], lo);
      ASSERT_LE(b[i], hi);
      // Monotone: a heavier weight never gets fewer samples (rounding may tie them).
      for (std::size_t j = 0; j < n; ++j) {
        if (weights[i] > weights[j]) {
          ASSERT_GE(b[i] + 1, b[j]) << "trial " << trial;
        }
      }
    }
  }
}

TEST(SplitBatch, InfeasibleBoundsAndBadWeightsAreErrors) {
  const std::vector<double> two{1, 1};
  EXPECT_THROW(split_batch(10, two, 6, 10), InvalidArgument);   // 2 x 6 > 10
  EXPECT_THROW(split_batch(10, two, 0, 4), InvalidArgument);    // 2 x 4 < 10
  EXPECT_THROW(split_batch(10, std::vector<double>{0, 0}, 0, 10), InvalidArgument);
  EXPECT_THROW(split_batch(10, std::vector<double>{1, -1}, 0, 10), InvalidArgument);
  EXPECT_THROW(split_batch(10, std::vector<double>{1, NAN}, 0, 10), InvalidArgument);
  EXPECT_THROW(split_batch(10, std::vector<double>{}, 0, 10), InvalidArgument);
  EXPECT_THROW(split_batch(10, two, 5, 4), InvalidArgument);
}

TEST(PlanForBatch, MicroBatchesAreCeilOfTheCap) {
  RankPlan p = plan_for_batch(100, 32);
  EXPECT_EQ(p.micro_batches, 4u);   // ceil(100 / 32)
  EXPECT_EQ(p.micro_batch, 25u);    // balanced passes, each <= 32
  p = plan_for_batch(64, 32);
  EXPECT_EQ(p.micro_batches, 2u);
  EXPECT_EQ(p.micro_batch, 32u);
  p = plan_for_batch(65, 32);
  EXPECT_EQ(p.micro_batches, 3u);
  EXPECT_EQ(p.micro_batch, 22u);    // 22 + 22 + 21
  p = plan_for_batch(100, 0);
  EXPECT_EQ(p.micro_batches, 1u);
  EXPECT_EQ(p.micro_batch, 100u);
  p = plan_for_batch(0, 16);
  EXPECT_EQ(p.micro_batches, 1u);
  EXPECT_EQ(p.micro_batch, 0u);
}

// ---------------------------------------------------------------------------
// A synthetic job: per-rank time per sample, a factor schedule, noise.
// ---------------------------------------------------------------------------

struct Job {
  int n;
  std::uint64_t batch;
  telemetry::Monitor monitor;
  std::unique_ptr<Controller> controller;
  std::uint64_t step = 0;
  std::mt19937_64 rng{42};
  double noise = 0;  // relative, uniform in [-noise, noise]

  Job(int ranks, std::uint64_t global_batch, std::string_view policy, std::string_view config = "{}",
      telemetry::MonitorConfig mc = {})
      : n(ranks), batch(global_batch), monitor(ranks, mc) {
    ControllerOptions o;
    o.world_size = ranks;
    o.global_batch = global_batch;
    const ControllerOptions::Split split = ControllerOptions::split_config(o, config);
    controller = std::make_unique<Controller>(monitor, make_policy(policy, split.policy_config), split.options);
  }

  // One step: every rank asks its plan, computes factor(rank) x 1 ms per sample.
  std::optional<Decision> run_step(const std::function<double(int, std::uint64_t)>& factor) {
    std::vector<telemetry::StepRecord> records(static_cast<std::size_t>(n));
    std::uniform_real_distribution<double> u(-noise, noise);
    for (int r = 0; r < n; ++r) {
      const RankPlan plan = controller->plan_for(r, step);
      telemetry::StepRecord& rec = records[static_cast<std::size_t>(r)];
      rec.rank = r;
      rec.step = step;
      rec.samples = plan.local_batch;
      rec.compute_s = 1e-3 * static_cast<double>(plan.local_batch) * factor(r, step) * (1 + u(rng));
      rec.step_s = rec.compute_s + 1e-3;
      rec.transfer_s = 1e-3;
    }
    return controller->on_step(step++, records);
  }
};

double healthy(int, std::uint64_t) { return 1.0; }

TEST(Controller, BspKeepsEqualPlansForever) {
  Job job(5, 103, "bsp");
  const auto initial = job.controller->latest_plans();
  ASSERT_EQ(initial.size(), 5u);
  EXPECT_EQ(sum_batches(initial), 103u);
  for (const RankPlan& p : initial) {
    EXPECT_TRUE(p.local_batch == 20 || p.local_batch == 21);
    EXPECT_EQ(p.late, LatePolicy::wait);
  }
  for (int s = 0; s < 100; ++s) {
    const auto d = job.run_step([](int r, std::uint64_t) { return r == 2 ? 4.0 : 1.0; });
    EXPECT_FALSE(d.has_value());
  }
  EXPECT_EQ(job.controller->latest_plans(), initial);
  EXPECT_EQ(job.controller->stats().decisions, 0u);
}

TEST(Controller, DdGivesASlowRankABatchInProportionToItsSpeed) {
  // The full split at the warm-up's end (the early one is the next test's).
  Job job(4, 400, "antdt-dd", R"({"warmup": 5, "interval": 10, "early_split": 0})");
  std::optional<Decision> first;
  for (int s = 0; s < 40 && !first; ++s) {
    first = job.run_step([](int r, std::uint64_t) { return r == 3 ? 3.0 : 1.0; });
  }
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(job.monitor.classify(3), StragglerClass::deterministic);
  ASSERT_EQ(first->plans.size(), 4u);
  EXPECT_EQ(sum_batches(first->plans), 400u);
  // Speeds 1, 1, 1, 1/3: shares 3/10 each and 1/10.
  EXPECT_EQ(first->plans[0].local_batch, 120u);
  EXPECT_EQ(first->plans[1].local_batch, 120u);
  EXPECT_EQ(first->plans[2].local_batch, 120u);
  EXPECT_EQ(first->plans[3].local_batch, 40u);
  EXPECT_EQ(first->plans[3].late, LatePolicy::wait);  // deterministic, not transient
  EXPECT_GT(first->effective_step, first->decided_after);
  // Balanced now: per-sample speed is unchanged, so no further decision.
  for (int s = 0; s < 100; ++s) EXPECT_FALSE(job.run_step([](int r, std::uint64_t) { return r == 3 ? 3.0 : 1.0; }));
}

// Before the warm-up ends, one early split for a rank far slower than the
// others (its batch moves by more than half); a milder one waits for the
// warm-up; the split at the warm-up's end may correct the early one whatever
// the interval.
TEST(Controller, DdSplitsEarlyOnlyForAFarSlowerRank) {
  auto decisions = [](std::string_view config, const std::function<double(int, std::uint64_t)>& factor) {
    Job job(4, 400, "antdt-dd", config);
    std::vector<Decision> out;
    for (int s = 0; s < 30; ++s)
      if (auto d = job.run_step(factor)) out.push_back(*d);
    return out;
  };
  const auto third = [](int r, std::uint64_t) { return r == 3 ? 3.0 : 1.0; };
  const auto early = decisions(R"({"warmup": 5, "interval": 10})", third);
  ASSERT_EQ(early.size(), 1u);  // the warm-up's end finds nothing left to move
  EXPECT_EQ(early[0].decided_after, 2u);
  EXPECT_EQ(early[0].plans[3].local_batch, 40u);
  EXPECT_EQ(early[0].plans[0].local_batch, 120u);
  EXPECT_EQ(early[0].plans[3].late, LatePolicy::wait);
  const auto off = decisions(R"({"warmup": 5, "interval": 10, "early_split": 0})", third);
  ASSERT_EQ(off.size(), 1u);
  EXPECT_EQ(off[0].decided_after, 5u);
  EXPECT_EQ(off[0].plans[3].local_batch, 40u);

  // 1.5x slower: 100 -> 73 samples, a move of 27%: no early split.
  const auto mild = decisions(R"({"warmup": 5, "interval": 10})", [](int r, std::uint64_t) { return r == 3 ? 1.5 : 1.0; });
  ASSERT_GE(mild.size(), 1u);
  EXPECT_EQ(mild[0].decided_after, 5u);

  // 4x slower only in the first three steps (one-time costs): the early split
  // is corrected at the warm-up's end, not `interval` steps after it.
  const auto passing = decisions(R"({"warmup": 5, "interval": 10})",
                                 [](int r, std::uint64_t step) { return r == 3 && step <= 2 ? 4.0 : 1.0; });
  ASSERT_GE(passing.size(), 2u);
  EXPECT_EQ(passing[0].decided_after, 2u);
  EXPECT_LT(passing[0].plans[3].local_batch, 40u);
  EXPECT_EQ(passing[1].decided_after, 5u);
  EXPECT_GT(passing[1].plans[3].local_batch, passing[0].plans[3].local_batch);
}

TEST(Controller, DdClampsAndMicroBatchCap) {
  Job job(4, 400, "antdt-dd",
          R"({"warmup": 3, "min_local_batch": 60, "max_local_batch": 130, "micro_batch_cap": 32})");
  // The initial plans already respect the cap: 100 -> 4 passes of 25.
  for (const RankPlan& p : job.controller->latest_plans()) {
    EXPECT_EQ(p.micro_batches, 4u);
    EXPECT_EQ(p.micro_batch, 25u);
  }
  std::optional<Decision> d;
  for (int s = 0; s < 40 && !d; ++s) d = job.run_step([](int r, std::uint64_t) { return r == 0 ? 10.0 : 1.0; });
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(sum_batches(d->plans), 400u);
  // Unclamped: 400 * (0.1 / 3.1) = 13 for rank 0; clamped to 60, the rest 340/3.
  EXPECT_EQ(d->plans[0].local_batch, 60u);
  EXPECT_EQ(d->plans[0].micro_batches, 2u);
  EXPECT_EQ(d->plans[0].micro_batch, 30u);
  for (int r = 1; r < 4; ++r) {
    const RankPlan& p = d->plans[static_cast<std::size_t>(r)];
    EXPECT_TRUE(p.local_batch == 113 || p.local_batch == 114) << p.local_batch;
    EXPECT_EQ(p.micro_batches, 4u);  // ceil(113 / 32)
    EXPECT_LE(p.micro_batch, 32u);
    EXPECT_GE(p.micro_batch * p.micro_batches, p.local_batch);
  }
}

TEST(Controller, DdHysteresisDoesNotOscillateUnderNoise) {
  // Equal ranks with +-8% noise: never worth a change with a 10% threshold.
  {
    Job job(8, 512, "antdt-dd", R"({"warmup": 5, "interval": 5, "threshold": 0.1})");
    job.noise = 0.08;
    for (int s = 0; s < 300; ++s) job.run_step(healthy);
    EXPECT_EQ(job.controller->stats().decisions, 0u);
  }
  // One rank 2x slower with the same noise: one rebalance, then it holds.
  {
    Job job(8, 512, "antdt-dd", R"({"warmup": 5, "interval": 5, "threshold": 0.1})");
    job.noise = 0.08;
    std::vector<std::uint64_t> decided_at;
    for (int s = 0; s < 300; ++s) {
      if (auto d = job.run_step([](int r, std::uint64_t) { return r == 5 ? 2.0 : 1.0; })) decided_at.push_back(d->decided_after);
    }
    ASSERT_GE(decided_at.size(), 1u);
    EXPECT_LE(decided_at.size(), 2u);  // the first estimate may be refined once
    EXPECT_LT(decided_at.back(), 60u);
    const auto plans = job.controller->latest_plans();
    EXPECT_EQ(sum_batches(plans), 512u);
    const double fast = static_cast<double>(plans[0].local_batch), slow = static_cast<double>(plans[5].local_batch);
    EXPECT_NEAR(fast / slow, 2.0, 0.3);
  }
}

TEST(Controller, DdDefersWhileARankHasTransientSpikesThenWaitsAgain) {
  Job job(4, 400, "antdt-dd", R"({"warmup": 5, "interval": 10, "staleness": 2})");
  // Normal for 30 steps, a 6x spike on rank 1 for 2 steps, then normal.
  const auto spike = [](int r, std::uint64_t s) { return r == 1 && (s == 30 || s == 31) ? 6.0 : 1.0; };
  bool deferred = false, back_to_wait = false;
  for (int s = 0; s < 200; ++s) {
    if (auto d = job.run_step(spike)) {
      for (const RankPlan& p : d->plans) EXPECT_EQ(p.late, d->plans[0].late);  // one policy for all
      if (d->plans[0].late == LatePolicy::defer) {
        deferred = true;
        EXPECT_EQ(d->plans[0].staleness, 2u);
        EXPECT_GE(d->decided_after, 30u);
        // The spike did not move batches: the transient rank keeps its speed.
        EXPECT_EQ(d->plans[1].local_batch, 100u);
      } else if (deferred) {
        back_to_wait = true;
      }
    }
  }
  EXPECT_TRUE(deferred);
  EXPECT_TRUE(back_to_wait);  // the rank stays transient for a window (64 steps), then healthy
  EXPECT_EQ(job.controller->latest_plans()[0].late, LatePolicy::wait);
}

// A rank stalled in bursts (as under a CPU quota): 6x on every 4th step, 2x
// otherwise, 3x on average. The Monitor calls it slow throughout (never
// transient), so only its jitter (p90/median of time per sample: 3) shows
// that waiting for it every step costs more than its average. A rank steady
// at 3x never turns defer on.
TEST(Controller, DdDefersWhileARankComputesInBurstsButNotForASteadySlowRank) {
  const auto bursty = [](int r, std::uint64_t s) { return r == 2 ? (s % 4 == 0 ? 6.0 : 2.0) : 1.0; };
  const auto steady = [](int r, std::uint64_t) { return r == 2 ? 3.0 : 1.0; };
  struct Seen {
    std::uint64_t first_defer = 0;  // 0: never
    bool rebalanced = false;
  };
  const auto run = [](std::string_view config, const std::function<double(int, std::uint64_t)>& factor) {
    Job job(4, 400, "antdt-dd", config);
    Seen seen;
    for (int s = 0; s < 200; ++s) {
      if (auto d = job.run_step(factor)) {
        for (const RankPlan& p : d->plans) EXPECT_EQ(p.late, d->plans[0].late);  // one policy for all
        if (d->plans[2].local_batch < 100) seen.rebalanced = true;
        if (d->plans[0].late == LatePolicy::defer && seen.first_defer == 0) seen.first_defer = d->decided_after;
      }
      EXPECT_NE(job.monitor.classify(2), StragglerClass::transient) << "step " << s;
    }
    return seen;
  };
  const Seen with = run(R"({"warmup": 5, "interval": 10})", bursty);
  EXPECT_TRUE(with.rebalanced);
  EXPECT_GT(with.first_defer, 0u) << "a bursty rank turns defer on";
  EXPECT_LE(with.first_defer, 20u);
  const Seen off = run(R"({"warmup": 5, "interval": 10, "jitter": 0})", bursty);
  EXPECT_TRUE(off.rebalanced);
  EXPECT_EQ(off.first_defer, 0u) << "jitter 0 turns the rule off";
  const Seen calm = run(R"({"warmup": 5, "interval": 10})", steady);
  EXPECT_TRUE(calm.rebalanced);
  EXPECT_EQ(calm.first_defer, 0u) << "a steady slow rank is rebalanced, never deferred";
}

// The same bursty rank (6x every 4th step, 2x otherwise: 3x on average) under
// a split every 10 steps. Its EWMA per sample cycles between about 2.5x and
// 3.6x with its stalls, so a split taken from it gives the rank 34 to 46 of
// 400 samples depending on where in its cycle the decision falls (under the
// EWMA the batch moved 30 times after step 100). Its sustained
// speed (samples over compute, summed over about 64 steps) is 1/3 within a
// few percent wherever the decision falls: 400 / 3.33 = 40 samples, held.
TEST(Controller, DdSplitsABurstyRankByItsSustainedSpeed) {
  const auto bursty = [](int r, std::uint64_t s) { return r == 2 ? (s % 4 == 0 ? 6.0 : 2.0) : 1.0; };
  Job job(4, 400, "antdt-dd", R"({"warmup": 5, "interval": 10})");
  std::vector<std::uint64_t> batches_after_settling;  // rank 2's new batches from step 100 on
  std::uint64_t previous = job.controller->latest_plans()[2].local_batch;
  for (int s = 0; s < 400; ++s) {
    if (auto d = job.run_step(bursty)) {
      EXPECT_EQ(sum_batches(d->plans), 400u);
      const std::uint64_t b = d->plans[2].local_batch;
      if (s >= 100 && b != previous) batches_after_settling.push_back(b);
      previous = b;
    }
  }
  const std::uint64_t last = job.controller->latest_plans()[2].local_batch;
  EXPECT_GE(last, 37u);
  EXPECT_LE(last, 43u);
  // A new split needs a move of more than 10 %: from step 100 on, none.
  EXPECT_TRUE(batches_after_settling.empty()) << "rank 2's batch still moved " << batches_after_settling.size()
                                              << " times after step 100, last to " << batches_after_settling.back();
}

TEST(Controller, NdDropsResplitsAndRestartsAPersistentStragglerOnce) {
  Job job(6, 600, "antdt-nd", R"({"warmup": 5, "restart_cooldown": 1000, "resplit_interval": 1000})");
  // Rank 4 turns 4x slower at step 30 and stays slow: persistent 10 steps later.
  const auto persistent = [](int r, std::uint64_t s) { return r == 4 && s >= 30 ? 4.0 : 1.0; };
  int restart_decisions = 0, resplit_orders = 0;
  std::uint64_t restart_effective = 0;
  for (int s = 0; s < 120; ++s) {
    if (auto d = job.run_step(persistent)) {
      EXPECT_EQ(sum_batches(d->plans), 600u);
      for (const RankPlan& p : d->plans) EXPECT_EQ(p.local_batch, 100u);  // nd never changes batches
      if (d->plans[4].restart) {
        ++restart_decisions;
        restart_effective = d->effective_step;
      }
      if (d->plans[4].resplit) ++resplit_orders;
      EXPECT_EQ(d->plans[0].late, LatePolicy::drop);
    }
  }
  EXPECT_EQ(restart_decisions, 1);
  EXPECT_EQ(resplit_orders, 1);  // resplit_interval 1000: once
  EXPECT_EQ(job.controller->restarting(), std::vector<int>{4});
  // The order stands (every answer to rank 4) until its new process is up.
  EXPECT_TRUE(job.controller->plan_for(4, restart_effective).restart);
  EXPECT_TRUE(job.controller->plan_for(4, job.step).restart);
  EXPECT_FALSE(job.controller->plan_for(3, job.step).restart);
  job.controller->rank_restarted(4);
  EXPECT_FALSE(job.controller->plan_for(4, job.step).restart);
  EXPECT_TRUE(job.controller->restarting().empty());
  EXPECT_EQ(job.controller->stats().restarts_ordered, 1u);
}

TEST(Controller, NdRestartsAtMostOneRankAtATime) {
  Job job(6, 600, "antdt-nd", R"({"warmup": 5, "restart_cooldown": 0})");
  const auto two = [](int r, std::uint64_t s) { return (r == 1 || r == 2) && s >= 30 ? 5.0 : 1.0; };
  for (int s = 0; s < 100; ++s) {
    job.run_step(two);
    EXPECT_LE(job.controller->restarting().size(), 1u) << "step " << s;
  }
  ASSERT_EQ(job.controller->restarting().size(), 1u);
  const int first = job.controller->restarting()[0];
  job.controller->rank_restarted(first);
  // With the cooldown at 0 the other persistent rank is next.
  job.run_step(two);
  ASSERT_EQ(job.controller->restarting().size(), 1u);
  EXPECT_NE(job.controller->restarting()[0], first);
  EXPECT_EQ(job.controller->stats().restarts_ordered, 2u);
}

TEST(Controller, ResplitOrderGoesOutOnce) {
  Job job(3, 300, "antdt-nd", R"({"warmup": 2, "restart": false})");
  std::optional<Decision> d;
  for (int s = 0; s < 40 && !(d && d->plans[0].resplit); ++s) {
    d = job.run_step([](int r, std::uint64_t) { return r == 0 ? 3.0 : 1.0; });
  }
  ASSERT_TRUE(d && d->plans[0].resplit);
  const std::uint64_t e = d->effective_step;
  const RankPlan first = job.controller->plan_for(0, e);
  const RankPlan again = job.controller->plan_for(0, e);
  EXPECT_TRUE(first.resplit);
  EXPECT_FALSE(again.resplit);
  RankPlan without = first;
  without.resplit = false;
  EXPECT_EQ(again, without);  // every other field identical
  EXPECT_EQ(job.controller->stats().resplits_delivered, 1u);
}

// ---------------------------------------------------------------------------
// The agreement rule
// ---------------------------------------------------------------------------

// Changes the plans at every decide(): rank 0 gets B - (n-1)k, the others k,
// with k = 1, 2, 3, ... (mod B/n): the plans say which decision they are from.
class CyclingPolicy final : public Policy {
 public:
  std::string_view name() const noexcept override { return "test-cycling"; }
  std::optional<std::vector<RankPlan>> decide(const PolicyContext& ctx, const MonitorView&) override {
    const std::uint64_t limit = ctx.global_batch / static_cast<std::uint64_t>(ctx.world_size);
    k_ = k_ % limit + 1;
    std::vector<RankPlan> plans(static_cast<std::size_t>(ctx.world_size));
    for (std::size_t r = 1; r < plans.size(); ++r) plans[r] = plan_for_batch(k_, 0);
    plans[0] = plan_for_batch(ctx.global_batch - k_ * (plans.size() - 1), 0);
    return plans;
  }

 private:
  std::uint64_t k_ = 0;
};

std::uint64_t tag_of(const RankPlan& p, int rank, std::uint64_t global, int n) {
  return rank == 0 ? (global - p.local_batch) / static_cast<std::uint64_t>(n - 1) : p.local_batch;
}

TEST(ControllerAgreement, DecisionTakesEffectAfterTheHighestStepAsked) {
  telemetry::Monitor monitor(3, telemetry::MonitorConfig{});
  ControllerOptions o;
  o.world_size = 3;
  o.global_batch = 300;
  Controller c(monitor, std::make_unique<CyclingPolicy>(), o);
  // Rank 0 is ahead: it asked step 7 already; ranks 1 and 2 are at step 2.
  const RankPlan r0s7 = c.plan_for(0, 7);
  const RankPlan r1s2 = c.plan_for(1, 2);
  const auto d = c.on_step(2, {});
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->effective_step, 8u);  // 1 + highest asked
  EXPECT_EQ(c.plan_for(0, 7), r0s7);  // asking again: the same plan
  EXPECT_EQ(c.plan_for(1, 2), r1s2);
  EXPECT_EQ(c.plan_for(2, 7).local_batch, 100u);   // the initial plans still
  EXPECT_EQ(c.plan_for(1, 8).local_batch, d->plans[1].local_batch);
  // A second decision before anyone asked step 9 replaces nothing that was seen:
  // effective at 9 (1 + highest asked = 8).
  const auto d2 = c.on_step(3, {});
  ASSERT_TRUE(d2.has_value());
  EXPECT_EQ(d2->effective_step, 9u);
  EXPECT_EQ(c.plan_for(0, 8).local_batch, d->plans[0].local_batch);
  // A third decision before anyone asked step 9 supersedes the second.
  const auto d3 = c.on_step(4, {});
  ASSERT_TRUE(d3.has_value());
  EXPECT_EQ(d3->effective_step, 9u);
  EXPECT_EQ(c.stats().superseded, 1u);
  EXPECT_EQ(c.plan_for(1, 9).local_batch, d3->plans[1].local_batch);
  EXPECT_THROW(c.plan_for(3, 9), InvalidArgument);
  EXPECT_THROW(c.plan_for(-1, 9), InvalidArgument);
}

TEST(ControllerAgreement, ThreadsNeverSeeTwoPlanSetsInOneStep) {
  constexpr int kRanks = 6;
  constexpr std::uint64_t kSteps = 400;
  constexpr std::uint64_t kBatch = 600;
  telemetry::Monitor monitor(kRanks, telemetry::MonitorConfig{});
  ControllerOptions o;
  o.world_size = kRanks;
  o.global_batch = kBatch;
  Controller c(monitor, std::make_unique<CyclingPolicy>(), o);

  // Ranks run ahead of the decisions at different paces; a decider thread makes
  // a decision "after" the lowest step every rank has finished, continuously.
  std::vector<std::vector<std::uint64_t>> tags(kRanks, std::vector<std::uint64_t>(kSteps));
  std::vector<std::atomic<std::uint64_t>> done(kRanks);
  std::atomic<bool> stop{false};
  std::thread decider([&] {
    std::uint64_t step = 0;
    while (!stop.load()) {
      std::uint64_t low = kSteps;
      for (auto& d : done) low = std::min(low, d.load());
      if (low > step) step = low;
      c.on_step(step, {});
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      std::mt19937 rng(static_cast<unsigned>(r));
      for (std::uint64_t s = 0; s < kSteps; ++s) {
        const RankPlan p = c.plan_for(r, s);
        tags[static_cast<std::size_t>(r)][s] = tag_of(p, r, kBatch, kRanks);
        // Asking twice gives the same plan.
        const RankPlan again = c.plan_for(r, s);
        ASSERT_EQ(again, p);
        if (rng() % 4 == 0) std::this_thread::yield();
        // Keep the decider in the race: a rank may run at most a few steps
        // ahead of the decisions (bounded wait; the test fails if it ran out).
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (c.stats().steps < s / 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        done[static_cast<std::size_t>(r)].store(s + 1);
      }
    });
  }
  for (auto& t : ranks) t.join();
  stop.store(true);
  decider.join();

  std::uint64_t changes = 0;
  for (std::uint64_t s = 0; s < kSteps; ++s) {
    for (int r = 1; r < kRanks; ++r) {
      ASSERT_EQ(tags[static_cast<std::size_t>(r)][s], tags[0][s]) << "rank " << r << " step " << s;
    }
    if (s > 0 && tags[0][s] != tags[0][s - 1]) ++changes;
  }
  EXPECT_GT(changes, 0u);  // decisions did take effect while the ranks ran
  EXPECT_GT(c.stats().decisions, 0u);
}

// ---------------------------------------------------------------------------
// Registry and configuration
// ---------------------------------------------------------------------------

class FixedPolicy final : public Policy {
 public:
  explicit FixedPolicy(std::uint64_t extra) : extra_(extra) {}
  std::string_view name() const noexcept override { return "test-fixed"; }
  std::vector<RankPlan> initial(const PolicyContext& ctx) override {
    std::vector<RankPlan> plans = equal_plans(ctx);
    plans[0].local_batch += extra_;
    plans[1].local_batch -= extra_;
    plans[0].micro_batch = plans[0].local_batch;
    plans[1].micro_batch = plans[1].local_batch;
    return plans;
  }
  std::optional<std::vector<RankPlan>> decide(const PolicyContext&, const MonitorView&) override { return std::nullopt; }

 private:
  std::uint64_t extra_;
};

TEST(PolicyRegistry, BuiltinsUserPoliciesAndUnknownNames) {
  const auto names = registered_policies();
  ASSERT_GE(names.size(), 3u);
  EXPECT_EQ(names[0], "bsp");
  EXPECT_EQ(names[1], "antdt-dd");
  EXPECT_EQ(names[2], "antdt-nd");
  register_policy("test-fixed", [](std::string_view config) {
    EXPECT_EQ(config, R"({"extra":3})");
    return std::make_unique<FixedPolicy>(3);
  });
  const auto after = registered_policies();
  EXPECT_NE(std::find(after.begin(), after.end(), "test-fixed"), after.end());

  // Through the configuration, as a program would select it.
  Config cfg = Config::from_env([](std::string_view name) -> std::optional<std::string> {
    if (name == "ANTDT_POLICY") return "test-fixed";
    if (name == "ANTDT_POLICY_CONFIG") return R"({"extra": 3, "micro_batch_cap": 0})";
    return std::nullopt;
  });
  telemetry::Monitor monitor(2, telemetry::MonitorConfig{});
  auto c = Controller::from_config(monitor, cfg, 2, 10);
  EXPECT_EQ(c->policy().name(), "test-fixed");
  EXPECT_EQ(c->plan_for(0, 0).local_batch, 8u);
  EXPECT_EQ(c->plan_for(1, 0).local_batch, 2u);

  try {
    (void)make_policy("no-such-policy", "{}");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ANTDT_POLICY='no-such-policy'"), std::string::npos) << what;
    EXPECT_NE(what.find("bsp, antdt-dd, antdt-nd"), std::string::npos) << what;
    EXPECT_NE(what.find("test-fixed"), std::string::npos) << what;
  }
  EXPECT_THROW(register_policy("antdt-dd", [](std::string_view) { return std::make_unique<FixedPolicy>(0); }),
               InvalidArgument);
  EXPECT_THROW(register_policy("bad name", [](std::string_view) { return std::make_unique<FixedPolicy>(0); }),
               InvalidArgument);
  EXPECT_THROW(register_policy("empty", PolicyFactory{}), InvalidArgument);
}

TEST(PolicyRegistry, PlansThatBreakTheRulesAreRejected) {
  telemetry::Monitor monitor(2, telemetry::MonitorConfig{});
  ControllerOptions o;
  o.world_size = 2;
  o.global_batch = 10;
  // A policy whose initial plans do not add up to B.
  class Short final : public Policy {
   public:
    std::string_view name() const noexcept override { return "short"; }
    std::vector<RankPlan> initial(const PolicyContext&) override { return {plan_for_batch(4, 0), plan_for_batch(5, 0)}; }
    std::optional<std::vector<RankPlan>> decide(const PolicyContext&, const MonitorView&) override { return std::nullopt; }
  };
  try {
    Controller c(monitor, std::make_unique<Short>(), o);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("add up to 9, not the global batch 10"), std::string::npos) << e.what();
  }
  // Mixed late policies: the arbiter needs one per step.
  class Mixed final : public Policy {
   public:
    std::string_view name() const noexcept override { return "mixed"; }
    std::vector<RankPlan> initial(const PolicyContext& ctx) override {
      auto p = equal_plans(ctx);
      p[1].late = LatePolicy::drop;
      return p;
    }
    std::optional<std::vector<RankPlan>> decide(const PolicyContext&, const MonitorView&) override { return std::nullopt; }
  };
  EXPECT_THROW({ Controller c(monitor, std::make_unique<Mixed>(), o); }, InvalidArgument);
  // Bounds no split can meet.
  o.min_local_batch = 6;
  EXPECT_THROW({ Controller c(monitor, make_policy("bsp", "{}"), o); }, InvalidArgument);
  o.min_local_batch = 0;
  o.world_size = 3;  // the Monitor has 2
  EXPECT_THROW({ Controller c(monitor, make_policy("bsp", "{}"), o); }, InvalidArgument);
}

std::string config_error(std::string_view policy, std::string_view json) {
  try {
    (void)make_policy(policy, json);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PolicyConfig, UnknownKeysAndBadValuesNameTheVariableAndTheKey) {
  std::string what = config_error("antdt-dd", R"({"treshold": 0.2})");
  EXPECT_NE(what.find("ANTDT_POLICY_CONFIG"), std::string::npos) << what;
  EXPECT_NE(what.find("\"treshold\""), std::string::npos) << what;
  EXPECT_NE(what.find("threshold"), std::string::npos) << what;  // among the accepted keys
  what = config_error("antdt-dd", R"({"threshold": "high"})");
  EXPECT_NE(what.find("\"threshold\" is \"high\", expected a number in [0, 10]"), std::string::npos) << what;
  what = config_error("antdt-dd", R"({"jitter": 0.8})");
  EXPECT_NE(what.find("\"jitter\" is 0.8, expected 0 (off) or a number above 1"), std::string::npos) << what;
  EXPECT_EQ(config_error("antdt-dd", R"({"jitter": 0})"), "(no error)");
  what = config_error("antdt-nd", R"({"restart": 1})");
  EXPECT_NE(what.find("\"restart\" is 1, expected true or false"), std::string::npos) << what;
  what = config_error("antdt-nd", R"({"restart_cooldown": -5})");
  EXPECT_NE(what.find("restart_cooldown"), std::string::npos) << what;
  what = config_error("bsp", R"({"anything": 1})");
  EXPECT_NE(what.find("\"anything\""), std::string::npos) << what;
  what = config_error("bsp", "{not json");
  EXPECT_NE(what.find("ANTDT_POLICY_CONFIG is invalid: not JSON"), std::string::npos) << what;
  what = config_error("bsp", "[1, 2]");
  EXPECT_NE(what.find("expected a JSON object"), std::string::npos) << what;
  EXPECT_EQ(config_error("antdt-dd", "  "), "(no error)");
  EXPECT_EQ(config_error("antdt-nd", R"({"warmup": 0, "resplit": false, "restart_cooldown": 5})"), "(no error)");

  ControllerOptions o;
  EXPECT_THROW(ControllerOptions::split_config(o, R"({"micro_batch_cap": -1})"), ConfigError);
  EXPECT_THROW(ControllerOptions::split_config(o, R"({"min_local_batch": 1.5})"), ConfigError);
  const auto split = ControllerOptions::split_config(o, R"({"micro_batch_cap": 16, "threshold": 0.3})");
  EXPECT_EQ(split.options.micro_batch_cap, 16u);
  EXPECT_EQ(split.policy_config, R"({"threshold":0.3})");
}

Config::Lookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(PolicyConfig, EnvironmentVariables) {
  Config c = Config::from_env(env_of({}));
  EXPECT_EQ(c.policy, "bsp");
  EXPECT_EQ(c.policy_config, "{}");
  c = Config::from_env(env_of({{"ANTDT_POLICY", "antdt-dd"}, {"ANTDT_POLICY_CONFIG", R"( {"threshold": 0.25} )"}}));
  EXPECT_EQ(c.policy, "antdt-dd");
  EXPECT_EQ(c.policy_config, R"({"threshold":0.25})");
  try {
    (void)Config::from_env(env_of({{"ANTDT_POLICY", "antdt dd"}}));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ANTDT_POLICY='antdt dd' is invalid"), std::string::npos) << e.what();
  }
  try {
    (void)Config::from_env(env_of({{"ANTDT_POLICY_CONFIG", "threshold=0.2"}}));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ANTDT_POLICY_CONFIG='threshold=0.2' is invalid"), std::string::npos)
        << e.what();
  }
  // @path reads a file.
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("antdt_policy_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(path);
    out << "{\n  \"interval\": 7\n}\n";
  }
  c = Config::from_env(env_of({{"ANTDT_POLICY", "antdt-nd"}, {"ANTDT_POLICY_CONFIG", "@" + path.string()}}));
  EXPECT_EQ(c.policy_config, R"({"interval":7})");
  std::filesystem::remove(path);
  try {
    (void)Config::from_env(env_of({{"ANTDT_POLICY_CONFIG", "@" + path.string()}}));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  // An unknown key is found when the policy is made (the name may be registered later).
  c = Config::from_env(env_of({{"ANTDT_POLICY", "antdt-nd"}, {"ANTDT_POLICY_CONFIG", R"({"intervall": 7})"}}));
  telemetry::Monitor monitor(2, telemetry::MonitorConfig{});
  EXPECT_THROW(Controller::from_config(monitor, c, 2, 8), ConfigError);
}

}  // namespace
}  // namespace antdt::sched
