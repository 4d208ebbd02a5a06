// Point-to-point send/recv on a communicator (collectives/transfer.hpp).
//
// A transfer is one message with its own tag kind (point_to_point), so it never
// matches a collective's receives, and a sequence number counted per peer and
// direction: the n-th send from a to b is the n-th receive at b from a (the
// transports match per sender and tag in send order). The header carries the
// (count, dtype) signature, so a receive of a different size or type is a
// MismatchError on every rank, like a mismatched collective.
#include "collectives/transfer.hpp"

#include "collectives/checks.hpp"
#include "collectives/issued_calls.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

namespace antdt::coll {
namespace {

Signature transfer_signature(std::size_t count, DataType dtype) {
  return Signature{Kind::point_to_point, count, dtype, ReduceOp::sum, -1, Algo::none};
}

}  // namespace

Transfer::Transfer(detail::CommImpl& comm, bool is_send, std::span<std::byte> payload, std::size_t count,
                   DataType dtype, int peer, std::uint64_t seq) {
  slot_.completion.state.store(transport::State::done);  // idle until posted
  call_.emplace(comm, transfer_signature(count, dtype), seq, std::span(&slot_, 1));
  if (is_send)
    call_->send(0, peer, payload);
  else
    call_->recv(0, peer, payload);
}

bool Transfer::test() {
  if (!finished_) {
    bool complete = false;
    try {
      complete = call_->done(0);
    } catch (...) {
      call_.reset();
      finish(std::current_exception());
    }
    if (!finished_) {
      if (!complete) return false;
      call_.reset();
      finish();
    }
  }
  rethrow_if_failed();
  return true;
}

void Transfer::wait() {
  if (!finished_) {
    try {
      call_->restart_deadline();  // bounded from the wait, not from the post
      call_->wait(0);
      finish();
    } catch (...) {
      finish(std::current_exception());
    }
    call_.reset();
  }
  rethrow_if_failed();
}

bool Transfer::cancel() {
  if (finished_) return false;
  try {
    cancelled_ = call_->cancel(0);
    finish();
  } catch (...) {
    finish(std::current_exception());  // it had completed, and wrongly (a mismatch)
  }
  call_.reset();
  rethrow_if_failed();
  return cancelled_;
}

void Transfer::detach() noexcept {
  call_.reset();  // cancels the operation if it is still in flight
  if (!finished_) finish(detached_error());
}

namespace {

void transfer_now(detail::CommImpl& comm, bool is_send, std::span<std::byte> payload, std::size_t count,
                  DataType dtype, int peer, std::uint64_t seq) {
  detail::OpSlot slot;
  slot.completion.state.store(transport::State::done);
  Call call(comm, transfer_signature(count, dtype), seq, std::span(&slot, 1));
  if (is_send)
    call.send(0, peer, payload);
  else
    call.recv(0, peer, payload);
  call.wait(0);
}

std::shared_ptr<Transfer> post_transfer(IssuedCalls& issued, bool is_send, std::span<std::byte> payload,
                                        std::size_t count, DataType dtype, int peer) {
  const std::uint64_t seq = issued.sequences().next(is_send, peer);
  auto posted = std::make_shared<Transfer>(issued.comm(), is_send, payload, count, dtype, peer, seq);
  issued.requests().track(posted);
  return posted;
}

}  // namespace

std::shared_ptr<detail::RequestState> transfer(detail::CommImpl& comm, bool is_send, const void* buf,
                                               std::size_t count, DataType dtype, int peer, Mode mode) {
  const bool nonblocking = mode == Mode::nonblocking;
  const char* what = is_send ? (nonblocking ? "isend" : "send") : (nonblocking ? "irecv" : "recv");
  check_transfer(comm, buf, count, dtype, peer, what);
  // The transport only reads a send's payload.
  std::span<std::byte> payload(static_cast<std::byte*>(const_cast<void*>(buf)), count * dtype_size(dtype));
  IssuedCalls& issued = issued_calls(comm);
  if (nonblocking) return post_transfer(issued, is_send, payload, count, dtype, peer);
  if (issued.in_group()) {
    issued.record(post_transfer(issued, is_send, payload, count, dtype, peer));
    return nullptr;
  }
  transfer_now(comm, is_send, payload, count, dtype, peer, issued.sequences().next(is_send, peer));
  return nullptr;
}

}  // namespace antdt::coll
