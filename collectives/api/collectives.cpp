// The public API of the collective suite: antdt::Request, the Communicator
// methods and the C functions for reduce-scatter, allgather(v), reduce,
// alltoall, send/recv, group calls and the non-blocking variants.
#include <antdt/comm.h>
#include <antdt/comm.hpp>

#include "collectives/collectives.hpp"
#include "collectives/device/device_collectives.hpp"
#include "collectives/suite.hpp"
#include "collectives/api/c_api.hpp"
#include "collectives/communicator.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

#include <span>

namespace antdt {

// ---------------------------------------------------------------------------
// Request
// ---------------------------------------------------------------------------
Request::Request() noexcept = default;
Request::Request(std::shared_ptr<detail::RequestState> state) noexcept : state_(std::move(state)) {}
Request::~Request() = default;
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&&) noexcept = default;

bool Request::test() { return state_ ? state_->test() : true; }
void Request::wait() {
  if (state_) state_->wait();
}
bool Request::cancel() { return state_ ? state_->cancel() : false; }
bool Request::cancelled() const noexcept { return state_ && state_->cancelled(); }

// ---------------------------------------------------------------------------
// Communicator
// ---------------------------------------------------------------------------
void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op) {
  coll::reduce_scatter(*impl_, send, recv, recv_count, dtype, op);
}
void Communicator::allgather(const void* send, void* recv, std::size_t send_count, DataType dtype) {
  coll::allgather(*impl_, send, recv, send_count, dtype);
}
void Communicator::allgatherv(const void* send, void* recv, std::span<const std::size_t> counts,
                              std::span<const std::size_t> displs, DataType dtype) {
  coll::allgatherv(*impl_, send, recv, counts, displs, dtype);
}
void Communicator::reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root) {
  coll::reduce(*impl_, send, recv, count, dtype, op, root);
}
void Communicator::alltoall(const void* send, void* recv, std::size_t count, DataType dtype) {
  coll::alltoall(*impl_, send, recv, count, dtype);
}
void Communicator::send(const void* buf, std::size_t count, DataType dtype, int peer) {
  coll::send(*impl_, buf, count, dtype, peer);
}
void Communicator::recv(void* buf, std::size_t count, DataType dtype, int peer) {
  coll::recv(*impl_, buf, count, dtype, peer);
}
void Communicator::group_start() { coll::group_start(*impl_); }
void Communicator::group_end() { coll::group_end(*impl_); }

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                             void* stream) {
  coll::allreduce_on(*impl_, send, recv, count, dtype, op, stream);
}
void Communicator::broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                             void* stream) {
  coll::broadcast_on(*impl_, send, recv, count, dtype, root, stream);
}
void Communicator::reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root,
                          void* stream) {
  coll::reduce_on(*impl_, send, recv, count, dtype, op, root, stream);
}
void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op,
                                  void* stream) {
  coll::reduce_scatter_on(*impl_, send, recv, recv_count, dtype, op, stream);
}
void Communicator::allgather(const void* send, void* recv, std::size_t send_count, DataType dtype, void* stream) {
  coll::allgather_on(*impl_, send, recv, send_count, dtype, stream);
}

Request Communicator::iallreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  return Request(coll::iallreduce(*impl_, send, recv, count, dtype, op));
}
Request Communicator::ibroadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root) {
  return Request(coll::ibroadcast(*impl_, send, recv, count, dtype, root));
}
Request Communicator::ibarrier() { return Request(coll::ibarrier(*impl_)); }
Request Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype,
                                      ReduceOp op) {
  return Request(coll::ireduce_scatter(*impl_, send, recv, recv_count, dtype, op));
}
Request Communicator::iallgather(const void* send, void* recv, std::size_t send_count, DataType dtype) {
  return Request(coll::iallgather(*impl_, send, recv, send_count, dtype));
}
Request Communicator::iallgatherv(const void* send, void* recv, std::span<const std::size_t> counts,
                                  std::span<const std::size_t> displs, DataType dtype) {
  return Request(coll::iallgatherv(*impl_, send, recv, counts, displs, dtype));
}
Request Communicator::ireduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                              int root) {
  return Request(coll::ireduce(*impl_, send, recv, count, dtype, op, root));
}
Request Communicator::ialltoall(const void* send, void* recv, std::size_t count, DataType dtype) {
  return Request(coll::ialltoall(*impl_, send, recv, count, dtype));
}
Request Communicator::isend(const void* buf, std::size_t count, DataType dtype, int peer) {
  return Request(coll::isend(*impl_, buf, count, dtype, peer));
}
Request Communicator::irecv(void* buf, std::size_t count, DataType dtype, int peer) {
  return Request(coll::irecv(*impl_, buf, count, dtype, peer));
}

}  // namespace antdt
