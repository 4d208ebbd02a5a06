// The partial collectives' protocol (collectives/partial/partial_protocol):
// what the arbiter reads from every rank and every rank from the arbiter. The
// first byte is the group size (1..64) and the direction.
#include "collectives/partial/partial_protocol.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace antdt;
  using namespace antdt::coll::partial;
  if (size == 0) return 0;
  const int ranks = 1 + (data[0] & 63);
  const bool to_arbiter = (data[0] & 64) != 0;
  const auto bytes = fuzz::as_bytes(data + 1, size - 1);
  fuzz::refuse_cleanly([&] {
    if (to_arbiter) {
      (void)decode_to_arbiter(bytes, ranks);
    } else {
      (void)decode_from_arbiter(bytes, ranks);
    }
  });
  return 0;
}
