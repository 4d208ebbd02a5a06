// Group calls (collectives/group_recording.hpp): the collectives issued
// between group_start() and group_end() run at group_end(), with the
// allreduces fused.
//
// Rules (docs/collectives.md#group-calls):
// * Groups nest; only the outermost group_end() runs anything.
// * Every allreduce of the group with the same (dtype, op) is packed into one
//   buffer, reduced in one allreduce, and unpacked: one pass instead of many
//   small ones. The pass runs where the first of them was issued; the group's
//   other collectives run in issue order.
// * Send/recv in a group are posted at once and waited for after the group's
//   collectives, so a group may hold both sides of an exchange.
// * The calls' buffers are read and written only at group_end(), and must not
//   depend on each other within the group (one call's output is not another's input).
// * Every rank must form the same groups: a rank that groups allreduces its
//   peers issue one by one runs a differently sized allreduce, a MismatchError.
#include "collectives/group_recording.hpp"

#include "collectives/execute.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <cstring>
#include <limits>

namespace antdt::coll {

GroupRecording::~GroupRecording() {
  for (auto& transfer : transfers_) transfer->detach();
}

void GroupRecording::end(detail::CommImpl& comm, RequestQueue& queue) {
  ANTDT_CHECK_ARG(depth_ > 0, "group_end() without a matching group_start()");
  if (--depth_ > 0) return;
  // Whatever happens below, the group is over: what it recorded is dropped and
  // its transfers still in flight are cancelled.
  struct Reset {
    GroupRecording& group;
    ~Reset() {
      group.calls_.clear();
      group.transfers_.clear();
    }
  } reset{*this};
  queue.run_queued();  // non-blocking collectives issued before the group come first
  run_recorded(comm);
  for (auto& transfer : transfers_) transfer->wait();
}

void GroupRecording::run_recorded(detail::CommImpl& comm) {
  for (std::size_t i = 0; i < calls_.size(); ++i) {
    GroupedCall& first = calls_[i];
    if (first.done) continue;
    if (!first.fusable) {
      if (first.run)
        first.run();
      else
        run_now(comm, first.collective.args());
      first.done = true;
      continue;
    }
    const CollectiveArgs head = first.collective.args();
    auto fuses_with_first = [&](const GroupedCall& g) {
      if (!g.fusable || g.done) return false;
      const CollectiveArgs& a = g.collective.args();
      return a.dtype == head.dtype && a.op == head.op;
    };
    std::size_t members = 0, total = 0;
    for (std::size_t j = i; j < calls_.size(); ++j)
      if (fuses_with_first(calls_[j])) {
        ++members;
        total += calls_[j].collective.args().count;
      }
    if (members == 1) {
      run_algorithm(comm, head);
      first.done = true;
      continue;
    }
    const std::size_t esize = dtype_size(head.dtype);
    ANTDT_CHECK_ARG(total <= std::numeric_limits<std::size_t>::max() / esize, "group_end: the fused allreduce of ",
                    total, " elements overflows size_t");
    if (fused_.size() < total * esize) fused_.resize(total * esize);
    std::size_t offset = 0;
    for (std::size_t j = i; j < calls_.size(); ++j) {
      if (!fuses_with_first(calls_[j])) continue;
      const CollectiveArgs& g = calls_[j].collective.args();
      if (g.count > 0) std::memcpy(fused_.data() + offset, g.send, g.count * esize);
      offset += g.count * esize;
    }
    CollectiveArgs pass = head;
    pass.send = fused_.data();
    pass.recv = fused_.data();
    pass.count = total;
    run_algorithm(comm, pass);
    offset = 0;
    for (std::size_t j = i; j < calls_.size(); ++j) {
      if (!fuses_with_first(calls_[j])) continue;
      const CollectiveArgs& g = calls_[j].collective.args();
      if (g.count > 0) std::memcpy(g.recv, fused_.data() + offset, g.count * esize);
      offset += g.count * esize;
      calls_[j].done = true;
    }
  }
}

}  // namespace antdt::coll
