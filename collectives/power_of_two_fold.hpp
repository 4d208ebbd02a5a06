// The fold of recursive doubling and Rabenseifner (allreduce_recursive_doubling.cpp,
// allreduce_rabenseifner.cpp): the largest power of two p <= n ranks take part;
// among the first 2(n - p) ranks each even rank hands its vector to the odd
// rank above it, sits out, and gets the result back at the end. Taking part,
// rank r is virtual rank r / 2 (the odd ones of the fold) or r - (n - p).
#pragma once

#include "collectives/call.hpp"

#include <cstddef>
#include <span>

namespace antdt::coll {

struct PowerOfTwoFold {
  int p = 1;      // ranks taking part
  int extra = 0;  // n - p: the ranks that sit out

  explicit constexpr PowerOfTwoFold(int n) {
    while (p * 2 <= n) p *= 2;
    extra = n - p;
  }
  constexpr bool sits_out(int rank) const { return rank < 2 * extra && rank % 2 == 0; }
  // Takes in the vector of the rank below it first (and sends it the result last).
  constexpr bool takes_in(int rank) const { return rank < 2 * extra && rank % 2 == 1; }
  constexpr int virtual_rank(int rank) const { return rank < 2 * extra ? rank / 2 : rank - extra; }
  constexpr int real_rank(int virtual_rank) const {
    return virtual_rank < extra ? 2 * virtual_rank + 1 : virtual_rank + extra;
  }

  // The fold's messages (power_of_two_fold.cpp), for the calling rank;
  // `index` is the call's next free operation slot, advanced past the ones used.
  // A rank that sits out hands its vector `data` to the rank above and then
  // receives the result into it (the send completes before the receive is
  // posted into the same buffer): true. Any other rank: false, nothing sent.
  bool sit_out(Call& call, std::size_t& index, std::span<std::byte> data) const;
  // A rank that takes in receives the vector of the rank below into
  // `incoming` and reduces it into `data` (the lower rank's operand first).
  void take_in(Call& call, std::size_t& index, std::span<std::byte> data, std::span<std::byte> incoming,
               DataType dtype, ReduceOp op) const;
  // ... and at the end sends it the result.
  void give_back(Call& call, std::size_t& index, std::span<const std::byte> data) const;
};

}  // namespace antdt::coll
