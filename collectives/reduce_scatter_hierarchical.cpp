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
// node-crossing links carry them unreduced. avg sums all the way and divides
// once by the number of ranks. Reduction order differs from the flat ring's,
// so sums and products of floating-point values may differ in the last bits
// (exact operations -- integers, min, max -- are bit-identical).
//
// Both stages run pipelined (collectives/block_pipeline.hpp): every rank's
// block is cut into chunks of ANTDT_CHUNK_BYTES, and pipeline block b is chunk
// b of every block; it walks the L-1 intra-node steps, then the N-1
// inter-node ones, so the node reduces one chunk while another crosses the
// network. A block's partial sums live in its work area: two units of N
// chunks (a step reduces into one while the next sends the other), the last
// intra-node step leaving the position's share there for the network steps to
// reduce in place. Chunks are read where they lie in the input (nothing is
// packed).
//
// First a round of empty messages between rank-order neighbours
// (agree_on_the_call, hierarchy.hpp) makes ranks that disagree on the call
// fail with MismatchError before any of them waits on the hierarchy.
// Every message goes through the Call, so mismatched calls, timeouts and
// aborts are handled as in the flat ring; every piece has at least one
// (possibly empty) message. Nodes of unequal size run the flat ring.
#include "collectives/algorithms.hpp"
#include "collectives/block_pipeline.hpp"
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
  call.set_index_base(call.next_free_index());
  CallMemory& memory = call.memory();
  const std::size_t N = h.nodes.size(), L = h.per_node(), p = h.position, q = h.node;
  const std::size_t esize = dtype_size(dtype);
  const std::size_t block = count * esize;
  const Blocks chunks{count, std::max<std::size_t>(1, call.config().chunk_bytes / esize)};
  const std::size_t chunk_bytes = chunks.elems(0) * esize;
  // Chunk b of rank r's input block.
  auto input = [&](int rank, std::size_t b) {
    return std::span(send + static_cast<std::size_t>(rank) * block + chunks.begin(b) * esize, chunks.elems(b) * esize);
  };
  auto output = [&](std::size_t b) { return std::span(recv + chunks.begin(b) * esize, chunks.elems(b) * esize); };
  // Piece j (node j) of unit `half` (0 or 1) of a block's work area.
  auto partial = [&](std::span<std::byte> work, std::size_t half, std::size_t j, std::size_t b) {
    return work.subspan((half * N + j) * chunk_bytes, chunks.elems(b) * esize);
  };
  const std::size_t share = L > 1 ? (L - 2) % 2 : 0;  // the half the last intra-node step fills
  const std::vector<int> cross = h.cross();
  const std::vector<int>& local = h.local();
  auto steps = [&](std::size_t b, std::size_t step, std::span<std::byte> work, PipelineStep& m) {
    m.reduces = true;
    if (step + 1 < L) {
      // Intra-node: unit u = the chunks of the ranks at position u, one per
      // node. Send unit p-s-1 (the input at s = 0, then what step s-1
      // reduced, in half (s-1) % 2), receive unit p-s-2 and reduce it with
      // this rank's input into half s % 2 (into recv on one node).
      const std::size_t s = step, out = (p + 2 * L - s - 1) % L, in = (p + 2 * L - s - 2) % L;
      m.right = local[(p + 1) % L];
      m.left = local[(p + L - 1) % L];
      for (std::size_t j = 0; j < N; ++j) {
        const std::span<const std::byte> sent = s == 0 ? input(h.at(j, out), b) : partial(work, (s + 1) % 2, j, b);
        const std::span<std::byte> into = N == 1 && s + 2 == L ? output(b) : partial(work, s % 2, j, b);
        m.pieces.push_back({sent, into, input(h.at(j, in), b)});
      }
      return;
    }
    // Inter-node over this position's ring: unit j = node j's chunk of the
    // share. Send unit q-t-1 (at t = 0 the share, or the input with one rank
    // per node), receive unit q-t-2 and reduce it in place; the last step
    // reduces unit q, this rank's own, into recv.
    const std::size_t t = step - (L - 1), out = (q + 2 * N - t - 1) % N, in = (q + 2 * N - t - 2) % N;
    auto unit = [&](std::size_t j) -> std::span<const std::byte> {
      return L > 1 ? partial(work, share, j, b) : input(cross[j], b);
    };
    m.right = cross[(q + 1) % N];
    m.left = cross[(q + N - 1) % N];
    const std::span<const std::byte> sent = t == 0 ? unit(out) : partial(work, share, out, b);
    const std::span<std::byte> into = t + 2 == N ? output(b) : partial(work, share, in, b);
    m.pieces.push_back({sent, into, unit(in)});
  };
  if (N == 1 && L == 1) {  // one rank
    memory.copy(recv, send, block);
    memory.settle();
  } else {
    const BlockPipeline pipeline{.blocks = chunks.count(),
                                 .steps = (L - 1) + (N - 1),
                                 .network_steps = N - 1,
                                 .max_pieces = L > 1 ? N : 1,
                                 .slot_bytes = N * chunk_bytes,
                                 .work_bytes = 2 * N * chunk_bytes,
                                 .step = steps};
    run_block_pipeline(call, pipeline, dtype, op == ReduceOp::avg ? ReduceOp::sum : op, 0);
  }
  if (op == ReduceOp::avg) {
    memory.finish_avg(dtype, std::span(recv, block), static_cast<std::size_t>(call.size()));
    memory.settle();
  }
}

}  // namespace antdt::coll
