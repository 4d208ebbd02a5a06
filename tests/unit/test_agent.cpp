// The Agent in one process: a single-rank job (no launcher environment) whose
// rank 0 hosts the coordinator; the C++ loop and the C API loop each commit
// every sample exactly once; a dropped contribution's samples are served again;
// rank 0 is never restarted while it hosts the coordinator; the C API's
// argument checks; the agent's environment variables (core/config).
#include <antdt/agent.h>
#include <antdt/agent.hpp>

#include "core/config.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace antdt {
namespace {

// A test process may run under a launcher or carry ANTDT_* variables; the
// single-rank tests need none of them.
bool clean_environment() {
  for (const char* name : {"ANTDT_RANK", "ANTDT_WORLD_SIZE", "ANTDT_COORDINATOR", "ANTDT_INCARNATION",
                           "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(name) != nullptr) return false;
  return true;
}

// One epoch of n samples, global_batch a step, shards of shard_size.
AgentOptions one_epoch(std::uint64_t n, std::uint64_t global_batch, std::uint64_t shard_size) {
  AgentOptions options;
  options.dataset_size = n;
  options.epochs = 1;
  options.global_batch = global_batch;
  options.shard_size = shard_size;
  return options;
}

TEST(Agent, SingleRankCommitsEverySampleOnce) {
  if (!clean_environment()) GTEST_SKIP() << "launcher or ANTDT_* variables set";
  const std::uint64_t n = 257;
  std::vector<int> counts(n, 0);
  Agent agent = Agent::from_env(one_epoch(n, 10, 16));
  EXPECT_EQ(agent.rank(), 0);
  EXPECT_EQ(agent.size(), 1);
  EXPECT_EQ(agent.incarnation(), 0);
  bool dropped_once = false;
  std::vector<std::uint64_t> dropped;
  std::uint64_t steps = 0;
  for (; steps < 1000; ++steps) {
    const StepPlan plan = agent.next_step();
    EXPECT_EQ(plan.step, steps + 1);
    EXPECT_FALSE(plan.restart);
    if (plan.stop) break;
    EXPECT_EQ(plan.local_batch, 10u);
    const SampleBatch batch = agent.next_samples();
    EXPECT_THROW(agent.next_samples(), InvalidArgument);  // once per step
    EXPECT_LE(batch.size(), 10u);
    float grad = static_cast<float>(batch.size());
    agent.communicator().allreduce(std::span<float>(&grad, 1), ReduceOp::sum);
    agent.report_step({.compute_s = 0.001, .samples = batch.size()});
    if (!dropped_once && !batch.empty()) {
      // As if the partial allreduce had dropped this contribution: the samples go back.
      dropped_once = true;
      dropped = batch.samples;
      EXPECT_TRUE(agent.settle(Fate::dropped));
      continue;
    }
    if (batch.empty()) continue;
    for (auto id : batch) ++counts.at(id);
    EXPECT_TRUE(agent.settle(Fate::included));
    EXPECT_FALSE(agent.commit());  // settled already
  }
  EXPECT_LT(steps, 1000u) << "no stop";
  for (std::uint64_t i = 0; i < n; ++i) EXPECT_EQ(counts[i], 1) << "sample " << i;
  ASSERT_FALSE(dropped.empty());  // and counted once above: served again after the drop
  agent.close();
  EXPECT_THROW(agent.next_step(), InvalidArgument);
}

// A program that skips next_samples() in some steps: the batch the Agent
// asked for with the plan (ANTDT_AGENT_PREFETCH, on by default) is given back
// unseen, and every sample is still committed exactly once.
TEST(Agent, StepsWithoutNextSamplesLoseNoPrefetchedSample) {
  if (!clean_environment()) GTEST_SKIP() << "launcher or ANTDT_* variables set";
  const std::uint64_t n = 301;
  std::vector<int> counts(n, 0);
  Agent agent = Agent::from_env(one_epoch(n, 8, 8));
  std::uint64_t steps = 0, skipped = 0;
  for (; steps < 1000; ++steps) {
    const StepPlan plan = agent.next_step();
    if (plan.stop) break;
    // Fetch in two steps of three, then skip two steps in a row every 7th.
    const bool fetch = steps % 3 != 2 && steps % 7 != 6 && steps % 7 != 0;
    SampleBatch batch;
    if (fetch) {
      batch = agent.next_samples();
    } else {
      ++skipped;
    }
    agent.report_step({.compute_s = 0.001, .samples = batch.size()});
    for (auto id : batch) ++counts.at(id);
    if (!batch.empty()) {
      EXPECT_TRUE(agent.commit());
    }
    EXPECT_FALSE(agent.commit()) << "nothing left to settle at step " << plan.step;
  }
  EXPECT_LT(steps, 1000u) << "no stop";
  EXPECT_GT(skipped, 20u);
  for (std::uint64_t i = 0; i < n; ++i) EXPECT_EQ(counts[i], 1) << "sample " << i;
  agent.close();
}

TEST(Agent, RankZeroHostingTheCoordinatorIsNotRestarted) {
  if (!clean_environment()) GTEST_SKIP() << "launcher or ANTDT_* variables set";
  AgentOptions options;
  options.dataset_size = 100;
  Agent agent = Agent::from_env(options);
  agent.next_step();
  agent.request_restart();
  const StepPlan plan = agent.next_step();
  EXPECT_FALSE(plan.restart);
  EXPECT_FALSE(agent.should_exit());
  EXPECT_EQ(agent.exit_code(), config().restart_exit_code);
}

TEST(AgentCApi, LoopCommitsEverySampleOnce) {
  if (!clean_environment()) GTEST_SKIP() << "launcher or ANTDT_* variables set";
  const std::uint64_t n = 64;
  antdtAgentOptions options = ANTDT_AGENT_OPTIONS_INIT;
  options.dataset_size = n;
  options.global_batch = 7;
  options.shard_size = 8;
  antdtAgent_t agent = nullptr;
  ASSERT_EQ(antdtAgentCreate(&agent, &options), ANTDT_OK) << antdtLastError();
  int rank = -1, size = -1, incarnation = -1;
  ASSERT_EQ(antdtAgentRank(agent, &rank, &size, &incarnation), ANTDT_OK);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(size, 1);
  EXPECT_EQ(incarnation, 0);
  std::vector<int> counts(n, 0);
  std::vector<uint64_t> ids(4);  // smaller than the local batch: the capacity caps the batch
  int stops = 0;
  for (int step = 0; step < 500 && stops == 0; ++step) {
    antdtStepPlan plan = ANTDT_STEP_PLAN_INIT;
    ASSERT_EQ(antdtAgentNextStep(agent, &plan), ANTDT_OK) << antdtLastError();
    if (plan.stop) {
      ++stops;
      break;
    }
    antdtComm_t comm = nullptr;
    ASSERT_EQ(antdtAgentComm(agent, &comm), ANTDT_OK);
    size_t count = 0;
    int finished = 0;
    ASSERT_EQ(antdtAgentNextSamples(agent, ids.data(), ids.size(), &count, &finished), ANTDT_OK) << antdtLastError();
    ASSERT_LE(count, ids.size());
    double grad = static_cast<double>(count);
    ASSERT_EQ(antdtAllReduce(&grad, &grad, 1, ANTDT_F64, ANTDT_SUM, comm), ANTDT_OK);
    antdtStepReport report = ANTDT_STEP_REPORT_INIT;
    report.samples = count;
    ASSERT_EQ(antdtAgentReportStep(agent, &report), ANTDT_OK) << antdtLastError();
    int done = 0;
    ASSERT_EQ(antdtAgentCommit(agent, &done), ANTDT_OK);
    EXPECT_EQ(done, count > 0 ? 1 : 0);
    for (size_t i = 0; i < count; ++i) ++counts.at(ids[i]);
  }
  EXPECT_EQ(stops, 1);
  for (std::uint64_t i = 0; i < n; ++i) EXPECT_EQ(counts[i], 1) << "sample " << i;
  int should_exit = -1, code = 0;
  ASSERT_EQ(antdtAgentShouldExit(agent, &should_exit, &code), ANTDT_OK);
  EXPECT_EQ(should_exit, 0);
  EXPECT_EQ(code, config().restart_exit_code);
  EXPECT_EQ(antdtAgentDestroy(agent), ANTDT_OK);
}

TEST(AgentCApi, ArgumentChecks) {
  EXPECT_EQ(antdtAgentCreate(nullptr, nullptr), ANTDT_ERR_INVALID_ARGUMENT);
  antdtAgentOptions old_options = ANTDT_AGENT_OPTIONS_INIT;
  old_options.struct_size = 4;
  antdtAgent_t agent = nullptr;
  EXPECT_EQ(antdtAgentCreate(&agent, &old_options), ANTDT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(antdtLastError()).find("struct_size"), std::string::npos) << antdtLastError();
  EXPECT_EQ(agent, nullptr);
  antdtStepPlan plan = ANTDT_STEP_PLAN_INIT;
  EXPECT_EQ(antdtAgentNextStep(nullptr, &plan), ANTDT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(antdtLastError()).find("agent handle is null"), std::string::npos) << antdtLastError();
  EXPECT_EQ(antdtAgentDestroy(nullptr), ANTDT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(antdtAgentCommit(nullptr, nullptr), ANTDT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(antdtAgentSettle(nullptr, ANTDT_FATE_INCLUDED, nullptr), ANTDT_ERR_INVALID_ARGUMENT);
  size_t count = 0;
  EXPECT_EQ(antdtAgentNextSamples(nullptr, nullptr, 0, &count, nullptr), ANTDT_ERR_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------------------
// The agent's environment variables
// ---------------------------------------------------------------------------
using Env = std::map<std::string, std::string>;

Config parse(const Env& env) {
  return Config::from_env([&](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

std::string error_for(const Env& env) {
  try {
    parse(env);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(AgentConfig, DefaultsAndValues) {
  const Config d = parse({});
  EXPECT_TRUE(d.coordinator.empty());
  EXPECT_FALSE(d.coordinator_embedded);
  EXPECT_EQ(d.incarnation, 0);
  EXPECT_EQ(d.restart_exit_code, 75);
  EXPECT_EQ(d.coordinator_checkpoint_interval.count(), 10000);
  EXPECT_TRUE(d.agent_prefetch);
  EXPECT_TRUE(d.agent_report_with_next);
  const Config c = parse({{"ANTDT_COORDINATOR", "127.0.0.1:4000"}, {"ANTDT_COORDINATOR_EMBEDDED", "1"},
                          {"ANTDT_COORDINATOR_CHECKPOINT", "/tmp/c.json"}, {"ANTDT_COORDINATOR_CHECKPOINT_S", "0.5"},
                          {"ANTDT_INCARNATION", "3"}, {"ANTDT_RESTART_EXIT_CODE", "42"},
                          {"ANTDT_AGENT_PREFETCH", "0"}, {"ANTDT_AGENT_REPORT_WITH_NEXT", "0"}});
  EXPECT_FALSE(c.agent_prefetch);
  EXPECT_FALSE(c.agent_report_with_next);
  EXPECT_EQ(c.coordinator, "127.0.0.1:4000");
  EXPECT_TRUE(c.coordinator_embedded);
  EXPECT_EQ(c.coordinator_checkpoint, "/tmp/c.json");
  EXPECT_EQ(c.coordinator_checkpoint_interval.count(), 500);
  EXPECT_EQ(c.incarnation, 3);
  EXPECT_EQ(c.restart_exit_code, 42);
}

TEST(AgentConfig, BadValuesNameTheVariable) {
  const std::vector<std::pair<Env, std::string>> bad = {
      {{{"ANTDT_COORDINATOR", "host"}}, "ANTDT_COORDINATOR"},
      {{{"ANTDT_COORDINATOR", "host:0"}}, "ANTDT_COORDINATOR"},
      {{{"ANTDT_COORDINATOR_EMBEDDED", "1"}}, "ANTDT_COORDINATOR_EMBEDDED=1 needs ANTDT_COORDINATOR"},
      {{{"ANTDT_COORDINATOR", "h:1"}, {"ANTDT_COORDINATOR_EMBEDDED", "2"}}, "ANTDT_COORDINATOR_EMBEDDED"},
      {{{"ANTDT_COORDINATOR_CHECKPOINT_S", "0"}}, "ANTDT_COORDINATOR_CHECKPOINT_S"},
      {{{"ANTDT_INCARNATION", "-1"}}, "ANTDT_INCARNATION"},
      {{{"ANTDT_RESTART_EXIT_CODE", "0"}}, "ANTDT_RESTART_EXIT_CODE"},
      {{{"ANTDT_RESTART_EXIT_CODE", "256"}}, "ANTDT_RESTART_EXIT_CODE"},
      {{{"ANTDT_AGENT_PREFETCH", "2"}}, "ANTDT_AGENT_PREFETCH"},
      {{{"ANTDT_AGENT_REPORT_WITH_NEXT", "yes"}}, "ANTDT_AGENT_REPORT_WITH_NEXT"},
  };
  for (const auto& [env, name] : bad) {
    const std::string e = error_for(env);
    EXPECT_NE(e.find(name), std::string::npos) << "error '" << e << "' should name " << name;
  }
}

}  // namespace
}  // namespace antdt
