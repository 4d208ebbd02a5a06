// AllGather by recursive doubling (collectives/halving_doubling.hpp), for a
// power-of-two rank count and equal blocks: log2(n) steps where the ring takes
// n - 1, with the same bytes, so it is chosen where a step is dear (TCP links,
// medium outputs; collectives/selection.hpp). Each step swaps the ranges two
// ranks hold, received straight into place in recv.
//
// Cost: log2(n)·α + (n-1)/n·N·β for N the gathered bytes.
#include "collectives/algorithms.hpp"
#include "collectives/halving_doubling.hpp"

#include "core/error.hpp"

namespace antdt::coll {

void allgather_doubling(Call& call, const std::byte* send, std::byte* recv, std::size_t count, std::size_t esize) {
  const int n = call.size();
  const int r = call.rank();
  const PowerOfTwoFold fold(n);
  if (fold.extra != 0) raise<InternalError>("allgather_doubling: ", n, " ranks is not a power of two");
  const std::size_t block_bytes = count * esize;
  std::byte* own = recv + static_cast<std::size_t>(r) * block_bytes;
  if (send != own) {
    call.memory().copy(own, send, block_bytes);
    call.memory().settle();  // the own block is sent from recv
  }
  if (n == 1) return;
  const HalvingBlocks blocks{count * static_cast<std::size_t>(n), static_cast<std::size_t>(n)};
  std::size_t index = 0;
  allgather_doubling_steps(call, index, fold, r, blocks, esize,
                           std::span(recv, static_cast<std::size_t>(n) * block_bytes));
}

}  // namespace antdt::coll
