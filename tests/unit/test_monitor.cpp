// The measuring half of the straggler machinery: window statistics
// (collectives/telemetry/step_stats), the step timer with an injected clock and an
// asynchronous device clock (collectives/telemetry/step_timer), the Monitor's
// classification from synthetic step streams (collectives/telemetry/monitor) and the
// trace files (collectives/telemetry/trace).
#include "core/config.hpp"
#include "core/error.hpp"
#include "collectives/telemetry/monitor.hpp"
#include "collectives/telemetry/step_stats.hpp"
#include "collectives/telemetry/step_timer.hpp"
#include "collectives/telemetry/trace.hpp"

#include <antdt/scheduler.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace antdt::sched {
namespace {

// ---------------------------------------------------------------------------
// StepStats against a sorted copy of the window
// ---------------------------------------------------------------------------

struct Reference {
  double median, p99, p90, mean;
};

// Independent reference: sort the last `capacity` values.
Reference reference_of(const std::vector<double>& all, std::size_t capacity) {
  const std::size_t n = std::min(all.size(), capacity);
  std::vector<double> w(all.end() - static_cast<std::ptrdiff_t>(n), all.end());
  std::sort(w.begin(), w.end());
  Reference r{};
  r.median = n % 2 == 1 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
  // Nearest rank ceil(q*n), in integers.
  r.p99 = w[(99 * n + 99) / 100 - 1];
  r.p90 = w[(90 * n + 99) / 100 - 1];
  double sum = 0;
  for (double v : w) sum += v;
  r.mean = sum / static_cast<double>(n);
  return r;
}

TEST(StepStats, MatchesSortedReferenceForOddEvenAndUnitWindows) {
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<double> dist(0.0, 100.0);
  for (std::size_t capacity : {1u, 2u, 7u, 8u, 100u}) {
    telemetry::StepStats stats(capacity, 0.25);
    std::vector<double> all;
    double ewma = 0;
    for (int i = 0; i < 250; ++i) {
      const double v = dist(rng);
      all.push_back(v);
      stats.add(v);
      ewma = i == 0 ? v : 0.25 * v + 0.75 * ewma;
      const Reference ref = reference_of(all, capacity);
      ASSERT_EQ(stats.count(), all.size());
      ASSERT_EQ(stats.size(), std::min(all.size(), capacity));
      ASSERT_DOUBLE_EQ(stats.last(), v);
      ASSERT_DOUBLE_EQ(stats.median(), ref.median) << "capacity " << capacity << " after " << i + 1;
      ASSERT_DOUBLE_EQ(stats.p99(), ref.p99) << "capacity " << capacity << " after " << i + 1;
      ASSERT_DOUBLE_EQ(stats.quantile(0.9), ref.p90) << "capacity " << capacity << " after " << i + 1;
      ASSERT_NEAR(stats.mean(), ref.mean, 1e-9);
      ASSERT_NEAR(stats.ewma(), ewma, 1e-9);
    }
  }
}

TEST(StepStats, QuantilesOfAHundredDistinctValuesUseNearestRank) {
  telemetry::StepStats stats(100, 1.0);
  for (int i = 100; i >= 1; --i) stats.add(i);  // 1..100, inserted backwards
  EXPECT_DOUBLE_EQ(stats.p99(), 99.0);          // ceil(0.99 * 100) = 99th smallest
  EXPECT_DOUBLE_EQ(stats.quantile(1.0), 100.0);
  EXPECT_DOUBLE_EQ(stats.quantile(0.01), 1.0);
  EXPECT_DOUBLE_EQ(stats.median(), 50.5);
  EXPECT_DOUBLE_EQ(stats.ewma(), 1.0);  // alpha 1: the last value
}

TEST(StepStats, EmptyIsZeroAndClearResets) {
  telemetry::StepStats stats(4, 0.5);
  EXPECT_TRUE(stats.empty());
  EXPECT_EQ(stats.median(), 0);
  EXPECT_EQ(stats.p99(), 0);
  EXPECT_EQ(stats.ewma(), 0);
  stats.add(8);
  EXPECT_DOUBLE_EQ(stats.ewma(), 8);  // seeded by the first sample, not pulled toward 0
  stats.add(4);
  EXPECT_DOUBLE_EQ(stats.ewma(), 6);
  stats.clear();
  EXPECT_TRUE(stats.empty());
  EXPECT_EQ(stats.size(), 0u);
  stats.add(2);
  EXPECT_DOUBLE_EQ(stats.median(), 2);
  EXPECT_DOUBLE_EQ(stats.ewma(), 2);
}

TEST(StepStats, SharedScratchIsReusedOnceWarm) {
  telemetry::StepStats stats(64, 0.3);
  std::vector<double> scratch;
  for (int i = 0; i < 64; ++i) stats.add(i);
  stats.median(scratch);
  const double* buffer = scratch.data();
  for (int i = 0; i < 1000; ++i) {
    stats.add(i % 17);
    stats.median(scratch);
    stats.quantile(0.99, scratch);
    ASSERT_EQ(scratch.data(), buffer) << "the scratch buffer was reallocated at sample " << i;
  }
}

TEST(StepStats, RejectsBadParameters) {
  EXPECT_THROW(telemetry::StepStats(0, 0.5), InvalidArgument);
  EXPECT_THROW(telemetry::StepStats(4, 0.0), InvalidArgument);
  EXPECT_THROW(telemetry::StepStats(4, 1.5), InvalidArgument);
  telemetry::StepStats stats(4, 0.5);
  EXPECT_THROW(stats.quantile(0.0), InvalidArgument);
  EXPECT_THROW(stats.quantile(1.01), InvalidArgument);
}

// ---------------------------------------------------------------------------
// StepTimer with a fake clock and a fake device clock
// ---------------------------------------------------------------------------

class FakeTime final : public telemetry::TimeSource {
 public:
  double now() const noexcept override { return t; }
  double t = 1000.0;
};

// A device whose intervals finish when the test says so.
class FakeDevice final : public telemetry::ComputeClock {
 public:
  void record_compute_begin(void* stream) override {
    streams.push_back(stream);
    ++begun;
  }
  void record_compute_end(void*) override {
    ASSERT_FALSE(durations.empty()) << "the test did not program enough device durations";
    issued.push_back(durations.front());
    durations.pop_front();
  }
  bool try_read(double& seconds) override {
    if (released == 0 || issued.empty()) return false;
    seconds = issued.front();
    issued.pop_front();
    --released;
    return true;
  }
  std::deque<double> durations;  // what the next intervals will measure
  std::deque<double> issued;     // ended, not yet read
  std::size_t released = 0;      // how many of `issued` are finished
  std::size_t begun = 0;
  std::vector<void*> streams;
};

TEST(StepTimer, MarkedComputeWaitAndTransfer) {
  FakeTime clock;
  telemetry::StepTimer timer(3, clock);
  timer.begin_step();
  clock.t += 0.1;
  timer.begin_compute();
  clock.t += 0.3;
  timer.end_compute();
  timer.add_wait(0.05);
  timer.add_transfer(0.02);
  clock.t += 0.1;
  timer.end_step(32);

  telemetry::StepRecord r;
  ASSERT_TRUE(timer.poll(r));
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.step, 0u);
  EXPECT_DOUBLE_EQ(r.t_begin, 1000.0);
  EXPECT_NEAR(r.step_s, 0.5, 1e-9);
  EXPECT_NEAR(r.compute_s, 0.3, 1e-9);
  EXPECT_DOUBLE_EQ(r.wait_s, 0.05);
  EXPECT_DOUBLE_EQ(r.transfer_s, 0.02);
  EXPECT_EQ(r.samples, 32u);
  EXPECT_FALSE(timer.poll(r));
}

TEST(StepTimer, UnmarkedComputeIsStepMinusCollectives) {
  FakeTime clock;
  telemetry::StepTimer timer(0, clock);
  for (int step = 0; step < 3; ++step) {
    timer.begin_step();
    clock.t += 1.0;
    timer.add_wait(0.2);
    timer.add_transfer(0.1);
    timer.add_transfer(0.05);
    timer.end_step(8);
  }
  for (std::uint64_t step = 0; step < 3; ++step) {
    telemetry::StepRecord r;
    ASSERT_TRUE(timer.poll(r));
    EXPECT_EQ(r.step, step);
    EXPECT_NEAR(r.compute_s, 1.0 - 0.2 - 0.15, 1e-9);
    EXPECT_NEAR(r.transfer_s, 0.15, 1e-12);
  }
}

TEST(StepTimer, SeveralComputeIntervalsAddUp) {
  FakeTime clock;
  telemetry::StepTimer timer(0, clock);
  timer.begin_step();
  for (double micro : {0.1, 0.2, 0.4}) {  // gradient accumulation: three micro-batches
    timer.begin_compute();
    clock.t += micro;
    timer.end_compute();
    clock.t += 0.01;
  }
  timer.end_step(3);
  telemetry::StepRecord r;
  ASSERT_TRUE(timer.poll(r));
  EXPECT_NEAR(r.compute_s, 0.7, 1e-9);
  EXPECT_NEAR(r.step_s, 0.73, 1e-9);
}

TEST(StepTimer, ExplicitStepNumbersAndTimeOutsideSteps) {
  FakeTime clock;
  telemetry::StepTimer timer(1, clock);
  timer.add_wait(0.5);  // a barrier before the first step belongs to no step
  timer.begin_step(10);
  clock.t += 1;
  timer.end_step(1);
  timer.add_transfer(0.25);
  timer.begin_step();  // continues after 10
  clock.t += 1;
  timer.end_step(1);
  EXPECT_DOUBLE_EQ(timer.unattributed_s(), 0.75);
  telemetry::StepRecord r;
  ASSERT_TRUE(timer.poll(r));
  EXPECT_EQ(r.step, 10u);
  EXPECT_EQ(r.wait_s, 0);
  ASSERT_TRUE(timer.poll(r));
  EXPECT_EQ(r.step, 11u);
  EXPECT_EQ(r.transfer_s, 0);
  EXPECT_THROW(timer.begin_step(11), InvalidArgument);  // numbers must increase
}

TEST(StepTimer, MisuseNamesTheCall) {
  FakeTime clock;
  telemetry::StepTimer timer(0, clock);
  const auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message([&] { timer.end_step(1); }).find("end_step()"), std::string::npos);
  EXPECT_NE(message([&] { timer.begin_compute(); }).find("begin_compute()"), std::string::npos);
  EXPECT_NE(message([&] { timer.end_compute(); }).find("end_compute()"), std::string::npos);
  timer.begin_step();
  EXPECT_NE(message([&] { timer.begin_step(); }).find("still open"), std::string::npos);
  timer.begin_compute();
  EXPECT_NE(message([&] { timer.begin_compute(); }).find("already"), std::string::npos);
  EXPECT_NE(message([&] { timer.end_step(1); }).find("end_compute() was not called"), std::string::npos);
  timer.end_compute();
  timer.end_step(1);
  telemetry::StepRecord r;
  EXPECT_TRUE(timer.poll(r));
}

TEST(StepTimer, DelayedDeviceResultsAreAttributedToTheirSteps) {
  FakeTime clock;
  FakeDevice device;
  device.durations = {0.30, 0.11, 0.12, 0.50};
  telemetry::StepTimer timer(2, clock, &device);
  int stream_tag = 0;
  void* stream = &stream_tag;

  // Step 0: one interval. Step 1: two intervals (micro-batches). Step 2: one.
  const std::vector<int> intervals = {1, 2, 1};
  for (int step = 0; step < 3; ++step) {
    timer.begin_step();
    for (int i = 0; i < intervals[static_cast<std::size_t>(step)]; ++i) {
      timer.begin_compute(stream);
      clock.t += 0.001;  // the CPU only launches work
      timer.end_compute(stream);
    }
    clock.t += 1;
    timer.end_step(4);
  }
  EXPECT_EQ(device.streams, std::vector<void*>(4, stream));
  telemetry::StepRecord r;
  EXPECT_FALSE(timer.poll(r)) << "no device result is ready, so no record may be";
  EXPECT_EQ(timer.pending(), 3u);

  device.released = 2;  // step 0's interval and the first of step 1's
  ASSERT_TRUE(timer.poll(r));
  EXPECT_EQ(r.step, 0u);
  EXPECT_DOUBLE_EQ(r.compute_s, 0.30);
  EXPECT_FALSE(timer.poll(r)) << "step 1 still misses one interval";

  device.released += 2;
  ASSERT_TRUE(timer.poll(r));
  EXPECT_EQ(r.step, 1u);
  EXPECT_NEAR(r.compute_s, 0.23, 1e-12);
  ASSERT_TRUE(timer.poll(r));
  EXPECT_EQ(r.step, 2u);
  EXPECT_DOUBLE_EQ(r.compute_s, 0.50);
  EXPECT_FALSE(timer.poll(r));
}

TEST(StepTimer, DrainFallsBackToCpuEstimateAndKeepsLaterStepsAligned) {
  FakeTime clock;
  FakeDevice device;
  device.durations = {0.7, 0.8, 0.9};
  telemetry::StepTimer timer(0, clock, &device);
  for (int step = 0; step < 2; ++step) {
    timer.begin_step();
    timer.begin_compute();
    timer.end_compute();
    clock.t += 1;
    timer.add_wait(0.25);
    timer.end_step(1);
  }
  timer.drain(std::chrono::milliseconds(5));  // the device never answers
  telemetry::StepRecord r;
  for (std::uint64_t step = 0; step < 2; ++step) {
    ASSERT_TRUE(timer.poll(r));
    EXPECT_EQ(r.step, step);
    EXPECT_DOUBLE_EQ(r.compute_s, 0.75) << "step minus collectives";
  }
  // The device's late answers for steps 0 and 1 must not land on step 2.
  timer.begin_step();
  timer.begin_compute();
  timer.end_compute();
  clock.t += 1;
  timer.end_step(1);
  device.released = 3;
  ASSERT_TRUE(timer.poll(r));
  EXPECT_EQ(r.step, 2u);
  EXPECT_DOUBLE_EQ(r.compute_s, 0.9);
}

TEST(StepTimer, UnpolledRecordsAreBoundedAndDropOldestFirst) {
  FakeTime clock;
  FakeDevice device;
  for (int i = 0; i < 6; ++i) device.durations.push_back(0.1 * (i + 1));
  telemetry::StepTimer timer(0, clock, &device, 2);
  for (int step = 0; step < 6; ++step) {
    timer.begin_step();
    timer.begin_compute();
    timer.end_compute();
    clock.t += 1;
    timer.end_step(1);
  }
  EXPECT_EQ(timer.dropped(), 3u);
  EXPECT_EQ(timer.pending(), 3u);
  device.released = 6;
  telemetry::StepRecord r;
  for (std::uint64_t step = 3; step < 6; ++step) {
    ASSERT_TRUE(timer.poll(r));
    EXPECT_EQ(r.step, step);
    EXPECT_NEAR(r.compute_s, 0.1 * static_cast<double>(step + 1), 1e-12) << "device result misattributed";
  }
  EXPECT_FALSE(timer.poll(r));
}

TEST(StepTimer, SteadyClockIsMonotonic) {
  const double a = telemetry::steady_time().now();
  const double b = telemetry::steady_time().now();
  EXPECT_GE(b, a);
  EXPECT_GT(a, 0);
}

// ---------------------------------------------------------------------------
// Monitor classification from synthetic step streams
// ---------------------------------------------------------------------------

// Compute seconds of `rank` at `step` for a synthetic job; 10 ms nominal with
// +-3% noise.
using Model = std::function<double(int rank, int step)>;

class Stream {
 public:
  Stream(int nranks, telemetry::MonitorConfig cfg, std::uint64_t seed = 7) : monitor(nranks, cfg), rng_(seed) {}

  // Runs steps [from, to) of the model; `samples(rank)` per step.
  void run(int from, int to, const Model& model, const std::function<std::uint64_t(int)>& samples = nullptr) {
    std::uniform_real_distribution<double> noise(0.97, 1.03);
    std::vector<telemetry::StepRecord> records(static_cast<std::size_t>(monitor.nranks()));
    for (int step = from; step < to; ++step) {
      for (int rank = 0; rank < monitor.nranks(); ++rank) {
        telemetry::StepRecord& r = records[static_cast<std::size_t>(rank)];
        r.rank = rank;
        r.step = static_cast<std::uint64_t>(step);
        r.compute_s = model(rank, step) * noise(rng_);
        r.transfer_s = 0.002;
        r.wait_s = 0.001;
        r.step_s = r.compute_s + r.wait_s + r.transfer_s;
        r.samples = samples ? samples(rank) : 32;
      }
      monitor.record_step(records);
    }
  }

  telemetry::Monitor monitor;

 private:
  std::mt19937_64 rng_;
};

constexpr double kBase = 0.010;

telemetry::MonitorConfig test_config() {
  telemetry::MonitorConfig cfg;  // the defaults: window 64, alpha 0.3, theta 1.5, W_short 10
  return cfg;
}

TEST(Monitor, AllHealthyWithNoise) {
  Stream s(8, test_config());
  for (int step = 0; step < 100; ++step) {
    s.run(step, step + 1, [](int, int) { return kBase; });
    for (int rank = 0; rank < 8; ++rank) {
      ASSERT_EQ(s.monitor.classify(rank), StragglerClass::healthy) << "rank " << rank << " step " << step;
    }
  }
  EXPECT_EQ(s.monitor.evaluations(), 100u);
}

TEST(Monitor, DeterministicFromTheFirstStep) {
  Stream s(8, test_config());
  const Model model = [](int rank, int) { return rank == 3 ? 3 * kBase : kBase; };
  s.run(0, 1, model);
  EXPECT_EQ(s.monitor.classify(3), StragglerClass::deterministic);
  s.run(1, 100, model);
  EXPECT_EQ(s.monitor.classify(3), StragglerClass::deterministic);
  EXPECT_NEAR(s.monitor.slowness(3), 3.0, 0.2);
  for (int rank : {0, 1, 2, 4, 5, 6, 7}) EXPECT_EQ(s.monitor.classify(rank), StragglerClass::healthy) << rank;
}

TEST(Monitor, TransientSpikes) {
  Stream s(8, test_config());
  const std::vector<int> spikes = {20, 45, 46, 70};
  const Model model = [&](int rank, int step) {
    const bool spike = rank == 5 && std::find(spikes.begin(), spikes.end(), step) != spikes.end();
    return spike ? 5 * kBase : kBase;
  };
  s.run(0, 20, model);
  EXPECT_EQ(s.monitor.classify(5), StragglerClass::healthy);
  s.run(20, 21, model);
  EXPECT_EQ(s.monitor.classify(5), StragglerClass::transient) << "during the spike";
  s.run(21, 30, model);
  EXPECT_EQ(s.monitor.classify(5), StragglerClass::transient) << "recently spiked";
  s.run(30, 100, model);
  EXPECT_EQ(s.monitor.classify(5), StragglerClass::transient);
  EXPECT_EQ(s.monitor.summary(5).transient_episodes, 3u);  // 20, 45-46, 70
  // Long after the last spike (more than a window), the rank is healthy again.
  s.run(100, 170, model);
  EXPECT_EQ(s.monitor.classify(5), StragglerClass::healthy);
  for (int rank : {0, 1, 2, 3, 4, 6, 7}) EXPECT_EQ(s.monitor.classify(rank), StragglerClass::healthy) << rank;
}

TEST(Monitor, PersistentOnsetAfterThirtySteps) {
  Stream s(8, test_config());
  const Model model = [](int rank, int step) { return rank == 2 && step >= 30 ? 4 * kBase : kBase; };
  s.run(0, 30, model);
  EXPECT_EQ(s.monitor.classify(2), StragglerClass::healthy);
  s.run(30, 33, model);
  EXPECT_EQ(s.monitor.classify(2), StragglerClass::transient) << "a short slow run is not yet persistent";
  s.run(33, 100, model);
  EXPECT_EQ(s.monitor.classify(2), StragglerClass::persistent);
  for (int rank : {0, 1, 3, 4, 5, 6, 7}) EXPECT_EQ(s.monitor.classify(rank), StragglerClass::healthy) << rank;
}

TEST(Monitor, Leader) {
  Stream s(8, test_config());
  const Model model = [](int rank, int) { return rank == 0 ? 0.5 * kBase : kBase; };
  s.run(0, 100, model);
  EXPECT_EQ(s.monitor.classify(0), StragglerClass::leader);
  EXPECT_NEAR(s.monitor.slowness(0), 0.5, 0.05);
  for (int rank = 1; rank < 8; ++rank) EXPECT_EQ(s.monitor.classify(rank), StragglerClass::healthy) << rank;
}

TEST(Monitor, MixedKindsInOneStreamOfEightRanks) {
  // 0 leader, 1 deterministic, 2 persistent from step 30, 3 transient, 4-7 healthy.
  Stream s(8, test_config());
  const Model model = [](int rank, int step) {
    switch (rank) {
      case 0: return 0.5 * kBase;
      case 1: return 3 * kBase;
      case 2: return step >= 30 ? 4 * kBase : kBase;
      case 3: return step == 40 || step == 41 || step == 80 ? 5 * kBase : kBase;
      default: return kBase;
    }
  };
  const std::map<int, StragglerClass> expected = {
      {0, StragglerClass::leader},     {1, StragglerClass::deterministic}, {2, StragglerClass::persistent},
      {3, StragglerClass::transient},  {4, StragglerClass::healthy},       {5, StragglerClass::healthy},
      {6, StragglerClass::healthy},    {7, StragglerClass::healthy}};
  s.run(0, 100, model);
  for (const auto& [rank, cls] : expected) {
    EXPECT_EQ(s.monitor.classify(rank), cls) << "rank " << rank << " is " << telemetry::to_string(s.monitor.classify(rank))
                                             << ", expected " << telemetry::to_string(cls);
  }
  const auto counts = s.monitor.class_counts();
  EXPECT_EQ(counts[static_cast<std::size_t>(StragglerClass::healthy)], 4u);
  EXPECT_EQ(counts[static_cast<std::size_t>(StragglerClass::leader)], 1u);

  const std::string table = s.monitor.summary_table();
  for (const char* kind : {"leader", "deterministic", "persistent", "transient"}) {
    EXPECT_NE(table.find(kind), std::string::npos) << kind << " missing from\n" << table;
  }
  // One header line, one column line, one row per non-healthy rank.
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2 + 4) << table;
  EXPECT_NE(table.find("c.p99 ms  jitter"), std::string::npos) << table;
}

TEST(Monitor, ThetaDecides) {
  // A rank 1.3x slower and one 0.75x as slow: healthy under theta 1.5
  // (1/theta = 0.67), deterministic and leader under theta 1.2 (1/theta = 0.83).
  const Model model = [](int rank, int) { return rank == 1 ? 1.3 * kBase : rank == 2 ? 0.75 * kBase : kBase; };
  telemetry::MonitorConfig loose = test_config();
  loose.theta = 1.5;
  Stream a(8, loose);
  a.run(0, 60, model);
  EXPECT_EQ(a.monitor.classify(1), StragglerClass::healthy);
  EXPECT_EQ(a.monitor.classify(2), StragglerClass::healthy);

  telemetry::MonitorConfig tight = test_config();
  tight.theta = 1.2;
  Stream b(8, tight);
  b.run(0, 60, model);
  EXPECT_EQ(b.monitor.classify(1), StragglerClass::deterministic);
  EXPECT_EQ(b.monitor.classify(2), StragglerClass::leader);
}

TEST(Monitor, ShortStepsSeparateTransientFromPersistent) {
  // The same 8-step slow run is transient with W_short 10 and persistent with W_short 4.
  const Model model = [](int rank, int step) { return rank == 6 && step >= 30 && step < 38 ? 4 * kBase : kBase; };
  telemetry::MonitorConfig wide = test_config();
  Stream a(8, wide);
  a.run(0, 38, model);
  EXPECT_EQ(a.monitor.classify(6), StragglerClass::transient);
  telemetry::MonitorConfig narrow = test_config();
  narrow.short_steps = 4;
  Stream b(8, narrow);
  b.run(0, 38, model);
  EXPECT_EQ(b.monitor.classify(6), StragglerClass::persistent);
}

TEST(Monitor, SmallerBatchIsNotCalledFast) {
  // Rank 1 gets half the batch and needs half the time: per sample it is
  // healthy. Rank 2 gets half the batch but needs the full time: it is 2x
  // slower per sample.
  const Model model = [](int rank, int) { return rank == 1 ? 0.5 * kBase : kBase; };
  const auto samples = [](int rank) -> std::uint64_t { return rank == 1 || rank == 2 ? 16 : 32; };
  Stream s(8, test_config());
  s.run(0, 50, model, samples);
  EXPECT_EQ(s.monitor.classify(1), StragglerClass::healthy);
  EXPECT_EQ(s.monitor.classify(2), StragglerClass::deterministic);
  EXPECT_NEAR(s.monitor.summary(1).samples_per_s.median, 16 / (0.5 * kBase + 0.003), 16 / (0.5 * kBase) * 0.05);

  // Without sample counts only the time is known: the half-batch rank looks fast.
  Stream raw(8, test_config());
  raw.run(0, 50, model, [](int) -> std::uint64_t { return 0; });
  EXPECT_EQ(raw.monitor.classify(1), StragglerClass::leader);
}

TEST(Monitor, CatchUpStepsWithoutSamplesDoNotCountAsCompute) {
  telemetry::Monitor m(2, test_config());
  telemetry::StepRecord r;
  r.rank = 0;
  r.compute_s = 0.01;
  r.step_s = 0.012;
  r.samples = 32;
  m.record(r);
  r.compute_s = 0;  // a late rank applying a missed result without computing
  r.samples = 0;
  m.record(r);
  const telemetry::RankSummary s = m.summary(0);
  EXPECT_EQ(s.steps, 1u);
  EXPECT_DOUBLE_EQ(s.compute_s.last, 0.01);
  EXPECT_DOUBLE_EQ(s.wait_s.last, 0);
}

TEST(Monitor, ExpectedStepAndGrace) {
  telemetry::MonitorConfig cfg = test_config();
  cfg.grace_margin = 2.0;
  telemetry::Monitor m(5, cfg);
  std::vector<telemetry::StepRecord> records(5);
  for (int step = 0; step < 30; ++step) {
    for (int rank = 0; rank < 5; ++rank) {
      telemetry::StepRecord& r = records[static_cast<std::size_t>(rank)];
      r.rank = rank;
      r.step = static_cast<std::uint64_t>(step);
      // Healthy ranks at 10, 11, 12, 13 ms; rank 4 a 4x straggler.
      r.compute_s = rank == 4 ? 0.044 : 0.010 + 0.001 * rank;
      r.transfer_s = 0.002;
      r.step_s = r.compute_s + r.transfer_s;
      r.samples = 32;
    }
    m.record_step(records);
  }
  EXPECT_EQ(m.classify(4), StragglerClass::deterministic);
  // Lower median of EWMA compute (10,11,12,13,44 ms) = 12 ms, plus 2 ms transfer.
  EXPECT_NEAR(m.expected_step(), 0.014, 1e-9);
  // Healthy spread: p99 (13 ms) - lower median (11 ms) = 2 ms; the straggler
  // is excluded. Grace = margin * spread.
  EXPECT_NEAR(m.grace(), 2 * 0.002, 1e-9);

  // Identical ranks: no measured spread, the floor of 5% of compute applies.
  telemetry::Monitor same(4, cfg);
  std::vector<telemetry::StepRecord> equal(4);
  for (int rank = 0; rank < 4; ++rank) {
    equal[static_cast<std::size_t>(rank)] = telemetry::StepRecord{rank, 0, 0, 0.010, 0.010, 0, 0, 32};
  }
  for (int step = 0; step < 5; ++step) same.record_step(equal);
  EXPECT_NEAR(same.grace(), 2 * 0.05 * 0.010, 1e-12);
}

TEST(Monitor, SummaryStatisticsMatchTheWindow) {
  telemetry::MonitorConfig cfg = test_config();
  cfg.window = 8;
  telemetry::Monitor m(1, cfg);
  std::vector<double> computes;
  for (int step = 0; step < 20; ++step) {
    const double c = 0.001 * ((step * 7) % 11 + 1);
    computes.push_back(c);
    m.record(telemetry::StepRecord{0, static_cast<std::uint64_t>(step), 0, c + 0.004, c, 0.001, 0.003, 4});
  }
  m.evaluate();
  const Reference ref = reference_of(computes, 8);
  const telemetry::RankSummary s = m.summary(0);
  EXPECT_DOUBLE_EQ(s.compute_s.median, ref.median);
  EXPECT_DOUBLE_EQ(s.compute_s.p99, ref.p99);
  EXPECT_DOUBLE_EQ(s.compute_s.last, computes.back());
  EXPECT_DOUBLE_EQ(s.wait_s.median, 0.001);
  EXPECT_DOUBLE_EQ(s.transfer_s.p99, 0.003);
  EXPECT_NEAR(s.samples_per_s.last, 4 / (computes.back() + 0.004), 1e-9);
  EXPECT_EQ(s.steps, 20u);
  EXPECT_EQ(s.cls, StragglerClass::healthy) << "a single rank is its own reference: z = 1";
}

TEST(Monitor, JitterIsP90OverMedianOfComputePerSample) {
  // Rank 0 3x slower than the others, with its batch cut to a third at step
  // 40 (its step time falls 3x, its time per sample stays); rank 1 stalled 4x on every 5th
  // step (20% of steps: p90 falls on a stall); ranks 2-4 plain.
  const Model model = [](int rank, int step) {
    if (rank == 0) return (step < 40 ? 3.0 : 1.0) * kBase;
    if (rank == 1 && step % 5 == 0) return 4 * kBase;
    return kBase;
  };
  int current_step = 0;
  const auto samples = [&](int rank) -> std::uint64_t { return rank == 0 && current_step >= 40 ? 11 : 32; };
  Stream s(5, test_config());
  s.run(0, 9, model, samples);
  EXPECT_EQ(s.monitor.summary(1).jitter, 0) << "fewer records than short_steps: no figure yet";
  for (current_step = 9; current_step < 80; ++current_step) s.run(current_step, current_step + 1, model, samples);
  // Noise is +-3%: p90/median of a steady rank is within (0.97..1.03)^2.
  EXPECT_NEAR(s.monitor.summary(2).jitter, 1.0, 0.07);
  // Rank 0's time per sample barely moves with its batch: 30 ms for 32
  // samples before the cut, 10 ms for 11 after (0.94 against 0.91 ms).
  EXPECT_NEAR(s.monitor.summary(0).jitter, 1.0, 0.1) << "a batch change is not jitter";
  EXPECT_NEAR(s.monitor.summary(1).jitter, 4.0, 0.3);
}

TEST(Monitor, JitterOfALastingSlowdownFadesWithinItsStretch) {
  // Rank 1 slows 4x for good at step 40: a level, not bursts. Its jitter is
  // high while the slow records are a minority of the last kJitterSteps (p90
  // slow, median not), and back to the noise's once they are the majority.
  const Model model = [](int rank, int step) { return rank == 1 && step >= 40 ? 4 * kBase : kBase; };
  Stream s(5, test_config());
  s.run(0, 40, model);
  EXPECT_NEAR(s.monitor.summary(1).jitter, 1.0, 0.07);
  s.run(40, 42, model);
  EXPECT_NEAR(s.monitor.summary(1).jitter, 4.0, 0.4) << "2 slow records of the last 16: p90 is slow, the median not";
  s.run(42, 40 + static_cast<int>(telemetry::kJitterSteps / 2) + 1, model);
  EXPECT_NEAR(s.monitor.summary(1).jitter, 1.0, 0.07) << "most of the last 16 records are slow: the median moved";
  s.run(40 + static_cast<int>(telemetry::kJitterSteps / 2) + 1, 120, model);
  EXPECT_NEAR(s.monitor.summary(1).jitter, 1.0, 0.07);
  EXPECT_NE(s.monitor.classify(1), StragglerClass::healthy);
}

TEST(Monitor, SingleRankIsItsOwnReference) {
  telemetry::Monitor m(1, test_config());
  m.record(telemetry::StepRecord{0, 0, 0, 0.02, 0.02, 0, 0, 1});
  m.evaluate();
  EXPECT_DOUBLE_EQ(m.slowness(0), 1.0);
}

TEST(Monitor, EightThousandRanks) {
  constexpr int kRanks = 8192;
  Stream s(kRanks, test_config());
  const Model model = [](int rank, int step) {
    if (rank == 17) return 3 * kBase;
    if (rank == 4000 && step >= 5) return 4 * kBase;
    if (rank == 8000) return 0.5 * kBase;
    return kBase;
  };
  s.run(0, 25, model);
  EXPECT_EQ(s.monitor.classify(17), StragglerClass::deterministic);
  EXPECT_EQ(s.monitor.classify(4000), StragglerClass::deterministic) << "slow since before a normal period";
  EXPECT_EQ(s.monitor.classify(8000), StragglerClass::leader);
  const auto counts = s.monitor.class_counts();
  EXPECT_EQ(counts[static_cast<std::size_t>(StragglerClass::healthy)], static_cast<std::size_t>(kRanks - 3));
  const std::string table = s.monitor.summary_table(2);
  EXPECT_NE(table.find("and 1 more"), std::string::npos) << table;
}

TEST(Monitor, RejectsBadArguments) {
  EXPECT_THROW(telemetry::Monitor(0, test_config()), InvalidArgument);
  telemetry::MonitorConfig bad = test_config();
  bad.theta = 1.0;
  EXPECT_THROW(telemetry::Monitor(4, bad), InvalidArgument);
  bad = test_config();
  bad.alpha = 0;
  EXPECT_THROW(telemetry::Monitor(4, bad), InvalidArgument);
  telemetry::Monitor m(4, test_config());
  EXPECT_THROW(m.record(telemetry::StepRecord{4, 0, 0, 0, 0, 0, 0, 0}), InvalidArgument);
  EXPECT_THROW(m.classify(-1), InvalidArgument);
}

TEST(Monitor, ConfigFromEnvironmentVariables) {
  const std::map<std::string, std::string, std::less<>> env = {
      {"ANTDT_MONITOR_WINDOW", "16"}, {"ANTDT_MONITOR_ALPHA", "0.5"}, {"ANTDT_MONITOR_THETA", "2"},
      {"ANTDT_MONITOR_SHORT_STEPS", "3"}, {"ANTDT_MONITOR_GRACE_MARGIN", "1.5"}};
  const Config c = Config::from_env([&](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
  const telemetry::MonitorConfig m = telemetry::MonitorConfig::from(c);
  EXPECT_EQ(m.window, 16u);
  EXPECT_DOUBLE_EQ(m.alpha, 0.5);
  EXPECT_DOUBLE_EQ(m.theta, 2.0);
  EXPECT_EQ(m.short_steps, 3u);
  EXPECT_DOUBLE_EQ(m.grace_margin, 1.5);
}

// ---------------------------------------------------------------------------
// Traces
// ---------------------------------------------------------------------------

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("antdt-trace-" + std::to_string(::getpid()) + "-" + info->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::vector<std::string> lines_of(const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  static telemetry::StepRecord record(int rank, std::uint64_t step) {
    return telemetry::StepRecord{rank, step, 50.0 + static_cast<double>(step), 0.016, 0.010, 0.002, 0.003, 64};
  }

  std::filesystem::path dir_;
};

TEST_F(TraceTest, JsonLinesParseBackAndFlushEveryNSteps) {
  {
    telemetry::TraceWriter trace(dir_.string(), 3, 10);
    ASSERT_TRUE(trace.ok());
    for (std::uint64_t step = 0; step < 25; ++step) trace.write(record(3, step), step < 12 ? "healthy" : "transient");
    EXPECT_EQ(lines_of(trace.jsonl_path()).size(), 20u) << "two flushes of 10 steps before close";
    trace.close();
    EXPECT_TRUE(trace.ok());
    EXPECT_EQ(trace.steps_written(), 25u);
  }
  const auto lines = lines_of((dir_ / "antdt-rank3.jsonl").string());
  ASSERT_EQ(lines.size(), 25u);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto j = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(j.at("rank").get<int>(), 3);
    EXPECT_EQ(j.at("step").get<std::uint64_t>(), i);
    EXPECT_DOUBLE_EQ(j.at("t_begin").get<double>(), 50.0 + static_cast<double>(i));
    EXPECT_DOUBLE_EQ(j.at("step_s").get<double>(), 0.016);
    EXPECT_DOUBLE_EQ(j.at("compute_s").get<double>(), 0.010);
    EXPECT_DOUBLE_EQ(j.at("wait_s").get<double>(), 0.002);
    EXPECT_DOUBLE_EQ(j.at("transfer_s").get<double>(), 0.003);
    EXPECT_EQ(j.at("samples").get<std::uint64_t>(), 64u);
    EXPECT_EQ(j.at("class").get<std::string>(), i < 12 ? "healthy" : "transient");
  }
}

TEST_F(TraceTest, ChromeTraceIsValidJsonWithThreeEventsPerStep) {
  {
    telemetry::TraceWriter trace(dir_.string(), 1, 4, "job7");
    for (std::uint64_t step = 0; step < 9; ++step) trace.write(record(1, step), "healthy");
    telemetry::StepRecord no_wait = record(1, 9);
    no_wait.wait_s = 0;  // zero-length phases are left out
    trace.write(no_wait, "healthy");
  }  // the destructor closes
  std::ifstream in(dir_ / "job7-rank1.trace.json");
  const auto j = nlohmann::json::parse(in);
  const auto& events = j.at("traceEvents");
  ASSERT_EQ(events.size(), 1u + 3 * 9 + 2);
  EXPECT_EQ(events[0].at("ph"), "M");
  EXPECT_EQ(events[0].at("args").at("name"), "rank 1");
  std::map<std::string, int> names;
  for (std::size_t i = 1; i < events.size(); ++i) {
    const auto& e = events[i];
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_EQ(e.at("pid").get<int>(), 1);
    ++names[e.at("name").get<std::string>()];
  }
  EXPECT_EQ(names["compute"], 10);
  EXPECT_EQ(names["wait"], 9);
  EXPECT_EQ(names["transfer"], 10);
  // Step 0: compute from t_begin, then wait, then transfer, in microseconds.
  EXPECT_DOUBLE_EQ(events[1].at("ts").get<double>(), 50.0e6);
  EXPECT_NEAR(events[1].at("dur").get<double>(), 10000.0, 1e-6);
  EXPECT_NEAR(events[2].at("ts").get<double>(), 50.010e6, 1e-3);
  EXPECT_NEAR(events[3].at("ts").get<double>(), 50.012e6, 1e-3);
  EXPECT_EQ(events[3].at("args").at("step").get<int>(), 0);
}

TEST_F(TraceTest, UnwritableDirectoryDisablesTracingWithoutThrowing) {
  std::filesystem::create_directories(dir_);
  const auto blocker = dir_ / "not-a-directory";
  std::ofstream(blocker) << "x";
  telemetry::TraceWriter trace((blocker / "sub").string(), 0, 1);
  EXPECT_FALSE(trace.ok());
  EXPECT_NO_THROW(trace.write(record(0, 0), "healthy"));
  EXPECT_NO_THROW(trace.flush());
  EXPECT_NO_THROW(trace.close());
  EXPECT_EQ(trace.steps_written(), 0u);
}

TEST_F(TraceTest, FromConfigFollowsTraceDir) {
  Config c;
  EXPECT_EQ(telemetry::TraceWriter::from_config(c, 0), nullptr);
  c.trace_dir = dir_.string();
  c.trace_flush_steps = 1;
  auto trace = telemetry::TraceWriter::from_config(c, 2);
  ASSERT_NE(trace, nullptr);
  trace->write(record(2, 0), "leader");
  EXPECT_EQ(lines_of((dir_ / "antdt-rank2.jsonl").string()).size(), 1u) << "flushed after every step";
}

}  // namespace
}  // namespace antdt::sched

// antdt::monitor_summary (the NCCL shim's passthrough report): the Monitor over
// step times gathered elsewhere names a rank 3x slower, and only it.
TEST(MonitorSummary, NamesTheSlowRankOfGatheredSteps) {
  std::vector<std::vector<antdt::StepTimes>> steps(4);
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < 80; ++s) steps[static_cast<std::size_t>(r)].push_back({r == 1 ? 0.030 : 0.010, 0.001, 1});
  const std::string text = antdt::monitor_summary(steps);
  EXPECT_NE(text.find("antdt monitor: 4 ranks"), std::string::npos) << text;
  EXPECT_NE(text.find("deterministic 1"), std::string::npos) << text;
  EXPECT_NE(text.find("     1  deterministic"), std::string::npos) << text;
  EXPECT_THROW(antdt::monitor_summary({}), antdt::InvalidArgument);
}
