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
// Why blocks: run one after the other, the three stages leave the network
// idle while the node reduces and copies (A and C of a 64 MiB vector cost
// 40-100 ms here, a sixth of its transfer over a 1 Gbit/s link). Up to
// W = max(2, S-1) blocks are in flight (3 for 2 nodes of 2 ranks), each with
// one step outstanding: enough that a network step is always queued, and
// fewer than S because more bytes in flight only lengthened the queues in
// front of a shaped link (docs/benchmarks.md, "Across namespace nodes"). They
// are served round robin: wait for the oldest block's step, finish it
// (reduce), post that block's next step (or admit the next block), so the
// network has the other blocks' steps queued while one is being reduced, and
// the node's copies of one block run under another's transfer. Every rank walks the
// same (block, step) order, and a rank posts its send of step k of a block at
// the same point of that order as its neighbour posts the matching receive, so
// messages between two ranks match in posting order and no rank waits on a
// step its neighbour has not reached. Within a block, a step is posted only
// once both transfers of the step before it completed, so no receive
// overwrites memory a send still reads.
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
#include "collectives/hierarchy.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <deque>
#include <vector>

namespace antdt::coll {
namespace {

// count elements in `parts` pieces whose sizes differ by at most one.
struct Split {
  std::size_t parts, count;
  std::size_t begin(std::size_t s) const { return count / parts * s + std::min(s, count % parts); }
  std::size_t elems(std::size_t s) const { return count / parts + (s < count % parts ? 1 : 0); }
};

// One rank's view of the pipeline: where each step of each block reads,
// receives and reduces.
class Pipeline {
 public:
  Pipeline(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype, ReduceOp op,
           const Hierarchy& h, std::size_t ranks)
      : call_(call),
        memory_(call.memory()),
        send_(send),
        recv_(recv),
        dtype_(dtype),
        op_(op == ReduceOp::avg ? ReduceOp::sum : op),  // avg: the owner of a segment divides it once
        avg_ranks_(op == ReduceOp::avg ? ranks : 0),
        esize_(dtype_size(dtype)),
        L_(h.local().size()),
        N_(h.nodes.size()),
        p_(h.position),
        q_(h.node),
        steps_(2 * (L_ - 1) + 2 * (N_ - 1)),
        blocks_(count, std::max<std::size_t>(1, call.config().chunk_bytes / esize_) * L_ * N_),
        window_(std::min(blocks_.count(), std::max<std::size_t>(2, steps_ - 1))) {
    const std::vector<int>& local = h.local();
    const std::vector<int> cross = h.cross();
    local_right_ = local[(p_ + 1) % L_];
    local_left_ = local[(p_ + L_ - 1) % L_];
    cross_right_ = cross[(q_ + 1) % N_];
    cross_left_ = cross[(q_ + N_ - 1) % N_];
    // Receive slots (what the A and B reduce-scatter steps reduce from), one
    // per block in flight: the largest slice of the largest block.
    slot_bytes_ = std::max<std::size_t>(1, Split{L_, blocks_.elems(0)}.elems(0)) * esize_;
    slots_ = memory_.scratch(call, window_ * slot_bytes_);
  }

  void run() {
    // Blocks finish in the order they were admitted, so the ones in flight are
    // consecutive and block % window_ names a free slot.
    std::deque<std::pair<std::size_t, std::size_t>> in_flight;  // (block, step)
    std::size_t admitted = 0;
    for (; admitted < window_; ++admitted) {
      post(admitted, 0);
      in_flight.emplace_back(admitted, 0);
    }
    while (!in_flight.empty()) {
      const auto [block, step] = in_flight.front();
      in_flight.pop_front();
      finish(block, step);
      if (step + 1 < steps_) {
        post(block, step + 1);
        in_flight.emplace_back(block, step + 1);
      } else if (admitted < blocks_.count()) {
        post(admitted, 0);
        in_flight.emplace_back(admitted, 0);
        ++admitted;
      }
    }
  }

 private:
  // The blocks of `count` elements, each of at most `block_elems` (the last
  // may be short; a zero count is one empty block, so the message stream does
  // not depend on the count).
  struct Blocks {
    std::size_t total, block_elems;
    std::size_t count() const { return std::max<std::size_t>(1, (total + block_elems - 1) / block_elems); }
    std::size_t begin(std::size_t b) const { return std::min(total, b * block_elems); }
    std::size_t elems(std::size_t b) const { return std::min(total, begin(b) + block_elems) - begin(b); }
  };
  enum class Stage { node_reduce, cross_reduce, cross_gather, node_gather };
  // Step `step` of block `block`: what it sends (from `out`), receives (into
  // `in`, or into the block's receive slot when `reduces`) and reduces into.
  struct Move {
    Stage stage;
    int right, left;
    std::span<const std::byte> out;
    std::span<std::byte> in;
    std::span<const std::byte> base;  // reduce: in = base (op) received
    bool reduces;
    bool owns_result;  // after this step, `in` is this rank's fully reduced segment
  };

  std::span<std::byte> at(std::byte* buffer, std::size_t elem, std::size_t elems) const {
    return std::span(buffer + elem * esize_, elems * esize_);
  }
  std::span<const std::byte> at(const std::byte* buffer, std::size_t elem, std::size_t elems) const {
    return std::span(buffer + elem * esize_, elems * esize_);
  }

  Move move(std::size_t block, std::size_t step) const {
    const std::size_t first = blocks_.begin(block);
    const Split slices{L_, blocks_.elems(block)};
    auto slice_in = [&](std::size_t s) { return at(recv_, first + slices.begin(s), slices.elems(s)); };
    if (step < L_ - 1) {
      // A: send slice p-s-1 (the input at s = 0, then what step s-1 reduced),
      // receive slice p-s-2 and reduce it with this rank's input.
      const std::size_t s = step, out = (p_ + 2 * L_ - s - 1) % L_, in = (p_ + 2 * L_ - s - 2) % L_;
      const std::byte* source = s == 0 ? send_ : recv_;
      return {Stage::node_reduce, local_right_, local_left_,
              at(source, first + slices.begin(out), slices.elems(out)), slice_in(in),
              at(send_, first + slices.begin(in), slices.elems(in)), true, false};
    }
    const std::size_t cross_steps = 2 * (N_ - 1);
    if (step < L_ - 1 + cross_steps) {
      // B: the ring over slice p, cut in N segments: at step j send segment
      // q-j, receive segment q-j-1; reduce for j < N-1, copy after.
      const std::size_t j = step - (L_ - 1);
      const Split segments{N_, slices.elems(p_)};
      const std::size_t base = first + slices.begin(p_);
      const std::size_t out = (q_ + 2 * N_ - j) % N_, in = (q_ + 2 * N_ - j - 1) % N_;
      auto segment = [&](std::size_t g) { return at(recv_, base + segments.begin(g), segments.elems(g)); };
      const bool reduces = j + 1 < N_;
      return {reduces ? Stage::cross_reduce : Stage::cross_gather, cross_right_, cross_left_, segment(out),
              segment(in), segment(in), reduces, j + 2 == N_};
    }
    // C: send slice p-s, receive slice p-s-1.
    const std::size_t s = step - (L_ - 1) - cross_steps;
    const std::size_t out = (p_ + L_ - s) % L_, in = (p_ + 2 * L_ - s - 1) % L_;
    return {Stage::node_gather, local_right_, local_left_, slice_in(out), slice_in(in), {}, false, false};
  }

  std::size_t slot_index(std::size_t block) const { return 2 * (block % window_); }
  std::span<std::byte> received(std::size_t block, std::size_t bytes) const {
    return slots_.subspan((block % window_) * slot_bytes_, bytes);
  }

  void post(std::size_t block, std::size_t step) {
    const Move m = move(block, step);
    const std::size_t index = slot_index(block);
    call_.recv(index, m.left, m.reduces ? received(block, m.in.size()) : m.in);
    call_.send(index + 1, m.right, m.out);
  }

  void finish(std::size_t block, std::size_t step) {
    const std::size_t index = slot_index(block);
    call_.wait(index);
    call_.wait(index + 1);
    const Move m = move(block, step);
    if (!m.reduces) return;
    memory_.reduce_into(dtype_, op_, m.in, m.base, received(block, m.in.size()));
    if (m.owns_result && avg_ranks_ > 0) memory_.finish_avg(dtype_, m.in, avg_ranks_);
    memory_.settle();  // the next step sends what was just reduced
  }

  Call& call_;
  CallMemory& memory_;
  const std::byte* send_;
  std::byte* recv_;
  DataType dtype_;
  ReduceOp op_;
  std::size_t avg_ranks_;
  std::size_t esize_, L_, N_, p_, q_, steps_;
  Blocks blocks_;
  std::size_t window_;
  int local_right_ = 0, local_left_ = 0, cross_right_ = 0, cross_left_ = 0;
  std::size_t slot_bytes_ = 0;
  std::span<std::byte> slots_;
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
  const std::size_t ranks = members.empty() ? static_cast<std::size_t>(call.size()) : members.size();
  Pipeline(call, send, recv, count, dtype, op, h, ranks).run();
  call.wait_all();
}

}  // namespace antdt::coll
