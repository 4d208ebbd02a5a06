// StepTiming (collectives/telemetry/step_timing.hpp).
#include "collectives/telemetry/step_timing.hpp"

#include <utility>

#if defined(ANTDT_HAVE_CUDA)
#include "cuda/cuda_runtime.hpp"
#include "collectives/telemetry/event_timer.hpp"
#endif

namespace antdt::telemetry {
namespace {

// With a GPU, compute marks given a stream are timed with CUDA events, read
// later without synchronising; otherwise with the CPU clock.
std::unique_ptr<ComputeClock> make_device_clock() {
#if defined(ANTDT_HAVE_CUDA)
  if (cuda::available()) return std::make_unique<EventTimer>();
#endif
  return nullptr;
}

}  // namespace

StepTiming::StepTiming(const Config& cfg, int rank, std::string trace_prefix)
    : device_clock_(make_device_clock()),
      timer_(rank, steady_time(), device_clock_.get()),
      trace_(TraceWriter::from_config(cfg, rank, std::move(trace_prefix))) {}

StepTiming::~StepTiming() = default;

void StepTiming::begin_step() {
  const std::lock_guard lock(mu_);
  timer_.begin_step();
  in_step_.store(timer_.in_step(), std::memory_order_relaxed);
}

void StepTiming::begin_compute(void* stream) {
  const std::lock_guard lock(mu_);
  timer_.begin_compute(stream);
}

void StepTiming::end_compute(void* stream) {
  const std::lock_guard lock(mu_);
  timer_.end_compute(stream);
}

void StepTiming::end_step(std::uint64_t samples, StragglerClass cls) {
  const std::lock_guard lock(mu_);
  timer_.end_step(samples);
  in_step_.store(timer_.in_step(), std::memory_order_relaxed);
  StepRecord rec;
  while (timer_.poll(rec)) {
    last_compute_s_ = rec.compute_s;
    if (trace_) trace_->write(rec, straggler_class_name(cls));
  }
}

void StepTiming::record_collective(double wait_s, double transfer_s) {
  if (!in_step()) return;  // nothing to attribute
  const std::lock_guard lock(mu_);
  if (!timer_.in_step()) return;  // the step closed meanwhile
  timer_.add_wait(wait_s);
  timer_.add_transfer(transfer_s);
}

double StepTiming::last_compute_seconds() {
  const std::lock_guard lock(mu_);
  return last_compute_s_;
}

}  // namespace antdt::telemetry
