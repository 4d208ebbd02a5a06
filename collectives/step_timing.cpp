// Step timing on every rank: the trainer's step/compute marks and the time
// collectives spend, into a StepTimer; finished steps go to the trace files
// (ANTDT_TRACE_DIR) and their compute time to the partial-collective arbiter.
#include "collectives/step_timing.hpp"

#include "core/error.hpp"
#include "scheduler/step_timer.hpp"
#include "scheduler/trace.hpp"

#if defined(ANTDT_HAVE_CUDA)
#include "cuda/cuda_runtime.hpp"
#include "cuda/event_timer.hpp"
#endif

namespace antdt::coll {
namespace {

// With a GPU, compute marks given a stream are timed with CUDA events, read
// later without synchronising; otherwise with the CPU clock.
std::unique_ptr<sched::ComputeClock> make_device_clock() {
#if defined(ANTDT_HAVE_CUDA)
  if (cuda::available()) return std::make_unique<cuda::EventTimer>();
#endif
  return nullptr;
}

class StepState final : public detail::CollectiveState {
 public:
  explicit StepState(detail::CommImpl& comm)
      : device_clock(make_device_clock()),
        timer(comm.rank(), sched::steady_time(), device_clock.get()),
        trace(sched::TraceWriter::from_config(comm.config(), comm.rank(), "antdt-c" + std::to_string(comm.id()))) {}
  std::unique_ptr<sched::ComputeClock> device_clock;  // before timer: the timer points at it
  sched::StepTimer timer;
  std::unique_ptr<sched::TraceWriter> trace;
  double last_compute_s = 0;
};

StepState& state_of(detail::CommImpl& comm) {
  auto& holder = comm.step_state();
  if (!holder) holder = std::make_unique<StepState>(comm);
  return static_cast<StepState&>(*holder);
}

}  // namespace

void begin_step(detail::CommImpl& comm) { state_of(comm).timer.begin_step(); }
void begin_compute(detail::CommImpl& comm, void* stream) { state_of(comm).timer.begin_compute(stream); }
void end_compute(detail::CommImpl& comm, void* stream) { state_of(comm).timer.end_compute(stream); }

void end_step(detail::CommImpl& comm, std::uint64_t samples, StragglerClass cls) {
  auto& st = state_of(comm);
  st.timer.end_step(samples);
  sched::StepRecord rec;
  while (st.timer.poll(rec)) {
    st.last_compute_s = rec.compute_s;
    if (st.trace) st.trace->write(rec, straggler_class_name(cls));
  }
}

void record_collective(detail::CommImpl& comm, double wait_s, double transfer_s) {
  auto& holder = comm.step_state();
  if (!holder) return;  // nobody marks steps: nothing to attribute
  auto& st = static_cast<StepState&>(*holder);
  if (!st.timer.in_step()) return;
  st.timer.add_wait(wait_s);
  st.timer.add_transfer(transfer_s);
}

bool collective_timing_active(detail::CommImpl& comm) {
  auto& holder = comm.step_state();
  return holder && static_cast<StepState&>(*holder).timer.in_step();
}

std::optional<double> last_compute_seconds(detail::CommImpl& comm) {
  auto& holder = comm.step_state();
  if (!holder) return std::nullopt;
  return static_cast<StepState&>(*holder).last_compute_s;
}

}  // namespace antdt::coll
