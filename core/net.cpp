#include "core/net.hpp"

#include "core/error.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace antdt::net {
namespace {

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000));
}

// Waits until fd is ready for `events`; false when the deadline passed.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = remaining_ms(deadline);
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) raise<BootstrapError>("poll failed: ", std::strerror(errno));
    if (rc == 0 && Clock::now() >= deadline) return false;
  }
}

struct sockaddr_storage to_sockaddr(const Endpoint& ep, socklen_t* len) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, ep.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(ep.port);
    *len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, ep.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(ep.port);
    *len = sizeof(sockaddr_in6);
  } else {
    raise<BootstrapError>("not a numeric IP address: '", ep.host, "'");
  }
  return ss;
}

std::string numeric_host(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  else if (sa->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

void set_common_options(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void Fd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string Endpoint::to_string() const {
  return host.find(':') != std::string::npos ? cat("[", host, "]:", port) : cat(host, ":", port);
}

Endpoint parse_endpoint(const std::string& text) {
  std::string host, port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      raise<ConfigError>("'", text, "' is not host:port");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) raise<ConfigError>("'", text, "' is not host:port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 1 || p > 65535)
    raise<ConfigError>("'", text, "': port must be an integer in [1, 65535]");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) raise<BootstrapError>("cannot resolve host '", host, "': ", ::gai_strerror(rc));
  Endpoint ep{numeric_host(res->ai_addr), static_cast<std::uint16_t>(p)};
  ::freeaddrinfo(res);
  return ep;
}

Fd listen_on(const std::string& host, std::uint16_t port, Endpoint* bound) {
  socklen_t len = 0;
  sockaddr_storage ss = to_sockaddr(Endpoint{host, port}, &len);
  Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) raise<BootstrapError>("socket() failed: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
    raise<BootstrapError>("cannot bind bootstrap listener to ", Endpoint{host, port}.to_string(), ": ",
                          std::strerror(errno));
  if (::listen(fd.get(), 1024) != 0) raise<BootstrapError>("listen() failed: ", std::strerror(errno));
  if (bound) {
    sockaddr_storage got{};
    socklen_t got_len = sizeof got;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&got), &got_len);
    bound->host = host;
    bound->port = ntohs(got.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&got)->sin_port
                                                 : reinterpret_cast<sockaddr_in6*>(&got)->sin6_port);
  }
  return fd;
}

std::string default_host_address() {
  ifaddrs* list = nullptr;
  std::string found = "127.0.0.1";
  if (::getifaddrs(&list) != 0) return found;
  for (ifaddrs* it = list; it; it = it->ifa_next) {
    if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET) continue;
    if (!(it->ifa_flags & IFF_UP) || (it->ifa_flags & IFF_LOOPBACK)) continue;
    found = numeric_host(it->ifa_addr);
    break;
  }
  ::freeifaddrs(list);
  return found;
}

Fd connect_to(const Endpoint& ep, Clock::time_point deadline, bool* refused) {
  socklen_t len = 0;
  sockaddr_storage ss = to_sockaddr(ep, &len);
  auto backoff = std::chrono::milliseconds(5);
  std::string last_error = "no attempt";
  while (Clock::now() < deadline) {
    Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) raise<BootstrapError>("socket() failed: ", std::strerror(errno));
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) == 0) {
      set_common_options(fd.get());
      return fd;
    }
    if (refused != nullptr && errno == ECONNREFUSED) {
      *refused = true;
      return Fd{};
    }
    last_error = std::strerror(errno);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  raise<TimeoutError>("could not connect to the bootstrap root at ", ep.to_string(), " before the timeout (",
                      last_error, "); is rank 0 running and ANTDT_ROOT right?");
}

Fd accept_until(int listen_fd, Clock::time_point deadline, std::string* peer) {
  if (!wait_ready(listen_fd, POLLIN, deadline)) return Fd{};
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  Fd fd(::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC));
  if (!fd) return Fd{};
  set_common_options(fd.get());
  if (peer) *peer = numeric_host(reinterpret_cast<sockaddr*>(&ss));
  return fd;
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    raise<BootstrapError>("cannot make socket ", fd, " non-blocking: ", std::strerror(errno));
}

Fd accept_pending(int listen_fd, std::string* peer) {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    Fd fd(::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC));
    if (fd) {
      set_common_options(fd.get());
      if (peer) *peer = numeric_host(reinterpret_cast<sockaddr*>(&ss));
      return fd;
    }
    if (errno == EINTR) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
      raise<BootstrapError>("cannot accept a connection: ", std::strerror(errno));
    // EAGAIN: nothing waits; ECONNABORTED and the like: that peer is gone already.
    return Fd{};
  }
}

std::size_t send_some(int fd, std::span<const std::byte> data) {
  for (;;) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    raise<BootstrapError>("connection lost while sending: ", std::strerror(errno));
  }
}

std::size_t recv_some(int fd, std::span<std::byte> data) {
  if (data.empty()) return 0;
  for (;;) {
    ssize_t n = ::recv(fd, data.data(), data.size(), MSG_DONTWAIT);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) raise<BootstrapError>("connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    raise<BootstrapError>("connection lost while receiving: ", std::strerror(errno));
  }
}

void send_all(int fd, std::span<const std::byte> data, Clock::time_point deadline) {
  while (!data.empty()) {
    if (!wait_ready(fd, POLLOUT, deadline)) raise<TimeoutError>("bootstrap send timed out");
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      raise<BootstrapError>("bootstrap connection lost while sending: ", std::strerror(errno));
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
}

void recv_all(int fd, std::span<std::byte> data, Clock::time_point deadline) {
  while (!data.empty()) {
    if (!wait_ready(fd, POLLIN, deadline)) raise<TimeoutError>("bootstrap receive timed out");
    ssize_t n = ::recv(fd, data.data(), data.size(), MSG_DONTWAIT);
    if (n == 0) raise<BootstrapError>("bootstrap connection closed by the peer");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      raise<BootstrapError>("bootstrap connection lost while receiving: ", std::strerror(errno));
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
}

}  // namespace antdt::net
