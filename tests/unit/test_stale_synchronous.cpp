// Stale-synchronous defer (docs/partial.md#stale-synchronous-defer), the NCCL
// shim's mode: late ranks compute every step and are answered at once (their
// contribution handed to a depositary, the results they lack pushed ahead), so
// no rank waits for a laggard while every rank stays within the bound.
// The arbiter on a fake clock, the protocol, and ranks as threads.
#include "comm_fixture.hpp"

#include "collectives/partial/arbiter.hpp"

#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <random>
#include <set>

namespace antdt::test {
namespace {

namespace p = coll::partial;

p::Arrival stale_arrival(int rank, std::uint64_t step, std::uint32_t staleness, double weight = 1) {
  p::Arrival a;
  a.rank = rank;
  a.step = step;
  a.weight = weight;
  a.policy = LatePolicy::defer;
  a.staleness = staleness;
  a.stale_synchronous = true;
  a.signature = 42;
  return a;
}

p::ArbiterConfig arbiter_config(int ranks) {
  p::ArbiterConfig cfg;
  cfg.ranks = ranks;
  cfg.grace_s = 0.001;
  cfg.warmup_steps = 0;
  cfg.result_cache = 8;
  return cfg;
}

// What one rank was told, gathered from the arbiter's output.
struct Told {
  std::vector<p::Decision> decisions;  // every decision sent to anyone, once
  std::vector<std::pair<int, p::Late>> lates;
  std::vector<p::Failure> failures;
  // Deposits announced to each holder (Incoming), counted, and how many of
  // them arrived after the decision that lists them (they must come before).
  std::map<std::tuple<int, int, std::uint64_t>, int> announced;  // (holder, from, step)
  int announced_late = 0;
};

void collect(std::vector<p::Arbiter::Out>& out, Told& told) {
  std::set<std::uint64_t> seen;
  for (auto& o : out) {
    if (auto* d = std::get_if<p::Decision>(&o.message)) {
      for (const auto& dep : d->deposits)
        if (dep.to == o.rank && told.announced.count({dep.to, dep.from, dep.step}) == 0) ++told.announced_late;
      if (seen.insert(d->step).second) told.decisions.push_back(*d);
    } else if (auto* in = std::get_if<p::Incoming>(&o.message)) {
      for (const auto& dep : in->deposits) {
        EXPECT_EQ(dep.to, o.rank);
        ++told.announced[{dep.to, dep.from, dep.step}];
      }
    } else if (auto* l = std::get_if<p::Late>(&o.message)) {
      told.lates.emplace_back(o.rank, *l);
    } else if (auto* f = std::get_if<p::Failure>(&o.message)) {
      told.failures.push_back(*f);
    }
  }
  out.clear();
}

// Ranks 0 and 1 arrive for every step; rank 2 computes three times longer and
// arrives only every third round. It is never made to wait for a close while
// it is behind (a Late answer, never a decision), the fast ranks never run
// more than S steps ahead of it, each of its contributions lands in exactly
// one later step within S, and every step that closed without it is pushed
// ahead to it and fetched exactly once, from that step's server.
TEST(ArbiterStaleSynchronous, LateRankIsAnsweredAtOnceAndStaysWithinTheBound) {
  constexpr std::uint32_t S = 2;
  p::Arbiter arb(arbiter_config(3));
  std::vector<p::Arbiter::Out> out;
  Told told;
  auto t = p::Clock::now();
  std::uint64_t fast = 1, slow = 1;
  int held_rounds = 0;
  for (int round = 0; round < 60; ++round) {
    // Every third round rank 2 arrives, every sixth before the fast ranks (its
    // depositary is then not at the open step yet: a backup holds the deposit too).
    if (round % 6 == 5) arb.on_arrival(stale_arrival(2, slow++, S), t, out);
    arb.on_arrival(stale_arrival(0, fast, S), t, out);
    arb.on_arrival(stale_arrival(1, fast, S), t, out);
    if (round % 6 == 2) arb.on_arrival(stale_arrival(2, slow++, S), t, out);
    t += std::chrono::milliseconds(5);
    arb.on_tick(t, out);
    const std::size_t before = told.decisions.size();
    collect(out, told);
    if (told.decisions.size() > before) {
      ++fast;
    } else {
      // Held at the bound: rank 2 arrives now, and that releases the step.
      ++held_rounds;
      arb.on_arrival(stale_arrival(2, slow, S), t, out);
      ++slow;
      t += std::chrono::milliseconds(5);
      arb.on_tick(t, out);
      collect(out, told);
      ASSERT_GT(told.decisions.size(), before) << "rank 2's arrival did not release the held step";
      ++fast;
    }
    ASSERT_LE(arb.open_step() - slow, S) << "rank 2 left beyond the bound in round " << round;
  }
  ASSERT_TRUE(told.failures.empty()) << told.failures.front().reason;
  EXPECT_GT(held_rounds, 5) << "the bound never held the fast ranks";
  EXPECT_GE(fast - slow, S - 1) << "the fast ranks never ran ahead";

  // Rank 2's late arrivals were answered Late, each with a depositary, and a
  // backup when the depositary was not at the open step yet.
  std::map<std::uint64_t, std::set<int>> holders_of;  // rank 2's step -> depositary (and backup)
  for (const auto& [rank, late] : told.lates) {
    ASSERT_EQ(rank, 2);
    ASSERT_TRUE(late.depositary == 0 || late.depositary == 1) << "step " << late.step;
    holders_of[late.step].insert(late.depositary);
    if (late.backup >= 0) {
      ASSERT_TRUE(late.backup == 0 || late.backup == 1) << "step " << late.step;
      ASSERT_NE(late.backup, late.depositary);
      holders_of[late.step].insert(late.backup);
    }
  }
  EXPECT_GT(holders_of.size(), 20u);
  // Each deposit lands once, at one of its holders, within S steps; every
  // holder receives it once (the other one discards it).
  std::map<std::uint64_t, int> landed;
  std::map<std::pair<std::uint64_t, int>, int> received;
  std::map<std::uint64_t, int> server_of;
  std::set<std::uint64_t> absent_from;  // steps that closed without rank 2
  for (const auto& d : told.decisions) {
    server_of[d.step] = d.server;
    bool contributor2 = false;
    for (const auto& c : d.contributors) contributor2 |= c.rank == 2;
    bool ahead2 = std::find(d.ahead.begin(), d.ahead.end(), 2) != d.ahead.end();
    EXPECT_NE(contributor2, ahead2) << "step " << d.step << ": rank 2 must be in the ring or sent the result ahead";
    if (ahead2) absent_from.insert(d.step);
    for (const auto& dep : d.deposits) {
      EXPECT_EQ(dep.from, 2);
      ASSERT_TRUE(holders_of.count(dep.step)) << "a deposit nobody was told to make";
      EXPECT_TRUE(holders_of[dep.step].count(dep.to)) << "step " << dep.step << " received by rank " << dep.to;
      ++received[{dep.step, dep.to}];
      if (dep.drop) continue;
      EXPECT_LE(d.step - dep.step, S) << "deposit of step " << dep.step << " landed in step " << d.step;
      EXPECT_GT(d.step, dep.step);
      bool depositary_contributes = false;
      for (const auto& c : d.contributors) depositary_contributes |= c.rank == dep.to;
      EXPECT_TRUE(depositary_contributes) << "step " << d.step;
      ++landed[dep.step];
    }
  }
  std::size_t backups = 0;
  for (const auto& [step, holders] : holders_of) {
    backups += holders.size() - 1;
    // The last S steps' deposits may still be held when the loop stops.
    if (step + S >= arb.open_step()) continue;
    EXPECT_EQ(landed[step], 1) << "deposit of rank 2's step " << step;
  }
  EXPECT_GT(backups, 0u) << "no deposit had a backup: the test did not exercise it";
  // Every holder was told of each deposit once, before the decision that lists it.
  EXPECT_EQ(told.announced_late, 0);
  for (const auto& [key, n] : told.announced) EXPECT_EQ(n, 1) << "announced " << n << " times";
  for (const auto& [key, n] : received)
    EXPECT_EQ(told.announced.count({key.second, 2, key.first}), 1u) << "step " << key.first << " at " << key.second;
  for (const auto& [key, n] : received) EXPECT_EQ(n, 1) << "step " << key.first << " at rank " << key.second;
  // Every result pushed ahead to rank 2 is fetched once, from its server.
  std::map<std::uint64_t, int> fetched;
  auto count_fetches = [&](const std::vector<p::Fetch>& fetches) {
    for (const auto& f : fetches) {
      if (f.rank != 2) continue;
      ++fetched[f.step];
      EXPECT_EQ(f.server, server_of[f.step]) << "step " << f.step;
    }
  };
  for (const auto& [rank, late] : told.lates) count_fetches(late.fetches);
  for (const auto& d : told.decisions) count_fetches(d.fetches);
  for (auto step : absent_from) {
    if (step + S >= arb.open_step()) continue;  // rank 2 may not have arrived since
    EXPECT_EQ(fetched[step], 1) << "result of step " << step << " pushed ahead to rank 2";
  }
  for (const auto& [step, n] : fetched) EXPECT_TRUE(absent_from.count(step)) << "fetch of a step rank 2 computed";
}

// A rank whose last arrival is older than the step before the open one still
// computes an earlier step: it cannot be on time, and the step closes without
// waiting the grace for it.
TEST(ArbiterStaleSynchronous, NoGraceForARankComputingAnOlderStep) {
  auto cfg = arbiter_config(3);
  cfg.grace_s = 10;  // would be plain to see
  p::Arbiter arb(cfg);
  std::vector<p::Arbiter::Out> out;
  Told told;
  auto t = p::Clock::now();
  for (std::uint64_t step = 1; step <= 2; ++step)
    for (int r = 0; r < 3; ++r) arb.on_arrival(stale_arrival(r, step, 3), t, out);
  collect(out, told);
  ASSERT_EQ(told.decisions.size(), 2u);
  // Step 3: rank 2 last arrived for step 2, so it may still come on time: the grace runs.
  arb.on_arrival(stale_arrival(0, 3, 3), t, out);
  arb.on_arrival(stale_arrival(1, 3, 3), t, out);
  arb.on_tick(t + std::chrono::milliseconds(1), out);
  collect(out, told);
  EXPECT_EQ(told.decisions.size(), 2u) << "step 3 closed before its grace although rank 2 could be on time";
  arb.on_tick(t + std::chrono::seconds(11), out);
  collect(out, told);
  ASSERT_EQ(told.decisions.size(), 3u);
  // Step 4: rank 2 computes step 3 (its last arrival is 2): no grace.
  arb.on_arrival(stale_arrival(0, 4, 3), t + std::chrono::seconds(11), out);
  arb.on_arrival(stale_arrival(1, 4, 3), t + std::chrono::seconds(11), out);
  collect(out, told);
  EXPECT_EQ(told.decisions.size(), 4u) << "step 4 waited the grace for a rank two steps behind";
}

// The run ends while a depositary holds a deposit that can no longer land: the
// final decision has it received and discarded, and the results pushed ahead
// are fetched, with catch-up pushes only for the steps before them.
TEST(ArbiterStaleSynchronous, TheFinalDecisionDrainsDepositsAndPushesAhead) {
  p::Arbiter arb(arbiter_config(3));
  std::vector<p::Arbiter::Out> out;
  Told told;
  auto t = p::Clock::now();
  for (int r = 0; r < 3; ++r) arb.on_arrival(stale_arrival(r, 1, 2), t, out);
  for (int r = 0; r < 2; ++r) arb.on_arrival(stale_arrival(r, 2, 2), t, out);
  arb.on_tick(t + std::chrono::milliseconds(5), out);  // step 2 closes without rank 2
  collect(out, told);
  ASSERT_EQ(told.decisions.size(), 2u);
  arb.on_finish(p::Finish{0, 2, 2}, t, out);
  arb.on_finish(p::Finish{1, 2, 2}, t, out);
  // Rank 2 arrives late for step 2: answered at once, its deposit with rank 0 or 1 (both finished: none).
  arb.on_arrival(stale_arrival(2, 2, 2), t, out);
  collect(out, told);
  ASSERT_EQ(told.lates.size(), 0u) << "no depositary is left: the arrival ends the run instead";
  // Now a case with a deposit held at the end: start a new run.
  p::Arbiter arb2(arbiter_config(3));
  Told told2;
  for (int r = 0; r < 3; ++r) arb2.on_arrival(stale_arrival(r, 1, 2), t, out);
  for (int r = 0; r < 2; ++r) arb2.on_arrival(stale_arrival(r, 2, 2), t, out);
  arb2.on_tick(t + std::chrono::milliseconds(5), out);
  arb2.on_arrival(stale_arrival(2, 2, 2), t, out);  // late: deposit with rank 0 or 1
  collect(out, told2);
  ASSERT_EQ(told2.lates.size(), 1u);
  const auto& late = told2.lates[0].second;
  // Ranks 0 and 1 are computing step 3: one holds the deposit, the other backs it up.
  ASSERT_TRUE(late.depositary == 0 || late.depositary == 1);
  ASSERT_EQ(late.backup, 1 - late.depositary);
  ASSERT_EQ(late.fetches.size(), 1u);
  EXPECT_EQ(late.fetches[0].step, 2u);
  for (int r = 0; r < 3; ++r) arb2.on_finish(p::Finish{r, 2, 2}, t, out);
  collect(out, told2);
  ASSERT_FALSE(told2.decisions.empty());
  const auto& final_decision = told2.decisions.back();
  ASSERT_TRUE(final_decision.final);
  ASSERT_EQ(final_decision.deposits.size(), 2u);
  std::set<int> drained_at;
  for (const auto& dep : final_decision.deposits) {
    EXPECT_TRUE(dep.drop);
    EXPECT_EQ(dep.from, 2);
    drained_at.insert(dep.to);
  }
  EXPECT_EQ(drained_at, (std::set<int>{0, 1}));
}

// A lost rank under stale-synchronous defer fails every rank (results were
// pushed ahead to it, deposits handed to it): the NCCL shim's callers get an error.
TEST(ArbiterStaleSynchronous, LostRankFailsEveryRank) {
  p::Arbiter arb(arbiter_config(3));
  std::vector<p::Arbiter::Out> out;
  Told told;
  auto t = p::Clock::now();
  arb.on_arrival(stale_arrival(0, 1, 2), t, out);
  arb.on_arrival(stale_arrival(1, 1, 2), t, out);
  arb.on_rank_lost(2, t, out);
  collect(out, told);
  ASSERT_EQ(told.failures.size(), 2u);
  for (const auto& f : told.failures) EXPECT_EQ(f.status, Status::peer_lost);
}

TEST(PartialProtocol, StaleSynchronousFieldsRoundTrip) {
  p::Decision d;
  d.step = 9;
  d.server = 1;
  d.contributors = {{0, 1.0, 9}, {1, 1.0, 9}};
  d.catchups = {{2, 3, 0, 7}};
  d.classes = {StragglerClass::healthy, StragglerClass::healthy, StragglerClass::transient};
  d.deposits = {{0, 2, 7, 1.5, false}, {1, 2, 8, 1.0, true}};
  d.ahead = {2};
  d.fetches = {{1, 8, 0}};
  const auto back = std::get<p::Decision>(p::decode_from_arbiter(p::encode(d), 3));
  ASSERT_EQ(back.deposits.size(), 2u);
  EXPECT_EQ(back.deposits[0].weight, 1.5);
  EXPECT_TRUE(back.deposits[1].drop);
  EXPECT_EQ(back.catchups[0].until_step, 7u);
  ASSERT_EQ(back.ahead.size(), 1u);
  ASSERT_EQ(back.fetches.size(), 1u);
  EXPECT_EQ(back.fetches[0].step, 8u);
  p::Late late{5, 1, 0, {{2, 4, 0}, {2, 5, 1}}, d.classes};
  const auto lb = std::get<p::Late>(p::decode_from_arbiter(p::encode(late), 3));
  EXPECT_EQ(lb.step, 5u);
  EXPECT_EQ(lb.depositary, 1);
  EXPECT_EQ(lb.backup, 0);
  ASSERT_EQ(lb.fetches.size(), 2u);
  EXPECT_EQ(lb.fetches[1].server, 1);
  EXPECT_EQ(lb.classes[2], StragglerClass::transient);
  p::Incoming incoming{{{1, 2, 7, 2.0, false}}};
  const auto ib = std::get<p::Incoming>(p::decode_from_arbiter(p::encode(incoming), 3));
  ASSERT_EQ(ib.deposits.size(), 1u);
  EXPECT_EQ(ib.deposits[0].step, 7u);
  EXPECT_EQ(ib.deposits[0].weight, 2.0);
  // A deposit to its own sender, a fetch of step 0, a rank out of range, or a
  // count beyond the bytes left are garbage.
  auto bad = d;
  bad.deposits[0].to = 2;
  EXPECT_THROW(p::decode_from_arbiter(p::encode(bad), 3), BootstrapError);
  bad = d;
  bad.fetches[0].step = 0;
  EXPECT_THROW(p::decode_from_arbiter(p::encode(bad), 3), BootstrapError);
  EXPECT_THROW(p::decode_from_arbiter(p::encode(late), 2), BootstrapError);
  auto same = late;
  same.backup = same.depositary;
  EXPECT_THROW(p::decode_from_arbiter(p::encode(same), 3), BootstrapError);
  auto bytes = p::encode(late);
  bytes.resize(bytes.size() - 1);
  EXPECT_THROW(p::decode_from_arbiter(bytes, 3), BootstrapError);
}

// Ranks as threads: every rank calls every step (as an NCCL program does),
// rank 2 computes three times longer and every rank has random 5x spikes.
// Each contribution is a one-hot vector naming (rank, call): every rank
// applies the same results bit for bit, each contribution lands in exactly
// one result, and rank 2 was answered late (its calls did not wait).
class StaleSynchronous : public ::testing::TestWithParam<TransportKind> {};

TEST_P(StaleSynchronous, EveryContributionLandsOnceAndReplicasAgree) {
  const int n = 4, steps = 40;
  const std::uint32_t S = 3;
  const int drain = static_cast<int>(S) + 1;  // weight-1 zero calls: the last real contributions land
  const std::size_t count = static_cast<std::size_t>(n * steps);
  Config cfg = test_config();
  cfg.partial_warmup = 2;
  cfg.partial_grace_ms = 1;
  cfg.result_cache = S + 1;
  std::vector<std::vector<std::vector<float>>> applied(n);
  std::vector<int> late_calls(n, 0);
  auto outcomes = run_ranks(n, GetParam(), [&](Communicator& comm) {
    const int me = comm.rank();
    std::mt19937 rng(static_cast<unsigned>(me + 11));
    std::vector<float> grad(count), result(count);
    PartialOptions opts{LatePolicy::defer, 1.0, S, 1};
    opts.stale_synchronous = true;
    for (int call = 0; call < steps + drain; ++call) {
      int ms = me == 2 ? 6 : 2;
      if (rng() % 10 == 0) ms *= 5;
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      std::fill(grad.begin(), grad.end(), 0.0f);
      if (call < steps) grad[static_cast<std::size_t>(me * steps + call)] = 1.0f;
      auto r = comm.partial_allreduce(grad.data(), result.data(), count, DataType::f32, ReduceOp::sum, opts);
      // The drain calls of a rank still behind when the others finish end the
      // run (their zero contributions dropped); the real ones must all land.
      if (call >= steps && (r.fate == Fate::dropped || r.step == 0)) {
        if (r.step != 0) applied[static_cast<std::size_t>(me)].push_back(result);
        continue;
      }
      if (r.step != static_cast<std::uint64_t>(call + 1))
        throw std::runtime_error(cat("call ", call, " returned step ", r.step));
      if (r.fate == Fate::dropped || r.fate == Fate::none)
        throw std::runtime_error(cat("call ", call, " fate ", static_cast<int>(r.fate)));
      if (r.fate == Fate::deferred && r.contribution_step == 0) ++late_calls[static_cast<std::size_t>(me)];
      applied[static_cast<std::size_t>(me)].push_back(result);
    }
    comm.partial_finish();
  }, cfg);
  expect_all_ok(outcomes);
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(applied[r].size(), applied[0].size());
    for (std::size_t s = 0; s < applied[0].size(); ++s)
      ASSERT_EQ(applied[r][s], applied[0][s]) << "rank " << r << " result " << s + 1;
  }
  std::vector<double> total(count, 0.0);
  for (const auto& res : applied[0])
    for (std::size_t i = 0; i < count; ++i) total[i] += res[i];
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < steps; ++c)
      EXPECT_EQ(total[static_cast<std::size_t>(r * steps + c)], 1.0) << "rank " << r << " call " << c;
  EXPECT_GT(late_calls[2], 0) << "rank 2 was never answered late: the test did not exercise deposits";
}

INSTANTIATE_TEST_SUITE_P(Transports, StaleSynchronous, ::testing::Values(TransportKind::inproc, TransportKind::ucx),
                         [](const auto& param_info) { return to_string(param_info.param); });

}  // namespace
}  // namespace antdt::test
