// Topology-aware Broadcast: one chain per slice across the nodes, the node's
// ranks share the slices after.
//
// N nodes of L ranks each (collectives/hierarchy.hpp); the root is on node
// k0. The payload is cut into L slices (sizes differing by at most one
// element), one per local position q.
//   1. slice q travels down a pipelined chain: the root, then the rank at
//      position q of node k0, k0+1, ... (the root heads every chain and is
//      the first node's member of its own position's). So the root's
//      node scatters the payload, and each position carries its slice across
//      the nodes: the network moves the payload once per node, split over L
//      parallel chains, where the flat chain moves it whole through one rank
//      at a time;
//   2. intra-node allgather of the slices over each node's local ring.
// Pure data movement: the result is bit-identical to the flat algorithms'.
//
// First a round of empty messages between rank-order neighbours
// (agree_on_the_call, hierarchy.hpp) makes ranks that disagree on the call
// fail with MismatchError before any of them waits on the hierarchy.
// Every message goes through the Call, so mismatched calls, timeouts and
// aborts are handled as in the flat chain; every slice has at least one
// (possibly empty) message. Nodes of unequal size run the flat chain.
#include "collectives/algorithms.hpp"
#include "collectives/hierarchy.hpp"

#include <algorithm>
#include <vector>

namespace antdt::coll {

void broadcast_hierarchical(Call& call, const std::byte* send, std::byte* recv, std::size_t bytes, int root,
                            std::size_t esize) {
  const Hierarchy h = hierarchy_of(call.comm());
  if (!h.uniform) return broadcast_chain(call, send, recv, bytes, root);
  agree_on_the_call(call);
  const std::size_t N = h.nodes.size(), L = h.per_node();
  const std::size_t count = bytes / esize;
  auto slice = [&](std::size_t q) {
    const std::size_t begin = count / L * q + std::min(q, count % L);
    const std::size_t elems = count / L + (q < count % L ? 1 : 0);
    return std::span(recv + begin * esize, elems * esize);
  };
  // The root's node: the chains start there.
  std::size_t k0 = 0;
  for (std::size_t j = 0; j < N; ++j)
    if (std::find(h.nodes[j].begin(), h.nodes[j].end(), root) != h.nodes[j].end()) k0 = j;
  const bool is_root = call.rank() == root;
  if (is_root && send != recv) {
    call.memory().copy(recv, send, bytes);
    call.memory().settle();
  }
  // 1. The chains; the root heads all of them, any other rank is in one (its position's).
  std::vector<int> chain;
  chain.reserve(N + 1);
  for (std::size_t q = 0; q < L; ++q) {
    if (!is_root && q != h.position) continue;
    chain.assign(1, root);
    for (std::size_t i = 0; i < N; ++i) {
      const int member = h.at((k0 + i) % N, q);
      if (member != root) chain.push_back(member);
    }
    call.set_index_base(call.next_free_index());
    chain_broadcast(call, chain, slice(q));
  }
  // The root's sends read recv, which the allgather rewrites (with the same bytes).
  if (is_root) call.wait_all();
  // 2. Intra-node allgather of the slices.
  if (L > 1) {
    call.set_index_base(call.next_free_index());
    std::vector<std::vector<std::span<std::byte>>> units(L);
    for (std::size_t q = 0; q < L; ++q) units[q].push_back(slice(q));
    ring_allgather_units(call, h.local(), units);
  }
}

}  // namespace antdt::coll
