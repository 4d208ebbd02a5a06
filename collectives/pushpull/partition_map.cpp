// The push-pull partition map (collectives/pushpull/partition_map.hpp).
#include "collectives/pushpull/partition_map.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"

#include <algorithm>
#include <limits>
#include <unordered_set>

namespace antdt::coll::pushpull {

std::size_t range_owner(std::size_t first, std::size_t count, std::size_t total, std::size_t owners) {
  const double midpoint = (static_cast<double>(first) + static_cast<double>(count) / 2) / static_cast<double>(total);
  return std::min(owners - 1, static_cast<std::size_t>(midpoint * static_cast<double>(owners)));
}

std::vector<std::pair<std::size_t, std::size_t>> split(std::size_t count, std::size_t esize,
                                                       std::size_t partition_bytes) {
  std::vector<std::pair<std::size_t, std::size_t>> parts;
  if (count == 0) return parts;
  const std::size_t per_part = std::max<std::size_t>(1, partition_bytes / esize);  // elements
  const std::size_t n = count / per_part + (count % per_part != 0 ? 1 : 0);
  const std::size_t base = count / n, extra = count % n;
  std::size_t first = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = base + (i < extra ? 1 : 0);
    parts.emplace_back(first, c);
    first += c;
  }
  return parts;
}

PartitionMap PartitionMap::make(std::span<const PushPullKey> keys, std::span<const int> servers, int nranks,
                                std::size_t partition_bytes, std::size_t chunk_bytes) {
  ANTDT_CHECK_ARG(partition_bytes >= 4096, "push-pull: partition size must be at least 4096 bytes, got ",
                  partition_bytes);
  ANTDT_CHECK_ARG(chunk_bytes >= 1, "push-pull: chunk size must be at least 1 byte");
  PartitionMap map;
  map.partition_bytes = partition_bytes;
  map.chunk_bytes = chunk_bytes;
  for (int s : servers) {
    ANTDT_CHECK_ARG(s >= 0 && s < nranks, "push-pull: server rank ", s, " is out of range [0, ", nranks, ")");
    map.servers.push_back(s);
  }
  std::sort(map.servers.begin(), map.servers.end());
  ANTDT_CHECK_ARG(std::adjacent_find(map.servers.begin(), map.servers.end()) == map.servers.end(),
                  "push-pull: a server rank is listed twice");
  if (map.servers.empty()) {
    for (int r = 0; r < nranks; ++r) map.servers.push_back(r), map.workers.push_back(r);
  } else {
    for (int r = 0; r < nranks; ++r)
      if (!std::binary_search(map.servers.begin(), map.servers.end(), r)) map.workers.push_back(r);
    ANTDT_CHECK_ARG(!map.workers.empty(), "push-pull: every one of the ", nranks,
                    " ranks is a dedicated server; at least one rank must be a worker");
  }

  std::unordered_set<std::uint64_t> seen;
  for (const auto& k : keys) {
    check_dtype(k.dtype);
    ANTDT_CHECK_ARG(seen.insert(k.key).second, "push-pull: key ", k.key, " is registered twice");
    const std::size_t esize = dtype_size(k.dtype);
    ANTDT_CHECK_ARG(k.count <= std::numeric_limits<std::size_t>::max() / esize, "push-pull: key ", k.key, " count ",
                    k.count, " overflows size_t bytes");
    map.keys.push_back(KeyEntry{k, esize, 0, 0});
  }
  std::sort(map.keys.begin(), map.keys.end(), [](const auto& a, const auto& b) { return a.spec.key < b.spec.key; });

  // Partitions in key order, then their byte ranges spread over the servers.
  std::vector<std::size_t> offsets;  // byte offset of each partition in the concatenated table
  std::size_t total = 0;
  for (std::size_t ki = 0; ki < map.keys.size(); ++ki) {
    auto& e = map.keys[ki];
    e.first_partition = map.partitions.size();
    for (auto [first, count] : split(e.spec.count, e.esize, partition_bytes)) {
      map.partitions.push_back(Partition{ki, first, count, -1});
      offsets.push_back(total);
      ANTDT_CHECK_ARG(total <= std::numeric_limits<std::size_t>::max() - count * e.esize,
                      "push-pull: the key table's total size overflows size_t");
      total += count * e.esize;
    }
    e.partitions = map.partitions.size() - e.first_partition;
  }
  for (std::size_t p = 0; p < map.partitions.size(); ++p) {
    auto& part = map.partitions[p];
    const std::size_t bytes = part.count * map.keys[part.key_index].esize;
    part.server = map.servers[range_owner(offsets[p], bytes, total, map.servers.size())];
  }
  for (auto& e : map.keys) {
    e.first_piece = map.pieces.size();
    const std::size_t per_piece = std::max<std::size_t>(1, chunk_bytes / e.esize);  // elements
    for (std::size_t p = e.first_partition; p < e.first_partition + e.partitions; ++p) {
      const auto& part = map.partitions[p];
      for (std::size_t off = 0; off < part.count; off += per_piece)
        map.pieces.push_back(Piece{part.first + off, std::min(per_piece, part.count - off), part.server, p});
    }
    e.pieces = map.pieces.size() - e.first_piece;
  }
  return map;
}

std::size_t PartitionMap::key_index(std::uint64_t key) const {
  auto it = std::lower_bound(keys.begin(), keys.end(), key, [](const auto& e, std::uint64_t k) { return e.spec.key < k; });
  ANTDT_CHECK_ARG(it != keys.end() && it->spec.key == key, "push-pull: key ", key, " is not in the table");
  return static_cast<std::size_t>(it - keys.begin());
}

std::span<const Partition> PartitionMap::partitions_of(std::size_t key_index) const {
  const auto& e = keys[key_index];
  return std::span(partitions).subspan(e.first_partition, e.partitions);
}

std::span<const Piece> PartitionMap::pieces_of(std::size_t key_index) const {
  const auto& e = keys[key_index];
  return std::span(pieces).subspan(e.first_piece, e.pieces);
}

std::uint64_t PartitionMap::hash() const noexcept {
  // antdt::hash: inside this member, `hash` alone names it.
  using antdt::hash::mix;
  std::uint64_t h = mix(antdt::hash::kSeed, keys.size());
  for (const auto& e : keys) h = mix(mix(mix(h, e.spec.key), e.spec.count), static_cast<std::uint64_t>(e.spec.dtype));
  h = mix(mix(mix(h, partition_bytes), chunk_bytes), servers.size());
  for (int s : servers) h = mix(h, static_cast<std::uint64_t>(s));
  return h;
}

}  // namespace antdt::coll::pushpull
