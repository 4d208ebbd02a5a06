// Shared pieces of the fuzz targets (docs/fuzzing.md). Each target is one
// LLVMFuzzerTestOneInput that hands the bytes to one parser of outside input.
// A parser may refuse the bytes only with an antdt::Error (BootstrapError,
// ConfigError, InvalidArgument, ...): the targets catch exactly that, so any
// other exception (std::length_error, a JSON library exception, bad_alloc
// from an unchecked length) escapes and counts as a crash, as do sanitizer
// reports and aborts.
#pragma once

#include <antdt/comm.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace antdt::fuzz {

inline std::span<const std::byte> as_bytes(const std::uint8_t* data, std::size_t size) noexcept {
  return {reinterpret_cast<const std::byte*>(data), size};
}
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) noexcept {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `parse`, accepting the library's own refusals.
template <class F>
void refuse_cleanly(F&& parse) {
  try {
    parse();
  } catch (const antdt::Error&) {
  }
}

}  // namespace antdt::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
