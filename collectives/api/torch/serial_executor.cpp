#include "serial_executor.hpp"

#include <pthread.h>

#include <utility>

namespace antdt::pytorch {

SerialExecutor::SerialExecutor(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

SerialExecutor::~SerialExecutor() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  ready_.notify_one();
  thread_.join();
}

void SerialExecutor::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  ready_.notify_one();
}

void SerialExecutor::run() {
  ::pthread_setname_np(::pthread_self(), name_.substr(0, 15).c_str());
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace antdt::pytorch
