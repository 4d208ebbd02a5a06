// Ranks that crash (issue 16, docs/scheduler.md "A rank that crashes"): the
// Controller's plans without a lost rank (Σb = B over the survivors, the
// policy's proportions kept, earlier steps unchanged), the coordinator's
// generations with the rank's next incarnation (restarts left) or without it
// (none left), a survivor's report of a failed communicator, and the wire
// messages that carry them.
#include <antdt/scheduler.hpp>

#include "collectives/telemetry/monitor.hpp"
#include "core/error.hpp"
#include "scheduler/controller.hpp"
#include "scheduler/coordinator/service.hpp"
#include "scheduler/coordinator/wire.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace antdt::sched {
namespace {

std::uint64_t sum_batches(const std::vector<RankPlan>& plans) {
  std::uint64_t s = 0;
  for (const RankPlan& p : plans) s += p.local_batch;
  return s;
}

std::vector<RankPlan> plans_at(Controller& c, int n, std::uint64_t step) {
  std::vector<RankPlan> out;
  for (int r = 0; r < n; ++r) out.push_back(c.plan_for(r, step));
  return out;
}

void expect_well_formed(const std::vector<RankPlan>& plans) {
  for (std::size_t r = 0; r < plans.size(); ++r) {
    const RankPlan& p = plans[r];
    ASSERT_GE(p.micro_batches, 1u) << "rank " << r;
    if (p.local_batch == 0) {
      EXPECT_EQ(p.micro_batch, 0u) << "rank " << r;
    } else {
      EXPECT_GE(p.micro_batch * p.micro_batches, p.local_batch) << "rank " << r;
      EXPECT_LT(p.micro_batch * (p.micro_batches - 1), p.local_batch) << "rank " << r;
    }
  }
}

struct Job {
  telemetry::Monitor monitor;
  std::unique_ptr<Controller> controller;
  Job(int ranks, std::uint64_t global_batch, std::string_view policy, std::string_view config = "{}")
      : monitor(ranks, {}) {
    ControllerOptions o;
    o.world_size = ranks;
    o.global_batch = global_batch;
    const auto split = ControllerOptions::split_config(o, config);
    controller = std::make_unique<Controller>(monitor, make_policy(policy, split.policy_config), split.options);
  }
};

TEST(LostRanks, BspSpreadsTheLostRanksShareFromItsStepOn) {
  Job job(4, 40, "bsp");
  for (std::uint64_t s = 1; s <= 4; ++s) plans_at(*job.controller, 4, s);
  job.controller->rank_lost(2, 5);
  // Steps before 5 keep their plans (asked again: the same answer).
  for (const RankPlan& p : plans_at(*job.controller, 4, 4)) EXPECT_EQ(p.local_batch, 10u);
  for (std::uint64_t s = 5; s <= 8; ++s) {
    const auto plans = plans_at(*job.controller, 4, s);
    EXPECT_EQ(plans[2].local_batch, 0u);
    EXPECT_EQ(sum_batches(plans), 40u) << "step " << s;
    // 40 x 10/30 = 13.33 each: 13 + 13 + 13, the last sample to the lowest rank.
    EXPECT_EQ(plans[0].local_batch, 14u);
    EXPECT_EQ(plans[1].local_batch, 13u);
    EXPECT_EQ(plans[3].local_batch, 13u);
    expect_well_formed(plans);
  }
  EXPECT_TRUE(job.controller->lost_at(2, 5));
  EXPECT_FALSE(job.controller->lost_at(2, 4));
  EXPECT_FALSE(job.controller->lost_at(1, 5));
}

TEST(LostRanks, DdKeepsItsSpeedRatiosAmongTheSurvivors) {
  Job job(4, 400, "antdt-dd", R"({"warmup": 5, "interval": 10})");
  std::optional<Decision> decision;
  std::uint64_t step = 1;
  for (; step < 60 && !decision; ++step) {
    std::vector<telemetry::StepRecord> records(4);
    for (int r = 0; r < 4; ++r) {
      const RankPlan plan = job.controller->plan_for(r, step);
      auto& rec = records[static_cast<std::size_t>(r)];
      rec.rank = r;
      rec.step = step;
      rec.samples = plan.local_batch;
      rec.compute_s = 1e-3 * static_cast<double>(plan.local_batch) * (r == 3 ? 3.0 : 1.0);
      rec.step_s = rec.compute_s + 1e-3;
      rec.transfer_s = 1e-3;
    }
    decision = job.controller->on_step(step, records);
  }
  ASSERT_TRUE(decision.has_value());
  const std::uint64_t from = decision->effective_step + 2;
  job.controller->rank_lost(0, from);
  const auto before = plans_at(*job.controller, 4, from - 1);
  EXPECT_EQ(before[0].local_batch, 120u);
  EXPECT_EQ(before[3].local_batch, 40u);
  const auto after = plans_at(*job.controller, 4, from);
  // 400 x (120, 120, 40) / 280 = 171.4, 171.4, 57.1: 171 + 171 + 57, one more to rank 1.
  EXPECT_EQ(after[0].local_batch, 0u);
  EXPECT_EQ(after[1].local_batch, 172u);
  EXPECT_EQ(after[2].local_batch, 171u);
  EXPECT_EQ(after[3].local_batch, 57u);
  EXPECT_EQ(sum_batches(after), 400u);
  expect_well_formed(after);
}

TEST(LostRanks, MicroBatchesFollowTheNewLocalBatch) {
  Job job(3, 30, "bsp", R"({"micro_batch_cap": 4})");
  job.controller->rank_lost(1, 1);
  const auto plans = plans_at(*job.controller, 3, 1);
  EXPECT_EQ(plans[0].local_batch, 15u);
  EXPECT_EQ(plans[2].local_batch, 15u);
  for (int r : {0, 2}) {
    EXPECT_LE(plans[static_cast<std::size_t>(r)].micro_batch, 4u);
    EXPECT_EQ(plans[static_cast<std::size_t>(r)].micro_batches, 4u);
  }
  expect_well_formed(plans);
}

TEST(LostRanks, TheLastRankCannotBeLostAndARankCanComeBack) {
  Job job(2, 10, "bsp");
  job.controller->rank_lost(1, 3);
  job.controller->rank_lost(1, 4);  // lost already: no-op
  EXPECT_THROW(job.controller->rank_lost(0, 5), InvalidArgument);
  EXPECT_EQ(job.controller->plan_for(0, 3).local_batch, 10u);
  job.controller->rank_back(1, 6);
  EXPECT_EQ(job.controller->plan_for(0, 5).local_batch, 10u);
  EXPECT_EQ(job.controller->plan_for(0, 6).local_batch, 5u);
  EXPECT_EQ(job.controller->plan_for(1, 6).local_batch, 5u);
}

namespace coord_tests {
using namespace antdt::sched::coord;

CoordinatorOptions options_for(int world, std::uint64_t dataset, std::uint64_t global_batch, int max_restarts) {
  CoordinatorOptions o;
  o.world_size = world;
  o.dataset_size = dataset;
  o.dds.shard_size = 10;
  o.dds.seed = 3;
  o.dds.epochs = 1;
  o.global_batch = global_batch;
  o.policy = "bsp";
  o.max_restarts = max_restarts;
  return o;
}

TEST(LostRanks, ACrashedRankWithRestartsLeftRejoinsTheNextGeneration) {
  Coordinator c(options_for(3, 0, 3, 1));
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  for (int r = 0; r < 3; ++r) c.plan(r, 1);
  c.lost(1);
  EXPECT_EQ(c.stats().ranks_lost, 1u);
  EXPECT_EQ(c.stats().ranks_gone, 0u);
  // The survivors' next step is a new generation that still counts rank 1.
  const Plan p = c.plan(0, 2);
  EXPECT_EQ(p.generation, 1u);
  EXPECT_EQ(c.members(1), (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(c.plan(2, 2).plan.local_batch, 1u);  // bsp over every rank: no one is lost for good
  // Its next incarnation joins that generation at its first step.
  const Welcome w = c.hello(1, 1, 0);
  ASSERT_TRUE(w.accepted);
  EXPECT_EQ(w.generation, 1u);
  EXPECT_EQ(w.resume_step, 2u);
  EXPECT_EQ(c.join(1, 1).members, (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_FALSE(c.join(1, 1).ready);
  c.offer_id(0, 1, UniqueId{});
  EXPECT_TRUE(c.join(1, 1).ready);
  EXPECT_EQ(c.stats().restarts_done, 1u);
}

TEST(LostRanks, ARestartedRankBeforeTheNextGenerationIsPlannedJoinsIt) {
  Coordinator c(options_for(2, 0, 2, 1));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  for (int r = 0; r < 2; ++r) c.plan(r, 1);
  c.lost(1);
  const Welcome w = c.hello(1, 1, 0);  // back before any survivor asked for step 2
  ASSERT_TRUE(w.accepted);
  EXPECT_EQ(w.generation, 1u);
  EXPECT_EQ(w.resume_step, 2u);
  // Its join plans the next step, which starts the generation: it need not
  // wait for a survivor's plan request (when every member restarted, none comes).
  EXPECT_EQ(c.join(1, 1).members, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(c.plan(0, 2).generation, 1u);
  EXPECT_EQ(c.plan(1, 2).generation, 1u);
  EXPECT_EQ(c.members(1), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(c.plan(0, 3).generation, 1u) << "one rebuild, not two";
}

TEST(LostRanks, WithoutRestartsTheJobGoesOnWithTheSurvivors) {
  const std::uint64_t n = 300;
  Coordinator c(options_for(3, n, 30, 0));
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  std::vector<int> counts(n, 0);
  for (int r = 0; r < 3; ++r) {
    const Plan p = c.plan(r, 1);
    EXPECT_EQ(p.plan.local_batch, 10u);
    const BatchReply b = c.fetch(r, p.plan.local_batch);
    if (r != 1) {
      for (auto id : b.samples) ++counts[id];
      EXPECT_TRUE(c.commit(r, b.lease));
    }
  }
  c.lost(1);  // died with its batch of step 1 uncommitted
  EXPECT_EQ(c.stats().ranks_gone, 1u);
  std::uint64_t step = 2;
  bool stopped = false;
  for (; step < 100 && !stopped; ++step) {
    std::uint64_t sum = 0;
    for (int r : {0, 2}) {
      const Plan p = c.plan(r, step);
      EXPECT_EQ(p.generation, 1u);
      if (p.stop) {
        stopped = true;
        continue;
      }
      sum += p.plan.local_batch;
      const BatchReply b = c.fetch(r, p.plan.local_batch);
      for (auto id : b.samples) ++counts[id];
      if (b.lease != 0) {
        EXPECT_TRUE(c.commit(r, b.lease));
      }
      c.report(r, Report{step, 0.01, 0, 0, b.samples.size(), Fate::included});
    }
    if (!stopped) {
      EXPECT_EQ(sum, 30u) << "step " << step;
    }
  }
  ASSERT_TRUE(stopped);
  EXPECT_FALSE(c.hello(1, 0, 0, true).accepted) << "the old process is not let back in once the job went on";
  EXPECT_EQ(c.members(1), (std::vector<std::uint32_t>{0, 2}));
  for (std::uint64_t id = 0; id < n; ++id) EXPECT_EQ(counts[id], 1) << "sample " << id;
  c.bye(0, false);
  EXPECT_FALSE(c.all_exited());
  c.bye(2, false);
  EXPECT_TRUE(c.all_exited()) << "a rank lost for good never says bye";
  EXPECT_TRUE(c.job_complete());
}

TEST(LostRanks, AConnectionThatBrokeComesBackBeforeTheJobWentOnWithoutIt) {
  Coordinator c(options_for(2, 0, 2, 0));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  c.plan(0, 1);
  c.lost(1);
  EXPECT_EQ(c.stats().ranks_gone, 1u);
  ASSERT_TRUE(c.hello(1, 0, 0, true).accepted);  // alive after all: no generation without it yet
  EXPECT_EQ(c.plan(0, 2).generation, 1u);
  EXPECT_EQ(c.members(1), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(c.plan(1, 2).plan.local_batch, 1u);
}

TEST(LostRanks, NoRestartIsOrderedBeyondTheLaunchersRestarts) {
  Coordinator c(options_for(2, 0, 2, 1));
  ASSERT_TRUE(c.hello(0, 0, 0).accepted);
  ASSERT_TRUE(c.hello(1, 1, 0).accepted);  // its one restart is used
  c.request_restart(0);
  c.request_restart(1);
  EXPECT_TRUE(c.plan(0, 1).plan.restart);
  EXPECT_FALSE(c.plan(1, 1).plan.restart);
  EXPECT_EQ(c.stats().restarts_ordered, 1u);
}

TEST(LostRanks, ASurvivorsFailedCommunicatorDeclaresTheDeadRankOnce) {
  Coordinator c(options_for(3, 0, 3, 0));
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  for (int r = 0; r < 3; ++r) c.plan(r, 1);
  // Rank 0's transport saw rank 2 die before the coordinator saw its connection close.
  EXPECT_EQ(c.comm_failed(0, 0, 1, {2}), (std::vector<int>{2}));
  EXPECT_EQ(c.stats().ranks_lost, 1u);
  EXPECT_TRUE(c.comm_failed(1, 0, 1, {2}).empty());
  c.lost(2);  // the close, seen later
  EXPECT_EQ(c.stats().ranks_lost, 1u);
  EXPECT_EQ(c.plan(0, 2).generation, 1u);
  EXPECT_EQ(c.members(1), (std::vector<std::uint32_t>{0, 1}));
  // A failure of an old generation, reported late, starts nothing new.
  c.comm_failed(1, 0, 1, {});
  EXPECT_EQ(c.plan(1, 2).generation, 1u);
  EXPECT_EQ(c.plan(0, 3).generation, 1u);
  // A failure of the current one (no rank named) moves every rank on.
  c.comm_failed(1, 1, 3, {});
  EXPECT_EQ(c.plan(0, 4).generation, 2u);
  EXPECT_EQ(c.members(2), (std::vector<std::uint32_t>{0, 1}));
}

TEST(LostRanks, ARankThatNeverSaidHelloToThisCoordinatorCanBeDeclaredLost) {
  // A restarted antdt-coordinator: rank 2 died before it could reconnect.
  Coordinator c(options_for(3, 0, 3, 0));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 4, true).accepted);
  c.plan(0, 9);
  EXPECT_TRUE(c.comm_failed(0, 4, 9, {2}).empty());  // no connection of its to close
  EXPECT_EQ(c.stats().ranks_gone, 1u);
  EXPECT_EQ(c.stats().connected, 2);
  EXPECT_EQ(c.plan(0, 10).generation, 5u);
  EXPECT_EQ(c.members(5), (std::vector<std::uint32_t>{0, 1}));
}

TEST(LostRanks, OnlyTheGenerationsFirstMemberOffersItsId) {
  Coordinator c(options_for(3, 0, 3, 0));
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  c.plan(0, 1);
  c.lost(0);  // an external coordinator: rank 0 may die too
  c.plan(1, 2);
  EXPECT_EQ(c.members(1), (std::vector<std::uint32_t>{1, 2}));
  EXPECT_THROW(c.offer_id(2, 1, UniqueId{}), InvalidArgument);
  c.offer_id(1, 1, UniqueId{});
  const GenerationId got = c.join(2, 1);
  EXPECT_TRUE(got.ready);
  EXPECT_EQ(got.members, (std::vector<std::uint32_t>{1, 2}));
}

// The first member of a new generation dies before it offered the id: the
// others, waiting in join, learn that the generation can never form (instead
// of waiting for the id until ANTDT_TIMEOUT_MS); its next incarnation joins
// the generation after, which every survivor's next plan starts.
TEST(LostRanks, AGenerationWhoseFirstMemberDiedBeforeItsIdIsAbandoned) {
  Coordinator c(options_for(3, 0, 3, 1));
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  for (int r = 0; r < 3; ++r) c.plan(r, 1);
  c.lost(2);
  ASSERT_EQ(c.plan(0, 2).generation, 1u);
  EXPECT_EQ(c.members(1), (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_FALSE(c.join(1, 1).abandoned);
  c.lost(0);  // rank 0, the generation's first member, dies before offer_id
  const GenerationId got = c.join(1, 1);
  EXPECT_FALSE(got.ready);
  EXPECT_TRUE(got.abandoned);
  EXPECT_TRUE(c.comm_failed(1, 1, 2, {0}).empty());  // known already
  const Welcome back = c.hello(0, 1, 0);
  ASSERT_TRUE(back.accepted);
  EXPECT_EQ(back.generation, 2u) << "not the abandoned generation";
  EXPECT_TRUE(c.join(0, 1).abandoned) << "abandoned for good, even with rank 0 back";
  EXPECT_EQ(c.plan(1, 3).generation, 2u);
  EXPECT_EQ(c.members(2), (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_FALSE(c.join(1, 2).abandoned);
  // Once a member reported a step on the generation, it formed: a loss then
  // abandons nothing (the survivors' collectives fail and they move on).
  c.offer_id(0, 2, UniqueId{});
  EXPECT_TRUE(c.join(1, 2).ready);
  c.report(1, Report{3, 0.01, 0, 0, 0, Fate::included});
  c.lost(0);
  EXPECT_FALSE(c.join(1, 2).abandoned);
  // Any member lost before then abandons it, not only the one that makes the id.
  EXPECT_EQ(c.plan(1, 4).generation, 3u);
  EXPECT_EQ(c.members(3), (std::vector<std::uint32_t>{1, 2}));
  ASSERT_TRUE(c.hello(2, 1, 1).accepted);
  c.lost(2);
  EXPECT_TRUE(c.join(1, 3).abandoned);
}

TEST(LostRanks, WireCarriesFailuresAndMembers) {
  const CommFailed sent{7, 42, {1, 3}};
  const Request back = decode_request(encode(Request{sent}));
  ASSERT_TRUE(std::holds_alternative<CommFailed>(back));
  EXPECT_EQ(std::get<CommFailed>(back).generation, 7u);
  EXPECT_EQ(std::get<CommFailed>(back).step, 42u);
  EXPECT_EQ(std::get<CommFailed>(back).lost, (std::vector<std::uint32_t>{1, 3}));
  GenerationId id;
  id.ready = true;
  id.generation = 3;
  id.members = {0, 2, 3};
  EXPECT_EQ(decode_generation_id(encode(id)).members, id.members);
  // Truncated, or a count that does not match the bytes: refused.
  Bytes bytes = encode(Request{sent});
  bytes.pop_back();
  EXPECT_THROW(decode_request(bytes), BootstrapError);
  Bytes members = encode(id);
  members.resize(members.size() - 4);
  EXPECT_THROW(decode_generation_id(members), BootstrapError);
  id.members.clear();
  EXPECT_THROW(decode_generation_id(encode(id)), BootstrapError) << "ready without members";
}

}  // namespace coord_tests
}  // namespace
}  // namespace antdt::sched
