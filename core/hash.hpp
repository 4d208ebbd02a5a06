// The library's one non-cryptographic hash: a 64-bit value built from 64-bit
// words, the same in every process and build (ranks compare such hashes to
// check that they agree: call signatures, push-pull partitions, v-counts,
// shared-memory segment names). Not for anything an attacker chooses to
// collide: the bootstrap and the coordinator authenticate with HMAC (OpenSSL).
#pragma once

#include <cstdint>
#include <span>

namespace antdt::hash {

// Where every hash starts (the FNV-1a offset basis: any fixed odd value would do).
inline constexpr std::uint64_t kSeed = 0xcbf29ce484222325ULL;

// Folds one word into h: one multiply-xorshift round (the finaliser of
// MurmurHash3's 64-bit variant). A few cycles per word, where the byte-wise
// FNV it replaced took ~50 ns per call signature, a third of an 8-byte
// shared-memory AllReduce.
constexpr std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  h ^= v;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

// Folds every word of `words` into h, in order.
constexpr std::uint64_t mix(std::uint64_t h, std::span<const std::uint64_t> words) noexcept {
  for (std::uint64_t w : words) h = mix(h, w);
  return h;
}

// A hash that is never 0, for fields where 0 means "none".
constexpr std::uint64_t nonzero(std::uint64_t h) noexcept { return h == 0 ? 1 : h; }

}  // namespace antdt::hash
