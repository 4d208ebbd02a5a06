// Topology-aware ReduceScatter: the node's ranks first, the network after.
//
// N nodes of L ranks each (collectives/hierarchy.hpp); rank (j, q) is the q-th
// rank of node j, and every rank's input holds one block of `count` elements
// per rank. Position q's *share* is the N blocks that the ranks at position q
// (one per node) end with.
//   1. intra-node reduce-scatter over the node's local ring: position q ends
//      with its share reduced over the node (N blocks, in scratch, node order);
//   2. inter-node reduce-scatter over position q's ring (rank q of every node,
//      in node order): rank (j, q) ends with block (j, q) reduced over the
//      nodes, i.e. over every rank, straight into recv.
// The network carries (N-1) blocks per rank, each already reduced over a
// node, where the flat ring sends (n-1) blocks per rank and its
// node-crossing links carry them unreduced. Both steps are the chunked,
// pipelined ring of hierarchy.hpp; the blocks of a share are read where they
// lie in the input (nothing is packed). avg sums all the way and divides once
// by the number of ranks. Reduction order differs from the flat ring's, so
// sums and products of floating-point values may differ in the last bits
// (exact operations -- integers, min, max -- are bit-identical).
//
// First a round of empty messages between rank-order neighbours
// (agree_on_the_call, hierarchy.hpp) makes ranks that disagree on the call
// fail with MismatchError before any of them waits on the hierarchy.
// Every message goes through the Call, so mismatched calls, timeouts and
// aborts are handled as in the flat ring; every piece has at least one
// (possibly empty) message. Nodes of unequal size run the flat ring.
#include "collectives/algorithms.hpp"
#include "collectives/hierarchy.hpp"

#include "core/dtype.hpp"

#include <algorithm>
#include <vector>

namespace antdt::coll {

void reduce_scatter_hierarchical(Call& call, const std::byte* send, std::byte* recv, std::size_t count,
                                 DataType dtype, ReduceOp op) {
  const Hierarchy h = hierarchy_of(call.comm());
  if (!h.uniform) return reduce_scatter_ring(call, send, recv, count, dtype, op);
  agree_on_the_call(call);
  CallMemory& memory = call.memory();
  const std::size_t N = h.nodes.size(), L = h.per_node();
  const std::size_t esize = dtype_size(dtype);
  const std::size_t block = count * esize;
  const ReduceOp inner = op == ReduceOp::avg ? ReduceOp::sum : op;
  auto block_of = [&](int rank) { return send + static_cast<std::size_t>(rank) * block; };
  const std::vector<int> cross = h.cross();

  // Scratch: this position's share (N blocks) and the ring steps' regions.
  const std::size_t share_bytes = L > 1 && N > 1 ? N * block : 0;
  const std::size_t regions_bytes = std::max(L > 1 ? (L - 1) * N * block : 0, N > 1 ? (N - 1) * block : 0);
  const std::span<std::byte> scratch = memory.scratch(call, std::max<std::size_t>(1, share_bytes + regions_bytes));
  std::byte* share = scratch.data();
  const std::span<std::byte> regions = scratch.subspan(share_bytes);

  // 1. Intra-node: unit q = the blocks of the ranks at position q, one per node.
  if (L > 1) {
    std::vector<std::byte*> out(N);
    for (std::size_t j = 0; j < N; ++j) out[j] = N > 1 ? share + j * block : recv;
    auto in = [&](std::size_t q, std::size_t j) { return block_of(h.at(j, q)); };
    ring_reduce_scatter_units(call, h.local(), N, count, dtype, inner, in, out, regions);
  }
  // 2. Inter-node: unit j = node j's rank's block of this position's share.
  if (N > 1) {
    call.set_index_base(call.next_free_index());
    std::byte* const out[] = {recv};
    auto in = [&](std::size_t j, std::size_t) -> const std::byte* {
      return L > 1 ? share + j * block : block_of(cross[j]);
    };
    ring_reduce_scatter_units(call, cross, 1, count, dtype, inner, in, out, regions);
  }
  if (N == 1 && L == 1 && send != recv) {  // one rank
    memory.copy(recv, send, block);
    memory.settle();
  }
  if (op == ReduceOp::avg) {
    memory.finish_avg(dtype, std::span(recv, block), static_cast<std::size_t>(call.size()));
    memory.settle();
  }
}

}  // namespace antdt::coll
