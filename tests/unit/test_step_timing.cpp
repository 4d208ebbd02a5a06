// Step timing through the public API: the trainer's step marks, the time spent
// in collectives, and the per-rank JSON-lines trace (ANTDT_TRACE_DIR).
#include "comm_fixture.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace antdt::test {
namespace {

// `nonblocking`: the collective is an iallreduce, run by the communicator's
// progress thread while this thread marks compute (the marks and the
// collective's report then come from two threads).
void expect_steps_traced_with_transfer_time(bool nonblocking) {
  const int n = 2;
  Config cfg = test_config();
  auto dir = std::filesystem::temp_directory_path() / ("antdt-step-timing-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  cfg.trace_dir = dir.string();
  auto outcomes = run_ranks(n, TransportKind::inproc, [&](Communicator& comm) {
    std::vector<float> g(1024, 1.0f);
    for (int step = 0; step < 3; ++step) {
      comm.begin_step();
      Request pending;
      if (nonblocking) pending = comm.iallreduce(g.data(), g.data(), g.size(), DataType::f32, ReduceOp::sum);
      comm.begin_compute();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      comm.end_compute();
      if (nonblocking)
        pending.wait();
      else
        comm.allreduce(g.data(), g.data(), g.size(), DataType::f32, ReduceOp::sum);
      comm.end_step(16);
    }
    // Misuse is an error naming the call, not silent garbage.
    try {
      comm.end_step(1);
    } catch (const InvalidArgument&) {
      return;
    }
    throw std::runtime_error("end_step without begin_step was accepted");
  }, cfg);
  expect_all_ok(outcomes);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jsonl") continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    int steps = 0;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j.at("samples").get<int>(), 16);
      EXPECT_GT(j.at("compute_s").get<double>(), 0.0) << line;
      EXPECT_GT(j.at("transfer_s").get<double>(), 0.0) << "the allreduce was not attributed: " << line;
      ++steps;
    }
    EXPECT_EQ(steps, 3) << entry.path();
  }
  EXPECT_EQ(files, n);
  std::filesystem::remove_all(dir);
}

TEST(StepTiming, StepsWithCollectivesAreTracedWithTheirTransferTime) { expect_steps_traced_with_transfer_time(false); }

TEST(StepTiming, CollectivesOfTheProgressThreadAreAttributedToTheOpenStep) {
  expect_steps_traced_with_transfer_time(true);
}

}  // namespace
}  // namespace antdt::test
