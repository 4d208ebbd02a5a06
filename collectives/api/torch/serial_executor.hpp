// A thread that runs jobs one at a time, in the order they were submitted.
//
// The process group owns two: one runs its collectives (so every antdt call
// on the collective communicator comes from one thread, in issue order, while
// the caller computes), one completes its transfers (it waits for each posted
// send/recv and finishes its Work).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace antdt::pytorch {

class SerialExecutor {
 public:
  // `name` names the thread (at most 15 characters are kept) for debuggers and top.
  explicit SerialExecutor(std::string name);
  // Runs every job still queued (peers expect the collectives this rank
  // issued), then joins the thread.
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // Queues `job` behind the jobs submitted before it. A job must not throw:
  // it reports its own outcome (the process group's jobs finish a Work).
  void submit(std::function<void()> job);

 private:
  void run();

  const std::string name_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace antdt::pytorch
