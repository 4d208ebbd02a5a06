// The queue of non-blocking collectives and its progress thread
// (collectives/request_queue.hpp).
#include "collectives/request_queue.hpp"

#include "collectives/execute.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

#include <algorithm>
#include <string>

namespace antdt::coll {

void QueuedCollective::release() noexcept {
  collective_ = DeferredCollective{};
  closure_ = nullptr;
}

void QueuedCollective::run_now() noexcept {
  std::exception_ptr error;
  try {
    if (closure_)
      closure_();
    else
      coll::run_now(queue_->comm(), collective_.args());
  } catch (...) {
    error = std::current_exception();
  }
  // Released before the outcome is published: once a waiter sees it, the
  // progress thread no longer touches this request.
  release();
  finish(std::move(error));
}

void QueuedCollective::wait() {
  if (!finished()) {
    ANTDT_ASSERT(queue_ != nullptr);
    queue_->run_queued(this);
  }
  rethrow_if_failed();
}

bool QueuedCollective::test() {
  if (queue_ != nullptr && queue_->background()) {
    if (!finished()) return false;
    rethrow_if_failed();
    return true;
  }
  wait();
  return true;
}

void QueuedCollective::detach() noexcept {
  queue_ = nullptr;
  if (!finished_) finish(detached_error());
  release();
}

RequestQueue::RequestQueue(detail::CommImpl& comm) : comm_(comm), background_(comm.config().progress_thread) {}

RequestQueue::~RequestQueue() {
  // After a failure the rest fail at once.
  if (worker_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  // The communicator goes away: requests the caller still holds must not
  // touch it (transfers in flight are cancelled while the transport lives).
  for (auto& weak : live_)
    if (auto request = weak.lock()) request->detach();
}

void RequestQueue::track(const std::shared_ptr<detail::RequestState>& request) {
  // Forget requests nobody holds any more, so the list stays as long as the live ones.
  if (live_.size() >= 16 && live_.size() == live_.capacity())
    std::erase_if(live_, [](const auto& weak) { return weak.expired(); });
  live_.push_back(request);
}

std::shared_ptr<QueuedCollective> RequestQueue::enqueue(DeferredCollective collective, const char* what) {
  return push(std::make_shared<QueuedCollective>(*this, std::move(collective), what, issued_ + 1));
}

std::shared_ptr<QueuedCollective> RequestQueue::enqueue(std::function<void()> closure, const char* what) {
  return push(std::make_shared<QueuedCollective>(*this, std::move(closure), what, issued_ + 1));
}

std::shared_ptr<QueuedCollective> RequestQueue::push(std::shared_ptr<QueuedCollective> request) {
  track(request);
  if (!background_) {
    ++issued_;
    queue_.push_back(request);
    return request;
  }
  if (!worker_.joinable()) worker_ = std::thread([this] { progress_loop(); });
  {
    std::lock_guard lock(mu_);
    ++issued_;
    queue_.push_back(request);
  }
  cv_.notify_all();
  return request;
}

void RequestQueue::progress_loop() noexcept {
  log::set_thread_rank(comm_.rank());
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and everything issued has run
    std::shared_ptr<QueuedCollective> next = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    next->run_now();  // never throws: the outcome goes to the request
    next.reset();
    lock.lock();
    running_ = false;
    ++finished_count_;
    cv_.notify_all();
  }
}

void RequestQueue::run_queued(const QueuedCollective* last) {
  if (!background_) {
    while (!queue_.empty()) {
      std::shared_ptr<QueuedCollective> next = std::move(queue_.front());
      queue_.pop_front();
      next->run_now();
      if (next.get() == last) return;
    }
    return;
  }
  if (!worker_.joinable()) return;  // nothing was ever queued
  auto drained = [&] { return last != nullptr ? last->finished() : queue_.empty() && !running_; };
  // Bounded by ANTDT_TIMEOUT_MS without progress, not in total: many queued
  // collectives may together take longer while each finishes in time.
  const auto timeout = comm_.config().timeout;
  std::unique_lock lock(mu_);
  auto deadline = transport::Clock::now() + timeout;
  std::uint64_t seen = finished_count_;
  while (!drained()) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::no_timeout) continue;
    if (drained()) break;
    if (finished_count_ != seen) {
      seen = finished_count_;
      deadline = transport::Clock::now() + timeout;
      continue;
    }
    lock.unlock();
    fail_wait(last);
  }
}

void RequestQueue::fail_wait(const QueuedCollective* last) {
  std::uint64_t at = 0;
  {
    std::lock_guard lock(mu_);
    at = finished_count_ + 1;
  }
  const std::string waited_for =
      last != nullptr ? cat(last->what(), " (non-blocking call #", last->number(), " of this communicator)")
                      : cat("the ", issued_, " non-blocking collectives issued before this call");
  const std::string reason =
      cat("rank ", comm_.rank(), " timed out after ", comm_.config().timeout.count(),
          " ms (ANTDT_TIMEOUT_MS) waiting for ", waited_for, ": the progress thread is still in non-blocking call #",
          at, " and finished nothing meanwhile");
  // As a blocking collective that times out: the peers learn it at once, and
  // the progress thread's collective ends (aborted) instead of running on.
  comm_.mark_failed(Status::timeout, reason);
  comm_.transport().abort(static_cast<int>(Status::timeout), reason);
  throw_status(Status::timeout, reason);
}

}  // namespace antdt::coll
