// The one entry of every collective call (point-to-point has its own small
// one, collectives/transfer.hpp): coll::execute checks the argument record,
// then runs it in its mode; run_now and run_algorithm are the steps it shares
// with the deferred calls (the request queue, group_end) and the device paths.
// Uses collectives/collective_args.hpp, call.hpp and the communicator; below
// it, checks.hpp, selection.hpp, issued_calls.hpp, the algorithms, the device
// paths and the partial protocol.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/call.hpp"
#include "collectives/collective_args.hpp"
#include "collectives/communicator.hpp"

#include <cstddef>
#include <memory>
#include <span>

namespace antdt::detail {
class RequestState;  // collectives/request.hpp
}

namespace antdt::coll {

using RequestPtr = std::shared_ptr<detail::RequestState>;

// What a call hands back: the request of a non-blocking call (null in the
// other modes), the outcome of a partial one.
struct CallOutcome {
  RequestPtr request;
  PartialResult partial;
};

// Checks `args` (InvalidArgument before anything is sent), then:
// * Mode::blocking: inside a group, records it (with owned copies of the
//   v-counts) for group_end(), which fuses the group's host allreduces; else
//   runs the non-blocking calls issued before it, then run_now().
// * Mode::nonblocking: queues it (owned copies of the v-counts) and returns
//   its request; refused inside a group.
// * Mode::partial: a partial AllReduce (args.partial its options), device
//   buffers staged whole around the host protocol (docs/partial.md).
CallOutcome execute(detail::CommImpl& comm, const CollectiveArgs& args, Mode mode);

// Runs a checked call now, on this thread, bypassing groups and the queue:
// the device path when a buffer is device memory (the entry points of
// collectives/device/device_collectives.hpp), else after the caller's stream
// (host buffers it may still be writing), in an NVTX range, run_algorithm().
void run_now(detail::CommImpl& comm, const CollectiveArgs& args);

// The algorithm alone: the selection table's choice (collectives/selection.hpp),
// the Call, the algorithm. On host bytes when `device` is null; else on device
// buffers handed to the transport as they are, copied and reduced by `device`
// (the direct GPU path; not for allreduce, whose direct path is its own ring).
void run_algorithm(detail::CommImpl& comm, const CollectiveArgs& args, CallMemory* device = nullptr);

// run_algorithm on a record of the given arguments, for the device paths
// (collectives/device/): their staged calls run the host algorithm on host
// views (`device` null), their direct path on the device buffers themselves,
// copied and reduced by `device`. AllReduce's direct path is its own ring.
void run_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                   ReduceOp op);
void plain_broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                     int root, CallMemory* device = nullptr);
void plain_reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                  int root, CallMemory* device = nullptr);
void plain_reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count,
                          DataType dtype, ReduceOp op, CallMemory* device = nullptr);
void plain_allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                      std::span<const std::size_t> displs, DataType dtype, CallMemory* device = nullptr);
void plain_alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                    CallMemory* device = nullptr);

}  // namespace antdt::coll
