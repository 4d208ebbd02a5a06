// What the collective suite keeps per communicator between calls, and the
// deferred execution behind non-blocking calls and group calls.
//
// Non-blocking collectives are queued and run in issue order (ranks call
// collectives in the same order, so running them later, in that order, is
// correct): when a request is waited for or tested, when the communicator's
// next blocking collective runs, or at group_end(). There is no background
// progress in this version, so no overlap of a collective with computation.
//
// Point-to-point transfers are posted when they are issued (tag kind
// point_to_point: they never match a collective's messages) and numbered per
// peer, so both sides of a pair agree on each transfer's sequence number.
//
// Group calls record the collectives issued between group_start() and
// group_end(); group_end() runs them, allreduces fused into one pass per
// (dtype, op). Transfers issued in a group are posted at once and waited for
// at group_end(), after the group's collectives.
#pragma once

#include "collectives/call.hpp"
#include "core/communicator.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
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

 protected:
  void finish(std::exception_ptr error = nullptr) noexcept;
  bool finished() const noexcept { return finished_; }
  void rethrow_if_failed() const;
  static std::exception_ptr detached_error() noexcept;

  bool finished_ = false;
  bool cancelled_ = false;
  std::exception_ptr error_;
};

// A collective issued by a non-blocking call: runs in issue order.
class QueuedCollective final : public RequestBase {
 public:
  QueuedCollective(SuiteState& suite, std::function<void()> run) : suite_(&suite), run_(std::move(run)) {}
  bool test() override;  // runs it (and everything queued before it) to completion
  void wait() override;
  bool cancel() override { return false; }  // every rank expects it: it runs in order regardless
  void detach() noexcept override;
  // Called by the queue, in issue order.
  void run_now() noexcept;

 private:
  SuiteState* suite_;  // null once detached
  std::function<void()> run_;
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

  // Non-blocking collectives.
  std::shared_ptr<detail::RequestState> enqueue(std::function<void()> run);
  // Runs queued collectives in order, up to and including `last` (all when null).
  void run_queued(const QueuedCollective* last = nullptr);

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

  detail::CommImpl& comm_;
  std::deque<std::shared_ptr<QueuedCollective>> queue_;
  std::vector<std::weak_ptr<detail::RequestState>> live_;  // every request still referenced by the caller
  std::vector<std::uint64_t> sends_to_, recvs_from_;
  int group_depth_ = 0;
  std::vector<GroupedCollective> grouped_;
  std::vector<std::shared_ptr<Transfer>> group_transfers_;
  std::vector<std::byte> fused_;  // grow-only packing buffer of fused allreduces
};

// The communicator's suite state (created on first use).
SuiteState& suite(detail::CommImpl& comm);

// A blocking send or receive, outside any group (sendrecv.cpp).
void transfer_now(detail::CommImpl& comm, bool is_send, std::span<std::byte> payload, std::size_t count,
                  DataType dtype, int peer);

// Runs an allreduce now, bypassing groups and the queue (collectives.cpp).
void run_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                   ReduceOp op);

}  // namespace antdt::coll
