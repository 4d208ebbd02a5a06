// Topology-aware AllReduce: shared memory inside a node, the network between,
// pipelined so that the node's own work hides under the network's.
//
// The ranks of each node (CommImpl::node_of: ANTDT_NODE_ID, else host name and
// boot id) form a local ring of L ranks; the ranks at one local position on
// every node form that position's inter-node ring of N ranks. The vector is cut
// into blocks; each block into L slices (one per local position p), and slice p
// into N segments (one per node). Every block goes through S = 2(L-1) + 2(N-1)
// ring steps, each a send to the right neighbour and a receive from the left:
//   A. L-1 intra-node reduce-scatter steps: position p ends with slice p of
//      the block reduced over its node;
//   B. 2(N-1) inter-node ring steps over slice p (reduce-scatter, then
//      allgather) among the ranks at position p, so slice p is reduced over
//      all ranks;
//   C. L-1 intra-node allgather steps: every rank copies the other slices.
// Each byte crosses the network once per slice ring, 2(N-1)/N * bytes/L per
// rank, instead of the flat ring's 2(n-1)/n * bytes over its node-crossing
// links.
//
// The three stages run pipelined over blocks (collectives/block_pipeline.hpp):
// run one after the other, they leave the network idle while the node reduces
// and copies (A and C of a 64 MiB vector took 27-242 ms in all here, beside
// 500-590 ms of network stage over 1 Gbit/s links); with blocks in flight, the
// node's steps of one block run under another block's network steps.
//
// A block is sized so that each inter-node message is one ANTDT_CHUNK_BYTES
// chunk, the flat ring's message unit. One rank per node (L = 1) or one node
// (N = 1) is a plain ring over the ranks that exchange anything.
//
// First a round of empty messages between rank-order neighbours
// (agree_on_the_call, hierarchy.hpp) makes ranks that disagree on the call
// fail with MismatchError before any of them waits on the hierarchy.
// Every message goes through the Call (headers, signature, deadlines, abort),
// like the flat ring's, so mismatched calls and timeouts are caught the same
// way. Nodes holding different numbers of ranks run the flat ring instead
// (every rank knows the same node map, so all of them do). A partial step runs
// it over its contributors (`members`): the hierarchy is theirs
// (collectives/hierarchy.hpp), and avg divides by their number.
#include "collectives/algorithms.hpp"
#include "collectives/block_pipeline.hpp"
#include "collectives/hierarchy.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <functional>
#include <vector>

namespace antdt::coll {
namespace {

// count elements in `parts` pieces whose sizes differ by at most one.
struct Split {
  std::size_t parts, count;
  std::size_t begin(std::size_t s) const { return count / parts * s + std::min(s, count % parts); }
  std::size_t elems(std::size_t s) const { return count / parts + (s < count % parts ? 1 : 0); }
};

// Step `step` of block `block` for the rank at local position p of L on node
// q of N.
class AllreduceSteps {
 public:
  AllreduceSteps(const std::byte* send, std::byte* recv, std::size_t esize, const Hierarchy& h, const Blocks& blocks)
      : send_(send), recv_(recv), esize_(esize), L_(h.local().size()), N_(h.nodes.size()), p_(h.position),
        q_(h.node), blocks_(blocks) {
    const std::vector<int>& local = h.local();
    const std::vector<int> cross = h.cross();
    local_right_ = local[(p_ + 1) % L_];
    local_left_ = local[(p_ + L_ - 1) % L_];
    cross_right_ = cross[(q_ + 1) % N_];
    cross_left_ = cross[(q_ + N_ - 1) % N_];
  }
  std::size_t steps() const { return 2 * (L_ - 1) + 2 * (N_ - 1); }
  // What a reducing step receives at most: the largest slice of the largest block.
  std::size_t slot_bytes() const { return Split{L_, blocks_.elems(0)}.elems(0) * esize_; }

  void operator()(std::size_t block, std::size_t step, std::span<std::byte> /*work*/, PipelineStep& m) const {
    const std::size_t first = blocks_.begin(block);
    const Split slices{L_, blocks_.elems(block)};
    auto slice = [&](std::byte* base, std::size_t s) { return at(base, first + slices.begin(s), slices.elems(s)); };
    auto input = [&](std::size_t s) { return at(send_, first + slices.begin(s), slices.elems(s)); };
    if (step < L_ - 1) {
      // A: send slice p-s-1 (the input at s = 0, then what step s-1 reduced),
      // receive slice p-s-2 and reduce it with this rank's input.
      const std::size_t s = step, out = (p_ + 2 * L_ - s - 1) % L_, in = (p_ + 2 * L_ - s - 2) % L_;
      m.right = local_right_;
      m.left = local_left_;
      m.reduces = true;
      m.pieces.push_back({s == 0 ? input(out) : slice(recv_, out), slice(recv_, in), input(in)});
      return;
    }
    const std::size_t cross_steps = 2 * (N_ - 1);
    if (step < L_ - 1 + cross_steps) {
      // B: the ring over slice p, cut in N segments: at step j send segment
      // q-j, receive segment q-j-1; reduce for j < N-1 (the last of them
      // leaves segment q+1 final: its owner divides avg), copy after.
      const std::size_t j = step - (L_ - 1);
      const Split segments{N_, slices.elems(p_)};
      const std::size_t base = first + slices.begin(p_);
      const std::size_t out = (q_ + 2 * N_ - j) % N_, in = (q_ + 2 * N_ - j - 1) % N_;
      auto segment = [&](std::size_t g) { return at(recv_, base + segments.begin(g), segments.elems(g)); };
      m.right = cross_right_;
      m.left = cross_left_;
      m.reduces = j + 1 < N_;
      m.owns_result = j + 2 == N_;
      m.pieces.push_back({segment(out), segment(in), segment(in)});
      return;
    }
    // C: send slice p-s, receive slice p-s-1.
    const std::size_t s = step - (L_ - 1) - cross_steps;
    const std::size_t out = (p_ + L_ - s) % L_, in = (p_ + 2 * L_ - s - 1) % L_;
    m.right = local_right_;
    m.left = local_left_;
    m.pieces.push_back({slice(recv_, out), slice(recv_, in), {}});
  }

 private:
  std::span<std::byte> at(std::byte* buffer, std::size_t elem, std::size_t elems) const {
    return std::span(buffer + elem * esize_, elems * esize_);
  }
  std::span<const std::byte> at(const std::byte* buffer, std::size_t elem, std::size_t elems) const {
    return std::span(buffer + elem * esize_, elems * esize_);
  }

  const std::byte* send_;
  std::byte* recv_;
  std::size_t esize_, L_, N_, p_, q_;
  Blocks blocks_;
  int local_right_ = 0, local_left_ = 0, cross_right_ = 0, cross_left_ = 0;
};

}  // namespace

void allreduce_hierarchical(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                            ReduceOp op, std::span<const int> members) {
  const Hierarchy h = hierarchy_of(call.comm(), members);
  if (!h.uniform) return allreduce_ring(call, send, recv, count, dtype, op, members);
  agree_on_the_call(call, members);
  call.set_index_base(call.next_free_index());
  // One rank per node, or one node: only one ring exchanges anything.
  if (h.local().size() == 1) return allreduce_ring(call, send, recv, count, dtype, op, h.cross());
  if (h.nodes.size() == 1) return allreduce_ring(call, send, recv, count, dtype, op, h.local());
  const std::size_t esize = dtype_size(dtype);
  const std::size_t L = h.local().size(), N = h.nodes.size();
  // Each inter-node message one ANTDT_CHUNK_BYTES chunk, the flat ring's unit.
  const Blocks blocks{count, std::max<std::size_t>(1, call.config().chunk_bytes / esize) * L * N};
  const AllreduceSteps steps(send, recv, esize, h, blocks);
  const BlockPipeline pipeline{.blocks = blocks.count(),
                               .steps = steps.steps(),
                               .network_steps = 2 * (N - 1),
                               .max_pieces = 1,
                               .slot_bytes = steps.slot_bytes(),
                               .step = std::cref(steps)};
  // avg: sums all the way; the owner of each final segment divides it once.
  const std::size_t ranks = members.empty() ? static_cast<std::size_t>(call.size()) : members.size();
  run_block_pipeline(call, pipeline, dtype, op == ReduceOp::avg ? ReduceOp::sum : op,
                     op == ReduceOp::avg ? ranks : 0);
}

}  // namespace antdt::coll
