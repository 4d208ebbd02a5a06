// Control-plane framing (core/control, core/control_reader): the bytes a rank
// or an unauthenticated client writes to the arbiter's or the coordinator's
// sockets. The input goes into a socketpair whose writing end is then closed;
// the first byte picks the reader (the coordinator's non-blocking FrameReader
// with a small or the full limit, or the arbiter's blocking Link::receive).
// Each reads frames until the closed end or garbage stops it.
#include "core/control.hpp"
#include "core/control_reader.hpp"
#include "tests/fuzz/fuzz_target.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace antdt;
  if (size == 0) return 0;
  // Stays under the socket buffer, so the write below never blocks.
  const std::size_t n = std::min<std::size_t>(size - 1, 32 * 1024);
  // Not a structured binding: clang 14 cannot capture one in the lambda below.
  auto ends = control::socket_pair();
  net::Fd reader_end = std::move(ends.first);
  net::Fd writer_end = std::move(ends.second);
  if (n > 0 && ::write(writer_end.get(), data + 1, n) != static_cast<ssize_t>(n)) std::abort();
  writer_end = {};
  fuzz::refuse_cleanly([&] {
    if (data[0] % 3 == 2) {
      control::Link link(std::move(reader_end));
      while (link.receive(net::Clock::now() + std::chrono::seconds(1))) {
      }
      return;
    }
    control::FrameReader reader(data[0] % 3 == 0 ? 64 : control::kMaxFrameBytes);
    for (int idle = 0; idle < 2;) {
      if (!reader.read_some(reader_end.get())) ++idle;
    }
  });
  return 0;
}
