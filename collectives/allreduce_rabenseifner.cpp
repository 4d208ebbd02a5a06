// Rabenseifner's AllReduce: a reduce-scatter by recursive halving, then an
// allgather by recursive doubling (collectives/halving_doubling.hpp). The
// ring's bytes (2(p-1)/p of the vector sent and received per rank) in
// 2·log2(p) steps instead of the ring's 2(p-1): for medium vectors over links
// where a step costs much more than shared memory's few microseconds (TCP), as
// MPI libraries use it.
//
// p = the largest power of two <= n ranks take part, the others folded in as
// recursive doubling does (collectives/power_of_two_fold.hpp); they take part
// as virtual rank v. Both halves work in place in recv: every block is reduced
// by one rank only and then copied, so every rank ends with the same bits.
//
// Cost: 2·log2(p)·α + 2(p-1)/p·m·β + (p-1)/p·m·γ, plus 2 steps and m·β, m·γ
// for the fold when n ≠ p.
#include "collectives/algorithms.hpp"
#include "collectives/halving_doubling.hpp"
#include "collectives/power_of_two_fold.hpp"

#include "core/dtype.hpp"

namespace antdt::coll {

void allreduce_rabenseifner(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                            ReduceOp op) {
  CallMemory& memory = call.memory();
  const int n = call.size();
  const int r = call.rank();
  const std::size_t esize = dtype_size(dtype);
  const std::size_t bytes = count * esize;
  if (send != recv && bytes > 0) memory.copy(recv, send, bytes);
  memory.settle();
  const std::span<std::byte> acc(recv, bytes);

  const PowerOfTwoFold fold(n);
  std::size_t index = 0;

  if (fold.sit_out(call, index, acc)) return;
  // Received ranges: a folded-in vector, then at most the larger half of the blocks.
  const HalvingBlocks blocks{count, static_cast<std::size_t>(fold.p)};
  const std::span<std::byte> incoming =
      memory.scratch(call, fold.takes_in(r) ? bytes : blocks.largest_half() * esize);
  fold.take_in(call, index, acc, incoming, dtype, op);

  const int v = fold.virtual_rank(r);
  const auto block_v = acc.subspan(blocks.begin(static_cast<std::size_t>(v)) * esize,
                                   blocks.size(static_cast<std::size_t>(v)) * esize);
  reduce_scatter_halving_steps(call, index, fold, v, blocks, dtype, op,
                               HalvingBuffers{.input = acc, .partial = acc, .partial_first = 0,
                                              .result = block_v, .incoming = incoming});
  if (op == ReduceOp::avg) {
    memory.finish_avg(dtype, block_v, static_cast<std::size_t>(n));
    memory.settle();
  }
  allgather_doubling_steps(call, index, fold, v, blocks, esize, acc);

  fold.give_back(call, index, acc);
}

}  // namespace antdt::coll
