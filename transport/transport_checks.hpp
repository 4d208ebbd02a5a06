// Argument checks and message texts shared by the transports, so that both
// report the same errors in the same words.
#pragma once

#include "core/error.hpp"
#include "transport/transport.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace antdt::transport {

// Abort reasons travel in control messages; longer ones are cut to this size.
inline constexpr std::size_t kMaxAbortReasonBytes = 1024;

inline void check_peer(int peer, int size, std::string_view operation) {
  ANTDT_CHECK_ARG(peer >= 0 && peer < size, operation, ": peer rank ", peer, " is outside [0, ", size, ")");
}

inline void check_tag(std::uint64_t tag, std::string_view operation) {
  ANTDT_CHECK_ARG(tag <= kMaxTag, operation, ": tag ", tag, " exceeds the largest user tag ", kMaxTag,
                  " (", kTagBits, " bits)");
}

inline std::string truncation_error(int peer, std::uint64_t tag, std::size_t capacity,
                                    std::string_view incoming) {
  return cat("message from rank ", peer, " with tag ", tag, " was truncated: ", incoming,
             " does not fit the posted receive buffer of ", capacity, " payload bytes");
}

inline std::string cut_reason(std::string_view reason) {
  return std::string(reason.substr(0, kMaxAbortReasonBytes));
}

}  // namespace antdt::transport
