// Sends that outlive the partial-collective call that posted them
// (stale-synchronous defer, docs/partial.md#stale-synchronous-defer): a late
// rank's deposit to its depositary, and a server's pushes ahead of a result to
// the ranks that were absent when its step closed. The caller returns at once;
// the receiver takes the message whenever it next calls.
//
// Each batch owns what it sends, its operation slots and its Call, so nothing
// it posted refers to the caller's buffers. A thread of this rank drives the
// transport for them: a rendezvous needs the sender's progress when the
// receiver asks for the data, and the caller may be computing for a long time.
// The thread sleeps while nothing is in flight and ticks every millisecond
// while something is (a progress pass and a test, never a spin), so
// oversubscribed ranks keep their cores.
#pragma once

#include "collectives/call.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace antdt::coll::partial {

class AsyncSends {
 public:
  explicit AsyncSends(detail::CommImpl& comm);
  // Stops the thread; whatever is still in flight is cancelled.
  ~AsyncSends();
  AsyncSends(const AsyncSends&) = delete;
  AsyncSends& operator=(const AsyncSends&) = delete;

  // One message: `part` of the batch's bytes, to `peer`.
  struct Message {
    int peer = -1;
    std::size_t offset = 0;
    std::size_t bytes = 0;
  };
  // A buffer of `bytes` for post(): one that an earlier batch finished with
  // when there is one (no allocation and no page faults per step once warm).
  std::vector<std::byte> take(std::size_t bytes);
  // Takes `data` and posts `messages` (slices of it) under (sig, seq), in
  // order, then returns. Rethrows a failure of an earlier batch first.
  void post(const Signature& sig, std::uint64_t seq, std::vector<std::byte> data, std::span<const Message> messages);
  // Waits until every batch posted so far completed (each receiver took its
  // message), bounded by ANTDT_TIMEOUT_MS; rethrows a failure.
  void drain();

 private:
  struct Batch;
  using Clock = std::chrono::steady_clock;
  void run();
  bool finished(Batch& batch);
  void rethrow_failure();

  detail::CommImpl& comm_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Batch>> batches_;  // in posting order; the front is the one waited for
  std::vector<std::vector<std::byte>> spare_;   // buffers of finished batches, for take()
  std::exception_ptr failure_;
  bool stop_ = false;
  std::thread thread_;  // started by the first post
};

}  // namespace antdt::coll::partial
