// What a communicator keeps about the calls issued on it between calls: the
// request queue and progress thread (collectives/request_queue.hpp), the
// recording of an open group (group_recording.hpp) and the point-to-point
// sequence numbers (peer_sequences.hpp). Created on first use: a
// communicator that never used groups, requests or send/recv has none. Uses
// those three and the communicator.
#pragma once

#include "collectives/communicator.hpp"
#include "collectives/group_recording.hpp"
#include "collectives/peer_sequences.hpp"
#include "collectives/request_queue.hpp"

#include <functional>
#include <memory>

namespace antdt::coll {

class IssuedCalls final : public detail::CollectiveState {
 public:
  explicit IssuedCalls(detail::CommImpl& comm) : comm_(comm), sequences_(comm.size()), requests_(comm) {}

  detail::CommImpl& comm() noexcept { return comm_; }
  RequestQueue& requests() noexcept { return requests_; }
  GroupRecording& group() noexcept { return group_; }
  PeerSequences& sequences() noexcept { return sequences_; }

  // How a call deferred by its own entry (push-pull's) uses them, as the
  // collective entry does (collectives/execute.cpp).
  bool in_group() const noexcept { return group_.open(); }
  void record(GroupedCall call) { group_.record(std::move(call)); }
  void record(std::shared_ptr<Transfer> transfer) { group_.record(std::move(transfer)); }
  std::shared_ptr<detail::RequestState> enqueue(std::function<void()> run,
                                                const char* what = "non-blocking collective") {
    return requests_.enqueue(std::move(run), what);
  }
  void run_queued() { requests_.run_queued(); }
  void group_start() noexcept { group_.start(); }
  void group_end() { group_.end(comm_, requests_); }

 private:
  detail::CommImpl& comm_;
  PeerSequences sequences_;
  // Destroyed after the queue: the queue first runs everything issued, then
  // the group's transfers still in flight are cancelled.
  GroupRecording group_;
  RequestQueue requests_;
};

// The communicator's issued calls (created on first use).
IssuedCalls& issued_calls(detail::CommImpl& comm);
// Null when the communicator never used groups, requests or send/recv.
inline IssuedCalls* existing_issued_calls(detail::CommImpl& comm) {
  return comm.collective_state() ? static_cast<IssuedCalls*>(comm.collective_state().get()) : nullptr;
}
// For calls outside the entry that use the communicator's collective resources
// (partial collectives): with the progress thread, returns once every queued
// non-blocking collective has run. Nothing to do in caller mode (nothing runs
// alongside the caller) or when the communicator never queued anything.
void drain_queue(detail::CommImpl& comm);

}  // namespace antdt::coll
