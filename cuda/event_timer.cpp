#include "cuda/event_timer.hpp"

namespace antdt::cuda {
namespace {

// Creates the events on `device` even when the caller has since made another
// device current (the ring grows lazily, from whatever thread records).
Event timing_event_on(int device) {
  const ScopedDevice on(device);
  return Event(Event::Kind::timing);
}

}  // namespace

EventTimer::EventPair::EventPair(int device) : begin_(timing_event_on(device)), end_(timing_event_on(device)) {}

bool EventTimer::EventPair::try_elapsed(double& seconds) {
  // Both queried: with begin and end on different streams, a finished end
  // says nothing about begin. Queries never block.
  if (!end_.query() || !begin_.query()) return false;
  seconds = Event::elapsed_seconds(begin_, end_);
  return true;
}

EventTimer::EventTimer(std::size_t initial_pairs) : device_(current_device()), ring_(device_, initial_pairs) {}

void EventTimer::record_compute_begin(void* stream) { ring_.begin(static_cast<cudaStream_t>(stream)); }

void EventTimer::record_compute_end(void* stream) { ring_.end(static_cast<cudaStream_t>(stream)); }

bool EventTimer::try_read(double& seconds) { return ring_.try_read(seconds); }

}  // namespace antdt::cuda
