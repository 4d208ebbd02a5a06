// Step timing on every rank: the trainer's step/compute marks and the time
// collectives spend, into a StepTimer; finished steps go to the trace files
// (ANTDT_TRACE_DIR) and their compute time to the partial-collective arbiter.
//
// Threads: the marks come from the caller's thread; collectives report from
// the caller's thread or from the communicator's progress thread
// (non-blocking calls, collectives/suite.hpp). The state is created by a mark
// and published to collectives after (CommImpl::step_state_published); the
// timer is guarded by a mutex, and whether a step is open is an atomic, so a
// collective outside any step (the common case) takes no lock.
#include "collectives/step_timing.hpp"

#include "core/error.hpp"
#include "collectives/telemetry/step_timer.hpp"
#include "collectives/telemetry/trace.hpp"

#include <atomic>
#include <mutex>

#if defined(ANTDT_HAVE_CUDA)
#include "cuda/cuda_runtime.hpp"
#include "collectives/telemetry/event_timer.hpp"
#endif

namespace antdt::coll {
namespace {

// With a GPU, compute marks given a stream are timed with CUDA events, read
// later without synchronising; otherwise with the CPU clock.
std::unique_ptr<telemetry::ComputeClock> make_device_clock() {
#if defined(ANTDT_HAVE_CUDA)
  if (cuda::available()) return std::make_unique<telemetry::EventTimer>();
#endif
  return nullptr;
}

class StepState final : public detail::CollectiveState {
 public:
  explicit StepState(detail::CommImpl& comm)
      : device_clock(make_device_clock()),
        timer(comm.rank(), telemetry::steady_time(), device_clock.get()),
        trace(telemetry::TraceWriter::from_config(comm.config(), comm.rank(), "antdt-c" + std::to_string(comm.id()))) {}
  std::unique_ptr<telemetry::ComputeClock> device_clock;  // before timer: the timer points at it
  std::mutex mu;                                       // guards timer, trace and last_compute_s
  telemetry::StepTimer timer;
  std::unique_ptr<telemetry::TraceWriter> trace;
  double last_compute_s = 0;
  std::atomic<bool> in_step{false};  // timer.in_step(), readable without mu
};

// The caller's thread (marks): creates the state on first use.
StepState& state_of(detail::CommImpl& comm) {
  auto& holder = comm.step_state();
  if (!holder) {
    holder = std::make_unique<StepState>(comm);
    comm.publish_step_state();
  }
  return static_cast<StepState&>(*holder);
}

// Any thread (collectives): the state, when a mark created it.
StepState* published_state(detail::CommImpl& comm) {
  if (!comm.step_state_published()) return nullptr;
  return static_cast<StepState*>(comm.step_state().get());
}

}  // namespace

void begin_step(detail::CommImpl& comm) {
  auto& st = state_of(comm);
  const std::lock_guard lock(st.mu);
  st.timer.begin_step();
  st.in_step.store(st.timer.in_step(), std::memory_order_relaxed);
}
void begin_compute(detail::CommImpl& comm, void* stream) {
  auto& st = state_of(comm);
  const std::lock_guard lock(st.mu);
  st.timer.begin_compute(stream);
}
void end_compute(detail::CommImpl& comm, void* stream) {
  auto& st = state_of(comm);
  const std::lock_guard lock(st.mu);
  st.timer.end_compute(stream);
}

void end_step(detail::CommImpl& comm, std::uint64_t samples, StragglerClass cls) {
  auto& st = state_of(comm);
  const std::lock_guard lock(st.mu);
  st.timer.end_step(samples);
  st.in_step.store(st.timer.in_step(), std::memory_order_relaxed);
  telemetry::StepRecord rec;
  while (st.timer.poll(rec)) {
    st.last_compute_s = rec.compute_s;
    if (st.trace) st.trace->write(rec, straggler_class_name(cls));
  }
}

void record_collective(detail::CommImpl& comm, double wait_s, double transfer_s) {
  StepState* st = published_state(comm);
  if (st == nullptr || !st->in_step.load(std::memory_order_relaxed)) return;  // nothing to attribute
  const std::lock_guard lock(st->mu);
  if (!st->timer.in_step()) return;  // the step closed meanwhile
  st->timer.add_wait(wait_s);
  st->timer.add_transfer(transfer_s);
}

bool collective_timing_active(detail::CommImpl& comm) {
  const StepState* st = published_state(comm);
  return st != nullptr && st->in_step.load(std::memory_order_relaxed);
}

std::optional<double> last_compute_seconds(detail::CommImpl& comm) {
  StepState* st = published_state(comm);
  if (st == nullptr) return std::nullopt;
  const std::lock_guard lock(st->mu);
  return st->last_compute_s;
}

}  // namespace antdt::coll
