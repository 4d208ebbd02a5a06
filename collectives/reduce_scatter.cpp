// Ring ReduceScatter.
//
// n ranks, send = n blocks of `count` elements; rank r ends with block r
// reduced over all ranks. In step s = 0 .. n-2 rank r sends block (r-s-1) mod n
// to its right neighbour and receives block (r-s-2) mod n from its left. Step 0
// sends the rank's own input; a block received at step s is reduced with the
// rank's input and forwarded at step s+1, and the one received at step n-2 is
// block r itself, reduced straight into recv. Blocks are cut into
// ANTDT_CHUNK_BYTES chunks and each chunk is forwarded as soon as it is
// reduced, so transfers overlap reductions.
//
// Received chunks land in scratch, one region per step, so a region is never
// overwritten while the send that forwards it may still read it.
//
// Cost: (n-1) α + (n-1)/n · N β + (n-1)/n · N γ for N = n·count elements' bytes
// (per chunk count: (n-1)·chunks α).
#include "collectives/algorithms.hpp"

#include "core/dtype.hpp"

#include <algorithm>
#include <cstring>

namespace antdt::coll {
namespace {

// Receives posted ahead of the one being processed.
constexpr std::size_t kReceiveWindow = 8;

}  // namespace

void reduce_scatter_ring(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                         ReduceOp op) {
  const std::size_t n = static_cast<std::size_t>(call.size());
  const std::size_t r = static_cast<std::size_t>(call.rank());
  const std::size_t esize = dtype_size(dtype);
  const std::size_t block_bytes = count * esize;
  CallMemory& memory = call.memory();
  if (n == 1) {
    if (send != recv) memory.copy(recv, send, block_bytes);
    return;
  }
  const std::size_t chunk_elems = std::max<std::size_t>(1, call.config().chunk_bytes / esize);
  // Every block has at least one chunk (possibly empty): the message stream
  // does not depend on the count, which keeps mismatches detectable.
  const std::size_t chunks = std::max<std::size_t>(1, (count + chunk_elems - 1) / chunk_elems);
  auto chunk_first = [&](std::size_t c) { return std::min(count, c * chunk_elems); };
  auto chunk_len = [&](std::size_t c) { return std::min(count, chunk_first(c) + chunk_elems) - chunk_first(c); };
  auto input = [&](std::size_t block, std::size_t c) {
    return std::span(send + (block * count + chunk_first(c)) * esize, chunk_len(c) * esize);
  };
  const std::size_t steps = n - 1;
  auto send_block = [&](std::size_t s) { return (r + 2 * n - s - 1) % n; };
  auto recv_block = [&](std::size_t s) { return (r + 2 * n - s - 2) % n; };
  std::span<std::byte> regions = memory.scratch(call, steps * block_bytes);
  auto region = [&](std::size_t s, std::size_t c) {
    return regions.subspan(s * block_bytes + chunk_first(c) * esize, chunk_len(c) * esize);
  };
  const int right = static_cast<int>((r + 1) % n);
  const int left = static_cast<int>((r + n - 1) % n);

  // Pool indexes: receives [0, total), sends [total, 2·total), both in (step, chunk) order.
  const std::size_t total = steps * chunks;
  for (std::size_t c = 0; c < chunks; ++c) call.send(total + c, right, input(send_block(0), c));

  std::size_t posted = 0;
  for (std::size_t done = 0; done < total; ++done) {
    for (; posted < total && posted < done + kReceiveWindow; ++posted)
      call.recv(posted, left, region(posted / chunks, posted % chunks));
    call.wait(done);
    const std::size_t s = done / chunks, c = done % chunks;
    const std::size_t block = recv_block(s);
    auto arrived = region(s, c);
    if (s + 1 < steps) {
      memory.reduce_into(dtype, op, arrived, arrived, input(block, c));
      memory.settle();
      call.send(total + done + chunks, right, arrived);
    } else {
      // block == r: in place, input(r, c) is this very part of recv.
      memory.reduce_into(dtype, op, std::span(recv + chunk_first(c) * esize, chunk_len(c) * esize), input(block, c),
                         arrived);
    }
  }
  if (op == ReduceOp::avg) memory.finish_avg(dtype, std::span(recv, block_bytes), n);
  call.wait_all();
}

}  // namespace antdt::coll
