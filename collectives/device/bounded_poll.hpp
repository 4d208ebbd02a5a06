// The host's wait for device copies: polling a condition until a deadline
// (ANTDT_TIMEOUT_MS from the call's start), and the clock the deadlines use.
#pragma once

#include "core/error.hpp"

#include <chrono>
#include <thread>

namespace antdt::coll::device {

using Clock = std::chrono::steady_clock;

// Polls `done()` until it holds or the deadline passes (then TimeoutError
// naming `what` and `waiting_for`). Yields between polls, sleeping briefly
// once the wait is long, so a rank waiting for its copies leaves the core to
// the transport.
template <class Done>
void poll_or_timeout(Done&& done, Clock::time_point deadline, const char* what, const char* waiting_for) {
  for (unsigned attempt = 0;; ++attempt) {
    if (done()) return;
    if (Clock::now() >= deadline)
      raise<TimeoutError>(what, ": ", waiting_for, " did not finish within ANTDT_TIMEOUT_MS");
    if (attempt < 1024)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace antdt::coll::device
