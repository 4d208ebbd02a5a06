// The bootstrap root's admission of ranks: the challenge/response of
// core/bootstrap_wire.hpp with every connection at once.
//
// Why not one connection after another: a connection needs no secret to open,
// so anyone who can reach the root could hold it for a whole handshake timeout
// per connection and no job could start. Here one poll() loop drives every
// handshake in progress without blocking, each with its own deadline, and the
// number in progress is capped (the oldest goes first: a real rank answers its
// challenge within a round trip, so the oldest is the likeliest to be idle).
#pragma once

#include "core/net.hpp"

#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

namespace antdt {

struct AdmissionLimits {
  std::chrono::milliseconds handshake{5000};  // per connection, from its accept
  std::size_t max_pending = 64;               // handshakes in progress at once
  // The cap for a job of `size` ranks: room for all of them connecting at once.
  static AdmissionLimits for_size(int size);
};

// Accepts on `listener` until ranks 1..size-1 proved `secret` and got their
// verdict; returns their connections, index = rank (index 0 empty). Refused
// and dropped connections are logged and closed. TimeoutError naming the
// missing ranks at `deadline` (`timeout` is only for the message).
std::vector<net::Fd> admit_ranks(int listener, std::span<const std::byte> secret, int size,
                                 net::Clock::time_point deadline, std::chrono::milliseconds timeout,
                                 const AdmissionLimits& limits);

}  // namespace antdt
