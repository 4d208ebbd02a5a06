// Topology-aware AllReduce: shared memory inside a node, the network between.
//
// The ranks of each node (CommImpl::node_of: ANTDT_NODE_ID, else host name and
// boot id) form a local ring of L ranks; the vector is cut into L slices
// (sizes differing by at most one element), one per local position p.
//   1. intra-node reduce-scatter: local position p ends with slice p reduced
//      over its node;
//   2. inter-node ring: the ranks at position p on every node AllReduce slice p
//      (allreduce_ring over those members), so slice p is reduced over all ranks;
//   3. intra-node allgather: every rank copies the other slices from its node.
// Each byte then crosses the network once per slice ring, 2(N-1)/N * bytes/L
// per rank for N nodes, instead of the flat ring's 2(n-1)/n * bytes over its
// node-crossing links; inside the node, messages travel through UCX's
// shared-memory transports (posix, sysv, cma) between processes of one node.
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
#include <vector>

namespace antdt::coll {
namespace {

// count elements in `parts` slices whose sizes differ by at most one.
struct Slices {
  std::size_t parts, count;
  std::size_t begin(std::size_t s) const { return count / parts * s + std::min(s, count % parts); }
  std::size_t elems(std::size_t s) const { return count / parts + (s < count % parts ? 1 : 0); }
};

}  // namespace

void allreduce_hierarchical(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                            ReduceOp op, std::span<const int> members) {
  const Hierarchy h = hierarchy_of(call.comm(), members);
  if (!h.uniform) return allreduce_ring(call, send, recv, count, dtype, op, members);
  agree_on_the_call(call, members);
  CallMemory& memory = call.memory();
  const std::vector<int>& local = h.local();
  const std::vector<int> cross = h.cross();
  const std::size_t ranks = members.empty() ? static_cast<std::size_t>(call.size()) : members.size();
  const std::size_t L = local.size();
  const std::size_t p = h.position;
  const std::size_t esize = dtype_size(dtype);
  const Slices slices{L, count};
  // avg: sums all the way, the owner of a slice divides it once by the ranks.
  const ReduceOp inner = op == ReduceOp::avg ? ReduceOp::sum : op;
  auto slice = [&](std::byte* base, std::size_t s) {
    return std::span(base + slices.begin(s) * esize, slices.elems(s) * esize);
  };
  auto const_slice = [&](const std::byte* base, std::size_t s) {
    return std::span(base + slices.begin(s) * esize, slices.elems(s) * esize);
  };
  const int right = local[(p + 1) % L];
  const int left = local[(p + L - 1) % L];

  // 1. Intra-node reduce-scatter: at step s send slice p-s-1 (the input at
  //    step 0, then what step s-1 reduced) and reduce slice p-s-2 into recv;
  //    the last step reduces slice p.
  if (L == 1) {
    if (send != recv) memory.copy(recv, send, count * esize);
  } else {
    auto tmp = memory.scratch(call, std::max<std::size_t>(1, slices.elems(0)) * esize);
    std::size_t index = 0;
    for (std::size_t s = 0; s + 1 < L; ++s) {
      const std::size_t out = (p + 2 * L - s - 1) % L, in = (p + 2 * L - s - 2) % L;
      const auto into = tmp.subspan(0, slices.elems(in) * esize);
      const std::size_t r = call.recv(index++, left, into);
      const std::size_t w = call.send(index++, right, s == 0 ? const_slice(send, out) : const_slice(recv, out));
      call.wait(r);
      memory.reduce_into(dtype, inner, slice(recv, in), const_slice(send, in), into);
      memory.settle();
      call.wait(w);
    }
  }

  // 2. Inter-node ring over slice p among the ranks at position p of every node.
  auto mine = slice(recv, p);
  if (cross.size() > 1) {
    call.set_index_base(call.next_free_index());
    allreduce_ring(call, mine.data(), mine.data(), slices.elems(p), dtype, inner, cross);
  }
  if (op == ReduceOp::avg) {
    memory.finish_avg(dtype, mine, ranks);
    memory.settle();
  }

  // 3. Intra-node allgather: at step s send slice p-s, receive slice p-s-1.
  if (L > 1) {
    call.set_index_base(call.next_free_index());
    std::size_t index = 0;
    for (std::size_t s = 0; s + 1 < L; ++s) {
      const std::size_t out = (p + L - s) % L, in = (p + 2 * L - s - 1) % L;
      const std::size_t r = call.recv(index++, left, slice(recv, in));
      call.send(index++, right, const_slice(recv, out));
      call.wait(r);
    }
  }
  call.wait_all();
}

}  // namespace antdt::coll
