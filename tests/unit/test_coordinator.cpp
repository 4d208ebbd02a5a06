// The coordinator (scheduler/coordinator/service): the per-step agreement on restarts,
// communicator generations and the stop; leases owned per rank; a lost rank's
// samples going back; checkpoint and restore. Then the service over real TCP
// with client threads: every sample committed exactly once per epoch (bitmaps),
// refused secrets, garbage on a connection, a client that vanishes without bye,
// and an external coordinator restarted from its checkpoint mid-job.
#include "core/error.hpp"
#include "core/net.hpp"
#include "scheduler/coordinator/service.hpp"
#include "scheduler/coordinator/client.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace antdt::sched::coord {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "antdt-coord-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

CoordinatorOptions options_for(int world, std::uint64_t dataset, std::uint64_t shard, std::uint32_t epochs,
                               std::uint64_t global_batch) {
  CoordinatorOptions o;
  o.world_size = world;
  o.dataset_size = dataset;
  o.dds.shard_size = shard;
  o.dds.shuffle = sched::ShuffleMode::samples;
  o.dds.seed = 11;
  o.dds.epochs = epochs;
  o.global_batch = global_batch;
  o.policy = "bsp";
  return o;
}

std::array<std::byte, 16> test_secret(std::uint8_t seed = 1) {
  std::array<std::byte, 16> s{};
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<std::byte>(seed * 31 + i);
  return s;
}

// Counts per sample id: a test passes only when every count is exactly 1.
class Bitmap {
 public:
  explicit Bitmap(std::uint64_t n) : counts_(n, 0) {}
  void add(std::span<const std::uint64_t> ids) {
    std::lock_guard lock(mu_);
    for (auto id : ids) {
      ASSERT_LT(id, counts_.size());
      ++counts_[id];
    }
  }
  // Text naming the first bad ids; empty when each id was counted once.
  std::string problems() const {
    std::lock_guard lock(mu_);
    std::string out;
    int shown = 0;
    for (std::size_t i = 0; i < counts_.size() && shown < 10; ++i)
      if (counts_[i] != 1) {
        out += "sample " + std::to_string(i) + " committed " + std::to_string(counts_[i]) + " times; ";
        ++shown;
      }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<int> counts_;
};

// ---------------------------------------------------------------------------
// Logic, no sockets
// ---------------------------------------------------------------------------
TEST(Coordinator, RestartIsAgreedPerStepAndStartsANewGeneration) {
  Coordinator c(options_for(3, 0, 1, 1, 6));
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  for (int r = 0; r < 3; ++r) {
    const Plan p = c.plan(r, 1);
    EXPECT_EQ(p.plan.local_batch, 2u);  // bsp: B / n
    EXPECT_FALSE(p.plan.restart);
    EXPECT_FALSE(p.stop);
    EXPECT_EQ(p.generation, 0u);
  }
  c.request_restart(2);
  // Step 2 is the first step nobody had a plan for: the restart and the new generation start there, for everyone.
  const Plan p0 = c.plan(0, 2);
  EXPECT_FALSE(p0.plan.restart);
  EXPECT_EQ(p0.generation, 1u);
  EXPECT_FALSE(c.plan(1, 2).plan.restart);
  EXPECT_EQ(c.plan(1, 2).generation, 1u);
  const Plan p2 = c.plan(2, 2);
  EXPECT_TRUE(p2.plan.restart);
  EXPECT_EQ(p2.generation, 1u);
  // Asking again gives the same answer.
  EXPECT_TRUE(c.plan(2, 2).plan.restart);

  c.bye(2, /*restarting=*/true);
  const Welcome back = c.hello(2, 1, 0);
  ASSERT_TRUE(back.accepted) << back.reason;
  EXPECT_EQ(back.generation, 1u);
  EXPECT_EQ(back.resume_step, 2u);
  // The new incarnation is not told to restart again at the same step.
  EXPECT_FALSE(c.plan(2, 2).plan.restart);
  EXPECT_EQ(c.plan(2, 2).generation, 1u);

  // Rank 0 of the new generation offers its id; the others fetch it.
  EXPECT_FALSE(c.join(1, 1).ready);
  const UniqueId id = UniqueId::create();
  EXPECT_THROW(c.offer_id(1, 1, id), InvalidArgument);  // only rank 0
  EXPECT_THROW(c.offer_id(0, 0, id), InvalidArgument);  // not the current generation
  c.offer_id(0, 1, id);
  for (int r : {1, 2}) {
    const GenerationId got = c.join(r, 1);
    ASSERT_TRUE(got.ready);
    EXPECT_EQ(got.id.bytes, id.bytes);
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(c.plan(r, 3).plan.restart);
    EXPECT_EQ(c.plan(r, 3).generation, 1u);
  }
  const auto s = c.stats();
  EXPECT_EQ(s.restarts_ordered, 1u);
  EXPECT_EQ(s.restarts_done, 1u);
  EXPECT_EQ(s.generation, 1u);
}

// A policy that orders rank 1 to restart once, at its first decision.
class RestartRankOne final : public Policy {
 public:
  std::string_view name() const noexcept override { return "test-restart-rank-one"; }
  std::optional<std::vector<RankPlan>> decide(const PolicyContext& ctx, const MonitorView&) override {
    if (ordered_) return std::nullopt;
    ordered_ = true;
    std::vector<RankPlan> plans(ctx.plans.begin(), ctx.plans.end());
    plans.at(1).restart = true;
    return plans;
  }

 private:
  bool ordered_ = false;
};

TEST(Coordinator, ARankThatConnectsLateStillGetsTheFirstPlans) {
  // Ranks 0 and 1 run ahead before rank 2 even said hello (its thread or
  // process started late): rank 2 must still get the plans from step 1 on.
  Coordinator c(options_for(3, 0, 1, 1, 6));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  for (std::uint64_t step = 1; step <= 20; ++step)
    for (int r = 0; r < 2; ++r) {
      const Plan p = c.plan(r, step);
      c.report(r, Report{step, 0.001, 0, 0, p.plan.local_batch, Fate::included});
    }
  ASSERT_TRUE(c.hello(2, 0, 0).accepted);
  for (std::uint64_t step = 1; step <= 20; ++step) EXPECT_EQ(c.plan(2, step).plan.local_batch, 2u) << "step " << step;
}

TEST(Coordinator, PolicyRestartOrderReachesEveryRankAtOneStep) {
  register_policy("test-restart-rank-one", [](std::string_view) { return std::make_unique<RestartRankOne>(); });
  auto o = options_for(3, 0, 1, 1, 6);
  o.policy = "test-restart-rank-one";
  Coordinator c(o);
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(c.plan(r, 1).plan.restart);
  for (int r = 0; r < 3; ++r) c.report(r, Report{1, 0.01, 0, 0, 2, Fate::included});
  ASSERT_EQ(c.stats().steps_closed, 1u);  // the policy decided after step 1
  // Ranks 0 and 2 run ahead: their plans of step 2 already carry the new generation.
  EXPECT_EQ(c.plan(0, 2).generation, 1u);
  EXPECT_EQ(c.plan(2, 2).generation, 1u);
  EXPECT_FALSE(c.plan(0, 2).plan.restart);
  const Plan p1 = c.plan(1, 2);
  EXPECT_TRUE(p1.plan.restart);
  EXPECT_EQ(p1.generation, 1u);
  c.bye(1, true);
  const Welcome w = c.hello(1, 1, 0);
  ASSERT_TRUE(w.accepted);
  EXPECT_EQ(w.resume_step, 2u);
  EXPECT_FALSE(c.plan(1, 2).plan.restart);
  EXPECT_FALSE(c.plan(1, 3).plan.restart);  // the order is done once the rank came back
  EXPECT_EQ(c.stats().restarts_done, 1u);
}

TEST(Coordinator, HelloRefusals) {
  Coordinator c(options_for(2, 0, 1, 1, 2));
  EXPECT_FALSE(c.hello(2, 0, 0).accepted);
  EXPECT_FALSE(c.hello(-1, 0, 0).accepted);
  ASSERT_TRUE(c.hello(1, 0, 0).accepted);
  const Welcome twice = c.hello(1, 0, 0);
  EXPECT_FALSE(twice.accepted);
  EXPECT_NE(twice.reason.find("already connected"), std::string::npos) << twice.reason;
}

TEST(Coordinator, EmbeddedCoordinatorDoesNotRestartRankZero) {
  auto o = options_for(2, 0, 1, 1, 2);
  o.embedded = true;
  Coordinator c(o);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  c.plan(0, 1);
  c.request_restart(0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(c.plan(r, 2).plan.restart);
    EXPECT_EQ(c.plan(r, 2).generation, 0u);
  }
  EXPECT_EQ(c.stats().restarts_ordered, 0u);
}

TEST(Coordinator, ReconnectOfARestartedRankIsNotARestart) {
  // A new coordinator process (restored from its checkpoint) meets a rank
  // that was restarted under the previous one: no new generation.
  Coordinator c(options_for(2, 0, 1, 1, 2));
  ASSERT_TRUE(c.hello(0, 0, 3, true).accepted);
  c.plan(0, 40);
  const Welcome w = c.hello(1, 1, 3, true);
  ASSERT_TRUE(w.accepted);
  EXPECT_EQ(w.generation, 3u);  // adopted from the ranks
  EXPECT_EQ(w.resume_step, 0u);
  EXPECT_EQ(c.plan(1, 40).generation, 3u);
  EXPECT_EQ(c.plan(0, 41).generation, 3u);
  EXPECT_EQ(c.stats().restarts_done, 0u);
}

TEST(Coordinator, UnorderedRestartMakesEveryRankRebuild) {
  Coordinator c(options_for(2, 0, 1, 1, 2));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  c.plan(0, 1);
  c.plan(1, 1);
  c.lost(1);  // crashed
  const Welcome w = c.hello(1, 1, 0);
  ASSERT_TRUE(w.accepted);
  EXPECT_EQ(w.resume_step, 2u);
  EXPECT_EQ(w.generation, 1u);
  EXPECT_EQ(c.plan(0, 2).generation, 1u);
  EXPECT_EQ(c.plan(1, 2).generation, 1u);
}

TEST(Coordinator, LeasesBelongToTheirRank) {
  Coordinator c(options_for(2, 40, 10, 1, 4));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  const BatchReply b1 = c.fetch(1, 5);
  ASSERT_EQ(b1.samples.size(), 5u);
  EXPECT_FALSE(c.commit(0, b1.lease));  // not rank 0's
  EXPECT_FALSE(c.give_back(0, b1.lease));
  EXPECT_FALSE(c.commit(1, 999));       // never issued
  EXPECT_TRUE(c.commit(1, b1.lease));
  EXPECT_FALSE(c.commit(1, b1.lease));  // settled already
  EXPECT_EQ(c.progress().committed, 5u);
}

// A plan request with fetch_max leases the step's samples as a Fetch right
// after the plan would: at most min(local batch, fetch_max), owned by the
// rank, committed once; never for a plan that stops the job.
TEST(Coordinator, PlanRequestCanLeaseTheStepsSamples) {
  const std::uint64_t n = 50;
  Coordinator c(options_for(2, n, 4, 1, 6));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  Bitmap committed(n);
  EXPECT_FALSE(c.plan(0, 1).batch.has_value()) << "fetch_max 0: a plan alone";
  std::uint64_t stop_step = 0;
  for (std::uint64_t step = 1; step < 200 && stop_step == 0; ++step) {
    for (int r = 0; r < 2; ++r) {
      const Plan p = c.plan(r, step, r == 0 ? 1000 : 2);
      if (p.stop) {
        EXPECT_FALSE(p.batch.has_value()) << "no lease at the stop step";
        stop_step = step;
        continue;
      }
      ASSERT_TRUE(p.batch.has_value()) << "step " << step;
      EXPECT_LE(p.batch->samples.size(), r == 0 ? p.plan.local_batch : 2u);
      EXPECT_FALSE(c.commit(1 - r, p.batch->lease)) << "the lease is the asking rank's";
      if (p.batch->lease == 0) continue;
      committed.add(p.batch->samples);
      EXPECT_TRUE(c.commit(r, p.batch->lease));
    }
    for (int r = 0; r < 2; ++r) c.report(r, Report{step, 0.01, 0, 0, 3, Fate::included});
  }
  ASSERT_NE(stop_step, 0u) << "the job never stopped";
  EXPECT_EQ(committed.problems(), "");
}

// After a dropped batch the rank sits out its next fetch (another rank takes
// the samples). A plan request does not use that up: only the trainer's own
// fetch does, whether or not the plan was asked with fetch_max.
TEST(Coordinator, PlanRequestLeavesTheSitOutAfterADropToTheTrainersFetch) {
  Coordinator c(options_for(2, 100, 10, 1, 8));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  const Plan first = c.plan(1, 1, 1000);
  ASSERT_TRUE(first.batch.has_value());
  ASSERT_NE(first.batch->lease, 0u);
  c.report(1, Report{1, 0.01, 0, 0, first.batch->samples.size(), Fate::dropped});
  ASSERT_TRUE(c.give_back(1, first.batch->lease));
  for (std::uint64_t step : {2u, 3u}) {  // e.g. steps it skips, catching up
    const Plan p = c.plan(1, step, 1000);
    EXPECT_FALSE(p.batch.has_value()) << "step " << step;
  }
  const BatchReply sat_out = c.fetch(1, 4);
  EXPECT_EQ(sat_out.status, static_cast<std::uint8_t>(sched::FetchStatus::wait));
  EXPECT_TRUE(sat_out.samples.empty());
  const Plan after = c.plan(1, 4, 1000);
  ASSERT_TRUE(after.batch.has_value()) << "the sit-out is used up";
  EXPECT_FALSE(after.batch->samples.empty());
}

TEST(Coordinator, LostRankSamplesGoBackAndAreServedOnce) {
  const std::uint64_t n = 100;
  Coordinator c(options_for(2, n, 10, 1, 4));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  Bitmap committed(n);
  const BatchReply lost_batch = c.fetch(1, 7);
  ASSERT_EQ(lost_batch.samples.size(), 7u);
  const BatchReply kept = c.fetch(1, 3);
  ASSERT_EQ(kept.samples.size(), 3u);
  c.lost(1);
  EXPECT_EQ(c.stats().ranks_lost, 1u);
  EXPECT_EQ(c.progress().leased, 0u);
  EXPECT_EQ(c.progress().rank_failures, 1u);
  EXPECT_FALSE(c.commit(1, kept.lease));  // revoked with the connection
  // Rank 0 consumes everything, the lost rank's samples included.
  std::set<std::uint64_t> seen;
  for (int guard = 0; guard < 1000; ++guard) {
    const BatchReply b = c.fetch(0, 9);
    if (b.status == 2) break;
    ASSERT_EQ(b.status, 0) << "a lone rank never waits";
    committed.add(b.samples);
    seen.insert(b.samples.begin(), b.samples.end());
    ASSERT_TRUE(c.commit(0, b.lease));
  }
  EXPECT_EQ(committed.problems(), "");
  for (auto id : lost_batch.samples) EXPECT_TRUE(seen.count(id)) << "sample " << id << " of the lost rank";
  EXPECT_TRUE(c.progress().finished);
}

TEST(Coordinator, StopComesAtTheSameStepForEveryRank) {
  const std::uint64_t n = 50;
  Coordinator c(options_for(2, n, 4, 1, 6));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  Bitmap committed(n);
  std::uint64_t stop_step = 0;
  for (std::uint64_t step = 1; step < 200 && stop_step == 0; ++step) {
    std::vector<std::uint64_t> leases(2, 0);
    for (int r = 0; r < 2; ++r) {
      const Plan p = c.plan(r, step);
      if (r == 1) {
        EXPECT_EQ(p.stop, c.plan(0, step).stop) << "step " << step;
      }
      if (p.stop) {
        stop_step = step;
        continue;
      }
      const BatchReply b = c.fetch(r, p.plan.local_batch);
      committed.add(b.samples);
      leases[static_cast<std::size_t>(r)] = b.lease;
    }
    if (stop_step != 0) break;
    for (int r = 0; r < 2; ++r) {
      if (leases[static_cast<std::size_t>(r)] != 0) {
        EXPECT_TRUE(c.commit(r, leases[static_cast<std::size_t>(r)]));
      }
      c.report(r, Report{step, 0.01, 0, 0, 3, Fate::included});
    }
  }
  ASSERT_NE(stop_step, 0u) << "the job never stopped";
  // 50 samples at 6 per step: 9 steps, and the stop at the first step planned after the last commit.
  EXPECT_EQ(stop_step, 10u);
  EXPECT_EQ(committed.problems(), "");
  EXPECT_EQ(c.stats().steps_closed, stop_step - 1);
}

TEST(Coordinator, StepsCloseWhenEveryConnectedRankReported) {
  Coordinator c(options_for(3, 0, 1, 1, 3));
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
  c.report(0, Report{1, 0.1, 0, 0, 1, Fate::included});
  c.report(1, Report{1, 0.1, 0, 0, 1, Fate::included});
  EXPECT_EQ(c.stats().steps_closed, 0u);
  c.report(0, Report{2, 0.1, 0, 0, 1, Fate::dropped});
  c.report(2, Report{1, 0.1, 0, 0, 1, Fate::included});
  EXPECT_EQ(c.stats().steps_closed, 1u);
  c.lost(2);  // a rank that is gone does not hold the steps back
  c.report(1, Report{2, 0.1, 0, 0, 1, Fate::included});
  EXPECT_EQ(c.stats().steps_closed, 2u);
  EXPECT_EQ(c.stats().dropped_reports, 1u);
}

TEST(Coordinator, CheckpointRestoresTheDataState) {
  TempDir dir;
  const std::uint64_t n = 100;
  auto o = options_for(2, n, 8, 1, 4);
  o.checkpoint_path = dir.file("coordinator.json");
  Bitmap committed(n);
  std::vector<std::uint64_t> open_samples;
  {
    Coordinator a(o);
    ASSERT_TRUE(a.hello(0, 0, 0).accepted);
    for (int i = 0; i < 6; ++i) {
      const BatchReply b = a.fetch(0, 5);
      committed.add(b.samples);
      ASSERT_TRUE(a.commit(0, b.lease));
    }
    const BatchReply open = a.fetch(0, 5);  // open at the checkpoint
    open_samples = open.samples;
    a.maybe_checkpoint(true);
    EXPECT_EQ(a.stats().checkpoints, 1u);
  }
  ASSERT_TRUE(std::filesystem::exists(o.checkpoint_path));
  Coordinator b(o);
  EXPECT_EQ(b.progress().committed, 30u);
  EXPECT_EQ(b.progress().leased, 0u);  // the open lease went back
  ASSERT_TRUE(b.hello(0, 0, 0).accepted);
  std::set<std::uint64_t> served;
  for (int guard = 0; guard < 1000; ++guard) {
    const BatchReply batch = b.fetch(0, 7);
    if (batch.status == 2) break;
    committed.add(batch.samples);
    served.insert(batch.samples.begin(), batch.samples.end());
    ASSERT_TRUE(b.commit(0, batch.lease));
  }
  EXPECT_EQ(committed.problems(), "");
  for (auto id : open_samples) EXPECT_TRUE(served.count(id)) << "open sample " << id << " was not served again";
}

TEST(Coordinator, UnwritableCheckpointPathIsRefusedAtTheStart) {
  // It used to be accepted, and only the final checkpoint of the job failed (a warning).
  auto o = options_for(2, 100, 8, 1, 4);
  auto error_for = [&](const std::string& path) -> std::string {
    o.checkpoint_path = path;
    try {
      Coordinator c(o);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  std::string msg = error_for("/nonexistent/dir/ck.json");
  EXPECT_NE(msg.find("ANTDT_COORDINATOR_CHECKPOINT"), std::string::npos) << msg;
  EXPECT_NE(msg.find("directory '/nonexistent/dir' does not exist"), std::string::npos) << msg;
  TempDir dir;
  msg = error_for(dir.file(""));
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
  if (::geteuid() != 0) {  // root may write anywhere
    const std::string locked = dir.file("locked");
    std::filesystem::create_directory(locked);
    std::filesystem::permissions(locked, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    msg = error_for(locked + "/ck.json");
    EXPECT_NE(msg.find("is not writable"), std::string::npos) << msg;
    std::filesystem::permissions(locked, std::filesystem::perms::owner_all);
  }
  EXPECT_EQ(error_for(dir.file("ck.json")), "");
  // Without a dataset nothing is written: the path is not checked.
  o.dataset_size = 0;
  EXPECT_EQ(error_for("/nonexistent/dir/ck.json"), "");
}

// ---------------------------------------------------------------------------
// The service over TCP
// ---------------------------------------------------------------------------
std::unique_ptr<CoordinatorClient> client_for(const CoordinatorService& service, int rank, int world,
                                              std::uint8_t secret_seed = 1, std::chrono::milliseconds timeout = 10s) {
  return std::make_unique<CoordinatorClient>(service.address(), test_secret(secret_seed), rank, world, 0, 0, timeout);
}

TEST(CoordinatorService, ManyRanksCommitEverySampleOncePerEpoch) {
  const int world = 4;
  const std::uint64_t n = 997;
  const std::uint32_t epochs = 2;
  CoordinatorService service(options_for(world, n, 16, epochs, 40), net::Endpoint{"127.0.0.1", 0}, test_secret());
  std::vector<std::unique_ptr<Bitmap>> per_epoch;
  for (std::uint32_t e = 0; e < epochs; ++e) per_epoch.push_back(std::make_unique<Bitmap>(n));
  std::vector<std::uint64_t> stop_steps(world, 0);
  std::atomic<int> failures{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto client = client_for(service, r, world);
        for (std::uint64_t step = 1; step < 10000; ++step) {
          const Plan p = client->plan(step);
          if (p.stop) {
            stop_steps[static_cast<std::size_t>(r)] = step;
            break;
          }
          // Rank 3 is slower: it takes a few milliseconds more per step.
          if (r == 3) std::this_thread::sleep_for(2ms);
          const BatchReply b = client->fetch(p.plan.local_batch);
          if (!b.samples.empty()) {
            per_epoch.at(b.epoch)->add(b.samples);
            if (!client->commit(b.lease)) ++failures;
          }
          client->report(Report{step, 0.001, 0, 0, b.samples.size(), Fate::included});
        }
        client->bye(false);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
        ++failures;
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (std::uint32_t e = 0; e < epochs; ++e) EXPECT_EQ(per_epoch[e]->problems(), "") << "epoch " << e;
  for (int r = 0; r < world; ++r) {
    EXPECT_NE(stop_steps[static_cast<std::size_t>(r)], 0u) << "rank " << r << " never got the stop";
    EXPECT_EQ(stop_steps[static_cast<std::size_t>(r)], stop_steps[0]) << "rank " << r;
  }
  EXPECT_TRUE(service.wait_all_exited(Clock::now() + 5s));
  EXPECT_EQ(service.coordinator().progress().epochs_completed, epochs);
  EXPECT_GT(service.coordinator().stats().steps_closed, 0u);
}

// A step report kept for the next request (the Agent's default,
// ANTDT_AGENT_REPORT_WITH_NEXT): the coordinator sees it when that request
// arrives, before answering it; a second report sends the kept one alone; bye
// carries the last one.
TEST(CoordinatorService, AReportKeptForTheNextRequestArrivesWithIt) {
  const int world = 2;
  CoordinatorService service(options_for(world, 64, 4, 1, 8), net::Endpoint{"127.0.0.1", 0}, test_secret());
  auto closed = [&] { return service.coordinator().stats().steps_closed; };
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  for (int r = 0; r < world; ++r) {
    clients.push_back(client_for(service, r, world));
    clients.back()->set_report_with_next(true);
  }
  std::vector<BatchReply> batches;
  for (auto& c : clients) {
    ASSERT_FALSE(c->plan(1).stop);
    batches.push_back(c->fetch(4));
    ASSERT_EQ(batches.back().samples.size(), 4u);
    c->report(Report{1, 0.01, 0, 0, 4, Fate::included});
    EXPECT_TRUE(c->report_pending());
  }
  // Sent at once, both reports would have closed step 1 by now.
  EXPECT_EQ(closed(), 0u);
  EXPECT_TRUE(clients[0]->commit(batches[0].lease));
  EXPECT_FALSE(clients[0]->report_pending());
  EXPECT_EQ(closed(), 0u);  // rank 1's report is still with rank 1
  EXPECT_TRUE(clients[1]->commit(batches[1].lease));
  EXPECT_EQ(closed(), 1u);

  for (auto& c : clients) c->report(Report{2, 0.01, 0, 0, 0, Fate::included});
  EXPECT_EQ(closed(), 1u);
  // Rank 0 reports step 3 with step 2's still kept: step 2's goes alone.
  clients[0]->report(Report{3, 0.01, 0, 0, 0, Fate::included});
  EXPECT_TRUE(clients[0]->report_pending());
  EXPECT_EQ(closed(), 1u);  // rank 1's step 2 is still with rank 1
  clients[1]->bye(false);   // carries it: step 2 closes
  EXPECT_EQ(closed(), 2u);
  clients[0]->bye(false);   // carries step 3, the only rank left
  EXPECT_EQ(closed(), 3u);
  EXPECT_TRUE(service.wait_all_exited(Clock::now() + 5s));
}

TEST(CoordinatorService, RefusesWrongSecretsAndSurvivesGarbage) {
  CoordinatorService service(options_for(2, 20, 4, 1, 2), net::Endpoint{"127.0.0.1", 0}, test_secret());
  try {
    client_for(service, 0, 2, /*secret_seed=*/2);
    FAIL() << "a wrong secret was accepted";
  } catch (const BootstrapError& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove the job secret"), std::string::npos) << e.what();
  }
  try {
    client_for(service, 0, 3);
    FAIL() << "a wrong world size was accepted";
  } catch (const BootstrapError& e) {
    EXPECT_NE(std::string(e.what()).find("believes the job has 3 ranks"), std::string::npos) << e.what();
  }
  {
    // Garbage instead of a hello: the connection is closed, the service goes on.
    control::Link raw(net::connect_to(service.address(), Clock::now() + 5s));
    ASSERT_TRUE(raw.receive(Clock::now() + 5s).has_value());  // the challenge
    const std::vector<std::byte> junk(40, std::byte{0x5a});
    raw.send(junk, Clock::now() + 5s);
    auto reply = raw.receive(Clock::now() + 5s);
    ASSERT_TRUE(reply.has_value());
    EXPECT_FALSE(decode_welcome(*reply).accepted);
  }
  auto good = client_for(service, 0, 2);
  EXPECT_EQ(good->fetch(4).samples.size(), 4u);
  // Garbage from an authenticated rank ends its session as a lost rank.
  {
    control::Link raw(net::connect_to(service.address(), Clock::now() + 5s));
    auto frame = raw.receive(Clock::now() + 5s);
    ASSERT_TRUE(frame.has_value());
    const Challenge challenge = decode_challenge(*frame);
    Hello hello{1, 2, 0, 0, false, {}};
    hello.mac = prove(test_secret(), challenge, 1, 2, 0);
    raw.send(encode(hello), Clock::now() + 5s);
    frame = raw.receive(Clock::now() + 5s);
    ASSERT_TRUE(frame.has_value());
    ASSERT_TRUE(decode_welcome(*frame).accepted);
    raw.send(encode(Request{Fetch{3}}), Clock::now() + 5s);
    frame = raw.receive(Clock::now() + 5s);
    ASSERT_TRUE(frame.has_value());
    ASSERT_EQ(decode_batch(*frame).samples.size(), 3u);
    Bytes step_zero = encode(Request{PlanRequest{1}});
    std::fill(step_zero.begin() + 8, step_zero.end(), std::byte{0});  // step 0: rejected by the decoder
    raw.send(step_zero, Clock::now() + 5s);
    EXPECT_THROW(raw.receive(Clock::now() + 5s), TransportError);  // closed without a reply
  }
  const auto deadline = Clock::now() + 5s;
  while (service.coordinator().stats().ranks_lost == 0 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(service.coordinator().stats().ranks_lost, 1u);
  EXPECT_EQ(service.coordinator().progress().leased, 4u);  // rank 0's; rank 1's 3 went back
  good->bye(false);
}

// Connections without the secret: idle ones, and ones that send part of a
// frame (part of a head, or a head and part of its payload) and stop.
std::vector<net::Fd> open_hostile(const net::Endpoint& address, int idle, int partial) {
  std::vector<net::Fd> fds;
  const auto deadline = Clock::now() + 5s;
  for (int i = 0; i < idle + partial; ++i) {
    auto fd = net::connect_to(address, deadline);
    if (i >= idle) {
      std::array<std::byte, 8 + 10> bytes{};
      const std::uint32_t magic = control::kFrameMagic, len = 70;
      std::memcpy(bytes.data(), &magic, 4);
      std::memcpy(bytes.data() + 4, &len, 4);
      const std::size_t sent = i % 2 ? 5 : bytes.size();
      net::send_all(fd.get(), std::span(bytes).first(sent), deadline);
    }
    fds.push_back(std::move(fd));
  }
  return fds;
}

// Reads (the challenge) until the other side closes: false at the deadline.
bool closed_by_peer(int fd, Clock::time_point deadline) {
  std::array<std::byte, 1> byte{};
  try {
    for (;;) net::recv_all(fd, byte, deadline);
  } catch (const BootstrapError&) {
    return true;
  } catch (const TimeoutError&) {
    return false;
  }
}

// Two ranks fetch, commit and report a few steps; the client timeout is what
// a stalled service runs into.
void run_two_ranks(const CoordinatorService& service, std::chrono::milliseconds timeout) {
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto client = client_for(service, r, 2, 1, timeout);
        for (std::uint64_t step = 1; step <= 3; ++step) {
          const Plan p = client->plan(step);
          const BatchReply b = client->fetch(p.plan.local_batch);
          if (!b.samples.empty()) {
            EXPECT_TRUE(client->commit(b.lease)) << "rank " << r;
          }
          client->report(Report{step, 0.001, 0, 0, b.samples.size(), Fate::included});
        }
        client->bye(false);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  for (auto& t : ranks) t.join();
}

TEST(CoordinatorService, PartialFramesWithoutTheSecretDoNotStallTheRanks) {
  // Read one after another, each partial frame held the service 5 s: 8 of them
  // outlast the ranks' 10 s timeout.
  CoordinatorService service(options_for(2, 40, 4, 1, 4), net::Endpoint{"127.0.0.1", 0}, test_secret());
  auto hostile = open_hostile(service.address(), /*idle=*/6, /*partial=*/8);
  const auto start = Clock::now();
  run_two_ranks(service, 10s);
  // Nothing waited for a hostile connection's deadline (5 s).
  EXPECT_LT(Clock::now() - start, 4s);
  EXPECT_EQ(service.coordinator().progress().total_committed, 12u);
  EXPECT_TRUE(service.wait_all_exited(Clock::now() + 5s));
}

TEST(CoordinatorService, MoreConnectionsAwaitingHelloThanTheCapDropTheOldest) {
  // Above the cap (64 here; kDefaultMaxPending by default) the oldest
  // connection without a hello is closed; the ranks, which come last, get in at once.
  CoordinatorService service(options_for(2, 40, 4, 1, 4), net::Endpoint{"127.0.0.1", 0}, test_secret(), 5s,
                             /*max_unauthenticated=*/64);
  auto hostile = open_hostile(service.address(), /*idle=*/90, /*partial=*/10);
  const auto start = Clock::now();
  run_two_ranks(service, 10s);
  EXPECT_LT(Clock::now() - start, 4s);
  // The first idle connection was closed by the service, not by its 5 s hello deadline.
  EXPECT_TRUE(closed_by_peer(hostile.front().get(), start + 4s));
}

TEST(CoordinatorService, AuthenticatedRankStoppingMidMessageHoldsOnlyItself) {
  CoordinatorService service(options_for(2, 40, 4, 1, 4), net::Endpoint{"127.0.0.1", 0}, test_secret());
  control::Link raw(net::connect_to(service.address(), Clock::now() + 5s));
  auto frame = raw.receive(Clock::now() + 5s);
  ASSERT_TRUE(frame.has_value());
  Hello hello{1, 2, 0, 0, false, {}};
  hello.mac = prove(test_secret(), decode_challenge(*frame), 1, 2, 0);
  raw.send(encode(hello), Clock::now() + 5s);
  frame = raw.receive(Clock::now() + 5s);
  ASSERT_TRUE(frame.has_value());
  ASSERT_TRUE(decode_welcome(*frame).accepted);
  // Rank 1 sends the first half of a fetch and stops.
  const Bytes fetch = encode(Request{Fetch{3}});
  std::array<std::byte, 8> head{};
  const std::uint32_t magic = control::kFrameMagic, len = static_cast<std::uint32_t>(fetch.size());
  std::memcpy(head.data(), &magic, 4);
  std::memcpy(head.data() + 4, &len, 4);
  net::send_all(raw.fd(), head, Clock::now() + 5s);
  net::send_all(raw.fd(), std::span(fetch).first(fetch.size() / 2), Clock::now() + 5s);
  // Rank 0 is served meanwhile: each call of it would otherwise wait out the 5 s.
  auto rank0 = client_for(service, 0, 2, 1, 3s);
  for (int i = 0; i < 3; ++i) {
    const BatchReply b = rank0->fetch(2);
    ASSERT_EQ(b.samples.size(), 2u);
    EXPECT_TRUE(rank0->commit(b.lease));
  }
  // Rank 1 is lost once its message stayed half-sent for 5 s.
  const auto deadline = Clock::now() + 20s;
  while (service.coordinator().stats().ranks_lost == 0 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(service.coordinator().stats().ranks_lost, 1u);
  rank0->bye(false);
}

TEST(CoordinatorService, RankGoneWithoutByeGivesItsSamplesBack) {
  const std::uint64_t n = 30;
  CoordinatorService service(options_for(2, n, 5, 1, 2), net::Endpoint{"127.0.0.1", 0}, test_secret());
  auto rank0 = client_for(service, 0, 2);
  std::vector<std::uint64_t> vanished;
  {
    auto rank1 = client_for(service, 1, 2);
    vanished = rank1->fetch(5).samples;
    ASSERT_EQ(vanished.size(), 5u);
  }  // closed without bye
  const auto deadline = Clock::now() + 5s;
  while (service.coordinator().stats().ranks_lost == 0 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(service.coordinator().stats().ranks_lost, 1u);
  EXPECT_EQ(service.coordinator().progress().leased, 0u);
  Bitmap committed(n);
  std::set<std::uint64_t> seen;
  for (int guard = 0; guard < 100; ++guard) {
    const BatchReply b = rank0->fetch(4);
    if (b.status == 2) break;
    ASSERT_EQ(b.status, 0);
    committed.add(b.samples);
    seen.insert(b.samples.begin(), b.samples.end());
    ASSERT_TRUE(rank0->commit(b.lease));
  }
  EXPECT_EQ(committed.problems(), "");
  for (auto id : vanished) EXPECT_TRUE(seen.count(id)) << "sample " << id;
  rank0->bye(false);
}

TEST(CoordinatorService, ExternalCoordinatorRestartsFromItsCheckpoint) {
  TempDir dir;
  const std::uint64_t n = 120;
  auto o = options_for(1, n, 10, 1, 6);
  o.checkpoint_path = dir.file("coordinator.json");
  Bitmap committed(n);
  auto service = std::make_unique<CoordinatorService>(o, net::Endpoint{"127.0.0.1", 0}, test_secret());
  const net::Endpoint address = service->address();
  CoordinatorClient client(address, test_secret(), 0, 1, 0, 0, 10s);
  for (int i = 0; i < 5; ++i) {
    const BatchReply b = client.fetch(6);
    committed.add(b.samples);
    ASSERT_TRUE(client.commit(b.lease));
  }
  const BatchReply open = client.fetch(6);  // in flight when the coordinator goes down
  ASSERT_EQ(open.samples.size(), 6u);
  service.reset();  // writes its final checkpoint
  service = std::make_unique<CoordinatorService>(o, address, test_secret());
  EXPECT_EQ(service->coordinator().progress().committed, 30u);
  // The client reconnects on its next call; the lease from before is void.
  EXPECT_FALSE(client.commit(open.lease));
  EXPECT_EQ(client.reconnections(), 1u);
  std::set<std::uint64_t> served;
  for (int guard = 0; guard < 100; ++guard) {
    const BatchReply b = client.fetch(6);
    if (b.status == 2) break;
    committed.add(b.samples);
    served.insert(b.samples.begin(), b.samples.end());
    ASSERT_TRUE(client.commit(b.lease));
  }
  EXPECT_EQ(committed.problems(), "");
  for (auto id : open.samples) EXPECT_TRUE(served.count(id)) << "sample " << id << " of the void lease";
  client.bye(false);
  EXPECT_TRUE(service->wait_all_exited(Clock::now() + 5s));
}

// A coordinator killed during a rank's first handshake and started again on
// the same address: the rank's constructor connects again instead of failing
// (integration.coordinator.kill once landed a kill there).
TEST(CoordinatorService, FirstHandshakeBrokenByACrashIsTriedAgain) {
  net::Endpoint address;
  auto dying = std::make_unique<net::Fd>(net::listen_on("127.0.0.1", 0, &address));
  std::atomic<bool> dropped{false};
  std::unique_ptr<CoordinatorService> service;
  std::thread crash([&] {
    // Take the rank's first connection and close it before the challenge: to
    // the rank, the link closes half-way through its handshake.
    net::Fd first = net::accept_until(dying->get(), Clock::now() + 10s, nullptr);
    first = net::Fd();
    dying.reset();
    dropped = true;
    service = std::make_unique<CoordinatorService>(options_for(1, 12, 4, 1, 4), address, test_secret());
  });
  std::unique_ptr<CoordinatorClient> client;
  std::string error;
  try {
    client = std::make_unique<CoordinatorClient>(address, test_secret(), 0, 1, 0, 0, 10s);
  } catch (const Error& e) {
    error = e.what();
  }
  crash.join();
  EXPECT_TRUE(dropped.load());
  ASSERT_EQ(error, "");
  const BatchReply b = client->fetch(4);
  EXPECT_EQ(b.samples.size(), 4u);
  EXPECT_TRUE(client->commit(b.lease));
  client->bye(false);
}

}  // namespace
}  // namespace antdt::sched::coord
