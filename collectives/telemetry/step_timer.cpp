// StepTimer (collectives/telemetry/step_timer.hpp).
#include "collectives/telemetry/step_timer.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <algorithm>
#include <thread>

namespace antdt::telemetry {
namespace {

class SteadyTime final : public TimeSource {
 public:
  double now() const noexcept override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

}  // namespace

const TimeSource& steady_time() noexcept {
  static const SteadyTime instance;
  return instance;
}

StepTimer::StepTimer(int rank, const TimeSource& time, ComputeClock* device, std::size_t max_pending)
    : rank_(rank), time_(time), device_(device) {
  ANTDT_CHECK_ARG(max_pending >= 1, "StepTimer: max_pending must be at least 1, got ", max_pending);
  // One more slot than asked for: the open step occupies one too.
  ring_.resize(max_pending + 1);
}

void StepTimer::push_entry() {
  if (count_ == ring_.size()) {
    // Nobody polls, or the device never answers: forget the oldest record,
    // and the device intervals still owed to it, so later reads stay aligned.
    Entry& oldest = slot(0);
    skip_reads_ += oldest.device_issued - oldest.device_read;
    head_ = (head_ + 1) % ring_.size();
    --count_;
    if (dropped_++ == 0) {
      ANTDT_WARN("step timer of rank ", rank_, ": more than ", ring_.size() - 1,
                 " step records unread; dropping the oldest (records must be polled every step)");
    }
  }
  ++count_;
  current() = Entry{};
}

void StepTimer::begin_step() { begin_step(next_step_); }

void StepTimer::begin_step(std::uint64_t step) {
  ANTDT_CHECK_ARG(!open_, "begin_step(", step, "): step ", current().record.step,
                  " is still open (end_step() was not called)");
  ANTDT_CHECK_ARG(step >= next_step_, "begin_step(", step, "): step numbers must increase; the next is at least ",
                  next_step_);
  read_device();
  push_entry();
  Entry& e = current();
  e.record.rank = rank_;
  e.record.step = step;
  e.record.t_begin = time_.now();
  next_step_ = step + 1;
  open_ = true;
}

void StepTimer::begin_compute(void* stream) {
  ANTDT_CHECK_ARG(open_, "begin_compute(): no step is open (call begin_step() first)");
  ANTDT_CHECK_ARG(!computing_, "begin_compute(): compute of step ", current().record.step,
                  " is already marked as begun (end_compute() was not called)");
  if (device_ != nullptr) device_->record_compute_begin(stream);
  computing_ = true;
  compute_begin_ = time_.now();
}

void StepTimer::end_compute(void* stream) {
  ANTDT_CHECK_ARG(computing_, "end_compute(): begin_compute() was not called in this step");
  Entry& e = current();
  e.cpu_compute_s += std::max(0.0, time_.now() - compute_begin_);
  e.compute_marked = true;
  computing_ = false;
  if (device_ != nullptr) {
    device_->record_compute_end(stream);
    ++e.device_issued;
  }
}

void StepTimer::end_step(std::uint64_t samples) {
  ANTDT_CHECK_ARG(open_, "end_step(): no step is open (call begin_step() first)");
  Entry& e = current();
  ANTDT_CHECK_ARG(!computing_, "end_step(): compute of step ", e.record.step,
                  " is still marked as running (end_compute() was not called)");
  e.record.step_s = std::max(0.0, time_.now() - e.record.t_begin);
  e.record.samples = samples;
  e.ended = true;
  open_ = false;
  read_device();
}

void StepTimer::add_wait(double seconds) noexcept {
  if (open_) {
    current().record.wait_s += seconds;
  } else {
    unattributed_s_ += seconds;
  }
}

void StepTimer::add_transfer(double seconds) noexcept {
  if (open_) {
    current().record.transfer_s += seconds;
  } else {
    unattributed_s_ += seconds;
  }
}

void StepTimer::read_device() {
  if (device_ == nullptr) return;
  double seconds = 0;
  while (device_->try_read(seconds)) {
    if (skip_reads_ > 0) {
      --skip_reads_;
      continue;
    }
    // Intervals come back in the order they ended, so the owner is the oldest
    // step still missing one.
    for (std::size_t i = 0; i < count_; ++i) {
      Entry& e = slot(i);
      if (e.device_read < e.device_issued) {
        e.record.compute_s += seconds;
        ++e.device_read;
        break;
      }
    }
  }
}

void StepTimer::finalize_compute(Entry& e, bool device_complete) noexcept {
  StepRecord& r = e.record;
  if (e.device_issued > 0 && device_complete) return;  // compute_s holds the device's sum
  if (e.compute_marked && e.device_issued == 0) {
    r.compute_s = e.cpu_compute_s;
  } else {
    // Unmarked compute, or device intervals that never came back (the CPU
    // interval only covers kernel launches then): everything outside collectives.
    r.compute_s = std::max(0.0, r.step_s - r.wait_s - r.transfer_s);
  }
}

bool StepTimer::poll(StepRecord& out) {
  read_device();
  if (count_ == 0) return false;
  Entry& oldest = slot(0);
  if (!oldest.ended || oldest.device_read < oldest.device_issued) return false;
  finalize_compute(oldest, true);
  out = oldest.record;
  head_ = (head_ + 1) % ring_.size();
  --count_;
  return true;
}

void StepTimer::drain(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto waiting_for_device = [this] {
    for (std::size_t i = 0; i < count_; ++i) {
      const Entry& e = slot(i);
      if (e.ended && e.device_read < e.device_issued) return true;
    }
    return false;
  };
  read_device();
  while (waiting_for_device() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    read_device();
  }
  for (std::size_t i = 0; i < count_; ++i) {
    Entry& e = slot(i);
    if (!e.ended || e.device_read == e.device_issued) continue;
    skip_reads_ += e.device_issued - e.device_read;
    // Without its device intervals the step falls back to the CPU estimate
    // (step minus collectives) when poll() finalizes it.
    e.record.compute_s = 0;
    e.device_issued = 0;
    e.device_read = 0;
    e.compute_marked = false;
  }
}

}  // namespace antdt::telemetry
