// The library's one non-cryptographic hash: a 64-bit value built from 64-bit
// words (or text), the same in every process and build (ranks compare such
// hashes to check that they agree: call signatures, push-pull partitions,
// v-counts, shared-memory segment names, node keys). Not for anything an
// attacker chooses to collide: the bootstrap and the coordinator authenticate
// with HMAC (OpenSSL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

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

// Folds the bytes of `text` into h, eight to a word (the first byte least
// significant, the last word padded with zeros), then the length, so that
// texts differing only by trailing zero bytes still hash apart.
constexpr std::uint64_t mix_text(std::uint64_t h, std::string_view text) noexcept {
  std::uint64_t word = 0;
  std::size_t filled = 0;
  for (const char c : text) {
    word |= std::uint64_t{static_cast<unsigned char>(c)} << (8 * filled);
    if (++filled == 8) {
      h = mix(h, word);
      word = 0;
      filled = 0;
    }
  }
  if (filled != 0) h = mix(h, word);
  return mix(h, text.size());
}

// SplitMix64's finaliser: a fixed, portable mixing of one word, for what must
// mean the same on every platform and in every version: the DDS's per-epoch
// sample order (checkpoints store positions in it) and ANTDT_INJECT's spikes
// (pure functions of seed, rank and step). Its values must never change.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A hash that is never 0, for fields where 0 means "none".
constexpr std::uint64_t nonzero(std::uint64_t h) noexcept { return h == 0 ? 1 : h; }

}  // namespace antdt::hash
