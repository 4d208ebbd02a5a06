// The epoch's sample order (scheduler/dds_sample_order.hpp).
#include "scheduler/dds_sample_order.hpp"

#include "core/hash.hpp"

namespace antdt::sched {
namespace {

// A keyed bijection of [0, n): a balanced 4-round Feistel network over the
// smallest even bit width covering n, with cycle walking back into [0, n).
// The domain is below 4n, so a position walks fewer than 4 times on average.
std::uint64_t permute(std::uint64_t x, std::uint64_t n, std::uint64_t key) noexcept {
  if (n <= 1) return x;
  int bits = 0;
  while (bits < 64 && (std::uint64_t{1} << bits) < n) ++bits;
  if (bits % 2 != 0) ++bits;
  if (bits < 2) bits = 2;
  const int half = bits / 2;
  const std::uint64_t mask = (std::uint64_t{1} << half) - 1;
  do {
    std::uint64_t left = x >> half, right = x & mask;
    for (std::uint64_t round = 0; round < 4; ++round) {
      const std::uint64_t f = hash::splitmix64(right ^ hash::splitmix64(key + round)) & mask;
      const std::uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= n);
  return x;
}

}  // namespace

std::uint64_t shuffled_sample(std::uint64_t n, const DdsOptions& options, std::uint32_t epoch,
                              std::uint64_t position) noexcept {
  const std::uint64_t key = hash::splitmix64(options.seed ^ hash::splitmix64(std::uint64_t{epoch} + 1));
  switch (options.shuffle) {
    case ShuffleMode::none: return position;
    case ShuffleMode::samples: return permute(position, n, key);
    case ShuffleMode::blocks: {
      // Full blocks change places; a short last block stays last.
      const std::uint64_t size = options.shard_size;
      const std::uint64_t full = n / size;
      if (position >= full * size) return position;
      return permute(position / size, full, key) * size + position % size;
    }
  }
  return position;
}

}  // namespace antdt::sched
