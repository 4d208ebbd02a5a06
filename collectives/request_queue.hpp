// The queue of non-blocking collectives and the progress thread that may run
// them, and the list of every request still referenced (detached when the
// communicator goes). Uses collectives/request.hpp, collective_args.hpp and
// the communicator; runs queued calls through collectives/execute.hpp.
//
// Non-blocking collectives are queued and run in issue order (ranks call
// collectives in the same order, so running them later, in that order, is
// correct). Who runs them depends on ANTDT_ASYNC_PROGRESS:
// * thread (Config::progress_thread): a progress thread per communicator,
//   started at the first queued collective and joined when the communicator
//   goes, runs them while the caller computes. test() only reports; wait()
//   sleeps on a condition variable. Anything else that uses the communicator's
//   collective resources (sequence numbers, slot pool, scratch, shared-memory
//   mailbox) first waits until the queue has drained and then runs on the
//   caller's thread: blocking collectives, group_end(), partial collectives,
//   push-pull, the communicator's destruction. So only one thread runs
//   collectives at a time.
// * caller: they run on the caller's thread when a request is waited for or
//   tested, when the communicator's next blocking collective runs, or at
//   group_end(); no overlap with computation.
#pragma once

#include "collectives/collective_args.hpp"
#include "collectives/communicator.hpp"
#include "collectives/request.hpp"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace antdt::coll {

class RequestQueue;

// A collective issued by a non-blocking call: runs in issue order.
class QueuedCollective final : public RequestBase {
 public:
  // A collective of the entry (collectives/execute.hpp), or a closure from an
  // entry of its own (push-pull).
  QueuedCollective(RequestQueue& queue, DeferredCollective collective, const char* what, std::uint64_t number)
      : queue_(&queue), collective_(std::move(collective)), what_(what), number_(number) {}
  QueuedCollective(RequestQueue& queue, std::function<void()> closure, const char* what, std::uint64_t number)
      : queue_(&queue), closure_(std::move(closure)), what_(what), number_(number) {}
  // Progress thread: reports whether it has run. Caller mode: runs it (and
  // everything queued before it) to completion.
  bool test() override;
  void wait() override;
  bool cancel() override { return false; }  // every rank expects it: it runs in order regardless
  void detach() noexcept override;
  // Called by the queue, in issue order.
  void run_now() noexcept;
  const char* what() const noexcept { return what_; }        // "iallreduce"
  std::uint64_t number() const noexcept { return number_; }  // 1, 2, ... in issue order

 private:
  void release() noexcept;  // drops the owned counts and the closure

  RequestQueue* queue_;  // null once detached
  DeferredCollective collective_;
  std::function<void()> closure_;
  const char* what_;
  std::uint64_t number_;
};

class RequestQueue {
 public:
  explicit RequestQueue(detail::CommImpl& comm);
  // Runs everything issued (every rank issued it, so the peers expect it),
  // then detaches the requests the caller still holds.
  ~RequestQueue();
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  detail::CommImpl& comm() noexcept { return comm_; }
  bool background() const noexcept { return background_; }

  // Queues a call. `what` names it in errors (a string literal).
  std::shared_ptr<QueuedCollective> enqueue(DeferredCollective collective, const char* what);
  std::shared_ptr<QueuedCollective> enqueue(std::function<void()> closure, const char* what);
  // Returns once the queued collectives up to and including `last` (all when
  // null) have run: runs them here in caller mode; waits for the progress
  // thread otherwise (then the progress thread is idle when `last` is null).
  // The wait is bounded by ANTDT_TIMEOUT_MS without any collective finishing:
  // then the communicator is failed and aborted, and TimeoutError names `last`.
  void run_queued(const QueuedCollective* last = nullptr);
  // Remembers a request (queued or a transfer) to detach when the communicator goes.
  void track(const std::shared_ptr<detail::RequestState>& request);

 private:
  std::shared_ptr<QueuedCollective> push(std::shared_ptr<QueuedCollective> request);
  void progress_loop() noexcept;  // the progress thread
  [[noreturn]] void fail_wait(const QueuedCollective* last);

  detail::CommImpl& comm_;
  const bool background_;  // ANTDT_ASYNC_PROGRESS=thread
  // Guards queue_, running_, finished_count_ and stopping_; cv_ wakes the
  // progress thread (work or stop) and the callers waiting for it (a collective finished).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<QueuedCollective>> queue_;
  std::uint64_t issued_ = 0;          // non-blocking collectives issued so far
  std::uint64_t finished_count_ = 0;  // ... and run to their end by the progress thread
  bool running_ = false;              // the progress thread is inside a collective
  bool stopping_ = false;             // the communicator goes: drain the queue, then exit
  std::thread worker_;                // started with the first queued collective
  std::vector<std::weak_ptr<detail::RequestState>> live_;  // every request still referenced by the caller
};

}  // namespace antdt::coll
