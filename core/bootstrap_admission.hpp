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
#include <functional>
#include <cstddef>
#include <span>
#include <vector>

namespace antdt {

// Handshakes in progress at once, by default. Why this many: a rank's
// connection is dropped only once this many newer ones arrived before its
// hello, so the cap is what an attacker must keep opening to push ranks out.
// At 64, 1 000 connections reopened as fast as they were closed pushed
// legitimate ranks out again and again (their start took seconds,
// perf/antdt_flood_perf); at 1024, 1 000 such connections push out none. A
// handshake costs a descriptor and some 200 bytes.
inline constexpr std::size_t kDefaultMaxPending = 1024;

// The cap that fits the descriptor limit: raises this process's soft
// RLIMIT_NOFILE towards its hard limit so that `wanted` connections fit beside
// a reserve of 256 for the rest of the process; returns `wanted`, or less
// (at least 16) when the hard limit is lower.
std::size_t fit_pending_cap(std::size_t wanted);

struct AdmissionLimits {
  std::chrono::milliseconds handshake{5000};  // per connection, from its accept
  std::size_t max_pending = 64;               // handshakes in progress at once
  // The cap for a job of `size` ranks: kDefaultMaxPending or `size` (room for
  // every rank connecting at once), whichever is larger, fitted to the
  // descriptor limit (fit_pending_cap).
  static AdmissionLimits for_size(int size);
};

// Accepts on `listener` until ranks 1..size-1 proved `secret` and got their
// verdict; returns their connections, index = rank (index 0 empty). Refused
// and dropped connections are logged and closed. TimeoutError naming the
// missing ranks at `deadline` (`timeout` is only for the message).
// `still_wanted`, when given, is called about every 200 ms while ranks are
// missing; it throws to give the communicator up (its generation was
// abandoned: a member died before it connected).
std::vector<net::Fd> admit_ranks(int listener, std::span<const std::byte> secret, int size,
                                 net::Clock::time_point deadline, std::chrono::milliseconds timeout,
                                 const AdmissionLimits& limits, const std::function<void()>& still_wanted = {});

}  // namespace antdt
