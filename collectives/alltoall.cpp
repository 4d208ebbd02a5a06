// Pairwise-exchange AlltoAll.
//
// Block j of rank r's send buffer goes to block r of rank j's recv buffer. In
// step s = 1 .. n-1 rank r sends to r+s and receives from r-s, so in every step
// each rank sends to one peer and receives from one, and no rank is a hot spot.
// Every receive goes straight into its block of recv and is posted before any
// wait, so no send can wait on a peer that has not posted its receive; a few
// steps' sends are kept in flight. The rank's own block is a local copy.
//
// Cost: (n-1) α + (n-1)/n · N β for N the bytes of one rank's send buffer.
#include "collectives/algorithms.hpp"

#include <algorithm>

namespace antdt::coll {
namespace {

constexpr std::size_t kSendWindow = 4;

}  // namespace

void alltoall_pairwise(Call& call, const std::byte* send, std::byte* recv, std::size_t bytes) {
  const std::size_t n = static_cast<std::size_t>(call.size());
  const std::size_t r = static_cast<std::size_t>(call.rank());
  call.memory().copy(recv + r * bytes, send + r * bytes, bytes);  // sent from nowhere: no settle
  // Indexes: the receive of step s is s - 1, its send n - 2 + s.
  for (std::size_t s = 1; s < n; ++s) {
    const std::size_t from = (r + n - s) % n;
    call.recv(s - 1, static_cast<int>(from), std::span(recv + from * bytes, bytes));
  }
  for (std::size_t s = 1; s < n; ++s) {
    if (s > kSendWindow) call.wait(n - 2 + s - kSendWindow);
    const std::size_t to = (r + s) % n;
    call.send(n - 2 + s, static_cast<int>(to), std::span(send + to * bytes, bytes));
  }
  call.wait_all();
}

}  // namespace antdt::coll
