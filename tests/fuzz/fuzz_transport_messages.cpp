// What the UCX transport reads from a peer outside a collective's payload:
// the abort message (transport/ucx, decode_abort_message), which any peer can
// send on the control tag. The first byte is the group size (1..256). A
// message that decodes must re-encode to the same bytes.
#include "transport/ucx/ucx_transport.hpp"
#include "tests/fuzz/fuzz_target.hpp"

#include <algorithm>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace antdt;
  if (size == 0) return 0;
  const int ranks = 1 + data[0];
  const auto bytes = fuzz::as_bytes(data + 1, size - 1);
  fuzz::refuse_cleanly([&] {
    const auto info = transport::decode_abort_message(bytes, ranks);
    if (!info) return;
    if (info->origin_rank < 0 || info->origin_rank >= ranks) std::abort();
    const auto again = transport::encode_abort_message(*info);
    if (!std::equal(again.begin(), again.end(), bytes.begin(), bytes.end())) std::abort();
  });
  return 0;
}
