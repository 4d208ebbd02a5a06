// Group calls: the collectives issued between group_start() and group_end()
// run at group_end(), with the allreduces fused.
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
#include "collectives/suite.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <cstring>
#include <limits>

namespace antdt::coll {

void SuiteState::group_end() {
  ANTDT_CHECK_ARG(group_depth_ > 0, "group_end() without a matching group_start()");
  if (--group_depth_ > 0) return;
  // Whatever happens below, the group is over: what it recorded is dropped and
  // its transfers still in flight are cancelled.
  struct Reset {
    SuiteState& state;
    ~Reset() {
      state.grouped_.clear();
      state.group_transfers_.clear();
    }
  } reset{*this};
  run_queued();  // non-blocking collectives issued before the group come first
  run_grouped();
  for (auto& transfer : group_transfers_) transfer->wait();
}

void SuiteState::run_grouped() {
  for (std::size_t i = 0; i < grouped_.size(); ++i) {
    GroupedCollective& first = grouped_[i];
    if (first.done) continue;
    if (!first.is_allreduce) {
      first.run();
      first.done = true;
      continue;
    }
    auto fuses_with_first = [&](const GroupedCollective& g) {
      return g.is_allreduce && !g.done && g.dtype == first.dtype && g.op == first.op;
    };
    std::size_t members = 0, total = 0;
    for (std::size_t j = i; j < grouped_.size(); ++j)
      if (fuses_with_first(grouped_[j])) {
        ++members;
        total += grouped_[j].count;
      }
    if (members == 1) {
      run_allreduce(comm_, first.send, first.recv, first.count, first.dtype, first.op);
      first.done = true;
      continue;
    }
    const std::size_t esize = dtype_size(first.dtype);
    ANTDT_CHECK_ARG(total <= std::numeric_limits<std::size_t>::max() / esize, "group_end: the fused allreduce of ",
                    total, " elements overflows size_t");
    if (fused_.size() < total * esize) fused_.resize(total * esize);
    std::size_t offset = 0;
    for (std::size_t j = i; j < grouped_.size(); ++j) {
      const GroupedCollective& g = grouped_[j];
      if (!fuses_with_first(g)) continue;
      if (g.count > 0) std::memcpy(fused_.data() + offset, g.send, g.count * esize);
      offset += g.count * esize;
    }
    run_allreduce(comm_, fused_.data(), fused_.data(), total, first.dtype, first.op);
    offset = 0;
    for (std::size_t j = i; j < grouped_.size(); ++j) {
      GroupedCollective& g = grouped_[j];
      if (!fuses_with_first(g)) continue;
      if (g.count > 0) std::memcpy(g.recv, fused_.data() + offset, g.count * esize);
      offset += g.count * esize;
      g.done = true;
    }
  }
}

}  // namespace antdt::coll
