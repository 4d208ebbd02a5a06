// A rank's link to an arbiter outside the ranks: the partial collectives'
// arbiter hosted by antdt-coordinator (docs/partial.md#where-the-arbiter-runs),
// so that no rank's death takes the arbiter with it.
//
// The link is a TCP connection to the coordinator's address. The coordinator
// opens every connection with a challenge frame; a rank answers it with an
// arbiter hello instead of a coordinator hello. The hello names the
// communicator (a key both ends derive from its UniqueId, never the id
// itself), the rank and size, who the rank is (pid and host, for messages),
// and the arbiter settings of the rank's configuration (the ranks', not the
// coordinator's environment, decide them as with an arbiter in rank 0); its
// MAC proves the job secret: HMAC-SHA256(secret, "antdt-arbiter-v1" ||
// challenge frame || the hello's fields). The MAC covers the challenge frame
// as sent, so this layer needs nothing of the coordinator's wire format.
// After an accepted answer the link carries the partial protocol's frames.
#pragma once

#include "core/control.hpp"
#include "core/net.hpp"
#include "core/wire_codec.hpp"
#include "collectives/partial/arbiter.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace antdt::coll::partial {

inline constexpr std::uint32_t kArbiterLinkMagic = 0x41544441;  // "ADTA"
inline constexpr std::uint16_t kArbiterLinkVersion = 1;
inline constexpr std::size_t kMaxChallengeBytes = 256;
inline constexpr std::size_t kMaxWhoBytes = 256;
// No communicator has more ranks than this (the arbiter keeps per-rank state).
inline constexpr std::uint32_t kMaxArbiterRanks = 1u << 20;

using GroupKey = std::array<std::byte, 16>;

// Which communicator a link belongs to: the same on every rank of it,
// different for every UniqueId (a keyed hash of the id's bytes).
GroupKey group_key_of(std::span<const std::byte> unique_id);

struct ArbiterHello {
  GroupKey key{};
  std::uint32_t rank = 0;
  std::uint32_t size = 0;
  std::string who;  // "pid 123 on host h"
  // The rank's arbiter settings (ArbiterConfig without the callbacks).
  std::uint64_t result_cache = 4;
  double quorum = 0.5;
  double grace_s = 0;
  std::uint32_t warmup_steps = 5;
  std::uint64_t monitor_window = 64;
  double monitor_alpha = 0.3;
  double monitor_theta = 1.5;
  std::uint32_t monitor_short_steps = 10;
  double monitor_grace_margin = 2.0;
  wire::Hmac mac{};

  // The settings as an ArbiterConfig for `size` ranks (describe_rank unset).
  ArbiterConfig config() const;
};

// A hello for this rank from its configuration (mac unset).
ArbiterHello make_arbiter_hello(const GroupKey& key, int rank, int size, const ArbiterConfig& cfg);

// Whether a frame is an arbiter link's (its magic), before decoding it.
bool is_arbiter_hello(std::span<const std::byte> frame) noexcept;
wire::Bytes encode(const ArbiterHello& hello);
// BootstrapError naming what is wrong: bad magic, version or kind, truncation,
// trailing bytes, rank out of range, settings out of their ranges.
ArbiterHello decode_arbiter_hello(std::span<const std::byte> frame);

wire::Hmac prove_arbiter_hello(std::span<const std::byte> secret, std::span<const std::byte> challenge,
                               const ArbiterHello& hello);
bool verify_arbiter_hello(std::span<const std::byte> secret, std::span<const std::byte> challenge,
                          const ArbiterHello& hello);

// The arbiter's answer to a hello.
struct ArbiterAnswer {
  bool accepted = false;
  std::string reason;  // why refused
};
wire::Bytes encode(const ArbiterAnswer& answer);
ArbiterAnswer decode_arbiter_answer(std::span<const std::byte> frame);

// Connects rank `hello.rank` to the arbiter at `address` and proves `secret`.
// TimeoutError past the deadline, BootstrapError naming the address when the
// arbiter refuses (the reason) or answers garbage, TransportError when the
// connection breaks.
net::Fd connect_to_arbiter(const net::Endpoint& address, std::span<const std::byte> secret, ArbiterHello hello,
                           net::Clock::time_point deadline);

}  // namespace antdt::coll::partial
