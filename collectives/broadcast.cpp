// Broadcast: a pipelined chain for large messages, a binomial tree for small.
//
// Chain: ranks in order root, root+1, ...; the payload is cut in chunks of
// ANTDT_CHUNK_BYTES and each rank forwards a chunk as soon as it arrived, so
// the time is about bytes/bandwidth + (n-2) chunk times.
// Binomial tree: ceil(log2 n) rounds of whole-message sends.
#include "collectives/algorithms.hpp"

#include <algorithm>

namespace antdt::coll {

void broadcast_chain(Call& call, const std::byte* send, std::byte* recv, std::size_t bytes, int root) {
  const int n = call.size();
  const int v = (call.rank() - root + n) % n;  // position in the chain
  const int next = (call.rank() + 1) % n;
  const int prev = (call.rank() - 1 + n) % n;
  const std::size_t chunk = std::max<std::size_t>(1, call.config().chunk_bytes);
  const std::size_t chunks = std::max<std::size_t>(1, (bytes + chunk - 1) / chunk);
  auto piece = [&](std::size_t c) {
    std::size_t begin = std::min(bytes, c * chunk);
    return std::pair(begin, std::min(bytes, begin + chunk) - begin);
  };
  if (v == 0) {
    if (send != recv) {
      call.memory().copy(recv, send, bytes);
      call.memory().settle();
    }
    for (std::size_t c = 0; c < chunks; ++c) {
      auto [begin, len] = piece(c);
      call.send(c, next, std::span(recv + begin, len));
    }
    call.wait_all();
    return;
  }
  // Receives go straight into the caller's buffer; the indexes [0, chunks) are
  // receives and [chunks, 2*chunks) the forwarding sends.
  for (std::size_t c = 0; c < chunks; ++c) {
    auto [begin, len] = piece(c);
    call.recv(c, prev, std::span(recv + begin, len));
  }
  for (std::size_t c = 0; c < chunks; ++c) {
    call.wait(c);
    if (v + 1 < n) {
      auto [begin, len] = piece(c);
      call.send(chunks + c, next, std::span(recv + begin, len));
    }
  }
  call.wait_all();
}

void broadcast_binomial_tree(Call& call, const std::byte* send, std::byte* recv, std::size_t bytes, int root) {
  const int n = call.size();
  const int v = (call.rank() - root + n) % n;
  auto real = [&](int virtual_rank) { return (virtual_rank + root) % n; };
  if (v == 0 && send != recv) {
    call.memory().copy(recv, send, bytes);
    call.memory().settle();
  }
  const std::span<std::byte> payload(recv, bytes);
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      call.recv(0, real(v - mask), payload);
      call.wait(0);
      break;
    }
    mask <<= 1;
  }
  std::size_t index = 1;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) call.send(index++, real(v + mask), payload);
  call.wait_all();
}

}  // namespace antdt::coll
