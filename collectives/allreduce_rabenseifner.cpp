// Rabenseifner's AllReduce: a reduce-scatter by recursive halving, then an
// allgather by recursive doubling. The ring's bytes (2(p-1)/p of the vector
// sent and received per rank) in 2·log2(p) steps instead of the ring's
// 2(p-1): for medium vectors over links where a step costs much more than
// shared memory's few microseconds (TCP), as MPI libraries use it.
//
// p = the largest power of two <= n ranks take part, the others folded in as
// recursive doubling does (collectives/power_of_two_fold.hpp); they take part
// as virtual rank v.
//
// The vector is cut into p blocks (element counts differing by at most one);
// virtual rank v ends the reduce-scatter owning block v. Reduce-scatter:
// for mask = p/2 .. 1 each rank keeps the half of its current block range on
// v's side of `mask`, sends the other half to v ^ mask and reduces the
// partner's copy of the kept half into its own (lower virtual rank's operand
// first). Allgather: for mask = 1 .. p/2 each rank swaps its range with
// v ^ mask, receiving straight into the result. Every block is reduced by one
// rank only and then copied, so every rank ends with the same bits.
//
// Cost: 2·log2(p)·α + 2(p-1)/p·m·β + (p-1)/p·m·γ, plus 2 steps and m·β, m·γ
// for the fold when n ≠ p.
#include "collectives/algorithms.hpp"
#include "collectives/power_of_two_fold.hpp"

#include "core/dtype.hpp"

#include <algorithm>

namespace antdt::coll {
namespace {

// p blocks of `count` elements, block b at [begin(b), begin(b + 1)).
struct Blocks {
  std::size_t count, p;
  std::size_t begin(std::size_t b) const { return count / p * b + std::min(b, count % p); }
};

}  // namespace

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
  auto range = [&](std::size_t first_elem, std::size_t end_elem) {
    return acc.subspan(first_elem * esize, (end_elem - first_elem) * esize);
  };

  const PowerOfTwoFold fold(n);
  const int p = fold.p;
  std::size_t index = 0;

  if (fold.sits_out(r)) {
    // Folded out: hand the vector over, then receive the result into it.
    call.wait(call.send(index++, r + 1, acc));
    call.wait(call.recv(index++, r + 1, acc));
    return;
  }
  // Received ranges: a folded-in vector, then at most the lower half of the
  // blocks (the larger one: the first count % p blocks hold one more element).
  const Blocks blocks{count, static_cast<std::size_t>(p)};
  const std::size_t largest_half = blocks.begin(static_cast<std::size_t>(p / 2)) * esize;
  const std::span<std::byte> incoming = memory.scratch(call, fold.takes_in(r) ? bytes : largest_half);
  if (fold.takes_in(r)) {
    call.wait(call.recv(index++, r - 1, incoming.first(bytes)));
    memory.reduce_into(dtype, op, acc, incoming.first(bytes), acc);  // the even partner is the lower rank
    memory.settle();
  }

  const int v = fold.virtual_rank(r);

  // Reduce-scatter by recursive halving: [lo, hi) is the block range still held.
  std::size_t lo = 0, hi = static_cast<std::size_t>(p);
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int partner_v = v ^ mask;
    const int partner = fold.real_rank(partner_v);
    const std::size_t mid = lo + (hi - lo) / 2;
    const bool keep_low = (v & mask) == 0;
    const std::size_t keep_lo = keep_low ? lo : mid, keep_hi = keep_low ? mid : hi;
    const std::size_t give_lo = keep_low ? mid : lo, give_hi = keep_low ? hi : mid;
    const auto kept = range(blocks.begin(keep_lo), blocks.begin(keep_hi));
    const auto theirs = incoming.first(kept.size());
    const std::size_t q = call.recv(index++, partner, theirs);
    const std::size_t s = call.send(index++, partner, range(blocks.begin(give_lo), blocks.begin(give_hi)));
    call.wait(q);
    if (partner_v < v)
      memory.reduce_into(dtype, op, kept, theirs, kept);
    else
      memory.reduce_into(dtype, op, kept, kept, theirs);
    memory.settle();
    call.wait(s);
    lo = keep_lo;
    hi = keep_hi;
  }
  if (op == ReduceOp::avg) {
    memory.finish_avg(dtype, range(blocks.begin(lo), blocks.begin(hi)), static_cast<std::size_t>(n));
    memory.settle();
  }

  // Allgather by recursive doubling: swap the held range with the partner's,
  // the adjacent range of the same size.
  for (int mask = 1; mask < p; mask *= 2) {
    const int partner = fold.real_rank(v ^ mask);
    const std::size_t width = hi - lo;
    const std::size_t their_lo = (v & mask) == 0 ? hi : lo - width;
    const std::size_t q = call.recv(index++, partner, range(blocks.begin(their_lo), blocks.begin(their_lo + width)));
    const std::size_t s = call.send(index++, partner, range(blocks.begin(lo), blocks.begin(hi)));
    call.wait(q);
    call.wait(s);
    lo = std::min(lo, their_lo);
    hi = lo + 2 * width;
  }

  if (fold.takes_in(r)) call.wait(call.send(index++, r - 1, acc));
}

}  // namespace antdt::coll
