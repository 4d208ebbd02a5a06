// The recording of an open group (group_start() .. group_end()): the calls
// issued in it and the transfers it posted, and group_end(), which runs them
// (rules in group_recording.cpp). Uses collectives/collective_args.hpp,
// request_queue.hpp, transfer.hpp and the communicator; runs the recorded
// calls through collectives/execute.hpp.
#pragma once

#include "collectives/collective_args.hpp"
#include "collectives/communicator.hpp"
#include "collectives/request_queue.hpp"
#include "collectives/transfer.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace antdt::coll {

// One call recorded in a group.
struct GroupedCall {
  DeferredCollective collective;  // a call of the entry (collectives/execute.hpp) ...
  std::function<void()> run;      // ... or, when set, one from an entry of its own (push-pull), run as it is
  bool fusable = false;           // a host allreduce: fused with the group's others of its (dtype, op)
  bool done = false;              // already run (a fused pass)
};

class GroupRecording {
 public:
  GroupRecording() = default;
  // Transfers still in flight are cancelled (the communicator goes).
  ~GroupRecording();
  GroupRecording(const GroupRecording&) = delete;
  GroupRecording& operator=(const GroupRecording&) = delete;

  bool open() const noexcept { return depth_ > 0; }
  void start() noexcept { ++depth_; }
  void record(GroupedCall call) { calls_.push_back(std::move(call)); }
  // A transfer posted in the group, waited for at group_end.
  void record(std::shared_ptr<Transfer> transfer) { transfers_.push_back(std::move(transfer)); }
  // group_end(): the outermost one runs the non-blocking collectives issued
  // before the group (`queue`), then the group's calls, then waits for its transfers.
  void end(detail::CommImpl& comm, RequestQueue& queue);

 private:
  void run_recorded(detail::CommImpl& comm);

  int depth_ = 0;
  std::vector<GroupedCall> calls_;
  std::vector<std::shared_ptr<Transfer>> transfers_;
  std::vector<std::byte> fused_;  // grow-only packing buffer of fused allreduces
};

}  // namespace antdt::coll
