// Compute timing with CUDA events: the ring bookkeeping (cuda/interval_ring.hpp)
// with a fake marker pair on every machine, and EventTimer against a known
// sleep kernel where a GPU is present (skipped otherwise, with the reason).
#include "cuda/cuda_runtime.hpp"
#include "cuda/interval_ring.hpp"

#include <antdt/comm.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#if ANTDT_HAVE_CUDA
#include "cuda/device_memory.hpp"
#include "collectives/telemetry/event_timer.hpp"
#include "cuda/sleep_kernel.hpp"
#include "collectives/telemetry/step_timer.hpp"

#include <chrono>
#endif

namespace {

// A device whose intervals finish when the test says so, in any order.
struct FakeDevice {
  std::uint64_t next_id = 0;
  std::set<std::uint64_t> finished;
  std::map<std::uint64_t, double> seconds;  // default: id + 0.5
  int pairs_created = 0;
  std::vector<int> streams_seen;

  void finish_all() {
    for (std::uint64_t id = 0; id < next_id; ++id) finished.insert(id);
  }
};

class FakePair {
 public:
  explicit FakePair(FakeDevice* device) : device_(device) { ++device_->pairs_created; }
  void record_begin(int stream) {
    id_ = device_->next_id++;
    device_->streams_seen.push_back(stream);
  }
  void record_end(int stream) { device_->streams_seen.push_back(stream); }
  bool try_elapsed(double& s) {
    if (device_->finished.count(id_) == 0) return false;
    const auto it = device_->seconds.find(id_);
    s = it != device_->seconds.end() ? it->second : static_cast<double>(id_) + 0.5;
    return true;
  }

 private:
  FakeDevice* device_;
  std::uint64_t id_ = 0;
};

using Ring = antdt::cuda::IntervalRing<FakePair, FakeDevice*, int>;

void record(Ring& ring, int stream = 7) {
  ring.begin(stream);
  ring.end(stream);
}

TEST(IntervalRing, ReadsInBeginOrderAndNeverSkipsAnUnfinishedInterval) {
  FakeDevice device;
  Ring ring(&device, 4);
  for (int i = 0; i < 3; ++i) record(ring);
  double s = -1;
  EXPECT_FALSE(ring.try_read(s)) << "nothing has finished";
  device.finished = {1, 2};  // newer ones finished first (another stream)
  EXPECT_FALSE(ring.try_read(s)) << "interval 0 must be read first";
  device.finished.insert(0);
  for (double expected : {0.5, 1.5, 2.5}) {
    ASSERT_TRUE(ring.try_read(s));
    EXPECT_EQ(s, expected);
  }
  EXPECT_FALSE(ring.try_read(s));
  EXPECT_EQ(ring.in_flight(), 0u);
  EXPECT_EQ(device.streams_seen, std::vector<int>(6, 7)) << "markers go on the caller's stream";
}

TEST(IntervalRing, AnOpenIntervalIsNotReadEvenIfItsBeginFinished) {
  FakeDevice device;
  Ring ring(&device, 2);
  ring.begin(1);
  device.finish_all();
  double s = 0;
  EXPECT_FALSE(ring.try_read(s));
  ring.end(1);
  ASSERT_TRUE(ring.try_read(s));
  EXPECT_EQ(s, 0.5);
}

TEST(IntervalRing, GrowsInsteadOfDroppingWhenEveryPairIsInFlight) {
  FakeDevice device;
  Ring ring(&device, 2);
  for (int i = 0; i < 9; ++i) record(ring);
  EXPECT_GE(ring.capacity(), 9u);
  EXPECT_EQ(device.pairs_created, static_cast<int>(ring.capacity()));
  device.finish_all();
  double s = 0;
  for (int i = 0; i < 9; ++i) {
    ASSERT_TRUE(ring.try_read(s)) << i;
    EXPECT_EQ(s, i + 0.5);
  }
  EXPECT_EQ(ring.dropped(), 0u);
}

TEST(IntervalRing, ReusesFinishedPairsKeepingTheirDurationsInOrder) {
  FakeDevice device;
  Ring ring(&device, 3);
  double s = 0;
  // The reader falls behind while the device keeps up: pairs are recycled,
  // their durations wait in the unread queue, and no pair is added.
  for (int i = 0; i < 10; ++i) {
    record(ring);
    device.finish_all();
  }
  EXPECT_EQ(ring.capacity(), 3u);
  EXPECT_EQ(device.pairs_created, 3);
  EXPECT_GT(ring.unread_finished(), 0u);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(ring.try_read(s)) << i;
    EXPECT_EQ(s, i + 0.5);
  }
  EXPECT_FALSE(ring.try_read(s));
}

TEST(IntervalRing, UnreadQueueIsBoundedAndCountsWhatItDrops) {
  FakeDevice device;
  Ring ring(&device, 1, /*max_unread=*/2);
  for (int i = 0; i < 6; ++i) {
    record(ring);
    device.finish_all();
  }
  // One pair: each new begin moves the previous duration to the queue of 2.
  EXPECT_EQ(ring.dropped(), 3u);
  double s = 0;
  for (double expected : {3.5, 4.5, 5.5}) {
    ASSERT_TRUE(ring.try_read(s));
    EXPECT_EQ(s, expected);
  }
}

TEST(IntervalRing, NegativeDurationReadsAsZero) {
  FakeDevice device;
  device.seconds[0] = -0.25;
  Ring ring(&device, 1);
  record(ring);
  device.finish_all();
  double s = 1;
  ASSERT_TRUE(ring.try_read(s));
  EXPECT_EQ(s, 0.0);
}

TEST(IntervalRing, MisuseIsRejectedWithoutChangingState) {
  FakeDevice device;
  Ring ring(&device, 2);
  EXPECT_THROW(ring.end(0), antdt::InvalidArgument);
  ring.begin(0);
  EXPECT_THROW(ring.begin(0), antdt::InvalidArgument);
  EXPECT_EQ(ring.in_flight(), 1u);
  ring.end(0);
  EXPECT_FALSE(ring.open());
}

#if ANTDT_HAVE_CUDA

class CudaEventTimer : public testing::Test {
 protected:
  void SetUp() override {
    if (!antdt::cuda::available()) GTEST_SKIP() << "no CUDA GPU available: " << antdt::cuda::unavailable_reason();
  }
};

// Reads the next interval, polling for at most `timeout`.
bool read_within(antdt::telemetry::EventTimer& timer, double& seconds, std::chrono::seconds timeout) {
  return antdt::cuda::poll_until_done([&] { return timer.try_read(seconds); }, timeout);
}

TEST_F(CudaEventTimer, MeasuresASleepKernelWithoutBlockingTheReader) {
  using namespace std::chrono_literals;
  antdt::cuda::Stream stream;
  antdt::telemetry::EventTimer timer;
  timer.record_compute_begin(stream.get());
  antdt::cuda::device_sleep(300ms, stream.get());
  timer.record_compute_end(stream.get());
  double seconds = -1;
  // The kernel runs for 300 ms, so an immediate read finds nothing (and returns).
  EXPECT_FALSE(timer.try_read(seconds));
  ASSERT_TRUE(read_within(timer, seconds, 20s)) << "the interval never finished";
  EXPECT_GE(seconds, 0.29);
  EXPECT_LT(seconds, 5.0) << "loose bound: the interval holds one 300 ms kernel";
}

TEST_F(CudaEventTimer, IntervalsComeBackInOrderAndTheRingGrowsBehindALongKernel) {
  using namespace std::chrono_literals;
  antdt::cuda::Stream stream;
  antdt::telemetry::EventTimer timer(2);
  // A long kernel first holds the stream, so every later pair is still in flight.
  antdt::cuda::device_sleep(200ms, stream.get());
  const std::vector<std::chrono::milliseconds> sleeps{30ms, 1ms, 20ms, 1ms, 10ms, 1ms, 40ms, 1ms};
  for (auto d : sleeps) {
    timer.record_compute_begin(stream.get());
    antdt::cuda::device_sleep(d, stream.get());
    timer.record_compute_end(stream.get());
  }
  EXPECT_GE(timer.capacity(), sleeps.size());
  for (auto d : sleeps) {
    double seconds = -1;
    ASSERT_TRUE(read_within(timer, seconds, 20s));
    EXPECT_GE(seconds, std::chrono::duration<double>(d).count() * 0.95) << d.count() << " ms kernel";
    EXPECT_LT(seconds, 5.0);
  }
  EXPECT_EQ(timer.dropped(), 0u);
}

TEST_F(CudaEventTimer, FeedsAStepTimerAsItsComputeClock) {
  using namespace std::chrono_literals;
  antdt::cuda::Stream stream;
  antdt::telemetry::EventTimer timer;
  antdt::telemetry::StepTimer steps(0, antdt::telemetry::steady_time(), &timer);
  for (int step = 0; step < 3; ++step) {
    steps.begin_step();
    steps.begin_compute(stream.get());
    antdt::cuda::device_sleep(20ms, stream.get());
    steps.end_compute(stream.get());
    steps.end_step(32);
  }
  std::vector<antdt::telemetry::StepRecord> records;
  ASSERT_TRUE(antdt::cuda::poll_until_done(
      [&] {
        antdt::telemetry::StepRecord r;
        while (steps.poll(r)) records.push_back(r);
        return records.size() == 3;
      },
      20s));
  for (const auto& r : records) EXPECT_GE(r.compute_s, 0.019) << "step " << r.step;
}

TEST_F(CudaEventTimer, BeginTwiceIsRejected) {
  antdt::telemetry::EventTimer timer;
  timer.record_compute_begin(nullptr);
  EXPECT_THROW(timer.record_compute_begin(nullptr), antdt::InvalidArgument);
  timer.record_compute_end(nullptr);
}

#endif  // ANTDT_HAVE_CUDA

}  // namespace
