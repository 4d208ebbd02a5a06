#include "collectives/telemetry/event_timer.hpp"

namespace antdt::telemetry {
namespace {

// Creates the events on `device` even when the caller has since made another
// device current (the ring grows lazily, from whatever thread records).
cuda::Event timing_event_on(int device) {
  const cuda::ScopedDevice on(device);
  return cuda::Event(cuda::Event::Kind::timing);
}

}  // namespace

EventTimer::EventPair::EventPair(int device) : begin_(timing_event_on(device)), end_(timing_event_on(device)) {}

bool EventTimer::EventPair::try_elapsed(double& seconds) {
  // Both queried: with begin and end on different streams, a finished end
  // says nothing about begin. Queries never block.
  if (!end_.query() || !begin_.query()) return false;
  seconds = cuda::Event::elapsed_seconds(begin_, end_);
  return true;
}

EventTimer::EventTimer(std::size_t initial_pairs) : device_(cuda::current_device()), ring_(device_, initial_pairs) {}

void EventTimer::record_compute_begin(void* stream) { ring_.begin(static_cast<cudaStream_t>(stream)); }

void EventTimer::record_compute_end(void* stream) { ring_.end(static_cast<cudaStream_t>(stream)); }

bool EventTimer::try_read(double& seconds) { return ring_.try_read(seconds); }

}  // namespace antdt::telemetry
