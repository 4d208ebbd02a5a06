// UniqueId::from_string: the text a launcher passes in ANTDT_UNIQUE_ID or on a
// command line. A valid id must read back as itself.
#include "tests/fuzz/fuzz_target.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = antdt::fuzz::as_text(data, size);
  antdt::fuzz::refuse_cleanly([&] {
    const antdt::UniqueId id = antdt::UniqueId::from_string(text);
    if (antdt::UniqueId::from_string(id.to_string()).to_string() != id.to_string()) std::abort();
  });
  return 0;
}
