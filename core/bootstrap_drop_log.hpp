// Warnings about unauthenticated connections (dropped, refused, timed out),
// at most a few per window: a flood of connections that need no secret to
// open must not turn into a flood of log lines (thousands a second under
// antdt_flood_perf). What is held back is counted and reported in one line.
#pragma once

#include "core/log.hpp"

#include <chrono>
#include <cstdint>
#include <string>

namespace antdt {

class DropLog {
 public:
  explicit DropLog(std::string who, std::chrono::seconds window = std::chrono::seconds(10), int per_window = 8)
      : who_(std::move(who)), window_(window), per_window_(per_window) {}
  DropLog(const DropLog&) = delete;
  DropLog& operator=(const DropLog&) = delete;
  ~DropLog() { report_held_back(); }

  // `what` goes to the log unless per_window lines went there in this window.
  template <class... Parts>
  void warn(const Parts&... what) {
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= window_) {
      report_held_back();
      window_start_ = now;
      shown_ = 0;
    }
    if (shown_ < per_window_) {
      ++shown_;
      ANTDT_WARN(who_, ": ", what...);
    } else {
      ++held_back_;
    }
  }

 private:
  void report_held_back() {
    if (held_back_ == 0) return;
    ANTDT_WARN(who_, ": ", held_back_, " more warning(s) about unauthenticated connections not shown (at most ",
               per_window_, " per ", window_.count(), " s)");
    held_back_ = 0;
  }

  std::string who_;
  std::chrono::seconds window_;
  int per_window_;
  std::chrono::steady_clock::time_point window_start_{};
  int shown_ = 0;
  std::uint64_t held_back_ = 0;
};

}  // namespace antdt
