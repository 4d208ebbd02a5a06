// Shared-memory AllReduce for large messages among ranks of one node
// (docs/collectives.md#shared-memory-allreduce).
//
// The vector is cut into blocks of at most a slot (ANTDT_SHM_BULK_BYTES), and
// each block into n slices, slice s reduced by rank s. For block k each rank
//   1. copies its block into its slot k % 3 and publishes it (stamp 2k+1, "in");
//   2. once every peer's block is in, reduces its slice from all n slots in rank
//      order into its result (in one pass: f16/bf16 are rounded once), writes the reduced slice back over its own
//      slice in its slot (only this rank ever reads that slice of its slot) and
//      publishes the slot again (stamp 2k+2, "reduced");
//   3. stages block k + 1 (step 1) before waiting, so that work is there to do;
//   4. once every peer's slice is reduced, copies the n - 1 other slices from
//      the peers' slots into its result.
// Every element is reduced once, by one rank, in rank order: every rank ends
// with the same bits. Per rank and byte: one copy in, one read for the
// reduction, one copy out (≈ 5 memory passes, as the ring), but no message,
// no header, and between two waits each rank has a whole slice of work of its
// own — oversubscribed ranks (more ranks than cores) sleep on a futex while
// they wait and the cores stay busy, where a ring stalls whenever its
// neighbour is descheduled.
//
// Why three slots per rank: a rank writes block k + 1 into slot (k+1) % 3 after
// seeing every peer's block k in; a peer stages block k only after its step 4
// of block k - 2, so every read of the slot's previous use (block k - 2) is
// over. Two slots would need block k - 1's step 4 to be over, which staging
// early (step 3) does not wait for. Stamps only grow per slot (2k+1, 2k+2 with
// k counted over the communicator's life), so a reader waiting for "in" is
// also satisfied by "reduced".
#include "collectives/algorithms.hpp"
#include "collectives/shm_common.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/stream_copy.hpp"
#include "core/topology.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

namespace antdt::coll {
namespace {


constexpr std::size_t kSliceAlignBytes = 64;  // slices start on cache lines where the block allows

// One block of the vector, as a channel round.
struct Block {
  std::size_t first = 0;  // element offset in the vector
  std::size_t count = 0;  // elements
  int slot = 0;
  std::uint64_t in_stamp = 0, reduced_stamp = 0;
};

// Element range [begin, end) of rank s's slice of a block of `count` elements.
struct Slice {
  std::size_t begin = 0, end = 0;
};
Slice slice_of(std::size_t count, int s, int n, std::size_t esize) {
  const std::size_t align = std::max<std::size_t>(1, kSliceAlignBytes / esize);
  const auto bound = [&](int r) -> std::size_t {
    if (r >= n) return count;
    const std::size_t raw = count * static_cast<std::size_t>(r) / static_cast<std::size_t>(n);
    return std::min(count, raw / align * align);
  };
  return {bound(s), bound(s + 1)};
}

}  // namespace

void allreduce_shm_bulk(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                        ReduceOp op) {
  ShmChannel& channel = *call.comm().shm(detail::ShmArea::bulk);
  const std::size_t esize = dtype_size(dtype);
  const std::size_t block_elems = channel.slot_bytes() / esize;
  ANTDT_ASSERT(block_elems > 0);
  const int n = call.size();
  const int me = call.rank();
  const std::uint64_t hash = call.signature_hash();

  const auto make_block = [&](std::size_t first) {
    const std::uint64_t round = channel.next_round();
    return Block{first, std::min(block_elems, count - first), static_cast<int>(round % 3), 2 * round - 1, 2 * round};
  };
  const auto stage = [&](const Block& b) {
    const std::size_t bytes = b.count * esize;
    std::memcpy(channel.own_slot(b.slot).data(), send + b.first * esize, bytes);
    channel.publish(b.slot, b.in_stamp, hash, bytes);
  };

  if (count == 0) return;
  // The peers' slices go to the result with streaming stores when the vector
  // is larger than the largest cache: it will not be read again from cache,
  // and a cached store would first read each of its lines from memory (2
  // ranks, 64 MiB, out of place: 5.23 -> 6.24 GB/s busbw, docs/collectives.md).
  // Below that the result may stay cached for the caller's next pass (in
  // place, 8 MiB: -10 % with streaming stores).
  const std::size_t cache_bytes = largest_cache_bytes();  // found once per process
  const bool stream_out = cache_bytes > 0 && count * esize > cache_bytes;
  // Every rank's copy of this rank's slice (grow-only per thread: no allocation per call once warm).
  thread_local std::vector<const std::byte*> slice_storage;
  slice_storage.resize(static_cast<std::size_t>(n));
  const std::span<const std::byte*> slices(slice_storage);
  Block block = make_block(0);
  stage(block);
  for (;;) {
    const std::size_t bytes = block.count * esize;
    // Step 2: reduce this rank's slice from every slot, in rank order.
    const Slice mine = slice_of(block.count, me, n, esize);
    const std::size_t slice_offset = mine.begin * esize;
    const std::size_t slice_bytes = (mine.end - mine.begin) * esize;
    const std::span<std::byte> acc(recv + (block.first + mine.begin) * esize, slice_bytes);
    for (int peer = 0; peer < n; ++peer) {
      std::span<const std::byte> data = channel.own_slot(block.slot).first(bytes);
      if (peer != me) {
        const ShmChannel::Peek p = shm_wait_for(call, channel, peer, block.slot, block.in_stamp, "block");
        shm_check_peer(call, p, peer, bytes);
        data = p.data;
      }
      slices[static_cast<std::size_t>(peer)] = data.data() + slice_offset;
    }
    // In rank order, in one pass: f16/bf16 are rounded once, not once per rank.
    if (slice_bytes > 0) reduce_many(dtype, op, acc, slices);
    if (op == ReduceOp::avg && slice_bytes > 0) finish_avg(dtype, acc, static_cast<std::size_t>(n));
    if (slice_bytes > 0) std::memcpy(channel.own_slot(block.slot).data() + slice_offset, acc.data(), slice_bytes);
    channel.publish(block.slot, block.reduced_stamp, hash, bytes);

    // Step 3: stage the next block while the peers finish this one.
    const std::size_t next_first = block.first + block.count;
    std::optional<Block> next;
    if (next_first < count) {
      next = make_block(next_first);
      stage(*next);
    }

    // Step 4: the other ranks' reduced slices.
    for (int i = 1; i < n; ++i) {
      const int peer = (me + i) % n;
      const ShmChannel::Peek p = shm_wait_for(call, channel, peer, block.slot, block.reduced_stamp, "reduced slice");
      shm_check_peer(call, p, peer, bytes);
      const Slice theirs = slice_of(block.count, peer, n, esize);
      const std::size_t off = theirs.begin * esize;
      const std::size_t len = (theirs.end - theirs.begin) * esize;
      if (len == 0) continue;
      if (stream_out)
        stream_copy(recv + block.first * esize + off, p.data.data() + off, len);
      else
        std::memcpy(recv + block.first * esize + off, p.data.data() + off, len);
    }
    if (!next) break;
    block = *next;
  }
  if (stream_out) stream_fence();
}

}  // namespace antdt::coll
