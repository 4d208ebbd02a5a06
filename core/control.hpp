// The control plane: small framed messages between every rank and the arbiter
// (a thread of rank 0, or a standalone coordinator), over stream sockets.
//
// Why sockets and not the data transport: the arbiter must decide while rank
// 0's training thread is busy computing, so it runs on its own thread, blocked
// in poll() until a rank writes. The bootstrap already left an authenticated
// TCP connection from every rank to rank 0; in-process groups use socketpairs.
// Control traffic is a few dozen bytes per rank and step.
#pragma once

#include "core/net.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace antdt::control {

using Bytes = std::vector<std::byte>;
using Deadline = net::Clock::time_point;

inline constexpr std::uint32_t kFrameMagic = 0x4b544441;  // "ADTK"
inline constexpr std::size_t kMaxFrameBytes = std::size_t{16} << 20;

// One end of a connection: length-prefixed frames.
class Link {
 public:
  Link() = default;
  explicit Link(net::Fd fd) : fd_(std::move(fd)) {}
  explicit operator bool() const noexcept { return static_cast<bool>(fd_); }
  int fd() const noexcept { return fd_.get(); }
  // The descriptor, handed on (the link is empty after).
  net::Fd release() noexcept { return std::move(fd_); }

  void send(std::span<const std::byte> payload, Deadline deadline);
  // One whole frame; nullopt when nothing started to arrive before the deadline.
  // Throws TransportError when the other side closed, BootstrapError on garbage.
  std::optional<Bytes> receive(Deadline deadline);

 private:
  net::Fd fd_;
};

// The arbiter's side: one link per rank (index = rank), waited on together.
class Hub {
 public:
  explicit Hub(std::vector<net::Fd> links);
  int size() const noexcept { return static_cast<int>(links_.size()); }
  // Links not yet seen closed.
  int open_count() const noexcept { return static_cast<int>(std::count(open_.begin(), open_.end(), true)); }
  void send(int rank, std::span<const std::byte> payload, Deadline deadline);

  struct Message {
    int rank = -1;
    Bytes payload;
    bool closed = false;  // the rank's side closed (its process ended or destroyed its communicator)
  };
  // The next frame from any rank, or nullopt at the deadline or after wake().
  std::optional<Message> receive_any(Deadline deadline);
  // Thread-safe: makes a blocked receive_any return promptly.
  void wake() noexcept;

 private:
  std::vector<Link> links_;
  std::vector<bool> open_;
  net::Fd wake_fd_;  // eventfd
  std::size_t next_ = 0;  // round-robin start, so one chatty rank cannot starve the others
};

// A connected pair of stream sockets (in-process groups, and rank 0's own link to its arbiter).
std::pair<net::Fd, net::Fd> socket_pair();

// What a rank holds of the control plane.
struct Endpoints {
  net::Fd client;               // this rank's link to the arbiter
  std::vector<net::Fd> server;  // rank 0 only: the arbiter's link to every rank (index = rank)
  // The communicator's UniqueId, for a link to an arbiter outside the ranks
  // (collectives/partial/arbiter_link.hpp); empty when it was made without one.
  std::vector<std::byte> unique_id;
  explicit operator bool() const noexcept { return static_cast<bool>(client); }
};

// Endpoints for a group of ranks in one process: element r goes to rank r.
std::vector<Endpoints> make_inproc_endpoints(int size);

}  // namespace antdt::control
