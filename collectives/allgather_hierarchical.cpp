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
// Both stages run pipelined (collectives/block_pipeline.hpp): every rank's
// block is cut into chunks of ANTDT_CHUNK_BYTES, and pipeline block b is chunk
// b of every rank's block; it walks the N-1 inter-node steps, then the L-1
// intra-node ones, so the node copies one chunk while the next crosses the
// network. AllGatherV's short blocks just run out of chunks (empty messages).
//
// First a round of empty messages between rank-order neighbours
// (agree_on_the_call, hierarchy.hpp) makes ranks that disagree on the call
// fail with MismatchError before any of them waits on the hierarchy.
// Every message goes through the Call, so mismatched calls, timeouts and
// aborts are handled as in the flat ring; every block has at least one
// (possibly empty) message. Nodes of unequal size run the flat ring.
#include "collectives/algorithms.hpp"
#include "collectives/block_pipeline.hpp"
#include "collectives/hierarchy.hpp"

#include <algorithm>
#include <vector>

namespace antdt::coll {

void allgather_hierarchical(Call& call, const std::byte* send, std::byte* recv, std::span<const std::size_t> counts,
                            std::span<const std::size_t> displs, std::size_t esize) {
  const Hierarchy h = hierarchy_of(call.comm());
  if (!h.uniform) return allgather_ring(call, send, recv, counts, displs, esize);
  agree_on_the_call(call);
  call.set_index_base(call.next_free_index());
  const std::size_t N = h.nodes.size(), L = h.per_node(), p = h.position, q = h.node;
  const auto me = static_cast<std::size_t>(call.rank());
  std::byte* own = recv + displs[me] * esize;
  if (send != own) {
    call.memory().copy(own, send, counts[me] * esize);
    call.memory().settle();  // the own block is sent from recv
  }
  const std::size_t chunk_elems = std::max<std::size_t>(1, call.config().chunk_bytes / esize);
  const std::size_t longest = *std::max_element(counts.begin(), counts.end());
  const std::size_t blocks = Blocks{longest, chunk_elems}.count();
  // Chunk b of rank r's block.
  auto chunk = [&](int rank, std::size_t b) {
    const auto r = static_cast<std::size_t>(rank);
    const Blocks of_rank{counts[r], chunk_elems};
    return std::span(recv + (displs[r] + of_rank.begin(b)) * esize, of_rank.elems(b) * esize);
  };
  const std::vector<int> cross = h.cross();
  const std::vector<int>& local = h.local();
  auto steps = [&](std::size_t b, std::size_t step, std::span<std::byte>, PipelineStep& m) {
    if (step + 1 < N) {
      // Inter-node: unit j = the block of node j's rank at this position;
      // send unit q-t, receive unit q-t-1.
      const std::size_t t = step, out = (q + N - t) % N, in = (q + 2 * N - t - 1) % N;
      m.right = cross[(q + 1) % N];
      m.left = cross[(q + N - 1) % N];
      m.pieces.push_back({chunk(cross[out], b), chunk(cross[in], b), {}});
      return;
    }
    // Intra-node: unit u = the blocks of the ranks at position u, one per
    // node; send unit p-s, receive unit p-s-1.
    const std::size_t s = step - (N - 1), out = (p + L - s) % L, in = (p + 2 * L - s - 1) % L;
    m.right = local[(p + 1) % L];
    m.left = local[(p + L - 1) % L];
    for (std::size_t j = 0; j < N; ++j) m.pieces.push_back({chunk(h.at(j, out), b), chunk(h.at(j, in), b), {}});
  };
  const BlockPipeline pipeline{
      .blocks = blocks, .steps = (N - 1) + (L - 1), .network_steps = N - 1, .max_pieces = L > 1 ? N : 1, .step = steps};
  run_block_pipeline(call, pipeline, DataType::u8, ReduceOp::sum, 0);
}

}  // namespace antdt::coll
