// Levelled logging to stderr with a rank prefix: "[antdt r3 INFO] ...".
// The level comes from ANTDT_DEBUG; the rank is per thread (ranks as threads)
// falling back to the process's rank once the bootstrap knows it.
#pragma once

#include "core/config.hpp"
#include "core/error.hpp"

namespace antdt::log {

bool enabled(LogLevel level) noexcept;
void write(LogLevel level, const std::string& message) noexcept;
void set_process_rank(int rank) noexcept;
void set_thread_rank(int rank) noexcept;  // -1 clears

}  // namespace antdt::log

#define ANTDT_LOG(level, ...)                                              \
  do {                                                                     \
    if (::antdt::log::enabled(::antdt::LogLevel::level))                   \
      ::antdt::log::write(::antdt::LogLevel::level, ::antdt::cat(__VA_ARGS__)); \
  } while (0)
#define ANTDT_WARN(...) ANTDT_LOG(warn, __VA_ARGS__)
#define ANTDT_INFO(...) ANTDT_LOG(info, __VA_ARGS__)
#define ANTDT_TRACE(...) ANTDT_LOG(trace, __VA_ARGS__)
