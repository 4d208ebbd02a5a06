// Topology-aware AllGather (and AllGatherV): the network first, the node after.
//
// N nodes of L ranks each (collectives/hierarchy.hpp); rank (j, q) is the q-th
// rank of node j.
//   1. inter-node allgather over position q's ring (rank q of every node, in
//      node order): each rank receives the blocks of the ranks at its position
//      on the other nodes;
//   2. intra-node allgather over the node's local ring, a position's unit
//      being the N blocks of the ranks at that position.
// Every block lands straight in its place in recv (nothing is packed). The
// network carries each block once per node instead of once per node-crossing
// link of the flat ring: (N-1) blocks received per rank across nodes, the
// rest inside the node. Pure data movement: the result is bit-identical to the
// flat ring's.
//
// First a round of empty messages between rank-order neighbours
// (agree_on_the_call, hierarchy.hpp) makes ranks that disagree on the call
// fail with MismatchError before any of them waits on the hierarchy.
// Every message goes through the Call, so mismatched calls, timeouts and
// aborts are handled as in the flat ring; every block has at least one
// (possibly empty) message. Nodes of unequal size run the flat ring.
#include "collectives/algorithms.hpp"
#include "collectives/hierarchy.hpp"

#include <vector>

namespace antdt::coll {

void allgather_hierarchical(Call& call, const std::byte* send, std::byte* recv, std::span<const std::size_t> counts,
                            std::span<const std::size_t> displs, std::size_t esize) {
  const Hierarchy h = hierarchy_of(call.comm());
  if (!h.uniform) return allgather_ring(call, send, recv, counts, displs, esize);
  agree_on_the_call(call);
  const std::size_t N = h.nodes.size(), L = h.per_node();
  auto block_of = [&](int rank) {
    const auto r = static_cast<std::size_t>(rank);
    return std::span(recv + displs[r] * esize, counts[r] * esize);
  };
  const auto me = static_cast<std::size_t>(call.rank());
  std::byte* own = recv + displs[me] * esize;
  if (send != own) {
    call.memory().copy(own, send, counts[me] * esize);
    call.memory().settle();  // the own block is sent from recv
  }
  // 1. Inter-node: unit j = the block of node j's rank at this position.
  if (N > 1) {
    const std::vector<int> cross = h.cross();
    std::vector<std::vector<std::span<std::byte>>> units(N);
    for (std::size_t j = 0; j < N; ++j) units[j].push_back(block_of(cross[j]));
    ring_allgather_units(call, cross, units);
  }
  // 2. Intra-node: unit q = the blocks of the ranks at position q, one per node.
  if (L > 1) {
    call.set_index_base(call.next_free_index());
    std::vector<std::vector<std::span<std::byte>>> units(L);
    for (std::size_t q = 0; q < L; ++q)
      for (std::size_t j = 0; j < N; ++j) units[q].push_back(block_of(h.at(j, q)));
    ring_allgather_units(call, h.local(), units);
  }
}

}  // namespace antdt::coll
