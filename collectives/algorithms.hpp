// The algorithms, one file each, written against coll::Call only. The entry
// points in collectives.hpp validate arguments and choose among them.
#pragma once

#include "collectives/call.hpp"

namespace antdt::coll {

// Pipelined ring: reduce-scatter then allgather, each rank's segment split in
// chunks of ANTDT_CHUNK_BYTES; a chunk is forwarded as soon as it is reduced.
// Copies and reductions go through call.memory() (device memory and kernels
// on the direct GPU path), as in every algorithm that may carry device payloads.
// Runs over `members` in that order (every rank of the communicator when empty);
// the calling rank must be one of them.
void allreduce_ring(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                    ReduceOp op, std::span<const int> members = {});

// Topology-aware (allreduce_hierarchical.cpp): the ranks of each node
// reduce-scatter among themselves, the ranks holding the same slice on each
// node AllReduce it with a ring across the nodes, and each node allgathers
// its slices. With the nodes unequal in size it runs the flat ring. Over
// `members` (a partial step's contributors; every rank when empty).
void allreduce_hierarchical(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                            ReduceOp op, std::span<const int> members = {});
// Topology-aware ReduceScatter (reduce_scatter_hierarchical.cpp): each node
// reduce-scatters among its ranks the blocks of the ranks at each local
// position, then the ranks at one position reduce-scatter those blocks across
// the nodes (one ring per position). Same arguments as reduce_scatter_ring.
void reduce_scatter_hierarchical(Call& call, const std::byte* send, std::byte* recv, std::size_t count,
                                 DataType dtype, ReduceOp op);
// Topology-aware AllGather(v) (allgather_hierarchical.cpp): the ranks at one
// local position gather their blocks across the nodes (one ring per
// position), then each node allgathers those among its ranks. Same arguments
// as allgather_ring.
void allgather_hierarchical(Call& call, const std::byte* send, std::byte* recv, std::span<const std::size_t> counts,
                            std::span<const std::size_t> displs, std::size_t esize);
// Topology-aware Broadcast (broadcast_hierarchical.cpp): the root hands slice
// q to its node's rank q, which chains it across the nodes to the rank q of
// every node; then each node allgathers its slices. Same arguments as
// broadcast_chain, plus the element size (slices end on element boundaries).
void broadcast_hierarchical(Call& call, const std::byte* send, std::byte* recv, std::size_t bytes, int root,
                            std::size_t esize);

// Pipelined chain root -> root+1 -> ... (large messages).
void broadcast_chain(Call& call, const std::byte* send, std::byte* recv, std::size_t bytes, int root);
// Binomial tree (small messages: log2(n) latency).
void broadcast_binomial_tree(Call& call, const std::byte* send, std::byte* recv, std::size_t bytes, int root);

// Dissemination barrier: ceil(log2 n) rounds of empty messages.
void barrier_dissemination(Call& call);

// ---- The rest of the collective suite (docs/collectives.md) ----
// Recursive doubling over the largest power of two p <= n ranks; the other
// n - p ranks fold their vector into a partner first and get the result back.
// Every rank ends with bit-identical results (each pair reduces lower ⊕ higher).
void allreduce_recursive_doubling(Call& call, const std::byte* send, std::byte* recv, std::size_t count,
                                  DataType dtype, ReduceOp op);
// Rabenseifner: reduce-scatter by recursive halving, allgather by recursive
// doubling, over the same folded power of two; the ring's bytes in 2·log2(p)
// steps. Every rank ends with bit-identical results (one rank reduces each block).
void allreduce_rabenseifner(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                            ReduceOp op);
// Reduce-scatter by recursive halving and allgather (equal blocks) by
// recursive doubling, for a power-of-two rank count (InternalError otherwise):
// Rabenseifner's halves, log2(n) steps each with the ring's bytes. Same
// arguments as the rings (allgather: `count` elements per rank).
void reduce_scatter_halving(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                            ReduceOp op);
void allgather_doubling(Call& call, const std::byte* send, std::byte* recv, std::size_t count, std::size_t esize);
// Ring reduce-scatter: send holds n blocks of `count` elements; rank r ends
// with the reduction of block r in recv (which may be send's block r: in place).
void reduce_scatter_ring(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                         ReduceOp op);
// Ring allgather of blocks with per-rank element counts, block b at element
// displs[b] of recv. This rank's contribution is send (which may be its own
// block of recv: in place).
void allgather_ring(Call& call, const std::byte* send, std::byte* recv, std::span<const std::size_t> counts,
                    std::span<const std::size_t> displs, std::size_t esize);
// Reduce to `root`: binomial tree (small messages) or pipelined chain (large).
void reduce_binomial_tree(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                          ReduceOp op, int root);
void reduce_chain(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                  ReduceOp op, int root);
// Shared-memory AllReduces among ranks of one node; both need their channel
// set up and usable (shm_ready() in shm_common.hpp).
// Mailbox (allreduce_shm.cpp), count * dtype size at most ANTDT_SHM_MAX_BYTES:
// every rank reduces all contributions in rank order.
void allreduce_shm(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                   ReduceOp op);
// Bulk area (allreduce_shm_bulk.cpp), any size, blocks of ANTDT_SHM_BULK_BYTES:
// rank s reduces slice s of each block, in rank order, and every rank copies
// the others' slices.
void allreduce_shm_bulk(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                        ReduceOp op);
// Pairwise exchange: in step s rank r sends block r+s to rank r+s and receives
// block r-s from rank r-s. send and recv hold n blocks of `bytes` bytes and do not overlap.
void alltoall_pairwise(Call& call, const std::byte* send, std::byte* recv, std::size_t bytes);

}  // namespace antdt::coll
