// The bootstrap's wire (core/bootstrap_wire): what the root and the ranks read
// from a TCP connection before and after the handshake. The first byte picks
// the decoder, the rest is the message.
#include "core/bootstrap_wire.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace antdt;
  if (size == 0) return 0;
  const auto bytes = fuzz::as_bytes(data + 1, size - 1);
  fuzz::refuse_cleanly([&] {
    switch (data[0] % 6) {
      case 0: (void)wire::decode_challenge(bytes); break;
      case 1: (void)wire::decode_hello(bytes); break;
      case 2: (void)wire::decode_verdict_head(bytes); break;
      case 3: (void)wire::decode_frame_head(wire::Kind::contribution, bytes); break;
      case 4: (void)wire::decode_frame_head(wire::Kind::gathered, bytes); break;
      case 5: {
        // The root says how many parts; a hostile payload must not make it allocate them.
        const std::size_t parts = bytes.empty() ? 0 : static_cast<std::size_t>(bytes[0]) * 97;
        (void)wire::decode_gathered(bytes, parts);
        break;
      }
    }
  });
  return 0;
}
