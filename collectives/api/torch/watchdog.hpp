// Bounds each job of one SerialExecutor by the process group's timeout (the
// `timeout` of init_process_group / new_group): when a job runs longer, the
// watchdog aborts the communicator it uses. antdt's abort() is safe from any
// thread and never blocks; the waiting call then fails at once (AbortedError,
// RemoteAbortError on the peers), so a rank that never calls makes the others
// fail within the timeout instead of hanging. antdt's own bound
// (ANTDT_TIMEOUT_MS) still applies below it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace antdt::pytorch {

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // `expire(reason)` is called (from the watchdog's thread) when a watched job overruns.
  Watchdog(std::chrono::milliseconds timeout, std::function<void(const std::string&)> expire);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Watches the job running now (one at a time) for as long as the guard lives.
  class Guard {
   public:
    Guard(Watchdog& dog, std::string what);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    Watchdog& dog_;
  };

  // True once it aborted the communicator: later errors are reported as this timeout.
  bool expired() const;
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void run();

  const std::chrono::milliseconds timeout_;
  const std::function<void(const std::string&)> expire_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::uint64_t job_ = 0;       // the watched job's number; odd while one runs
  Clock::time_point deadline_;  // of the watched job
  std::string what_;
  bool expired_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace antdt::pytorch
