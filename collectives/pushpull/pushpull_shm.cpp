// Push and pull through the node-local shared-memory bulk area
// (docs/collectives.md#push-pull-through-shared-memory), used instead of
// messages when every rank of the communicator is on one node.
//
// A key moves in blocks of one slot (ANTDT_SHM_BULK_BYTES, less a 64-byte
// header); each block is one round of the communicator's push-pull channel
// (its own segment, shaped like the AllReduce's bulk area, so that the two
// protocols never share a slot), using slot r % 3 and stamps 2r - 1
// ("posted") and 2r ("taken"). Every rank takes the same rounds in the same
// order (the block count depends only on the key) and marks every round
// taken on its slot when it is done with it, whatever its role.
//
// push, block r:
//   worker: waits until every server took round r - 3 (the slot's previous
//           use), copies its block and weight into its slot, posts it;
//   server: waits for every worker's post, adds the part of the block in its
//           shard, worker by worker in rank order (the same bytes as the
//           message path).
// pull, block r:
//   server: waits until every worker took round r - 3, writes its shard's part
//           of the block (finished: sum or weighted average) at the block's
//           offsets in its slot, posts it;
//   worker: for each server whose shard meets the block, waits for its post
//           and copies that part.
// At the end of a call a writer waits until its readers took the last round
// (push: a worker for the servers; pull: a server for the workers), so no one
// still reads a slot when the next call rewrites it. Stamps only grow, so a
// reader waiting for "posted" accepts "taken".
#include "collectives/pushpull/pushpull_shm.hpp"

#include "collectives/pushpull/weights.hpp"
#include "collectives/shm_common.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

namespace antdt::coll::pushpull {
namespace {


constexpr std::size_t kHeaderBytes = 64;  // the worker's weight (push), then padding to a cache line

struct Round {
  int slot = 0;
  std::uint64_t posted = 0, taken = 0;
};

Round round_of(std::uint64_t r) { return {static_cast<int>(r % 3), 2 * r - 1, 2 * r}; }

Round next_round(ShmChannel& channel) { return round_of(channel.next_round()); }

// The round `back` rounds before `r` (the slot's previous use), or none.
std::optional<Round> earlier(const Round& r, std::uint64_t back) {
  const std::uint64_t round = r.taken / 2;
  if (round <= back) return std::nullopt;
  return round_of(round - back);
}

void check_same_call(Call& call, const ShmChannel::Peek& p, int peer) {
  if (p.hash != call.signature_hash())
    call.fail_mismatch(cat("rank ", call.rank(), " called ", call.signature().describe(), " #", call.seq(),
                           " but rank ", peer, " called a different operation (another key, count, dtype or op) "
                           "through shared memory; all ranks must call push/pull in the same order"));
}

// Waits until every rank in `readers` (but this one) marked `r` taken on its slot.
void await_taken(Call& call, ShmChannel& channel, std::span<const int> readers, const Round& r) {
  for (int peer : readers) {
    if (peer == call.rank()) continue;
    shm_wait_for(call, channel, peer, r.slot, r.taken, "acknowledgement");
  }
}

}  // namespace

std::size_t shm_block_elements(const ShmChannel& channel, std::size_t esize) {
  return (channel.slot_bytes() - std::min(channel.slot_bytes(), kHeaderBytes)) / esize;
}

void shm_push(Call& call, ShmChannel& channel, const ShmKey& key, const std::byte* data, double weight,
              std::span<double> weights) {
  const std::size_t esize = key.esize;
  const std::size_t block = shm_block_elements(channel, esize);
  ANTDT_ASSERT(block > 0);
  const std::uint64_t hash = call.signature_hash();
  const std::size_t acc_size = dtype_size(weighted_sum_type(key.dtype));
  std::optional<Round> last;
  for (std::size_t first = 0; first < key.count; first += block) {
    const std::size_t n = std::min(block, key.count - first);
    const Round r = next_round(channel);
    last = r;
    if (key.worker) {
      if (auto prev = earlier(r, 3)) await_taken(call, channel, key.servers, *prev);
      const std::span<std::byte> slot = channel.own_slot(r.slot);
      std::memcpy(slot.data(), &weight, sizeof weight);
      std::memcpy(slot.data() + kHeaderBytes, data + first * esize, n * esize);
      channel.publish(r.slot, r.posted, hash, kHeaderBytes + n * esize);
    }
    if (!key.server) {
      channel.publish(r.slot, r.taken, hash, key.worker ? kHeaderBytes + n * esize : 0);
      continue;
    }
    // This server's part of the block: elements [lo, hi) of the key.
    const std::size_t lo = std::max(first, key.shard_lo), hi = std::min(first + n, key.shard_hi);
    for (std::size_t w = 0; w < key.workers.size(); ++w) {
      const int peer = key.workers[w];
      const std::byte* slot_data;
      if (peer == call.rank()) {
        slot_data = channel.own_slot(r.slot).data();
      } else {
        const ShmChannel::Peek p = shm_wait_for(call, channel, peer, r.slot, r.posted, "pushed block");
        check_same_call(call, p, peer);
        slot_data = p.data.data();
      }
      if (first == 0) {
        std::memcpy(&weights[w], slot_data, sizeof(double));
        check_weight(key.dtype, weights[w], "push (a worker's weight)");
      }
      if (lo < hi)
        accumulate_weighted(key.dtype, key.acc + (lo - key.shard_lo) * acc_size, slot_data + kHeaderBytes + (lo - first) * esize,
                   hi - lo, weights[w], key.first_push && w == 0);
    }
    // Taken: the workers may rewrite their slots three rounds on. (A server
    // that is also a worker keeps its block in the slot.)
    channel.publish(r.slot, r.taken, hash, key.worker ? kHeaderBytes + n * esize : 0);
  }
  // Whatever runs next may rewrite this worker's slots: every server must have read them.
  if (key.worker && last) await_taken(call, channel, key.servers, *last);
}

void shm_pull(Call& call, ShmChannel& channel, const ShmKey& key, const std::byte* shard_result, std::byte* out) {
  const std::size_t esize = key.esize;
  const std::size_t block = shm_block_elements(channel, esize);
  ANTDT_ASSERT(block > 0);
  const std::uint64_t hash = call.signature_hash();
  std::optional<Round> last;
  for (std::size_t first = 0; first < key.count; first += block) {
    const std::size_t n = std::min(block, key.count - first);
    const Round r = next_round(channel);
    last = r;
    if (key.server) {
      if (auto prev = earlier(r, 3)) await_taken(call, channel, key.workers, *prev);
      const std::size_t lo = std::max(first, key.shard_lo), hi = std::min(first + n, key.shard_hi);
      if (lo < hi) {
        std::memcpy(channel.own_slot(r.slot).data() + kHeaderBytes + (lo - first) * esize,
                    shard_result + (lo - key.shard_lo) * esize, (hi - lo) * esize);
        if (key.worker) std::memcpy(out + lo * esize, shard_result + (lo - key.shard_lo) * esize, (hi - lo) * esize);
      }
      channel.publish(r.slot, r.posted, hash, kHeaderBytes + n * esize);
    }
    if (!key.worker) {
      channel.publish(r.slot, r.taken, hash, key.server ? kHeaderBytes + n * esize : 0);
      continue;
    }
    for (const ServerRange& s : key.server_ranges) {
      if (s.rank == call.rank()) continue;
      const std::size_t lo = std::max(first, s.lo), hi = std::min(first + n, s.hi);
      if (lo >= hi) continue;
      const ShmChannel::Peek p = shm_wait_for(call, channel, s.rank, r.slot, r.posted, "pulled block");
      check_same_call(call, p, s.rank);
      std::memcpy(out + lo * esize, p.data.data() + kHeaderBytes + (lo - first) * esize, (hi - lo) * esize);
    }
    channel.publish(r.slot, r.taken, hash, key.server ? kHeaderBytes + n * esize : 0);
  }
  // Whatever runs next may rewrite this server's slots: every worker must have read them.
  if (key.server && last) await_taken(call, channel, key.workers, *last);
}

}  // namespace antdt::coll::pushpull
