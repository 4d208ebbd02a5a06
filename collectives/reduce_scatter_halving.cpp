// ReduceScatter by recursive halving (collectives/halving_doubling.hpp), for a
// power-of-two rank count: log2(n) steps where the ring takes n - 1, with the
// same bytes, so it is chosen where a step is dear (TCP links, medium inputs;
// collectives/selection.hpp). Each step's message is whole (not chunked): at
// the sizes it is chosen for, the transport splits it.
//
// The first step reads the input; the partial sums of the half it keeps go to
// scratch (none with two ranks), and the last step writes block r straight
// into recv (which may be send's block r: in place).
//
// Cost: log2(n)·α + (n-1)/n·N·β + (n-1)/n·N·γ for N the input's bytes.
#include "collectives/algorithms.hpp"
#include "collectives/halving_doubling.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace antdt::coll {

void reduce_scatter_halving(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                            ReduceOp op) {
  const int n = call.size();
  const int r = call.rank();
  const std::size_t esize = dtype_size(dtype);
  const std::size_t block_bytes = count * esize;
  CallMemory& memory = call.memory();
  const PowerOfTwoFold fold(n);
  if (fold.extra != 0) raise<InternalError>("reduce_scatter_halving: ", n, " ranks is not a power of two");
  if (n == 1) {
    if (send != recv) memory.copy(recv, send, block_bytes);
    return;
  }
  const HalvingBlocks blocks{count * static_cast<std::size_t>(n), static_cast<std::size_t>(n)};
  const std::size_t half_bytes = blocks.largest_half() * esize;
  const std::size_t partial_bytes = n > 2 ? half_bytes : 0;
  const std::span<std::byte> space = memory.scratch(call, partial_bytes + half_bytes);
  std::size_t index = 0;
  reduce_scatter_halving_steps(
      call, index, fold, r, blocks, dtype, op,
      HalvingBuffers{.input = std::span(send, static_cast<std::size_t>(n) * block_bytes),
                     .partial = space.first(partial_bytes),
                     .partial_first = halving_first_kept(blocks, r),
                     .result = std::span(recv, block_bytes),
                     .incoming = space.subspan(partial_bytes, half_bytes)});
  if (op == ReduceOp::avg) {
    memory.finish_avg(dtype, std::span(recv, block_bytes), static_cast<std::size_t>(n));
    memory.settle();
  }
}

}  // namespace antdt::coll
