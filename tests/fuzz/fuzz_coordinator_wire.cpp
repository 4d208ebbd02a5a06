// The coordinator's wire (scheduler/coordinator/wire): what the coordinator
// reads from any TCP client (handshake, requests) and what a rank reads back
// (replies), and the arbiter link's hello and answer, which the coordinator's
// listener also reads (collectives/partial/arbiter_link). The first byte picks
// the decoder.
#include "collectives/partial/arbiter_link.hpp"
#include "scheduler/coordinator/wire.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace antdt;
  using namespace antdt::sched::coord;
  if (size == 0) return 0;
  const auto bytes = fuzz::as_bytes(data + 1, size - 1);
  fuzz::refuse_cleanly([&] {
    switch (data[0] % 12) {
      case 0: (void)peek_kind(bytes); break;
      case 1: (void)decode_challenge(bytes); break;
      case 2: (void)decode_hello(bytes); break;
      case 3: (void)decode_welcome(bytes); break;
      case 4: (void)decode_envelope(bytes); break;  // a request, with a step report or not
      case 5: (void)decode_plan(bytes); break;
      case 6: (void)decode_batch(bytes); break;
      case 7: (void)decode_generation_id(bytes); break;
      case 8: (void)decode_ack(bytes); break;
      case 9: (void)decode_error(bytes); break;
      case 10: (void)coll::partial::decode_arbiter_hello(bytes); break;
      case 11: (void)coll::partial::decode_arbiter_answer(bytes); break;
    }
  });
  return 0;
}
