// The two halves of Rabenseifner's AllReduce, each a collective of its own
// over p (a power of two) virtual ranks: a reduce-scatter by recursive halving
// and an allgather by recursive doubling. Rabenseifner's AllReduce runs both
// (allreduce_rabenseifner.cpp); ReduceScatter and AllGather over TCP run one
// each (reduce_scatter_halving.cpp, allgather_doubling.cpp). log2(p) steps
// where the ring takes p - 1, with the ring's bytes.
//
// The vector is p blocks (HalvingBlocks); virtual rank v ends the
// reduce-scatter owning block v and starts the allgather holding it.
// `fold` maps virtual ranks to ranks (the identity when n is a power of two);
// `index` is the next free operation slot of the call, advanced past the ones used.
#pragma once

#include "collectives/call.hpp"
#include "collectives/power_of_two_fold.hpp"

#include <algorithm>
#include <cstddef>
#include <span>

namespace antdt::coll {

// p blocks of `count` elements in all, their sizes differing by at most one
// (the first count % p one larger): block b is elements [begin(b), begin(b + 1)).
struct HalvingBlocks {
  std::size_t count = 0, p = 1;
  std::size_t begin(std::size_t b) const { return count / p * b + std::min(b, count % p); }
  std::size_t size(std::size_t b) const { return begin(b + 1) - begin(b); }
  // The larger of the two halves, in elements: what one step receives at most.
  std::size_t largest_half() const { return begin(p / 2); }
};

struct HalvingBuffers {
  // This rank's whole contribution, read by the first step.
  std::span<const std::byte> input;
  // Where the partial sums of the later steps go: element i of the vector at
  // element i - partial_first of `partial`, for the elements of the half the
  // first step keeps (`partial` may be `input` itself, with partial_first 0).
  std::span<std::byte> partial;
  std::size_t partial_first = 0;
  // Block v's sum, written by the last step (may alias block v of input or partial).
  std::span<std::byte> result;
  // Receive space: at least blocks.largest_half() elements.
  std::span<std::byte> incoming;
};

// The first element of the half virtual rank v keeps in the first step: where
// HalvingBuffers::partial starts when it holds only that half.
std::size_t halving_first_kept(const HalvingBlocks& blocks, int v);

// Reduce-scatter by recursive halving: for mask = p/2 .. 1 this rank keeps the
// half of its block range on v's side of `mask`, sends the other half to
// v ^ mask and reduces the partner's copy of the kept half with its own (the
// lower virtual rank's operand first, so both sides of a pair would compute
// the same bits). `avg` is left to the caller (the sum of n contributions).
void reduce_scatter_halving_steps(Call& call, std::size_t& index, const PowerOfTwoFold& fold, int v,
                                  const HalvingBlocks& blocks, DataType dtype, ReduceOp op,
                                  const HalvingBuffers& buffers);

// Allgather by recursive doubling: `data` holds the whole vector with block v
// in place; for mask = 1 .. p/2 this rank swaps its block range with v ^ mask's,
// the adjacent range of the same width, receiving straight into `data`.
void allgather_doubling_steps(Call& call, std::size_t& index, const PowerOfTwoFold& fold, int v,
                              const HalvingBlocks& blocks, std::size_t esize, std::span<std::byte> data);

}  // namespace antdt::coll
