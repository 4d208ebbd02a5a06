// antdt-sim's engine (tools/antdt-sim.hpp) on small simulated jobs: its models
// against their formulas, the invariants of every policy's run (Σ b = B every
// step, every sample committed exactly once per epoch, every lease settled),
// and the policies' effect (antdt-dd and antdt-nd beat bsp with stragglers).
// No timing assertions: simulated time only.
#include "tools/antdt-sim.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace antdt::sim {
namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += s + "; ";
  return out;
}

TEST(SimModel, RingAllreduceIsTheAlphaBetaFormula) {
  // 2(p-1)/p * n * beta + 2(p-1) * alpha
  EXPECT_DOUBLE_EQ(ring_allreduce_s(4, 1e6, 1e-5, 1e-9), 2.0 * 3 / 4 * 1e6 * 1e-9 + 2.0 * 3 * 1e-5);
  EXPECT_DOUBLE_EQ(ring_allreduce_s(1024, 25e6, 2e-6, 1.0 / 25e9), 2.0 * 1023 / 1024 * 1e-3 + 2.0 * 1023 * 2e-6);
  EXPECT_EQ(ring_allreduce_s(1, 1e6, 1e-5, 1e-9), 0.0);
  EXPECT_EQ(ring_allreduce_s(0, 1e6, 1e-5, 1e-9), 0.0);
}

TEST(SimModel, StragglerKindsFactorsAndSpikeRate) {
  Scenario sc;
  sc.ranks = 100;
  sc.straggler_fraction = 0.3;
  sc.kinds = {Kind::deterministic, Kind::transient, Kind::persistent};
  sc.slow_factor = 3;
  sc.spike_p = 0.1;
  sc.spike_x = 5;
  sc.spike_len = 2;
  sc.onset = 40;
  sc.persistent_factor = 4;
  const ComputeModel m(sc);
  EXPECT_EQ(m.count(Kind::deterministic), 10u);
  EXPECT_EQ(m.count(Kind::transient), 10u);
  EXPECT_EQ(m.count(Kind::persistent), 10u);
  EXPECT_EQ(m.count(Kind::healthy), 70u);
  std::uint64_t spiking = 0, steps = 0;
  for (int r = 0; r < sc.ranks; ++r) {
    switch (m.kind(r)) {
      case Kind::healthy:
        EXPECT_EQ(m.factor(r, 0), 1.0);
        EXPECT_EQ(m.factor(r, 500), 1.0);
        break;
      case Kind::deterministic:
        EXPECT_EQ(m.factor(r, 0), 3.0);
        EXPECT_EQ(m.factor(r, 500), 3.0);
        break;
      case Kind::persistent:
        EXPECT_EQ(m.factor(r, 39), 1.0);
        EXPECT_EQ(m.factor(r, 40), 4.0);
        EXPECT_EQ(m.factor(r, 5000), 4.0);
        break;
      case Kind::transient:
        for (std::uint64_t s = 0; s < 2000; ++s) {
          const double f = m.factor(r, s);
          ASSERT_TRUE(f == 1.0 || f == 5.0);
          spiking += f == 5.0 ? 1 : 0;
          ++steps;
        }
        break;
    }
    // Noise stays within its bound; a restart (cured) removes the factor.
    for (std::uint64_t s = 0; s < 50; ++s) {
      const double noise = m.noise(r, s);
      EXPECT_GE(noise, 1 - sc.noise);
      EXPECT_LT(noise, 1 + sc.noise);
      EXPECT_DOUBLE_EQ(m.compute_s(r, s, 10, 1, true), sc.per_sample_s * 10 * noise);
    }
  }
  // Fraction of steps inside a spike: 1 - (1 - p)^len = 0.19 (20000 steps).
  EXPECT_NEAR(static_cast<double>(spiking) / static_cast<double>(steps), 1 - std::pow(0.9, 2), 0.015);
}

Scenario small_mixed() {
  Scenario sc;
  sc.ranks = 32;
  sc.steps = 250;
  sc.straggler_fraction = 0.1875;  // 6 ranks: 2 of each kind
  sc.onset = 40;
  sc.restart_delay_s = 2;
  return sc;
}

TEST(Sim, EveryPolicyKeepsTheInvariantsWithMixedStragglers) {
  const Scenario sc = small_mixed();
  for (const char* policy : {"bsp", "antdt-dd", "antdt-nd"}) {
    const Result r = simulate(sc, policy);
    EXPECT_TRUE(r.violations.empty()) << policy << ": " << joined(r.violations);
    EXPECT_GE(r.epochs_completed, 1u) << policy;  // the exactly-once check covered a whole epoch
    EXPECT_GT(r.committed, 0u) << policy;
    EXPECT_LE(r.efficiency, 1.05) << policy;
    EXPECT_LE(r.max_batch, sc.batch_per_rank * static_cast<std::uint64_t>(sc.ranks));
  }
  // bsp never changes anything and never leaves a contribution out.
  const Result bsp = simulate(sc, "bsp");
  EXPECT_EQ(bsp.decisions, 0u);
  EXPECT_EQ(bsp.dropped + bsp.deferred + bsp.given_back, 0u);
  EXPECT_EQ(bsp.committed, sc.batch_per_rank * static_cast<std::uint64_t>(sc.ranks) * sc.steps);
  EXPECT_EQ(bsp.min_batch, sc.batch_per_rank);
  EXPECT_EQ(bsp.max_batch, sc.batch_per_rank);
  // Its efficiency is the BSP theory less the collective's share.
  EXPECT_LE(bsp.efficiency, bsp.bsp_theory);
  EXPECT_GE(bsp.efficiency, 0.9 * bsp.bsp_theory);
}

TEST(Sim, DdAndNdBeatBspWithADeterministicStraggler) {
  Scenario sc;
  sc.ranks = 16;
  sc.steps = 300;
  sc.straggler_fraction = 1.0 / 16;
  sc.kinds = {Kind::deterministic};
  sc.slow_factor = 3;
  const Result bsp = simulate(sc, "bsp");
  const Result dd = simulate(sc, "antdt-dd");
  const Result nd = simulate(sc, "antdt-nd");
  for (const Result* r : {&bsp, &dd, &nd}) EXPECT_TRUE(r->violations.empty()) << r->policy << ": " << joined(r->violations);
  // BSP runs at the slow rank's pace: n / (k (n-1) + 1) = 16 / 46.
  EXPECT_NEAR(bsp.bsp_theory, 16.0 / 46.0, 0.02);
  EXPECT_GT(dd.efficiency, 1.5 * bsp.efficiency);
  EXPECT_GT(nd.efficiency, 1.5 * bsp.efficiency);
  // antdt-dd gave the slow rank about a third of a fast rank's batch.
  EXPECT_LE(dd.min_batch, sc.batch_per_rank / 2);
  EXPECT_GE(dd.decisions, 1u);
  // antdt-nd kept equal batches and restarted the slow rank.
  EXPECT_EQ(nd.min_batch, sc.batch_per_rank);
  EXPECT_EQ(nd.max_batch, sc.batch_per_rank);
  EXPECT_GE(nd.restarts, 1u);
}

TEST(Sim, NdRestartsAPersistentStragglerAndDropsTransients) {
  Scenario sc = small_mixed();
  sc.kinds = {Kind::persistent, Kind::transient};
  const Result nd = simulate(sc, "antdt-nd");
  EXPECT_TRUE(nd.violations.empty()) << joined(nd.violations);
  EXPECT_GE(nd.restarts, 1u);
  EXPECT_GT(nd.dropped, 0u);
  EXPECT_GT(nd.given_back, 0u);   // dropped samples went back to the DDS ...
  EXPECT_GT(nd.resplits, 0u);
  EXPECT_EQ(nd.deferred, 0u);     // ... nothing is deferred under drop
}

TEST(Sim, RunsAreReproducible) {
  const Scenario sc = small_mixed();
  const Result a = simulate(sc, "antdt-dd");
  const Result b = simulate(sc, "antdt-dd");
  EXPECT_EQ(a.committed, b.committed);
  EXPECT_EQ(a.given_back, b.given_back);
  EXPECT_EQ(a.decisions, b.decisions);
  EXPECT_DOUBLE_EQ(a.sim_time_s, b.sim_time_s);
  Scenario other = sc;
  other.seed = 99;
  const Result c = simulate(other, "antdt-dd");
  EXPECT_TRUE(c.violations.empty()) << joined(c.violations);
  EXPECT_NE(c.sim_time_s, a.sim_time_s);
}

TEST(Sim, MicroBatchCapAndBoundsFromThePolicyConfig) {
  Scenario sc;
  sc.ranks = 8;
  sc.steps = 120;
  sc.straggler_fraction = 0.25;
  sc.kinds = {Kind::deterministic};
  sc.slow_factor = 6;
  const Result r = simulate(sc, "antdt-dd", R"({"min_local_batch": 12, "max_local_batch": 40, "micro_batch_cap": 8})");
  EXPECT_TRUE(r.violations.empty()) << joined(r.violations);
  EXPECT_EQ(r.min_batch, 12u);  // 6x slower would get ~8: clamped
  EXPECT_LE(r.max_batch, 40u);
  EXPECT_THROW(simulate(sc, "antdt-dd", R"({"micro_batch_cap": "8"})"), ConfigError);
  EXPECT_THROW(simulate(sc, "no-such-policy"), ConfigError);
}

}  // namespace
}  // namespace antdt::sim
