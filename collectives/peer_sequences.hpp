// The point-to-point sequence numbers of a communicator: 1, 2, ... per peer
// and direction, so the n-th send from a to b is the n-th receive at b from a
// (collectives/transfer.cpp). Uses nothing but the standard library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace antdt::coll {

class PeerSequences {
 public:
  explicit PeerSequences(int nranks)
      : sends_to_(static_cast<std::size_t>(nranks), 0), recvs_from_(static_cast<std::size_t>(nranks), 0) {}
  std::uint64_t next_send(int peer) { return ++sends_to_.at(static_cast<std::size_t>(peer)); }
  std::uint64_t next_recv(int peer) { return ++recvs_from_.at(static_cast<std::size_t>(peer)); }
  std::uint64_t next(bool is_send, int peer) { return is_send ? next_send(peer) : next_recv(peer); }

 private:
  std::vector<std::uint64_t> sends_to_, recvs_from_;
};

}  // namespace antdt::coll
