// StepTiming: one communicator's step timing (docs/monitor.md). The trainer's
// step and compute marks and the time collectives spend go into a StepTimer;
// finished steps go to the trace files (ANTDT_TRACE_DIR) and their compute
// time to whoever asks for it (the partial-collective arbiter, the Agent).
//
// Threads: the marks come from the caller's thread; collectives report from
// the caller's thread or from the communicator's progress thread
// (non-blocking calls, collectives/request_queue.hpp), and read the last compute time
// from either. The owner creates a StepTiming at the first mark and publishes
// it to collectives after (detail::CommImpl::started_step_timing). The timer
// is guarded by a mutex, and whether a step is open is an atomic, so a
// collective outside any step (the common case) takes no lock.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/telemetry/step_timer.hpp"
#include "collectives/telemetry/trace.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace antdt {
struct Config;
}

namespace antdt::telemetry {

class StepTiming {
 public:
  // Traces (when ANTDT_TRACE_DIR is set) are named <trace_prefix>-rank<rank>.*.
  StepTiming(const Config& cfg, int rank, std::string trace_prefix);
  ~StepTiming();
  StepTiming(const StepTiming&) = delete;
  StepTiming& operator=(const StepTiming&) = delete;

  // The trainer's marks (the caller's thread). `stream` is the caller's
  // stream for the device clock (cudaStream_t; null: the default stream).
  void begin_step();
  void begin_compute(void* stream);
  void end_compute(void* stream);
  // `cls` is this rank's class as last reported by the arbiter (for the trace).
  void end_step(std::uint64_t samples, StragglerClass cls);

  // Collectives (any thread) report the time they waited for peers and moved data.
  void record_collective(double wait_s, double transfer_s);
  // Whether record_collective() would count anything now (inside a marked step).
  bool in_step() const noexcept { return in_step_.load(std::memory_order_relaxed); }
  // Compute time of the last finished step (0 before any).
  double last_compute_seconds();

 private:
  std::unique_ptr<ComputeClock> device_clock_;  // before timer_: the timer points at it
  std::mutex mu_;                               // guards timer_, trace_ and last_compute_s_
  StepTimer timer_;
  std::unique_ptr<TraceWriter> trace_;
  double last_compute_s_ = 0;
  std::atomic<bool> in_step_{false};  // timer_.in_step(), readable without mu_
};

}  // namespace antdt::telemetry
