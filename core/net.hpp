// Small RAII helpers over POSIX TCP sockets, used only by the bootstrap.
// Every blocking operation takes a deadline and fails with TimeoutError.
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
// Connects, retrying refused connections until the deadline.
Fd connect_to(const Endpoint& ep, Clock::time_point deadline);
// Accepts one connection; an invalid Fd when the deadline passed.
Fd accept_until(int listen_fd, Clock::time_point deadline, std::string* peer);

void send_all(int fd, std::span<const std::byte> data, Clock::time_point deadline);
// Reads exactly data.size() bytes; throws BootstrapError on EOF, TimeoutError on deadline.
void recv_all(int fd, std::span<std::byte> data, Clock::time_point deadline);

}  // namespace antdt::net
