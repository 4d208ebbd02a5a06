// ANTDT_INJECT parsing and the per-rank Injector (core/inject).
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/inject.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace antdt::sched {
namespace {

constexpr const char* kExample =
    "rank=2:slow=3;rank=*:spike_p=0.1,spike_x=5,spike_len=1;rank=1:slow=4,from_step=30;rank=0:delay_us=200";

// The ConfigError message for `text`, or "" when it parses.
std::string error_for(const std::string& text) {
  try {
    parse_inject(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(InjectParse, TheDocumentedExample) {
  const InjectSpec spec = parse_inject(kExample);
  EXPECT_EQ(spec.text, kExample);
  ASSERT_EQ(spec.clauses.size(), 4u);
  const InjectClause& slow = spec.clauses[0];
  EXPECT_EQ(slow.text, "rank=2:slow=3");
  EXPECT_EQ(slow.rank_first, 2);
  EXPECT_EQ(slow.rank_last, 2);
  EXPECT_DOUBLE_EQ(slow.slow, 3);
  EXPECT_EQ(slow.spike_p, 0);
  const InjectClause& spikes = spec.clauses[1];
  EXPECT_EQ(spikes.rank_first, -1);
  EXPECT_TRUE(spikes.applies_to(0));
  EXPECT_TRUE(spikes.applies_to(1000));
  EXPECT_DOUBLE_EQ(spikes.spike_p, 0.1);
  EXPECT_DOUBLE_EQ(spikes.spike_x, 5);
  EXPECT_EQ(spikes.spike_len, 1u);
  const InjectClause& onset = spec.clauses[2];
  EXPECT_DOUBLE_EQ(onset.slow, 4);
  EXPECT_EQ(onset.from_step, 30u);
  const InjectClause& delay = spec.clauses[3];
  EXPECT_EQ(delay.rank_first, 0);
  EXPECT_EQ(delay.delay_us, 200u);
  EXPECT_DOUBLE_EQ(delay.slow, 1);
  EXPECT_FALSE(delay.seed.has_value());
}

TEST(InjectParse, RangesSeedsAndBlanks) {
  const InjectSpec spec = parse_inject(" seed=42 ; rank = 1-3 : slow = 0.5 , seed=9 ;; rank=5:spike_p=1,spike_x=2,spike_len=4; ");
  EXPECT_EQ(spec.seed, 42u);
  ASSERT_EQ(spec.clauses.size(), 2u);
  EXPECT_EQ(spec.clauses[0].rank_first, 1);
  EXPECT_EQ(spec.clauses[0].rank_last, 3);
  EXPECT_FALSE(spec.clauses[0].applies_to(0));
  EXPECT_TRUE(spec.clauses[0].applies_to(3));
  EXPECT_FALSE(spec.clauses[0].applies_to(4));
  EXPECT_DOUBLE_EQ(spec.clauses[0].slow, 0.5);
  EXPECT_EQ(spec.clauses[0].seed, std::optional<std::uint64_t>(9));
  EXPECT_EQ(spec.clauses[1].spike_len, 4u);
  EXPECT_TRUE(parse_inject("").clauses.empty());
}

TEST(InjectParse, InvalidClausesNameVariableClauseAndAcceptedKeys) {
  const std::string unknown = error_for("rank=2:slow=3;rank=1:slo=3");
  EXPECT_NE(unknown.find("ANTDT_INJECT"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("clause 'rank=1:slo=3'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("unknown key 'slo'"), std::string::npos) << unknown;
  for (const char* key : {"slow", "spike_p", "spike_x", "spike_len", "from_step", "delay_us", "seed"}) {
    EXPECT_NE(unknown.find(key), std::string::npos) << key << " not listed in: " << unknown;
  }

  const std::map<std::string, std::string> bad = {
      {"slow=3", "starts with 'rank="},
      {"rank=1", "missing ':'"},
      {"rank=1:", "no keys"},
      {"rank=x:slow=2", "rank='x'"},
      {"rank=-1:slow=2", "rank=''"},
      {"rank=3-1:slow=2", "is empty"},
      {"rank=1:slow", "not key=value"},
      {"rank=1:slow=0", "slow='0'"},
      {"rank=1:slow=-2", "slow='-2'"},
      {"rank=1:slow=abc", "slow='abc'"},
      {"rank=1:slow=nan", "slow='nan'"},
      {"rank=1:slow=inf", "slow='inf'"},
      {"rank=1:slow=1e3", "slow='1e3'"},
      {"rank=1:slow=2000", "(0, 1000]"},
      {"rank=1:spike_p=1.5,spike_x=2", "spike_p='1.5'"},
      {"rank=1:spike_p=0.1", "go together"},
      {"rank=1:spike_x=3", "go together"},
      {"rank=1:spike_len=3,slow=2", "needs spike_p"},
      {"rank=1:spike_p=0.1,spike_x=2,spike_len=0", "at least 1"},
      {"rank=1:slow=2,slow=3", "given twice"},
      {"rank=1:slow=2,,delay_us=4", "empty key"},
      {"rank=1:delay_us=1.5", "delay_us='1.5'"},
      {"rank=1:from_step=-1", "from_step='-1'"},
      {"seed=abc", "seed='abc'"},
      {"seed=1;seed=2", "twice"},
  };
  for (const auto& [text, expected] : bad) {
    const std::string message = error_for(text);
    EXPECT_NE(message.find(expected), std::string::npos) << text << " -> " << message;
    EXPECT_NE(message.find("ANTDT_INJECT='"), std::string::npos) << text << " -> " << message;
  }
}

TEST(InjectParse, ThroughTheConfiguration) {
  const auto parse_env = [](const char* value) {
    return Config::from_env([value](std::string_view name) -> std::optional<std::string> {
      if (name == "ANTDT_INJECT") return std::string(value);
      return std::nullopt;
    });
  };
  EXPECT_EQ(parse_env("").inject, nullptr);
  const Config c = parse_env(kExample);
  ASSERT_NE(c.inject, nullptr);
  EXPECT_EQ(c.inject->clauses.size(), 4u);
  bool described = false;
  for (const auto& line : c.describe()) described |= line == std::string("ANTDT_INJECT=") + kExample;
  EXPECT_TRUE(described);
  EXPECT_THROW(parse_env("rank=1:bogus=2"), ConfigError);
}

TEST(Injector, FactorsPerRankAndStep) {
  const InjectSpec spec = parse_inject("rank=2:slow=3;rank=1:slow=4,from_step=30;rank=0:delay_us=200;rank=0-1:delay_us=50");
  const Injector r0(spec, 0, 4), r1(spec, 1, 4), r2(spec, 2, 4), r3(spec, 3, 4);
  for (std::uint64_t step : {0u, 29u, 30u, 1000u}) {
    EXPECT_DOUBLE_EQ(r0.compute_factor(step), 1.0);
    EXPECT_DOUBLE_EQ(r2.compute_factor(step), 3.0);
    EXPECT_DOUBLE_EQ(r3.compute_factor(step), 1.0);
    EXPECT_DOUBLE_EQ(r1.compute_factor(step), step >= 30 ? 4.0 : 1.0) << step;
  }
  EXPECT_EQ(r0.transport_delay(), std::chrono::microseconds(250));
  EXPECT_EQ(r1.transport_delay(), std::chrono::microseconds(50));
  EXPECT_EQ(r2.transport_delay(), std::chrono::microseconds(0));
  EXPECT_TRUE(r0.active());
  EXPECT_FALSE(r3.active());
  EXPECT_FALSE(Injector().active());
  EXPECT_DOUBLE_EQ(Injector().compute_factor(7), 1.0);
}

TEST(Injector, ClausesMultiply) {
  const InjectSpec spec = parse_inject("rank=2:slow=3;rank=*:spike_p=0.2,spike_x=5;seed=11");
  const Injector r2(spec, 2, 4);
  int spikes = 0;
  for (std::uint64_t step = 0; step < 500; ++step) {
    const double f = r2.compute_factor(step);
    if (r2.in_spike(step)) {
      EXPECT_DOUBLE_EQ(f, 15.0);
      ++spikes;
    } else {
      EXPECT_DOUBLE_EQ(f, 3.0);
    }
  }
  EXPECT_GT(spikes, 0);
}

TEST(Injector, RankOutsideTheJobIsAConfigError) {
  const InjectSpec spec = parse_inject("rank=2-9:slow=3");
  try {
    Injector(spec, 0, 4);
    FAIL() << "rank 9 of a 4-rank job was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ANTDT_INJECT"), std::string::npos) << m;
    EXPECT_NE(m.find("rank=2-9:slow=3"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 9"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(Injector(spec, 0, 10));
}

std::vector<double> factors(const Injector& inj, std::uint64_t steps) {
  std::vector<double> out;
  for (std::uint64_t s = 0; s < steps; ++s) out.push_back(inj.compute_factor(s));
  return out;
}

TEST(Injector, DeterministicPerSeedRankAndStep) {
  const InjectSpec a = parse_inject("seed=5;rank=*:spike_p=0.3,spike_x=4,spike_len=2");
  const InjectSpec b = parse_inject("seed=6;rank=*:spike_p=0.3,spike_x=4,spike_len=2");
  const auto a1 = factors(Injector(a, 1, 8), 2000);
  EXPECT_EQ(a1, factors(Injector(a, 1, 8), 2000)) << "same seed and rank must repeat exactly";
  EXPECT_NE(a1, factors(Injector(b, 1, 8), 2000)) << "another seed must give other spikes";
  EXPECT_NE(a1, factors(Injector(a, 2, 8), 2000)) << "ranks must spike independently";
  // Queries in any order give the same answers: a pure function of the step.
  const Injector inj(a, 1, 8);
  for (std::uint64_t step = 2000; step-- > 0;) ASSERT_EQ(inj.compute_factor(step), a1[step]) << step;
  // A clause's own seed overrides the global one.
  const InjectSpec c = parse_inject("seed=6;rank=*:spike_p=0.3,spike_x=4,spike_len=2,seed=5");
  EXPECT_EQ(a1, factors(Injector(c, 1, 8), 2000));
}

TEST(Injector, SpikeFrequencyWithinStatisticalBounds) {
  // Fixed seeds: the counts are exact and repeat; the bounds are 5 standard
  // deviations of a binomial count, so a correct generator passes any seed.
  constexpr std::uint64_t kSteps = 20000;
  struct Case {
    const char* spec;
    double expected_fraction;  // of steps inside a spike
    double factor;
  };
  const Case cases[] = {
      {"seed=1;rank=*:spike_p=0.1,spike_x=5,spike_len=1", 0.1, 5},
      {"seed=2;rank=*:spike_p=0.05,spike_x=5,spike_len=3", 1 - std::pow(0.95, 3), 5},
      {"seed=3;rank=*:spike_p=0.01,spike_x=2", 0.01, 2},
  };
  for (const Case& c : cases) {
    const Injector inj(parse_inject(c.spec), 3, 4);
    std::uint64_t in_spike = 0;
    for (std::uint64_t step = 0; step < kSteps; ++step) {
      const bool spiking = inj.in_spike(step);
      in_spike += spiking ? 1 : 0;
      ASSERT_DOUBLE_EQ(inj.compute_factor(step), spiking ? c.factor : 1.0) << c.spec << " step " << step;
    }
    const double p = c.expected_fraction;
    const double n = static_cast<double>(kSteps);
    // Overlapping windows correlate neighbouring steps; spike_len times the
    // binomial variance bounds the variance of the count.
    const double sigma = std::sqrt(n * p * (1 - p) * 3);
    EXPECT_NEAR(static_cast<double>(in_spike), n * p, 5 * sigma) << c.spec;
  }
}

TEST(Injector, SpikesRespectOnsetAndLength) {
  const Injector inj(parse_inject("rank=0:spike_p=1,spike_x=3,spike_len=2,from_step=10"), 0, 1);
  for (std::uint64_t step = 0; step < 10; ++step) EXPECT_DOUBLE_EQ(inj.compute_factor(step), 1.0) << step;
  for (std::uint64_t step = 10; step < 20; ++step) EXPECT_DOUBLE_EQ(inj.compute_factor(step), 3.0) << step;
  const Injector never(parse_inject("rank=0:spike_p=0,spike_x=3"), 0, 1);
  for (std::uint64_t step = 0; step < 100; ++step) EXPECT_DOUBLE_EQ(never.compute_factor(step), 1.0);
}

TEST(Injector, SimulateComputeScalesTheBase) {
  const Injector inj(parse_inject("rank=0:slow=3"), 0, 2);
  EXPECT_DOUBLE_EQ(inj.simulate_compute(0.0, 0), 0.0);
  EXPECT_DOUBLE_EQ(inj.simulate_compute(0.0002, 5), 0.0006);
  EXPECT_DOUBLE_EQ(Injector(parse_inject("rank=0:slow=3"), 1, 2).simulate_compute(0.0001, 5), 0.0001);
  EXPECT_THROW(inj.simulate_compute(-1, 0), InvalidArgument);
  EXPECT_THROW(inj.simulate_compute(std::nan(""), 0), InvalidArgument);
}

TEST(Injector, FromConfig) {
  Config c;
  EXPECT_FALSE(Injector::from_config(c, 0, 4).active());
  c.inject = std::make_shared<const InjectSpec>(parse_inject("rank=3:slow=2"));
  EXPECT_DOUBLE_EQ(Injector::from_config(c, 3, 4).compute_factor(0), 2.0);
  EXPECT_THROW(Injector::from_config(c, 0, 2), ConfigError);
}

TEST(Injector, IncarnationLimitsAClauseToOneIncarnation) {
  // A persistent straggler on a bad node: a restart (incarnation 1) moves the rank off it.
  const InjectSpec spec = parse_inject("rank=1:slow=4,from_step=30,incarnation=0;rank=1:delay_us=50;rank=*:slow=2,incarnation=1");
  ASSERT_EQ(spec.clauses.size(), 3u);
  ASSERT_TRUE(spec.clauses[0].incarnation.has_value());
  EXPECT_EQ(*spec.clauses[0].incarnation, 0);
  EXPECT_FALSE(spec.clauses[1].incarnation.has_value());
  const Injector first(spec, 1, 4, 0);
  EXPECT_DOUBLE_EQ(first.compute_factor(29), 1.0);
  EXPECT_DOUBLE_EQ(first.compute_factor(30), 4.0);
  const Injector restarted(spec, 1, 4, 1);
  EXPECT_DOUBLE_EQ(restarted.compute_factor(30), 2.0) << "only the incarnation-1 clause applies";
  EXPECT_EQ(restarted.transport_delay().count(), 50) << "a clause without incarnation= applies to every incarnation";
  EXPECT_DOUBLE_EQ(Injector(spec, 1, 4, 2).compute_factor(30), 1.0);
  EXPECT_DOUBLE_EQ(Injector(spec, 1, 4).compute_factor(30), 4.0) << "the default incarnation is 0";
  // A clause of another incarnation still has its rank checked against the job.
  EXPECT_THROW(Injector(parse_inject("rank=5:slow=2,incarnation=3"), 0, 4, 0), ConfigError);

  Config c;
  c.inject = std::make_shared<const InjectSpec>(spec);
  c.incarnation = 1;
  EXPECT_DOUBLE_EQ(Injector::from_config(c, 1, 4).compute_factor(30), 2.0) << "from_config uses ANTDT_INCARNATION";

  EXPECT_NE(error_for("rank=1:slow=2,incarnation=-1").find("incarnation='-1' must be an integer"), std::string::npos);
  EXPECT_NE(error_for("rank=1:slow=2,incarnation=0,incarnation=1").find("given twice"), std::string::npos);
}

}  // namespace
}  // namespace antdt::sched
