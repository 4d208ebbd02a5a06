// Small RAII helpers over POSIX TCP sockets, used by the bootstrap and the
// control plane. Every blocking operation takes a deadline and fails with
// TimeoutError; the *_some/accept_pending calls never block, for servers that
// serve many connections from one poll() loop.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace antdt::net {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const noexcept { return fd_; }
  int release() noexcept { int f = fd_; fd_ = -1; return f; }
  void reset() noexcept;
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct Endpoint {
  std::string host;  // numeric address
  std::uint16_t port = 0;
  std::string to_string() const;
};

// Parses "host:port" or "[v6]:port"; host names are resolved to a numeric address.
Endpoint parse_endpoint(const std::string& text);
// Binds and listens on host:port (port 0 = any); returns the socket and the bound endpoint.
Fd listen_on(const std::string& host, std::uint16_t port, Endpoint* bound);
// The address other hosts should use to reach this one: the first non-loopback
// IPv4 interface address that is up, else 127.0.0.1.
std::string default_host_address();
// Connects, retrying refused connections until the deadline. With `refused`,
// a refused connection is not tried again: an invalid Fd and *refused = true.
Fd connect_to(const Endpoint& ep, Clock::time_point deadline, bool* refused = nullptr);
// Accepts one connection; an invalid Fd when the deadline passed.
Fd accept_until(int listen_fd, Clock::time_point deadline, std::string* peer);

// Makes accept() on a listener return at once when the connection poll() saw is gone.
void set_nonblocking(int fd);
// Accepts one connection waiting on a non-blocking listener; an invalid Fd when
// none waits. BootstrapError when the process is out of descriptors or memory
// (the caller frees some, e.g. drops a connection, rather than spin on poll()).
Fd accept_pending(int listen_fd, std::string* peer);
// Writes what the socket takes now; returns the bytes written (0: its buffer is full).
// BootstrapError when the connection is gone.
std::size_t send_some(int fd, std::span<const std::byte> data);
// Reads what has arrived, up to data.size(); returns the bytes read (0: nothing yet).
// BootstrapError when the peer closed or the connection is gone.
std::size_t recv_some(int fd, std::span<std::byte> data);

void send_all(int fd, std::span<const std::byte> data, Clock::time_point deadline);
// Reads exactly data.size() bytes; throws BootstrapError on EOF, TimeoutError on deadline.
void recv_all(int fd, std::span<std::byte> data, Clock::time_point deadline);

}  // namespace antdt::net
