// Per-rank step timing (DESIGN §8). The trainer marks step and compute
// boundaries; collectives report the time they spent waiting for peers
// (arrival -> start of the exchange) and moving data. Each finished step
// becomes a StepRecord, the unit the Monitor aggregates and the trace writes.
//
// Compute time comes from, in order of preference:
//   1. a ComputeClock (CUDA events on the caller's stream), read without
//      blocking: a step's record waits until its device intervals are read,
//      which may be several steps later;
//   2. the CPU clock between begin_compute() and end_compute();
//   3. when the trainer never marks compute: the step's duration minus the
//      time spent inside collectives.
//
// One StepTimer belongs to one rank and is used from that rank's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace antdt::telemetry {

struct StepRecord {
  int rank = -1;
  std::uint64_t step = 0;
  double t_begin = 0;     // seconds on the rank's steady clock at begin_step()
  double step_s = 0;      // begin_step() -> end_step()
  double compute_s = 0;
  double wait_s = 0;      // inside collectives, before the exchange started
  double transfer_s = 0;  // inside collectives, exchanging data
  std::uint64_t samples = 0;
};

// Where the timer reads the time; tests inject a fake so nothing sleeps.
class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual double now() const noexcept = 0;  // seconds, monotonic
};

// std::chrono::steady_clock, in seconds since its epoch (CLOCK_MONOTONIC on
// Linux: the same epoch for every process on a host, so per-rank traces line up).
const TimeSource& steady_time() noexcept;

// Measures compute on a device, asynchronously. Intervals are read in the
// order their record_compute_end() calls were made; try_read() never blocks
// and returns false while the oldest interval is not finished.
class ComputeClock {
 public:
  virtual ~ComputeClock() = default;
  // `stream` is the caller's stream (cudaStream_t for CUDA; null: the default stream).
  virtual void record_compute_begin(void* stream) = 0;
  virtual void record_compute_end(void* stream) = 0;
  virtual bool try_read(double& seconds) = 0;
};

class StepTimer {
 public:
  // `time` and `device` must outlive the timer. At most `max_pending` records
  // wait for the device or for poll(); beyond that the oldest is dropped
  // (counted in dropped()) so a trainer that never polls cannot grow memory.
  explicit StepTimer(int rank, const TimeSource& time = steady_time(), ComputeClock* device = nullptr,
                     std::size_t max_pending = 1024);

  // Steps are numbered 0, 1, ... unless the caller gives the number; numbers
  // must increase. InvalidArgument on misuse (a step already open, compute
  // marks out of order), naming the call.
  void begin_step();
  void begin_step(std::uint64_t step);
  void begin_compute(void* stream = nullptr);
  void end_compute(void* stream = nullptr);
  void end_step(std::uint64_t samples);

  // Called by collectives; time outside an open step belongs to no step and
  // is only counted (unattributed_s()).
  void add_wait(double seconds) noexcept;
  void add_transfer(double seconds) noexcept;

  bool in_step() const noexcept { return open_; }
  bool in_compute() const noexcept { return computing_; }
  int rank() const noexcept { return rank_; }

  // Reads what the device has finished, then hands out the oldest finished
  // record; false when none is ready (yet).
  bool poll(StepRecord& out);
  // At shutdown: waits up to `timeout` for the device's outstanding intervals;
  // records still missing them get the CPU estimate (step minus collectives).
  void drain(std::chrono::milliseconds timeout);

  std::size_t pending() const noexcept { return count_; }
  std::uint64_t dropped() const noexcept { return dropped_; }
  double unattributed_s() const noexcept { return unattributed_s_; }

 private:
  struct Entry {
    StepRecord record;
    double cpu_compute_s = 0;
    std::uint32_t device_issued = 0;  // intervals begun on the device this step
    std::uint32_t device_read = 0;
    bool compute_marked = false;
    bool ended = false;
  };

  Entry& slot(std::size_t i) noexcept { return ring_[(head_ + i) % ring_.size()]; }
  Entry& current() noexcept { return slot(count_ - 1); }
  void read_device();
  void finalize_compute(Entry& e, bool device_complete) noexcept;
  void push_entry();

  int rank_;
  const TimeSource& time_;
  ComputeClock* device_;
  std::vector<Entry> ring_;  // entries [head_, head_ + count_), oldest first
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  std::uint64_t next_step_ = 0;
  bool open_ = false;
  bool computing_ = false;
  double compute_begin_ = 0;
  std::uint64_t skip_reads_ = 0;  // device intervals owed to dropped records
  std::uint64_t dropped_ = 0;
  double unattributed_s_ = 0;
};

}  // namespace antdt::telemetry
