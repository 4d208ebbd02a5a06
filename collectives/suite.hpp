// What the collective suite keeps per communicator between calls, and the
// deferred execution behind non-blocking calls and group calls.
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
//
// Point-to-point transfers are posted when they are issued (tag kind
// point_to_point: they never match a collective's messages) and numbered per
// peer, so both sides of a pair agree on each transfer's sequence number. They
// do not wait for the queue: they use their own slots and sequence numbers,
// and both transports accept posts from one thread while another waits
// (docs/collectives.md#requests says why they are not queued).
//
// Group calls record the collectives issued between group_start() and
// group_end(); group_end() runs them, allreduces fused into one pass per
// (dtype, op). Transfers issued in a group are posted at once and waited for
// at group_end(), after the group's collectives.
#pragma once

#include "collectives/call.hpp"
#include "collectives/communicator.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace antdt::detail {

// The operation behind an antdt::Request.
class RequestState {
 public:
  virtual ~RequestState() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
  virtual bool cancel() = 0;
  virtual bool cancelled() const noexcept = 0;
  // The communicator is being destroyed: release it; later waits report that.
  virtual void detach() noexcept = 0;
};

}  // namespace antdt::detail

namespace antdt::coll {

class SuiteState;

// Shared by both kinds of request: the outcome, kept so that a second wait()
// reports the same result.
class RequestBase : public detail::RequestState {
 public:
  bool cancelled() const noexcept override { return cancelled_; }
  bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }

 protected:
  // Sets the outcome, then publishes it: a thread that sees finished() sees the error too.
  void finish(std::exception_ptr error = nullptr) noexcept;
  void rethrow_if_failed() const;
  static std::exception_ptr detached_error() noexcept;

  // Atomic: a queued collective is finished by the progress thread while the caller tests it.
  std::atomic<bool> finished_{false};
  bool cancelled_ = false;
  std::exception_ptr error_;
};

// A collective issued by a non-blocking call: runs in issue order.
class QueuedCollective final : public RequestBase {
 public:
  QueuedCollective(SuiteState& suite, std::function<void()> run, const char* what, std::uint64_t number)
      : suite_(&suite), run_(std::move(run)), what_(what), number_(number) {}
  // Progress thread: reports whether it has run. Caller mode: runs it (and
  // everything queued before it) to completion.
  bool test() override;
  void wait() override;
  bool cancel() override { return false; }  // every rank expects it: it runs in order regardless
  void detach() noexcept override;
  // Called by the queue, in issue order.
  void run_now() noexcept;
  const char* what() const noexcept { return what_; }      // "iallreduce"
  std::uint64_t number() const noexcept { return number_; }  // 1, 2, ... in issue order

 private:
  SuiteState* suite_;  // null once detached
  std::function<void()> run_;
  const char* what_;
  std::uint64_t number_;
};

// One send or receive with a peer, posted when issued.
class Transfer final : public RequestBase {
 public:
  Transfer(detail::CommImpl& comm, bool is_send, std::span<std::byte> payload, std::size_t count, DataType dtype,
           int peer, std::uint64_t seq);
  bool test() override;
  void wait() override;
  bool cancel() override;
  void detach() noexcept override;

 private:
  detail::OpSlot slot_;
  std::optional<Call> call_;  // engaged while the transfer may be in flight
};

// A blocking collective issued between group_start() and group_end().
struct GroupedCollective {
  bool is_allreduce = false;
  // allreduce (fused at group_end):
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::u8;
  ReduceOp op = ReduceOp::sum;
  // anything else, run in issue order:
  std::function<void()> run;
  bool done = false;  // an allreduce already run as part of a fused pass
};

class SuiteState final : public detail::CollectiveState {
 public:
  explicit SuiteState(detail::CommImpl& comm);
  ~SuiteState() override;

  detail::CommImpl& comm() noexcept { return comm_; }

  // Non-blocking collectives. `what` names the call in errors (a string literal).
  std::shared_ptr<detail::RequestState> enqueue(std::function<void()> run,
                                                const char* what = "non-blocking collective");
  // Returns once the queued collectives up to and including `last` (all when
  // null) have run: runs them here in caller mode; waits for the progress
  // thread otherwise (then the progress thread is idle when `last` is null).
  // The wait is bounded by ANTDT_TIMEOUT_MS without any collective finishing:
  // then the communicator is failed and aborted, and TimeoutError names `last`.
  void run_queued(const QueuedCollective* last = nullptr);
  bool background() const noexcept { return background_; }

  // Point-to-point sequence numbers (1, 2, ... per peer and direction).
  std::uint64_t next_send_seq(int peer) { return ++sends_to_.at(static_cast<std::size_t>(peer)); }
  std::uint64_t next_recv_seq(int peer) { return ++recvs_from_.at(static_cast<std::size_t>(peer)); }
  std::shared_ptr<Transfer> post_transfer(bool is_send, std::span<std::byte> payload, std::size_t count,
                                          DataType dtype, int peer);

  // Group calls.
  bool in_group() const noexcept { return group_depth_ > 0; }
  void group_start() { ++group_depth_; }
  // Records a collective, or a transfer to wait for at group_end.
  void record(GroupedCollective op) { grouped_.push_back(std::move(op)); }
  void record(std::shared_ptr<Transfer> transfer) { group_transfers_.push_back(std::move(transfer)); }
  void group_end();

 private:
  void track(const std::shared_ptr<detail::RequestState>& request);
  void run_grouped();
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
  std::vector<std::uint64_t> sends_to_, recvs_from_;
  int group_depth_ = 0;
  std::vector<GroupedCollective> grouped_;
  std::vector<std::shared_ptr<Transfer>> group_transfers_;
  std::vector<std::byte> fused_;  // grow-only packing buffer of fused allreduces
};

// The communicator's suite state (created on first use).
SuiteState& suite(detail::CommImpl& comm);
// For calls outside the suite that use the communicator's collective resources
// (partial collectives): with the progress thread, returns once every queued
// non-blocking collective has run (SuiteState::run_queued). Nothing to do in
// caller mode (nothing runs alongside the caller) or when the suite was never used.
void drain_queue(detail::CommImpl& comm);

// A blocking send or receive, outside any group (sendrecv.cpp).
void transfer_now(detail::CommImpl& comm, bool is_send, std::span<std::byte> payload, std::size_t count,
                  DataType dtype, int peer);

// Runs an allreduce now, bypassing groups and the queue (collectives.cpp).
void run_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                   ReduceOp op);

}  // namespace antdt::coll
