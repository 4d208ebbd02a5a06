// Push and pull of one key through the node-local shared-memory area
// (pushpull_shm.cpp says how; docs/collectives.md#push-pull-through-shared-memory),
// used instead of messages when every rank of the communicator is on one node.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/call.hpp"
#include "core/shm_channel.hpp"

#include <cstddef>
#include <span>

namespace antdt::coll::pushpull {

// One server's element range [lo, hi) of a key.
struct ServerRange {
  int rank = -1;
  std::size_t lo = 0, hi = 0;
};

// What a shared-memory push or pull of one key needs from this rank's state.
struct ShmKey {
  DataType dtype = DataType::f32;
  std::size_t esize = 0, count = 0;
  bool worker = false;                     // this rank pushes and pulls the key
  bool server = false;                     // this rank serves a non-empty range of the key
  std::span<const int> workers, servers;   // ascending; servers: every server of the partition map
  std::span<const ServerRange> server_ranges;  // the key's servers with a non-empty range
  std::size_t shard_lo = 0, shard_hi = 0;  // this server's range
  std::byte* acc = nullptr;                // push: this server's aggregate (weighted_sum_type elements)
  bool first_push = false;                 // push: the first of the round (the aggregate restarts)
};

// Elements of a block (a slot less its header).
std::size_t shm_block_elements(const ShmChannel& channel, std::size_t esize);
// push: `data` is the worker's tensor (ignored on a dedicated server); a
// server adds its range into key.acc and gets each worker's weight in
// `weights` (indexed like key.workers).
void shm_push(Call& call, ShmChannel& channel, const ShmKey& key, const std::byte* data, double weight,
              std::span<double> weights);
// pull: a server offers `shard_result` (its range, finished, dtype elements);
// a worker gets the whole key in `out`.
void shm_pull(Call& call, ShmChannel& channel, const ShmKey& key, const std::byte* shard_result,
              std::byte* out);

}  // namespace antdt::coll::pushpull
