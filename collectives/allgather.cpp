// Ring AllGather (and AllGatherV: per-rank counts and displacements).
//
// Rank r first places its own block in recv (nothing to do in place), then in
// step s = 0 .. n-2 sends block (r-s) mod n to its right neighbour and receives
// block (r-s-1) mod n from its left, straight into its place in recv. Blocks
// are cut into ANTDT_CHUNK_BYTES chunks; a chunk is forwarded as soon as it
// arrived. Every block has at least one (possibly empty) chunk, so zero-length
// members still take part in the message stream.
//
// Cost: (n-1) α + (n-1)/n · N β for N the gathered bytes (balanced counts).
#include "collectives/algorithms.hpp"

#include <algorithm>

namespace antdt::coll {
namespace {

constexpr std::size_t kReceiveWindow = 8;

}  // namespace

void allgather_ring(Call& call, const std::byte* send, std::byte* recv, std::span<const std::size_t> counts,
                    std::span<const std::size_t> displs, std::size_t esize) {
  const std::size_t n = static_cast<std::size_t>(call.size());
  const std::size_t r = static_cast<std::size_t>(call.rank());
  std::byte* own = recv + displs[r] * esize;
  if (send != own) {
    call.memory().copy(own, send, counts[r] * esize);
    call.memory().settle();  // the own block is sent from recv
  }
  if (n == 1) return;

  const std::size_t chunk_elems = std::max<std::size_t>(1, call.config().chunk_bytes / esize);
  auto chunks = [&](std::size_t block) { return std::max<std::size_t>(1, (counts[block] + chunk_elems - 1) / chunk_elems); };
  auto piece = [&](std::size_t block, std::size_t c) {
    const std::size_t first = std::min(counts[block], c * chunk_elems);
    const std::size_t len = std::min(counts[block], first + chunk_elems) - first;
    return std::span(recv + (displs[block] + first) * esize, len * esize);
  };
  auto recv_block = [&](std::size_t s) { return (r + 2 * n - s - 1) % n; };
  const int right = static_cast<int>((r + 1) % n);
  const int left = static_cast<int>((r + n - 1) % n);

  // Pool indexes: receives [0, total) in (step, chunk) order, then the sends:
  // step 0's chunks, then the forward of receive i at total + first + i.
  std::size_t total = 0;
  for (std::size_t s = 0; s + 1 < n; ++s) total += chunks(recv_block(s));
  const std::size_t first_sends = chunks(r);
  for (std::size_t c = 0; c < first_sends; ++c) call.send(total + c, right, piece(r, c));

  // (step, chunk) cursors of the next receive to post and to process.
  std::size_t post_step = 0, post_chunk = 0, posted = 0;
  std::size_t step = 0, chunk = 0;
  for (std::size_t done = 0; done < total; ++done) {
    for (; posted < total && posted < done + kReceiveWindow; ++posted) {
      call.recv(posted, left, piece(recv_block(post_step), post_chunk));
      if (++post_chunk == chunks(recv_block(post_step))) {
        post_chunk = 0;
        ++post_step;
      }
    }
    call.wait(done);
    if (step + 2 < n) call.send(total + first_sends + done, right, piece(recv_block(step), chunk));
    if (++chunk == chunks(recv_block(step))) {
      chunk = 0;
      ++step;
    }
  }
  call.wait_all();
}

}  // namespace antdt::coll
