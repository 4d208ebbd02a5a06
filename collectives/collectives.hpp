// Collective entry points on a communicator: argument checks, algorithm
// selection, and the Call that bounds and checks every message.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/call.hpp"
#include "collectives/communicator.hpp"

#include <memory>
#include <span>

namespace antdt::detail {
class RequestState;  // collectives/suite.hpp
}

namespace antdt::coll {

void allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op);
void broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, int root);
void barrier(detail::CommImpl& comm);

// Partial collectives (collectives/partial/partial_allreduce.cpp, docs/partial.md).
PartialResult partial_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count,
                                DataType dtype, ReduceOp op, const PartialOptions& opts);
PartialResult partial_finish(detail::CommImpl& comm);
StragglerClass straggler_class(detail::CommImpl& comm, int rank);

// Below this many bytes broadcast uses the binomial tree, above it the pipelined chain.
inline constexpr std::size_t kBroadcastTreeMaxBytes = 64 * 1024;

// ---- The rest of the collective suite (docs/collectives.md) ----
// Every blocking entry point first runs the non-blocking collectives issued
// before it, and inside a group (group_start .. group_end) only records itself.

// send holds size() blocks of recv_count elements; recv gets block rank()
// reduced. In place when recv == send + rank() * recv_count elements.
void reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count, DataType dtype,
                    ReduceOp op);
// recv gets size() blocks of send_count elements, in rank order. In place when
// send == recv + rank() * send_count elements.
void allgather(detail::CommImpl& comm, const void* send, void* recv, std::size_t send_count, DataType dtype);
// Rank b contributes counts[b] elements, placed at element displs[b] of recv
// (displs empty: packed in rank order). In place when send == recv + displs[rank()].
void allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                std::span<const std::size_t> displs, DataType dtype);
// recv (significant at root only) gets the reduction. In place at root when send == recv.
void reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
            int root);
// Block j (count elements) of send goes to rank j's block rank(). In place when send == recv.
void alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype);
// Point-to-point, matched in order per pair of ranks.
void send(detail::CommImpl& comm, const void* buf, std::size_t count, DataType dtype, int peer);
void recv(detail::CommImpl& comm, void* buf, std::size_t count, DataType dtype, int peer);
void group_start(detail::CommImpl& comm);
void group_end(detail::CommImpl& comm);

// Non-blocking variants: arguments are checked here; see collectives/suite.hpp
// for when the operation runs.
using RequestPtr = std::shared_ptr<detail::RequestState>;
RequestPtr iallreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                      ReduceOp op);
RequestPtr ibroadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                      int root);
RequestPtr ibarrier(detail::CommImpl& comm);
RequestPtr ireduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count,
                           DataType dtype, ReduceOp op);
RequestPtr iallgather(detail::CommImpl& comm, const void* send, void* recv, std::size_t send_count, DataType dtype);
RequestPtr iallgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                       std::span<const std::size_t> displs, DataType dtype);
RequestPtr ireduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                   ReduceOp op, int root);
RequestPtr ialltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype);
RequestPtr isend(detail::CommImpl& comm, const void* buf, std::size_t count, DataType dtype, int peer);
RequestPtr irecv(detail::CommImpl& comm, void* buf, std::size_t count, DataType dtype, int peer);

// AllReduce algorithm choice: ANTDT_ALGO when forced, else recursive doubling
// up to recursive_doubling_max_bytes(nranks) and the ring above. A function of
// values every rank shares, so every rank chooses the same.
Algo allreduce_algorithm(std::size_t count, DataType dtype, int nranks, AllreduceAlgo forced);
// Whether an AllReduce of `bytes` bytes runs through the node-local
// shared-memory mailbox: more than one rank, at most ANTDT_SHM_MAX_BYTES,
// ANTDT_ALGO auto or shm, and the mailbox not known to be unavailable. Every
// rank gets the same answer (the mailbox's availability is agreed at set-up).
bool use_shm_allreduce(const detail::CommImpl& comm, std::size_t bytes);
// Above ANTDT_SHM_MAX_BYTES: the bulk area (ANTDT_SHM_BULK_BYTES not 0), same conditions.
bool use_shm_bulk_allreduce(const detail::CommImpl& comm, std::size_t bytes);
// Whether push and pull move data through the push-pull shared-memory area
// (collectives/pushpull/pushpull_shm.cpp): same conditions as the bulk area, any size.
bool use_shm_pushpull(const detail::CommImpl& comm);
// The α-β-γ model's crossover (docs/collectives.md#allreduce-selection).
std::size_t recursive_doubling_max_bytes(int nranks);

// Below this many bytes reduce uses the binomial tree, above it the pipelined chain.
inline constexpr std::size_t kReduceTreeMaxBytes = 64 * 1024;

}  // namespace antdt::coll
