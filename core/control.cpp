#include "core/control.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace antdt::control {
namespace {

std::array<std::byte, 8> frame_head(std::size_t bytes) {
  std::array<std::byte, 8> head{};
  const std::uint32_t magic = kFrameMagic, len = static_cast<std::uint32_t>(bytes);
  std::memcpy(head.data(), &magic, 4);
  std::memcpy(head.data() + 4, &len, 4);
  return head;
}

}  // namespace

void Link::send(std::span<const std::byte> payload, Deadline deadline) {
  ANTDT_CHECK_ARG(payload.size() <= kMaxFrameBytes, "control frame of ", payload.size(), " bytes is too large");
  auto head = frame_head(payload.size());
  // A peer that closed or died is a broken link on send as on receive
  // (TransportError); callers retry or report a lost peer on that alone.
  try {
    net::send_all(fd_.get(), head, deadline);
    net::send_all(fd_.get(), payload, deadline);
  } catch (const BootstrapError& e) {
    raise<TransportError>("control link closed: ", e.what());
  }
}

std::optional<Bytes> Link::receive(Deadline deadline) {
  pollfd p{fd_.get(), POLLIN, 0};
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now()).count();
    int rc = ::poll(&p, 1, static_cast<int>(std::clamp<long long>(left, 0, 1000)));
    if (rc > 0) break;
    if (rc < 0 && errno != EINTR) raise<TransportError>("control link poll failed: ", std::strerror(errno));
    if (rc == 0 && net::Clock::now() >= deadline) return std::nullopt;
  }
  // A frame that started arriving completes quickly; allow a few seconds for it.
  const auto frame_deadline = std::max(deadline, net::Clock::now() + std::chrono::seconds(5));
  std::array<std::byte, 8> head{};
  try {
    net::recv_all(fd_.get(), head, frame_deadline);
  } catch (const BootstrapError& e) {
    raise<TransportError>("control link closed: ", e.what());
  }
  std::uint32_t magic, len;
  std::memcpy(&magic, head.data(), 4);
  std::memcpy(&len, head.data() + 4, 4);
  if (magic != kFrameMagic) raise<BootstrapError>("malformed control frame: bad magic 0x", std::hex, magic);
  if (len > kMaxFrameBytes) raise<BootstrapError>("malformed control frame: ", len, " bytes exceeds the limit");
  Bytes payload(len);
  try {
    net::recv_all(fd_.get(), payload, frame_deadline);
  } catch (const BootstrapError& e) {  // the other side ended halfway through the frame
    raise<TransportError>("control link closed: ", e.what());
  }
  return payload;
}

Hub::Hub(std::vector<net::Fd> links) : open_(links.size(), true) {
  for (auto& fd : links) {
    ANTDT_CHECK_ARG(static_cast<bool>(fd), "control hub: a rank has no link");
    links_.emplace_back(std::move(fd));
  }
  wake_fd_ = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_) raise<TransportError>("eventfd failed: ", std::strerror(errno));
}

void Hub::send(int rank, std::span<const std::byte> payload, Deadline deadline) {
  ANTDT_CHECK_ARG(rank >= 0 && rank < size(), "control hub: rank ", rank, " out of range");
  if (!open_[static_cast<std::size_t>(rank)]) return;  // a closed rank has nobody left to read
  links_[static_cast<std::size_t>(rank)].send(payload, deadline);
}

std::optional<Hub::Message> Hub::receive_any(Deadline deadline) {
  std::vector<pollfd> fds;
  fds.reserve(links_.size() + 1);
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    for (std::size_t i = 0; i < links_.size(); ++i) fds.push_back({open_[i] ? links_[i].fd() : -1, POLLIN, 0});
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now()).count();
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(left, 0, 1000)));
    if (rc < 0 && errno != EINTR) raise<TransportError>("control hub poll failed: ", std::strerror(errno));
    if (rc > 0 && (fds[0].revents & POLLIN)) {
      std::uint64_t drained;
      [[maybe_unused]] auto n = ::read(wake_fd_.get(), &drained, sizeof drained);
      return std::nullopt;
    }
    if (rc > 0) {
      for (std::size_t k = 0; k < links_.size(); ++k) {
        std::size_t i = (next_ + k) % links_.size();
        if (!(fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        next_ = i + 1;
        Message m;
        m.rank = static_cast<int>(i);
        try {
          auto payload = links_[i].receive(net::Clock::now());
          if (!payload) continue;
          m.payload = std::move(*payload);
        } catch (const Error&) {
          open_[i] = false;
          m.closed = true;
        }
        return m;
      }
    }
    if (net::Clock::now() >= deadline) return std::nullopt;
  }
}

void Hub::wake() noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_.get(), &one, sizeof one);
}

std::pair<net::Fd, net::Fd> socket_pair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    raise<TransportError>("socketpair failed: ", std::strerror(errno));
  return {net::Fd(sv[0]), net::Fd(sv[1])};
}

std::vector<Endpoints> make_inproc_endpoints(int size) {
  ANTDT_CHECK_ARG(size >= 1, "group size must be >= 1");
  std::vector<Endpoints> out(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    auto [server_end, client_end] = socket_pair();
    out[static_cast<std::size_t>(r)].client = std::move(client_end);
    out[0].server.push_back(std::move(server_end));
  }
  return out;
}

}  // namespace antdt::control
