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
#include "core/error.hpp"

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

  bool in_group() const noexcept { return group_.open(); }
  void record(GroupedCall call) { group_.record(std::move(call)); }
  void record(std::shared_ptr<Transfer> transfer) { group_.record(std::move(transfer)); }
  // The non-blocking mode of every entry: the call (a DeferredCollective, or
  // a closure of an entry of its own: push-pull's) joins the queue; `what`
  // names it. Refused inside a group: the group itself runs at group_end().
  template <class Deferred>
  std::shared_ptr<QueuedCollective> enqueue(Deferred call, const char* what) {
    ANTDT_CHECK_ARG(!in_group(), what,
                    ": non-blocking calls cannot be issued inside a group (the group itself runs at group_end())");
    return requests_.enqueue(std::move(call), what);
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

// The blocking mode of every entry: inside an open group the call is recorded
// (`grouped()` makes its GroupedCall, only then) and false returned; otherwise
// the non-blocking calls issued before it run first, and true says "run it now".
template <class MakeGrouped>
bool run_queued_or_record(detail::CommImpl& comm, MakeGrouped&& grouped) {
  if (IssuedCalls* issued = existing_issued_calls(comm)) {
    if (issued->in_group()) {
      issued->record(grouped());
      return false;
    }
    issued->run_queued();
  }
  return true;
}
// For calls outside the entry that use the communicator's collective resources
// (partial collectives): with the progress thread, returns once every queued
// non-blocking collective has run. Nothing to do in caller mode (nothing runs
// alongside the caller) or when the communicator never queued anything.
void drain_queue(detail::CommImpl& comm);

}  // namespace antdt::coll
