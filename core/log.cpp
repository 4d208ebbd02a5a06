// Levelled logging to stderr (core/log.hpp). Each message, all of its lines
// prefixed, goes out in one write(2), so messages from concurrent threads and
// processes sharing the terminal do not interleave.
#include "core/log.hpp"

#include <atomic>
#include <cerrno>
#include <string>
#include <string_view>

#include <unistd.h>

namespace antdt::log {
namespace {

std::atomic<int> g_process_rank{-1};
thread_local int t_thread_rank = -1;

LogLevel current_level() noexcept {
  try {
    return config().log_level;
  } catch (...) {
    // A malformed ANTDT_* variable is reported where the configuration is
    // used; logging itself must not throw, so it falls back to the default.
    return LogLevel::warn;
  }
}

std::string_view level_name(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::error: return "ERROR";
    case LogLevel::warn: return "WARN";
    case LogLevel::info: return "INFO";
    case LogLevel::trace: return "TRACE";
  }
  return "?";
}

void write_all(int fd, std::string_view text) noexcept {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere left to report a failing stderr
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

bool enabled(LogLevel level) noexcept { return static_cast<int>(level) <= static_cast<int>(current_level()); }

void write(LogLevel level, const std::string& message) noexcept {
  try {
    const int rank = t_thread_rank >= 0 ? t_thread_rank : g_process_rank.load(std::memory_order_relaxed);
    std::string prefix = "[antdt r";
    prefix += rank >= 0 ? std::to_string(rank) : std::string("?");
    prefix += ' ';
    prefix += level_name(level);
    prefix += "] ";

    std::string out;
    out.reserve(message.size() + prefix.size() + 1);
    std::string_view rest = message;
    do {
      const auto newline = rest.find('\n');
      const std::string_view line = rest.substr(0, newline);
      out += prefix;
      out += line;
      out += '\n';
      rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
    } while (!rest.empty());
    write_all(STDERR_FILENO, out);
  } catch (...) {
    // Out of memory while formatting: drop the message rather than throw.
  }
}

void set_process_rank(int rank) noexcept { g_process_rank.store(rank < 0 ? -1 : rank, std::memory_order_relaxed); }

void set_thread_rank(int rank) noexcept { t_thread_rank = rank < 0 ? -1 : rank; }

}  // namespace antdt::log
