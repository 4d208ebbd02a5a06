// ANTDT_INJECT (core/inject): a value from the environment. The first byte is
// the group size (1..16) the spec is applied to; every rank's Injector is
// built and asked about a few steps, so a spec the parser accepted must not
// trip anything later.
#include "core/inject.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace antdt;
  if (size == 0) return 0;
  const int ranks = 1 + (data[0] & 15);
  const std::string_view text = fuzz::as_text(data + 1, size - 1);
  fuzz::refuse_cleanly([&] {
    const InjectSpec spec = parse_inject(text);
    for (int rank = 0; rank < ranks; ++rank) {
      fuzz::refuse_cleanly([&] {
        const Injector injector(spec, rank, ranks);
        for (std::uint64_t step : {0ULL, 1ULL, 29ULL, 30ULL, 1000ULL}) {
          (void)injector.compute_factor(step);
          (void)injector.in_spike(step);
        }
      });
    }
  });
  return 0;
}
