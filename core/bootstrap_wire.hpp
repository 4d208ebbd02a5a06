// The bootstrap's wire format. Every message starts with an 8-byte prefix
// (magic, version, kind); all integers are little-endian. Parsers check every
// length and field and throw BootstrapError on garbage (tests/fuzz covers them).
#pragma once

#include <antdt/comm.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace antdt::wire {

inline constexpr std::uint32_t kMagic = 0x42544441;  // "ADTB"
inline constexpr std::uint16_t kVersion = 1;
inline constexpr std::size_t kMaxFrameBytes = std::size_t{64} << 20;
inline constexpr std::size_t kMaxReasonBytes = 256;
inline constexpr std::size_t kNonceBytes = 16;
inline constexpr std::size_t kMacBytes = 32;  // HMAC-SHA256

enum class Kind : std::uint16_t { challenge = 1, hello = 2, verdict = 3, contribution = 4, gathered = 5 };

struct Challenge {
  std::array<std::byte, kNonceBytes> nonce{};
};
struct Hello {
  std::uint32_t rank = 0;
  std::uint32_t size = 0;
  std::array<std::byte, kMacBytes> mac{};
};
struct Verdict {
  bool accepted = false;
  std::string reason;  // why refused
};

inline constexpr std::size_t kPrefixBytes = 8;
inline constexpr std::size_t kChallengeBytes = kPrefixBytes + kNonceBytes;
inline constexpr std::size_t kHelloBytes = kPrefixBytes + 8 + kMacBytes;
inline constexpr std::size_t kVerdictHeadBytes = kPrefixBytes + 8;  // accepted u32, reason length u32
inline constexpr std::size_t kFrameHeadBytes = kPrefixBytes + 8;    // payload length u64

std::vector<std::byte> encode(const Challenge& c);
std::vector<std::byte> encode(const Hello& h);
std::vector<std::byte> encode(const Verdict& v);
// Frame head of a contribution or gathered payload.
std::array<std::byte, kFrameHeadBytes> encode_frame_head(Kind kind, std::uint64_t payload_bytes);

Challenge decode_challenge(std::span<const std::byte> bytes);
Hello decode_hello(std::span<const std::byte> bytes);
// Head of a verdict: (accepted, reason length) — the reason follows.
std::pair<bool, std::size_t> decode_verdict_head(std::span<const std::byte> bytes);
std::uint64_t decode_frame_head(Kind expected, std::span<const std::byte> bytes);

// Gathered payload: for each rank, u64 length then bytes.
std::vector<std::byte> encode_gathered(const std::vector<std::vector<std::byte>>& parts);
std::vector<std::vector<std::byte>> decode_gathered(std::span<const std::byte> bytes, std::size_t expected_parts);

// MAC proving knowledge of the job secret: HMAC-SHA256(secret, nonce || rank || size).
std::array<std::byte, kMacBytes> prove(std::span<const std::byte> secret, const Challenge& c, std::uint32_t rank,
                                       std::uint32_t size);
bool verify(std::span<const std::byte> secret, const Challenge& c, const Hello& h);

}  // namespace antdt::wire
