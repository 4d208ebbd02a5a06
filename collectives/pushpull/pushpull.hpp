// Push-pull (parameter-server mode) internals: the key table's layout over
// the servers, and the weighted aggregation kernels. The public class is in
// include/antdt/pushpull.hpp; docs/collectives.md#push-pull has the design.
#pragma once

#include <antdt/pushpull.hpp>

#include "collectives/call.hpp"
#include "core/shm_channel.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace antdt::coll::pushpull {

struct Partition {
  std::size_t key_index = 0;  // into Layout::keys
  std::size_t first = 0;      // first element of the key
  std::size_t count = 0;      // elements
  int server = -1;            // rank
};

// The unit of transfer: a partition is sent in pieces of at most the
// communicator's chunk size (ANTDT_CHUNK_BYTES), so that a server adds one
// piece while the next is still in flight.
struct Piece {
  std::size_t first = 0;      // first element of the key
  std::size_t count = 0;      // elements
  int server = -1;            // its partition's server
  std::size_t partition = 0;  // into Layout::partitions
};

struct KeyEntry {
  PushPullKey spec;
  std::size_t esize = 0;
  std::size_t first_partition = 0;  // into Layout::partitions
  std::size_t partitions = 0;
  std::size_t first_piece = 0;      // into Layout::pieces
  std::size_t pieces = 0;
};

// Keys sorted by id; each key cut into partitions of at most partition_bytes
// (equal sizes, element-aligned); the partitions, in key order, spread by
// range over the servers in rank order, balanced by bytes. A server therefore
// holds one contiguous element range of each key.
struct Layout {
  std::vector<KeyEntry> keys;
  std::vector<Partition> partitions;
  std::vector<Piece> pieces;
  std::vector<int> servers;  // ascending
  std::vector<int> workers;  // ascending
  std::size_t partition_bytes = 0;
  std::size_t chunk_bytes = 0;

  // Validates keys and options (InvalidArgument naming the fault).
  static Layout make(std::span<const PushPullKey> keys, std::span<const int> servers, int nranks,
                     std::size_t partition_bytes, std::size_t chunk_bytes);
  // Index into keys; InvalidArgument for an unknown key.
  std::size_t key_index(std::uint64_t key) const;
  std::span<const Partition> partitions_of(std::size_t key_index) const;
  std::span<const Piece> pieces_of(std::size_t key_index) const;
  // What every rank must agree on (keys, counts, dtypes, partitioning, chunking, servers).
  std::uint64_t hash() const noexcept;
};

// Cuts `count` elements of `esize` bytes into parts of at most
// `partition_bytes` (at least one element each): {first, count} pairs.
std::vector<std::pair<std::size_t, std::size_t>> split(std::size_t count, std::size_t esize,
                                                       std::size_t partition_bytes);

// Checks that `weight` suits `t` (finite, >= 0; integral for integer dtypes).
void check_weight(DataType t, double weight, const char* what);
// Aggregates are kept in weighted_sum_type(t), added to with
// accumulate_weighted and finished with finish_weighted (core/dtype.hpp).
// True when finish_weighted for (t, op) is a plain copy, so acc can be sent as it is.
bool finish_is_copy(DataType t, ReduceOp op) noexcept;

// ---- Push and pull through shared memory (pushpull_shm.cpp) ----
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
  std::span<const int> workers, servers;   // ascending; servers: every server of the layout
  std::span<const ServerRange> server_ranges;  // the key's servers with a non-empty range
  std::size_t shard_lo = 0, shard_hi = 0;  // this server's range
  std::byte* acc = nullptr;                // push: this server's aggregate (weighted_sum_type elements)
  bool first_push = false;                 // push: the first of the round (the aggregate restarts)
};
// Elements of a block (a slot less its header).
std::size_t shm_block_elements(const detail::ShmChannel& channel, std::size_t esize);
// push: `data` is the worker's tensor (ignored on a dedicated server); a
// server adds its range into key.acc and gets each worker's weight in
// `weights` (indexed like key.workers).
void shm_push(Call& call, detail::ShmChannel& channel, const ShmKey& key, const std::byte* data, double weight,
              std::span<double> weights);
// pull: a server offers `shard_result` (its range, finished, dtype elements);
// a worker gets the whole key in `out`.
void shm_pull(Call& call, detail::ShmChannel& channel, const ShmKey& key, const std::byte* shard_result,
              std::byte* out);

}  // namespace antdt::coll::pushpull
