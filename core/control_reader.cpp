#include "core/control_reader.hpp"

#include "core/error.hpp"

#include <cstring>
#include <utility>

namespace antdt::control {
namespace {

// The connection's end is a transport event, not garbage from the peer.
std::size_t recv_some(int fd, std::span<std::byte> into) {
  try {
    return net::recv_some(fd, into);
  } catch (const BootstrapError& e) {
    raise<TransportError>("control link closed: ", e.what());
  }
}

}  // namespace

std::optional<Bytes> FrameReader::read_some(int fd) {
  while (head_bytes_ < head_.size()) {
    const std::size_t n = recv_some(fd, std::span(head_).subspan(head_bytes_));
    if (n == 0) return std::nullopt;
    head_bytes_ += n;
    if (head_bytes_ < head_.size()) continue;
    std::uint32_t magic, len;
    std::memcpy(&magic, head_.data(), 4);
    std::memcpy(&len, head_.data() + 4, 4);
    if (magic != kFrameMagic) raise<BootstrapError>("malformed control frame: bad magic 0x", std::hex, magic);
    if (len > limit_) raise<BootstrapError>("malformed control frame: ", len, " bytes exceeds the limit of ", limit_);
    payload_.assign(len, std::byte{0});
    payload_bytes_ = 0;
  }
  while (payload_bytes_ < payload_.size()) {
    const std::size_t n = recv_some(fd, std::span(payload_).subspan(payload_bytes_));
    if (n == 0) return std::nullopt;
    payload_bytes_ += n;
  }
  head_bytes_ = 0;
  payload_bytes_ = 0;
  return std::exchange(payload_, {});
}

}  // namespace antdt::control
