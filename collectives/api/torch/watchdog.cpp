#include "watchdog.hpp"

#include <utility>

namespace antdt::pytorch {

Watchdog::Watchdog(std::chrono::milliseconds timeout, std::function<void(const std::string&)> expire)
    : timeout_(timeout), expire_(std::move(expire)), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  changed_.notify_one();
  thread_.join();
}

Watchdog::Guard::Guard(Watchdog& dog, std::string what) : dog_(dog) {
  {
    std::lock_guard lock(dog_.mu_);
    ++dog_.job_;
    dog_.deadline_ = Clock::now() + dog_.timeout_;
    dog_.what_ = std::move(what);
  }
  dog_.changed_.notify_one();
}

Watchdog::Guard::~Guard() {
  {
    std::lock_guard lock(dog_.mu_);
    ++dog_.job_;
  }
  dog_.changed_.notify_one();
}

bool Watchdog::expired() const {
  std::lock_guard lock(mu_);
  return expired_;
}

void Watchdog::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (job_ % 2 == 0 || expired_) {
      changed_.wait(lock);
      continue;
    }
    const std::uint64_t watched = job_;
    if (changed_.wait_until(lock, deadline_, [&] { return stopping_ || job_ != watched; })) continue;
    expired_ = true;
    const std::string reason = what_ + " did not complete within the process group's timeout of " +
                               std::to_string(timeout_.count()) + " ms";
    lock.unlock();
    expire_(reason);
    lock.lock();
  }
}

}  // namespace antdt::pytorch
