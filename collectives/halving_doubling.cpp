// Recursive halving and recursive doubling (collectives/halving_doubling.hpp).
#include "collectives/halving_doubling.hpp"

#include "core/dtype.hpp"

namespace antdt::coll {

std::size_t halving_first_kept(const HalvingBlocks& blocks, int v) {
  if (blocks.p < 2) return 0;
  return (static_cast<std::size_t>(v) & (blocks.p / 2)) == 0 ? 0 : blocks.begin(blocks.p / 2);
}

void reduce_scatter_halving_steps(Call& call, std::size_t& index, const PowerOfTwoFold& fold, int v,
                                  const HalvingBlocks& blocks, DataType dtype, ReduceOp op,
                                  const HalvingBuffers& buffers) {
  CallMemory& memory = call.memory();
  const std::size_t esize = dtype_size(dtype);
  // Elements [first, end) of what this rank holds: its input before the first
  // step has reduced anything, the partial sums after.
  bool reduced = false;
  auto held = [&](std::size_t first, std::size_t end) -> std::span<const std::byte> {
    if (!reduced) return buffers.input.subspan(first * esize, (end - first) * esize);
    return buffers.partial.subspan((first - buffers.partial_first) * esize, (end - first) * esize);
  };

  std::size_t lo = 0, hi = blocks.p;  // the block range still held
  for (int mask = static_cast<int>(blocks.p) / 2; mask >= 1; mask /= 2) {
    const int partner_v = v ^ mask;
    const int partner = fold.real_rank(partner_v);
    const std::size_t mid = lo + (hi - lo) / 2;
    const bool keep_low = (v & mask) == 0;
    const std::size_t keep_lo = keep_low ? lo : mid, keep_hi = keep_low ? mid : hi;
    const std::size_t give_lo = keep_low ? mid : lo, give_hi = keep_low ? hi : mid;
    const std::size_t keep_first = blocks.begin(keep_lo), keep_end = blocks.begin(keep_hi);

    const std::span<const std::byte> mine = held(keep_first, keep_end);
    const std::span<std::byte> sum =
        mask == 1 ? buffers.result
                  : buffers.partial.subspan((keep_first - buffers.partial_first) * esize, mine.size());
    const std::span<std::byte> theirs = buffers.incoming.first(mine.size());
    const std::size_t q = call.recv(index++, partner, theirs);
    const std::size_t s = call.send(index++, partner, held(blocks.begin(give_lo), blocks.begin(give_hi)));
    call.wait(q);
    if (partner_v < v)
      memory.reduce_into(dtype, op, sum, theirs, mine);
    else
      memory.reduce_into(dtype, op, sum, mine, theirs);
    memory.settle();
    call.wait(s);  // the given half may be rewritten by the next step's sum only once it left
    reduced = true;
    lo = keep_lo;
    hi = keep_hi;
  }
}

void allgather_doubling_steps(Call& call, std::size_t& index, const PowerOfTwoFold& fold, int v,
                              const HalvingBlocks& blocks, std::size_t esize, std::span<std::byte> data) {
  auto range = [&](std::size_t lo_block, std::size_t hi_block) {
    const std::size_t first = blocks.begin(lo_block);
    return data.subspan(first * esize, (blocks.begin(hi_block) - first) * esize);
  };
  std::size_t lo = static_cast<std::size_t>(v), hi = lo + 1;
  for (int mask = 1; static_cast<std::size_t>(mask) < blocks.p; mask *= 2) {
    const int partner = fold.real_rank(v ^ mask);
    const std::size_t width = hi - lo;
    const std::size_t their_lo = (v & mask) == 0 ? hi : lo - width;
    const std::size_t q = call.recv(index++, partner, range(their_lo, their_lo + width));
    const std::size_t s = call.send(index++, partner, range(lo, hi));
    call.wait(q);
    call.wait(s);
    lo = std::min(lo, their_lo);
    hi = lo + 2 * width;
  }
}

}  // namespace antdt::coll
