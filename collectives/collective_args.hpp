// The argument record of one collective call, the modes a call runs in, and
// the owning copy a deferred call keeps. Uses only the public types and
// collectives/call.hpp (Kind).
#pragma once

#include <antdt/comm.hpp>

#include "collectives/call.hpp"

#include <cstddef>
#include <span>
#include <vector>

namespace antdt::coll {

// Everything one collective call was given. Which fields matter depends on
// `kind` (the others keep their defaults):
//   allreduce        send, recv, count, dtype, op
//   broadcast        send (root only), recv, count, dtype, root
//   reduce           send, recv (root only), count, dtype, op, root
//   reduce_scatter   send (size() blocks), recv, count (elements per block), dtype, op
//   allgather        send, recv (size() blocks), count (elements per block), dtype
//   allgatherv       send, recv, counts, displs (empty: packed), dtype
//   alltoall         send, recv, count (elements per block), dtype
//   barrier          nothing
//   partial          send, recv, count, dtype, op, partial (Mode::partial)
// `stream` is the caller's cudaStream_t (nullptr: the legacy default stream):
// the device paths order themselves on it, host buffers wait for it first.
struct CollectiveArgs {
  Kind kind = Kind::barrier;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::u8;
  ReduceOp op = ReduceOp::sum;
  int root = -1;
  std::span<const std::size_t> counts, displs;
  void* stream = nullptr;
  const PartialOptions* partial = nullptr;
};

// How the entry (collectives/execute.hpp) runs a call.
enum class Mode : std::uint8_t {
  // Runs now, after the non-blocking calls issued before it; recorded instead
  // when a group is open (it then runs at group_end()).
  blocking,
  // Queued and run in issue order (collectives/request_queue.hpp); returns the request.
  nonblocking,
  // A partial collective (docs/partial.md): the arbiter decides who contributes.
  partial,
};

// A call that runs after its caller returned (queued or recorded in a group):
// the caller's counts and displacements may be gone by then, so it owns copies.
// Only these modes copy; a blocking call runs on the caller's spans.
class DeferredCollective {
 public:
  DeferredCollective() = default;
  explicit DeferredCollective(const CollectiveArgs& args)
      : args_(args), counts_(args.counts.begin(), args.counts.end()), displs_(args.displs.begin(), args.displs.end()) {}

  // The record, its v-counts pointing at the owned copies.
  CollectiveArgs args() const noexcept {
    CollectiveArgs a = args_;
    a.counts = counts_;
    a.displs = displs_;
    return a;
  }
  Kind kind() const noexcept { return args_.kind; }

 private:
  CollectiveArgs args_;
  std::vector<std::size_t> counts_, displs_;
};

}  // namespace antdt::coll
