// Reduce to a root: a binomial tree for small messages, a pipelined chain for
// large ones (the mirror images of broadcast's).
//
// Tree: with v = (rank - root) mod n, rank v receives from its children
// v+1, v+2, v+4, ... (below v's lowest set bit), reduces their vectors into its
// own and sends the sum to v - lowbit(v). ceil(log2 n) rounds of whole vectors:
// ceil(log2 n)(α + m β + m γ).
//
// Chain: root+n-1 -> ... -> root+1 -> root, chunk by chunk; each rank adds its
// input to the chunk it received and forwards it at once, so the time is about
// m β + m γ + (n-2) chunk times.
//
// avg reduces as sum; the root divides once.
#include "collectives/algorithms.hpp"

#include "core/dtype.hpp"

#include <algorithm>
#include <cstring>

namespace antdt::coll {
namespace {

constexpr std::size_t kReceiveWindow = 8;

}  // namespace

void reduce_binomial_tree(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                          ReduceOp op, int root) {
  const int n = call.size();
  const int v = (call.rank() - root + n) % n;
  auto real = [&](int virtual_rank) { return (virtual_rank + root) % n; };
  const std::size_t bytes = count * dtype_size(dtype);
  const std::span<const std::byte> input(send, bytes);

  // Children are v + mask for each mask below v's lowest set bit (all masks for the root).
  int children = 0;
  int mask = 1;
  for (; mask < n && (v & mask) == 0; mask <<= 1)
    if (v + mask < n) ++children;
  const int parent = v == 0 ? -1 : real(v - mask);

  if (children == 0) {  // a leaf sends its input as it is
    call.wait(call.send(0, parent, input));
    return;
  }
  // scratch: [this rank's partial sum (non-root only)] [one region per child]
  CallMemory& memory = call.memory();
  auto scratch = memory.scratch(call, (static_cast<std::size_t>(children) + (v == 0 ? 0 : 1)) * bytes);
  const std::span<std::byte> acc = v == 0 ? std::span(recv, bytes) : scratch.first(bytes);
  auto incoming = [&](int child) {
    return scratch.subspan((static_cast<std::size_t>(child) + (v == 0 ? 0 : 1)) * bytes, bytes);
  };
  int child = 0;
  for (int m = 1; m < n && (v & m) == 0; m <<= 1)
    if (v + m < n) {
      call.recv(static_cast<std::size_t>(child), real(v + m), incoming(child));
      ++child;
    }
  for (child = 0; child < children; ++child) {
    call.wait(static_cast<std::size_t>(child));
    memory.reduce_into(dtype, op, acc, child == 0 ? input : std::span<const std::byte>(acc), incoming(child));
  }
  if (v == 0) {
    if (op == ReduceOp::avg) memory.finish_avg(dtype, acc, static_cast<std::size_t>(n));
    return;
  }
  memory.settle();
  call.wait(call.send(static_cast<std::size_t>(children), parent, acc));
}

void reduce_chain(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                  ReduceOp op, int root) {
  const int n = call.size();
  const int v = (call.rank() - root + n) % n;
  const int toward_root = (call.rank() - 1 + n) % n;
  const int from = (call.rank() + 1) % n;
  const std::size_t esize = dtype_size(dtype);
  const std::size_t chunk_elems = std::max<std::size_t>(1, call.config().chunk_bytes / esize);
  const std::size_t chunks = std::max<std::size_t>(1, (count + chunk_elems - 1) / chunk_elems);
  auto first = [&](std::size_t c) { return std::min(count, c * chunk_elems); };
  auto len = [&](std::size_t c) { return std::min(count, first(c) + chunk_elems) - first(c); };
  auto at = [&](const std::byte* base, std::size_t c) { return std::span(base + first(c) * esize, len(c) * esize); };

  if (v == n - 1) {  // the far end of the chain sends its input
    for (std::size_t c = 0; c < chunks; ++c) call.send(c, toward_root, at(send, c));
    call.wait_all();
    return;
  }
  // Indexes: receives [0, chunks), forwarding sends [chunks, 2·chunks).
  CallMemory& memory = call.memory();
  auto arrived_all = memory.scratch(call, count * esize);
  auto arrived = [&](std::size_t c) { return arrived_all.subspan(first(c) * esize, len(c) * esize); };
  std::size_t posted = 0;
  for (std::size_t c = 0; c < chunks; ++c) {
    for (; posted < chunks && posted < c + kReceiveWindow; ++posted) call.recv(posted, from, arrived(posted));
    call.wait(c);
    if (v == 0) {
      memory.reduce_into(dtype, op, std::span(recv + first(c) * esize, len(c) * esize), at(send, c), arrived(c));
    } else {
      memory.reduce_into(dtype, op, arrived(c), arrived(c), at(send, c));
      memory.settle();
      call.send(chunks + c, toward_root, arrived(c));
    }
  }
  if (v == 0 && op == ReduceOp::avg)
    memory.finish_avg(dtype, std::span(recv, count * esize), static_cast<std::size_t>(n));
  call.wait_all();
}

}  // namespace antdt::coll
