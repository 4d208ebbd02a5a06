// The push-pull partition map: which server aggregates which element range of
// each key of the table, and the pieces those ranges travel in. Every rank
// builds the same map from the same table and options (PartitionMap::hash()
// checks that). docs/collectives.md#push-pull has the design.
#pragma once

#include <antdt/pushpull.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace antdt::coll::pushpull {

struct Partition {
  std::size_t key_index = 0;  // into PartitionMap::keys
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
  std::size_t partition = 0;  // into PartitionMap::partitions
};

struct KeyEntry {
  PushPullKey spec;
  std::size_t esize = 0;
  std::size_t first_partition = 0;  // into PartitionMap::partitions
  std::size_t partitions = 0;
  std::size_t first_piece = 0;      // into PartitionMap::pieces
  std::size_t pieces = 0;
};

// Keys sorted by id; each key cut into partitions of at most partition_bytes
// (equal sizes, element-aligned); the partitions, in key order, spread by
// range over the servers in rank order, balanced by bytes. A server therefore
// holds one contiguous element range of each key.
struct PartitionMap {
  std::vector<KeyEntry> keys;
  std::vector<Partition> partitions;
  std::vector<Piece> pieces;
  std::vector<int> servers;  // ascending
  std::vector<int> workers;  // ascending
  std::size_t partition_bytes = 0;
  std::size_t chunk_bytes = 0;

  // Validates keys and options (InvalidArgument naming the fault).
  static PartitionMap make(std::span<const PushPullKey> keys, std::span<const int> servers, int nranks,
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

// Range ownership: of `owners` owners spreading `total` units (bytes or
// elements) by range, the one (0 .. owners - 1) whose range holds the
// midpoint of the part [first, first + count).
std::size_t range_owner(std::size_t first, std::size_t count, std::size_t total, std::size_t owners);

}  // namespace antdt::coll::pushpull
