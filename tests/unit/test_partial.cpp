// Partial AllReduce with ranks as threads, over every transport: the five
// invariants of DESIGN §7 (consistency, accounting, weighting, liveness,
// wait == plain allreduce), with a slowed rank.
#include "comm_fixture.hpp"

#include "collectives/partial/arbiter.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

namespace antdt::test {
namespace {

using Steps = std::vector<std::vector<float>>;  // results applied by one rank, in order

std::uint64_t hash_of(const std::vector<float>& v) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

Config partial_config() {
  Config cfg = test_config();
  cfg.partial_warmup = 2;
  cfg.partial_grace_ms = 2;
  cfg.result_cache = 8;
  return cfg;
}

class Partial : public ::testing::TestWithParam<TransportKind> {};

// Invariant 5 (and 1): with `wait`, every step equals the plain allreduce of the same inputs, bit for bit.
TEST_P(Partial, WaitPolicyEqualsPlainAllreduceBitForBit) {
  const int n = 4;
  const std::size_t count = 3001;
  std::vector<std::vector<std::uint64_t>> partial_hashes(n), plain_hashes(n);
  auto outcomes = run_ranks(n, GetParam(), [&](Communicator& comm) {
    std::mt19937 rng(static_cast<unsigned>(comm.rank() * 7 + 1));
    std::uniform_real_distribution<float> dist(-1, 1);
    for (int step = 1; step <= 6; ++step) {
      std::vector<float> grad(count), a(count), b(count);
      for (auto& g : grad) g = dist(rng);
      auto r = comm.partial_allreduce(grad.data(), a.data(), count, DataType::f32, ReduceOp::avg,
                                      PartialOptions{LatePolicy::wait, 1.0, 1, 0});
      if (r.step != static_cast<std::uint64_t>(step) || r.fate != Fate::included || r.participants != n)
        throw std::runtime_error(cat("step ", step, ": got step ", r.step, " participants ", r.participants));
      comm.allreduce(grad.data(), b.data(), count, DataType::f32, ReduceOp::avg);
      partial_hashes[comm.rank()].push_back(hash_of(a));
      plain_hashes[comm.rank()].push_back(hash_of(b));
    }
    comm.partial_finish();
  }, partial_config());
  expect_all_ok(outcomes);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(partial_hashes[r], plain_hashes[r]) << "rank " << r;
    EXPECT_EQ(partial_hashes[r], partial_hashes[0]) << "rank " << r;
  }
}

// A training loop where rank `slow` computes `factor` times longer. Each
// contribution is a one-hot vector naming (rank, call), so the sum of all
// applied results shows which contributions were included, and how often.
struct LoopOutcome {
  Steps applied;
  std::vector<int> fate_of_call;  // Fate per contributing call
  std::vector<std::uint64_t> contribution_step;
  std::vector<std::pair<int, double>> info;  // per applied result: participants, total weight
  int calls = 0;
};

// weighted: each rank weighs its contributions rank + 1 and the op is avg, so
// the steps take the weighted path (sum(w_i g_i) / sum(w_i)); each applied
// result times its total weight then holds w_r where rank r's one-hot is.
void straggler_loop(Communicator& comm, LatePolicy policy, int steps, int max_calls, int slow, int factor,
                    LoopOutcome& mine, bool weighted = false) {
  const int n = comm.size();
  const std::size_t count = static_cast<std::size_t>(n * max_calls);
  std::vector<float> grad(count), result(count);
  auto step_ms = std::chrono::milliseconds(comm.rank() == slow ? 4 * factor : 4);
  for (;;) {
    std::this_thread::sleep_for(step_ms);
    if (mine.calls >= max_calls) throw std::runtime_error("too many calls");
    std::fill(grad.begin(), grad.end(), 0.0f);
    grad[static_cast<std::size_t>(comm.rank() * max_calls + mine.calls)] = 1.0f;
    auto r = comm.partial_allreduce(grad.data(), result.data(), count, DataType::f32,
                                    weighted ? ReduceOp::avg : ReduceOp::sum,
                                    PartialOptions{policy, weighted ? comm.rank() + 1.0 : 1.0, 1, 1});
    mine.fate_of_call.push_back(static_cast<int>(r.fate));
    mine.contribution_step.push_back(r.contribution_step);
    ++mine.calls;
    if (r.step == 0) break;  // the run ended while this rank was late
    mine.applied.push_back(result);
    mine.info.emplace_back(r.participants, r.total_weight);
    while (r.steps_behind > 0) {  // catch up without computing
      r = comm.partial_allreduce(nullptr, result.data(), count, DataType::f32,
                                 weighted ? ReduceOp::avg : ReduceOp::sum, PartialOptions{policy, 0.0, 1, 0});
      if (r.fate != Fate::none) throw std::runtime_error("weight-0 call reported a contribution");
      mine.applied.push_back(result);
      mine.info.emplace_back(r.participants, r.total_weight);
    }
    if (static_cast<int>(r.step) >= steps) break;
  }
  auto f = comm.partial_finish();
  while (f.steps_behind > 0) {
    auto r = comm.partial_allreduce(nullptr, result.data(), count, DataType::f32,
                                    weighted ? ReduceOp::avg : ReduceOp::sum, PartialOptions{policy, 0.0, 1, 0});
    mine.applied.push_back(result);
    mine.info.emplace_back(r.participants, r.total_weight);
    f.steps_behind = r.steps_behind;
  }
}

void check_invariants(const std::vector<LoopOutcome>& all, int n, int max_calls, bool expect_late,
                      bool weighted = false) {
  // 1. Consistency: every rank applied the same sequence of results, bit for bit.
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(all[r].applied.size(), all[0].applied.size()) << "rank " << r << " applied a different number of results";
    for (std::size_t s = 0; s < all[0].applied.size(); ++s)
      ASSERT_EQ(hash_of(all[r].applied[s]), hash_of(all[0].applied[s])) << "rank " << r << " step " << s + 1;
  }
  // Each result as counts of the one-hot contributions it holds: itself, or
  // (weighted) each entry times the result's total weight over its rank's
  // weight, which must be a whole number up to rounding.
  std::vector<std::vector<double>> counts;
  for (std::size_t s = 0; s < all[0].applied.size(); ++s) {
    std::vector<double> c(all[0].applied[s].begin(), all[0].applied[s].end());
    if (weighted) {
      ASSERT_EQ(all[0].info.size(), all[0].applied.size());
      for (std::size_t i = 0; i < c.size(); ++i) {
        const double exact = c[i] * all[0].info[s].second / static_cast<double>(i / max_calls + 1);
        ASSERT_NEAR(exact, std::round(exact), 1e-4) << "step " << s + 1 << " entry " << i << ": not a whole weight";
        c[i] = std::round(exact);
      }
    }
    counts.push_back(std::move(c));
  }
  // Every rank was told the same participant count and total weight for each
  // result — late ranks too, for the results they fetched — and they match the
  // result itself (each contribution a single 1 of weight 1, or rank + 1).
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(all[r].info.size(), all[r].applied.size());
    for (std::size_t s = 0; s < all[r].applied.size(); ++s) {
      double ones = 0, weight = 0;
      for (std::size_t i = 0; i < counts[s].size(); ++i) {
        ones += counts[s][i];
        weight += counts[s][i] * (weighted ? static_cast<double>(i / max_calls + 1) : 1.0);
      }
      EXPECT_EQ(all[r].info[s].first, static_cast<int>(ones)) << "rank " << r << " step " << s + 1 << " participants";
      EXPECT_EQ(all[r].info[s].second, weight) << "rank " << r << " step " << s + 1 << " total weight";
    }
  }
  // 2. Accounting: each contribution is in exactly one result, or reported dropped.
  std::vector<double> total(static_cast<std::size_t>(n * max_calls), 0.0);
  for (const auto& res : counts)
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += res[i];
  int late = 0;
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < all[r].calls; ++c) {
      const double seen = total[static_cast<std::size_t>(r * max_calls + c)];
      const auto fate = static_cast<Fate>(all[r].fate_of_call[static_cast<std::size_t>(c)]);
      if (fate == Fate::dropped) {
        EXPECT_EQ(seen, 0.0) << "rank " << r << " call " << c << " reported dropped but was included";
        ++late;
      } else {
        EXPECT_EQ(seen, 1.0) << "rank " << r << " call " << c << " (fate " << static_cast<int>(fate)
                             << ") included " << seen << " times";
        if (fate == Fate::deferred) ++late;
        // It sits in the result it was reported in.
        auto step = all[r].contribution_step[static_cast<std::size_t>(c)];
        ASSERT_GE(step, 1u);
        ASSERT_LE(step, all[0].applied.size());
        EXPECT_EQ(counts[step - 1][static_cast<std::size_t>(r * max_calls + c)], 1.0);
      }
    }
  }
  if (expect_late) {
    EXPECT_GT(late, 0) << "the slow rank was never late: the test did not exercise skipping";
  }
}

TEST_P(Partial, DropSkipsTheSlowRankAndAccountsForEveryContribution) {
  const int n = 4, steps = 24, max_calls = 64;
  std::vector<LoopOutcome> all(n);
  auto outcomes = run_ranks(n, GetParam(), [&](Communicator& comm) {
    straggler_loop(comm, LatePolicy::drop, steps, max_calls, n - 1, 3, all[static_cast<std::size_t>(comm.rank())]);
  }, partial_config());
  expect_all_ok(outcomes);
  check_invariants(all, n, max_calls, true);
  // The fast ranks did not wait for the slow one: it made far fewer calls.
  EXPECT_LT(all[n - 1].calls, all[0].calls);
}

TEST_P(Partial, DeferAddsLateContributionsToALaterStep) {
  const int n = 3, steps = 24, max_calls = 64;
  std::vector<LoopOutcome> all(n);
  Config cfg = partial_config();
  auto outcomes = run_ranks(n, GetParam(), [&](Communicator& comm) {
    // Slow rank 1: its ring neighbour on the left is rank 0, the server of its
    // catch-up, so ring messages and catch-up pushes travel the same link.
    straggler_loop(comm, LatePolicy::defer, steps, max_calls, 1, 2, all[static_cast<std::size_t>(comm.rank())]);
  }, cfg);
  expect_all_ok(outcomes);
  check_invariants(all, n, max_calls, true);
}

// The weighted path (avg over unequal weights: sum(w_i g_i) / sum(w_i), the
// ring) with a slow rank under defer: replicas bit-identical, every
// contribution in exactly one result with its weight, and each result's
// participants and total weight what it holds.
TEST_P(Partial, WeightedDeferIncludesEveryContributionOnceWithItsWeight) {
  const int n = 4, steps = 24, max_calls = 64;
  std::vector<LoopOutcome> all(n);
  auto outcomes = run_ranks(n, GetParam(), [&](Communicator& comm) {
    straggler_loop(comm, LatePolicy::defer, steps, max_calls, 2, 3, all[static_cast<std::size_t>(comm.rank())], true);
  }, partial_config());
  expect_all_ok(outcomes);
  check_invariants(all, n, max_calls, true, true);
}

// A step in which every rank calls with weight 0 (no data, e.g. at the end of
// an epoch) closes empty — zeros, no participants — instead of waiting for a
// contribution that never comes; with a rank behind as well, it is served.
TEST_P(Partial, StepsWhereNobodyContributesCloseEmpty) {
  const int n = 3;
  Config cfg = partial_config();
  cfg.timeout = std::chrono::seconds(10);
  for (LatePolicy policy : {LatePolicy::wait, LatePolicy::defer}) {
    expect_all_ok(run_ranks(n, GetParam(), [&](Communicator& comm) {
      std::vector<float> grad(5, static_cast<float>(comm.rank() + 1)), result(5, -1.0f);
      auto r = comm.partial_allreduce(grad.data(), result.data(), grad.size(), DataType::f32, ReduceOp::sum,
                                      PartialOptions{policy, 1.0, 1, 1});
      if (r.step != 1 || r.participants != n || result[4] != 6.0f)
        throw std::runtime_error(cat("step 1: step ", r.step, ", ", r.participants, " participants, ", result[4]));
      for (std::uint64_t step = 2; step <= 4; ++step) {
        std::fill(result.begin(), result.end(), -1.0f);
        r = comm.partial_allreduce(nullptr, result.data(), grad.size(), DataType::f32, ReduceOp::sum,
                                   PartialOptions{policy, 0.0, 1, 0});
        if (r.step != step || r.participants != 0 || r.total_weight != 0 || r.fate != Fate::none ||
            std::any_of(result.begin(), result.end(), [](float v) { return v != 0.0f; }))
          throw std::runtime_error(cat("empty step ", step, ": got step ", r.step, ", ", r.participants,
                                       " participants, total weight ", r.total_weight, ", result[0] ", result[0]));
      }
      comm.partial_finish();
    }, cfg));
  }
}

// The end of an epoch under defer: ranks 0 and 1 have no data for step 2
// (weight 0) while rank 2's contribution for step 1 arrives late. Step 2
// closes empty on every rank, rank 2's contribution is reported dropped, and
// rank 2 fetches steps 1 and 2 like any late rank (before the fix the step's
// server did not hold the step it had to serve: InternalError).
TEST_P(Partial, LateContributionIntoAStepWithoutDataIsDroppedOnEveryRank) {
  const int n = 3;
  Config cfg = partial_config();
  cfg.partial_warmup = 0;
  cfg.timeout = std::chrono::seconds(10);
  std::vector<std::vector<float>> step1(n), step2(n);
  std::vector<Fate> first_fate(n, Fate::none);
  expect_all_ok(run_ranks(n, GetParam(), [&](Communicator& comm) {
    const auto me = static_cast<std::size_t>(comm.rank());
    std::vector<float> grad(5, static_cast<float>(comm.rank() + 1)), result(5, -1.0f);
    const PartialOptions with_data{LatePolicy::defer, 1.0, 2, 1}, without{LatePolicy::defer, 0.0, 2, 0};
    if (comm.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // late for step 1
    auto r = comm.partial_allreduce(grad.data(), result.data(), grad.size(), DataType::f32, ReduceOp::sum, with_data);
    first_fate[me] = r.fate;
    step1[me] = result;
    if (comm.rank() != 2) {
      r = comm.partial_allreduce(nullptr, result.data(), grad.size(), DataType::f32, ReduceOp::sum, without);
    } else {
      if (r.step != 1 || r.steps_behind != 1)
        throw std::runtime_error(cat("rank 2: step ", r.step, ", ", r.steps_behind, " behind; expected 1 and 1"));
      r = comm.partial_allreduce(nullptr, result.data(), grad.size(), DataType::f32, ReduceOp::sum, without);
    }
    if (r.step != 2 || r.participants != 0 || r.total_weight != 0)
      throw std::runtime_error(cat("rank ", me, ": step ", r.step, ", ", r.participants, " participants, total weight ",
                                   r.total_weight, "; expected the empty step 2"));
    step2[me] = result;
    comm.partial_finish();
  }, cfg));
  EXPECT_EQ(first_fate[0], Fate::included);
  EXPECT_EQ(first_fate[1], Fate::included);
  EXPECT_EQ(first_fate[2], Fate::dropped) << "a late contribution into a step without data lands nowhere";
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(step1[static_cast<std::size_t>(r)], std::vector<float>(5, 3.0f)) << "rank " << r << ", step 1: 1 + 2";
    EXPECT_EQ(step2[static_cast<std::size_t>(r)], std::vector<float>(5, 0.0f)) << "rank " << r << ", step 2: empty";
  }
}

// Invariant 3: avg over unequal weights is sum(w_i g_i) / sum(w_i).
TEST_P(Partial, WeightedAverageIsExact) {
  const int n = 3;
  std::vector<std::vector<double>> got(n);
  auto outcomes = run_ranks(n, GetParam(), [&](Communicator& comm) {
    const double w = comm.rank() + 1.0;  // 1, 2, 3
    std::vector<double> grad(5, static_cast<double>(comm.rank() * 10)), out(5);
    auto r = comm.partial_allreduce(grad.data(), out.data(), grad.size(), DataType::f64, ReduceOp::avg,
                                    PartialOptions{LatePolicy::wait, w, 1, 0});
    if (r.total_weight != 6.0) throw std::runtime_error(cat("total weight ", r.total_weight));
    got[comm.rank()] = out;
    comm.partial_finish();
  }, partial_config());
  expect_all_ok(outcomes);
  const double want = (1 * 0.0 + 2 * 10.0 + 3 * 20.0) / 6.0;
  for (int r = 0; r < n; ++r)
    for (double v : got[r]) EXPECT_NEAR(v, want, 1e-12) << "rank " << r;
}

// Invariant 4: a rank more results behind than are kept gets ResyncError, not a hang.
TEST_P(Partial, RankTooFarBehindGetsResync) {
  const int n = 2;
  Config cfg = partial_config();
  cfg.result_cache = 2;
  cfg.partial_warmup = 0;
  cfg.partial_quorum = 0.5;
  std::string slow_error;
  std::mutex mu;
  std::atomic<bool> slow_done{false};
  auto outcomes = run_ranks(n, GetParam(), [&](Communicator& comm) {
    std::vector<float> g(8, 1.0f), out(8);
    if (comm.rank() == 0) {
      for (int s = 0; s < 6; ++s) {
        comm.partial_allreduce(g.data(), out.data(), g.size(), DataType::f32, ReduceOp::sum,
                               PartialOptions{LatePolicy::drop, 1.0, 1, 0});
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      // Rank 0 hosts the arbiter: stay until the slow rank has had its answer.
      while (!slow_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    try {
      comm.partial_allreduce(g.data(), out.data(), g.size(), DataType::f32, ReduceOp::sum,
                             PartialOptions{LatePolicy::drop, 1.0, 1, 0});
    } catch (const ResyncError& e) {
      std::lock_guard lock(mu);
      slow_error = e.what();
    }
    slow_done.store(true);
  }, cfg);
  expect_all_ok(outcomes);
  EXPECT_NE(slow_error.find("behind"), std::string::npos) << slow_error;
}

TEST_P(Partial, MismatchedCountIsAnErrorOnEveryRank) {
  const int n = 3;
  std::atomic<int> answered{0};
  auto outcomes = run_ranks(n, GetParam(), [&](Communicator& comm) {
    std::vector<float> g(16, 1.0f), out(16);
    std::size_t count = comm.rank() == 2 ? 12 : 16;
    try {
      comm.partial_allreduce(g.data(), out.data(), count, DataType::f32, ReduceOp::sum, PartialOptions{});
    } catch (...) {
      ++answered;
      // Rank 0 hosts the arbiter: it stays until every rank had its answer.
      while (comm.rank() == 0 && answered.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      throw;
    }
  }, partial_config());
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(failed_with<MismatchError>(outcomes, r)) << "rank " << r << ": " << failure_of(outcomes, r);
}

INSTANTIATE_TEST_SUITE_P(Transports, Partial, ::testing::Values(TransportKind::inproc, TransportKind::ucx),
                         [](const auto& param_info) { return to_string(param_info.param); });

// An arrival of weight 1 at `step` under `policy`.
coll::partial::Arrival arrival_of(int rank, std::uint64_t step, LatePolicy policy) {
  coll::partial::Arrival a;
  a.rank = rank;
  a.step = step;
  a.weight = 1;
  a.policy = policy;
  return a;
}

// `ranks` ranks, a grace of `grace_s`, no warm-up.
coll::partial::ArbiterConfig no_warmup_config(int ranks, double grace_s) {
  coll::partial::ArbiterConfig cfg;
  cfg.ranks = ranks;
  cfg.grace_s = grace_s;
  cfg.warmup_steps = 0;
  return cfg;
}

// Three ranks, a 1 ms grace, no warm-up, 8 results kept (the defer tests below).
coll::partial::ArbiterConfig three_ranks_config() {
  coll::partial::ArbiterConfig cfg = no_warmup_config(3, 0.001);
  cfg.result_cache = 8;
  return cfg;
}

// An arrival of `weight` at `step` under defer whose staleness is 2 (two steps late is still deferred).
coll::partial::Arrival deferred_arrival(int rank, std::uint64_t step, double weight = 1) {
  coll::partial::Arrival a = arrival_of(rank, step, LatePolicy::defer);
  a.staleness = 2;
  a.weight = weight;
  return a;
}

// The arbiter's decisions alone, on a fake clock.
TEST(ArbiterTest, ClosesAtQuorumPlusGraceAndNotBefore) {
  coll::partial::Arbiter arb(no_warmup_config(4, 0.010));
  std::vector<coll::partial::Arbiter::Out> out;
  auto t0 = coll::partial::Clock::now();
  auto arrive = [&](int r, std::uint64_t step, coll::partial::Clock::time_point t) {
    arb.on_arrival(arrival_of(r, step, LatePolicy::drop), t, out);
  };
  arrive(0, 1, t0);
  arrive(1, 1, t0);
  EXPECT_TRUE(out.empty()) << "closed before the grace period";
  arb.on_tick(t0 + std::chrono::milliseconds(5), out);
  EXPECT_TRUE(out.empty()) << "closed before the grace period";
  arb.on_tick(t0 + std::chrono::milliseconds(11), out);
  ASSERT_EQ(out.size(), 2u);
  const auto& d = std::get<coll::partial::Decision>(out[0].message);
  EXPECT_EQ(d.step, 1u);
  ASSERT_EQ(d.contributors.size(), 2u);
  EXPECT_TRUE(d.server == 0 || d.server == 1) << "the server must be an on-time contributor";
  out.clear();
  // Rank 3 is late for step 1: with drop it only catches up in step 2.
  arrive(3, 1, t0 + std::chrono::milliseconds(12));
  arrive(0, 2, t0 + std::chrono::milliseconds(13));
  arrive(1, 2, t0 + std::chrono::milliseconds(13));
  arrive(2, 2, t0 + std::chrono::milliseconds(13));
  ASSERT_EQ(out.size(), 4u) << "all four ranks accounted for: the step closes at once";
  const auto& d2 = std::get<coll::partial::Decision>(out[0].message);
  EXPECT_EQ(d2.contributors.size(), 3u);
  ASSERT_EQ(d2.catchups.size(), 1u);
  EXPECT_EQ(d2.catchups[0].rank, 3);
  EXPECT_EQ(d2.catchups[0].from_step, 1u);
}

// With defer and no grace set, a step waits for a missing rank about what
// deferring it costs: two of the ranks' typical transfers (the missed result's
// push, and the weighted ring of the step that carries the late contribution).
TEST(ArbiterTest, DeferGraceIsTwoTransfers) {
  coll::partial::ArbiterConfig cfg;
  cfg.ranks = 4;
  cfg.warmup_steps = 0;  // grace_s 0: derived from the Monitor
  coll::partial::Arbiter arb(cfg);
  std::vector<coll::partial::Arbiter::Out> out;
  const auto ms = [](double v) {
    return std::chrono::duration_cast<coll::partial::Clock::duration>(std::chrono::duration<double, std::milli>(v));
  };
  const auto t0 = coll::partial::Clock::now();
  constexpr double kTransferMs = 4;
  auto arrive = [&](int r, std::uint64_t step, coll::partial::Clock::time_point t) {
    coll::partial::Arrival a = arrival_of(r, step, LatePolicy::defer);
    a.staleness = 2;
    a.compute_s = 0.020;  // every rank alike: no arrival spread, so the transfers decide the grace
    a.transfer_s = kTransferMs / 1e3;
    arb.on_arrival(a, t, out);
  };
  // Ten steps where everyone is on time (each closes at once) teach the Monitor the transfer time.
  std::uint64_t step = 1;
  for (; step <= 10; ++step) {
    for (int r = 0; r < 4; ++r) arrive(r, step, t0 + ms(30.0 * static_cast<double>(step)));
    ASSERT_EQ(out.size(), 4u) << "step " << step << " should close when every rank is there";
    out.clear();
  }
  // Rank 3 is missing: not closed after one transfer, closed after two.
  const auto t = t0 + ms(30.0 * static_cast<double>(step));
  for (int r = 0; r < 3; ++r) arrive(r, step, t);
  EXPECT_TRUE(out.empty());
  arb.on_tick(t + ms(1.5 * kTransferMs), out);
  EXPECT_TRUE(out.empty()) << "closed after 1.5 transfers: the grace is two";
  arb.on_tick(t + ms(2.2 * kTransferMs), out);
  ASSERT_EQ(out.size(), 3u) << "not closed after 2.2 transfers";
  EXPECT_EQ(std::get<coll::partial::Decision>(out[0].message).contributors.size(), 3u);
}

TEST(ArbiterTest, WaitPolicyNeverClosesWithoutEveryRank) {
  coll::partial::ArbiterConfig cfg;
  cfg.ranks = 3;
  cfg.grace_s = 0.001;
  cfg.warmup_steps = 0;
  coll::partial::Arbiter arb(cfg);
  std::vector<coll::partial::Arbiter::Out> out;
  auto t0 = coll::partial::Clock::now();
  for (int r = 0; r < 2; ++r) arb.on_arrival(arrival_of(r, 1, LatePolicy::wait), t0, out);
  arb.on_tick(t0 + std::chrono::seconds(10), out);
  EXPECT_TRUE(out.empty());
}

// A deferred rank takes part in the ring of every step it is present at, so it
// holds those results: the arbiter pushes it only the steps that closed while it
// was absent, and nothing while it stays present, however far behind it is.
TEST(ArbiterTest, DeferredRankIsSentOnlyTheResultsItMissed) {
  coll::partial::Arbiter arb(three_ranks_config());
  std::vector<coll::partial::Arbiter::Out> out;
  auto t = coll::partial::Clock::now();
  auto arrive = [&](int r, std::uint64_t step) { arb.on_arrival(deferred_arrival(r, step), t, out); };
  // The decision rank 2 gets when the open step closes (it has arrived for `slow`).
  auto close_with_rank2 = [&](std::uint64_t fast, std::optional<std::uint64_t> slow) {
    out.clear();
    arrive(0, fast);
    arrive(1, fast);
    if (slow) arrive(2, *slow);
    t += std::chrono::milliseconds(5);
    arb.on_tick(t, out);
    std::optional<coll::partial::Decision> mine;
    for (const auto& o : out)
      if (o.rank == 2) mine = std::get<coll::partial::Decision>(o.message);
    return mine;
  };
  EXPECT_FALSE(close_with_rank2(1, std::nullopt)) << "step 1 closes without rank 2";
  auto d = close_with_rank2(2, 1);  // rank 2 late for step 1, deferred into step 2
  ASSERT_TRUE(d);
  ASSERT_EQ(d->catchups.size(), 1u);
  EXPECT_EQ(d->catchups[0].from_step, 1u) << "step 1 closed while rank 2 was absent";
  d = close_with_rank2(3, 2);  // still one step behind, but it computed step 2 in the ring
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->catchups.empty()) << "rank 2 holds step 2's result: nothing to push";
  EXPECT_FALSE(close_with_rank2(4, std::nullopt)) << "step 4 closes without rank 2";
  d = close_with_rank2(5, 3);
  ASSERT_TRUE(d);
  ASSERT_EQ(d->catchups.size(), 1u);
  EXPECT_EQ(d->catchups[0].from_step, 4u) << "only from the step it missed (it holds 3)";
}

// A late contribution arriving into a step where every rank at the open step
// has no data (weight 0, the end of an epoch): nobody at the open step takes
// part in a ring, so no rank could compute or serve a result holding it. The
// step closes empty and the late contribution is dropped (its caller is told,
// and the Agent gives its batch back); before, it was made the step's only
// contributor while a weight-0 rank was to serve the step's result, which no
// rank held ("serves step 2 but no longer holds it").
TEST(ArbiterTest, LateContributionIntoAStepWithoutDataIsDropped) {
  coll::partial::Arbiter arb(three_ranks_config());
  std::vector<coll::partial::Arbiter::Out> out;
  auto t = coll::partial::Clock::now();
  auto arrive = [&](int r, std::uint64_t step, double weight) {
    arb.on_arrival(deferred_arrival(r, step, weight), t, out);
  };
  arrive(0, 1, 1);
  arrive(1, 1, 1);
  t += std::chrono::milliseconds(5);
  arb.on_tick(t, out);
  ASSERT_EQ(out.size(), 2u) << "step 1 closes without rank 2";
  out.clear();
  arrive(0, 2, 0);  // no data left for ranks 0 and 1
  arrive(1, 2, 0);
  arrive(2, 1, 1);  // rank 2's contribution for step 1, one step late
  ASSERT_EQ(out.size(), 3u) << "every rank is here: step 2 closes at once";
  for (const auto& o : out) {
    const auto& d = std::get<coll::partial::Decision>(o.message);
    EXPECT_EQ(d.step, 2u);
    EXPECT_TRUE(d.contributors.empty()) << "nobody at step 2 has data: the step is empty";
    EXPECT_TRUE(d.server == 0 || d.server == 1) << "a rank at the open step serves (it holds step 1)";
    ASSERT_EQ(d.catchups.size(), 1u);
    EXPECT_EQ(d.catchups[0].rank, 2);
    EXPECT_EQ(d.catchups[0].from_step, 1u) << "rank 2 missed step 1";
    EXPECT_EQ(d.catchups[0].contribution_step, 0u) << "its contribution landed nowhere: dropped";
  }
}

// Dead ranks (docs/partial.md#dead-ranks): rank 2 dies while every rank moves
// the data of step 1. Nobody completed it: the survivors give it up, and the
// arbiter re-runs it among them under a new tag generation.
TEST(ArbiterTest, LostRankDuringAStepIsReRunAmongTheSurvivors) {
  namespace p = coll::partial;
  p::ArbiterConfig cfg;
  cfg.ranks = 4;
  cfg.grace_s = 0.010;
  cfg.warmup_steps = 0;
  p::Arbiter arb(cfg);
  std::vector<p::Arbiter::Out> out;
  const auto t = p::Clock::now();
  for (int r = 0; r < 4; ++r) arb.on_arrival(arrival_of(r, 1, LatePolicy::defer), t, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(std::get<p::Decision>(out[0].message).generation, 0u);
  out.clear();
  arb.on_rank_lost(2, t, out);
  ASSERT_EQ(out.size(), 3u) << "every survivor of the step is told to give it up";
  for (const auto& o : out) {
    const auto& abandon = std::get<p::Abandon>(o.message);
    EXPECT_EQ(abandon.step, 1u);
    EXPECT_EQ(abandon.lost, 2);
  }
  out.clear();
  for (int r : {0, 1}) {
    auto retry = arrival_of(r, 1, LatePolicy::defer);
    retry.retry = true;
    arb.on_arrival(retry, t, out);
  }
  EXPECT_TRUE(out.empty()) << "decided before rank 3 was heard of";
  auto retry = arrival_of(3, 1, LatePolicy::defer);
  retry.retry = true;
  arb.on_arrival(retry, t, out);
  ASSERT_EQ(out.size(), 3u);
  for (const auto& o : out) {
    const auto& d = std::get<p::Decision>(o.message);
    EXPECT_EQ(d.step, 1u);
    EXPECT_EQ(d.generation, 1u) << "a re-run must not match messages of the attempt given up";
    ASSERT_EQ(d.contributors.size(), 3u);
    for (const auto& c : d.contributors) EXPECT_NE(c.rank, 2);
    EXPECT_NE(d.server, 2);
    EXPECT_EQ(d.classes.at(2), StragglerClass::lost);
  }
  out.clear();
  // The next step closes without waiting for the dead rank.
  for (int r : {0, 1, 3}) {
    auto a = arrival_of(r, 2, LatePolicy::defer);
    a.holds = 1;
    arb.on_arrival(a, t, out);
  }
  ASSERT_EQ(out.size(), 3u);
  const auto& d2 = std::get<p::Decision>(out[0].message);
  EXPECT_EQ(d2.step, 2u);
  EXPECT_EQ(d2.contributors.size(), 3u);
  EXPECT_EQ(d2.generation, 1u);
}

// Rank 2 dies during step 1 after ranks 0 and 3 completed it: rank 1, which
// gave it up, fetches the result they hold, with its contribution counted in it.
TEST(ArbiterTest, LostRankAfterOthersCompletedTheStepLetsTheRestFetchIt) {
  namespace p = coll::partial;
  p::ArbiterConfig cfg;
  cfg.ranks = 4;
  cfg.grace_s = 0.010;
  cfg.warmup_steps = 0;
  p::Arbiter arb(cfg);
  std::vector<p::Arbiter::Out> out;
  const auto t = p::Clock::now();
  for (int r = 0; r < 4; ++r) arb.on_arrival(arrival_of(r, 1, LatePolicy::drop), t, out);
  out.clear();
  auto next = [&](int r) {
    auto a = arrival_of(r, 2, LatePolicy::drop);
    a.holds = 1;
    arb.on_arrival(a, t, out);
  };
  next(0);  // completed step 1 before the loss was known
  arb.on_rank_lost(2, t, out);
  ASSERT_EQ(out.size(), 2u) << "ranks 1 and 3 are not heard of yet";
  out.clear();
  auto retry = arrival_of(1, 1, LatePolicy::drop);
  retry.retry = true;
  arb.on_arrival(retry, t, out);
  EXPECT_TRUE(out.empty());
  next(3);
  // Step 2: ranks 0 and 3 on time, rank 1 fetches steps 1 and 2, rank 2 lost: it closes at once.
  ASSERT_EQ(out.size(), 3u);
  const auto& d = std::get<p::Decision>(out[0].message);
  EXPECT_EQ(d.step, 2u);
  ASSERT_EQ(d.contributors.size(), 2u);
  ASSERT_EQ(d.catchups.size(), 1u);
  EXPECT_EQ(d.catchups[0].rank, 1);
  EXPECT_EQ(d.catchups[0].from_step, 1u);
  EXPECT_EQ(d.catchups[0].contribution_step, 1u) << "its contribution is in step 1's result";
  EXPECT_EQ(d.generation, 1u);
  EXPECT_EQ(d.classes.at(2), StragglerClass::lost);
}

// Rank 0 dies during step 1 after ranks 1 and 2 completed it, and they finish
// their run before rank 3, which gave the step up, asks again. Found by the
// kill test under antdt-run (rank 3 waited for a push no rank was told to
// send): rank 3's run is over too, so it gets the final decision at once, with
// step 1's result pushed to it and its contribution counted in it.
TEST(ArbiterTest, RankRetryingAfterTheOthersFinishedGetsTheFinalDecision) {
  namespace p = coll::partial;
  p::ArbiterConfig cfg;
  cfg.ranks = 4;
  cfg.grace_s = 0.010;
  cfg.warmup_steps = 0;
  p::Arbiter arb(cfg);
  std::vector<p::Arbiter::Out> out;
  const auto t = p::Clock::now();
  for (int r = 0; r < 4; ++r) arb.on_arrival(arrival_of(r, 1, LatePolicy::defer), t, out);
  out.clear();
  arb.on_rank_lost(0, t, out);
  out.clear();
  for (int r : {1, 2}) arb.on_finish(p::Finish{r, 1, 1}, t, out);
  EXPECT_TRUE(out.empty()) << "rank 3 is not heard of yet";
  auto retry = arrival_of(3, 1, LatePolicy::defer);
  retry.retry = true;
  arb.on_arrival(retry, t, out);
  std::set<int> told;
  for (const auto& o : out) {
    const auto& d = std::get<p::Decision>(o.message);
    EXPECT_TRUE(d.final);
    EXPECT_EQ(d.step, 1u);
    EXPECT_TRUE(d.server == 1 || d.server == 2) << "a rank that holds step 1 serves it, not " << d.server;
    ASSERT_EQ(d.catchups.size(), 1u);
    EXPECT_EQ(d.catchups[0].rank, 3);
    EXPECT_EQ(d.catchups[0].from_step, 1u);
    EXPECT_EQ(d.catchups[0].contribution_step, 1u) << "rank 3's contribution is in step 1's result";
    told.insert(o.rank);
  }
  EXPECT_EQ(told, (std::set<int>{1, 2, 3}));
}

// Ranks 1 and 2 finished, rank 3 waits to fetch step 2, and rank 0, the only
// rank a step could still wait for, dies while computing: the run is over,
// and rank 3 gets the final decision instead of waiting for its timeout.
TEST(ArbiterTest, LosingTheLastRankAStepCouldWaitForEndsTheRun) {
  namespace p = coll::partial;
  p::ArbiterConfig cfg;
  cfg.ranks = 4;
  cfg.grace_s = 0.010;
  cfg.warmup_steps = 0;
  p::Arbiter arb(cfg);
  std::vector<p::Arbiter::Out> out;
  const auto t = p::Clock::now();
  for (int r = 0; r < 4; ++r) arb.on_arrival(arrival_of(r, 1, LatePolicy::defer), t, out);
  out.clear();
  for (int r : {1, 2}) arb.on_finish(p::Finish{r, 1, 1}, t, out);
  auto fetch = arrival_of(3, 2, LatePolicy::defer);
  fetch.weight = 0;
  fetch.holds = 1;
  arb.on_arrival(fetch, t, out);
  arb.on_tick(t + std::chrono::seconds(1), out);
  EXPECT_TRUE(out.empty()) << "rank 0 may still arrive";
  arb.on_rank_lost(0, t + std::chrono::seconds(1), out);
  std::set<int> told;
  for (const auto& o : out) {
    const auto& d = std::get<p::Decision>(o.message);
    EXPECT_TRUE(d.final);
    EXPECT_EQ(d.step, 1u);
    EXPECT_TRUE(d.catchups.empty()) << "every survivor holds step 1";
    told.insert(o.rank);
  }
  EXPECT_EQ(told, (std::set<int>{1, 2, 3}));
}

// Under wait (BSP) a lost rank fails every survivor with PeerLostError's status, naming it.
TEST(ArbiterTest, WaitPolicyLostRankIsPeerLostOnEveryRank) {
  namespace p = coll::partial;
  p::ArbiterConfig cfg;
  cfg.ranks = 3;
  cfg.describe_rank = [](int r) { return "rank " + std::to_string(r) + " (pid 77 on host h)"; };
  p::Arbiter arb(cfg);
  std::vector<p::Arbiter::Out> out;
  const auto t = p::Clock::now();
  arb.on_arrival(arrival_of(0, 1, LatePolicy::wait), t, out);
  arb.on_arrival(arrival_of(1, 1, LatePolicy::wait), t, out);
  arb.on_rank_lost(2, t, out);
  ASSERT_EQ(out.size(), 2u);
  for (const auto& o : out) {
    const auto& f = std::get<p::Failure>(o.message);
    EXPECT_EQ(f.status, Status::peer_lost);
    EXPECT_NE(f.reason.find("rank 2 (pid 77 on host h)"), std::string::npos) << f.reason;
  }
}

TEST(PartialProtocol, DeadRankFieldsRoundTrip) {
  namespace p = coll::partial;
  p::Abandon a{7, 3, 2};
  const auto back = std::get<p::Abandon>(p::decode_from_arbiter(p::encode(a), 4));
  EXPECT_EQ(back.step, 7u);
  EXPECT_EQ(back.generation, 3u);
  EXPECT_EQ(back.lost, 2);
  EXPECT_THROW(p::decode_from_arbiter(p::encode(p::Abandon{7, 3, 9}), 4), BootstrapError);
  auto arrival = arrival_of(1, 5, LatePolicy::defer);
  arrival.retry = true;
  arrival.holds = 4;
  const auto in = std::get<p::Arrival>(p::decode_to_arbiter(p::encode(arrival), 4));
  EXPECT_TRUE(in.retry);
  EXPECT_EQ(in.holds, 4u);
  p::Decision d;
  d.step = 2;
  d.server = 0;
  d.contributors = {{0, 1.0, 2}};
  d.catchups = {{1, 1, 1}};
  d.classes = {StragglerClass::healthy, StragglerClass::lost};
  d.generation = 9;
  const auto dd = std::get<p::Decision>(p::decode_from_arbiter(p::encode(d), 2));
  EXPECT_EQ(dd.generation, 9u);
  EXPECT_EQ(dd.catchups[0].contribution_step, 1u);
  EXPECT_EQ(dd.classes[1], StragglerClass::lost);
}

TEST(PartialProtocol, RejectsGarbage) {
  coll::partial::Decision d;
  d.step = 3;
  d.server = 1;
  d.contributors = {{0, 1.0, 3}, {1, 2.0, 3}};
  d.catchups = {{2, 2}};
  d.classes = {StragglerClass::healthy, StragglerClass::leader, StragglerClass::deterministic};
  auto bytes = coll::partial::encode(d);
  auto back = std::get<coll::partial::Decision>(coll::partial::decode_from_arbiter(bytes, 3));
  EXPECT_EQ(back.contributors.size(), 2u);
  EXPECT_EQ(back.catchups[0].from_step, 2u);
  EXPECT_THROW(coll::partial::decode_from_arbiter(bytes, 2), BootstrapError);  // rank 2 out of range
  bytes.pop_back();
  EXPECT_THROW(coll::partial::decode_from_arbiter(bytes, 3), BootstrapError);
  std::mt19937 rng(7);
  for (int i = 0; i < 5000; ++i) {
    std::vector<std::byte> junk(rng() % 64);
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    try { coll::partial::decode_from_arbiter(junk, 4); } catch (const BootstrapError&) {}
    try { coll::partial::decode_to_arbiter(junk, 4); } catch (const BootstrapError&) {}
  }
}

}  // namespace
}  // namespace antdt::test
