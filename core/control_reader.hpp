// Assembles control::Link frames (core/control.hpp) from a socket without
// blocking, for a server that serves many connections from one poll() loop:
// a peer that sends part of a frame and stops holds nothing but its own
// buffer. The head is checked (magic, length against a per-connection limit)
// before the payload is allocated, and nothing past the current frame is read,
// so poll() still reports the next one.
#pragma once

#include "core/control.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>

namespace antdt::control {

class FrameReader {
 public:
  explicit FrameReader(std::size_t max_frame_bytes = kMaxFrameBytes) : limit_(max_frame_bytes) {}
  // Frames started after this call may be up to `bytes` long (at most kMaxFrameBytes).
  void set_limit(std::size_t bytes) noexcept { limit_ = std::min(bytes, kMaxFrameBytes); }

  // Reads what `fd` holds now, up to the end of the current frame; the frame
  // once it is whole. TransportError when the peer closed, BootstrapError on a
  // bad head or a frame over the limit.
  std::optional<Bytes> read_some(int fd);
  // Part of a frame arrived and the rest did not yet.
  bool mid_frame() const noexcept { return head_bytes_ > 0; }

 private:
  std::size_t limit_;
  std::array<std::byte, 8> head_{};
  std::size_t head_bytes_ = 0;
  Bytes payload_;
  std::size_t payload_bytes_ = 0;
};

}  // namespace antdt::control
