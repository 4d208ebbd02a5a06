// The public API of the collective suite: antdt::Request, the Communicator
// methods and the C functions for reduce-scatter, allgather(v), reduce,
// alltoall, send/recv, group calls and the non-blocking variants.
#include <antdt/comm.h>
#include <antdt/comm.hpp>

#include "collectives/collectives.hpp"
#include "collectives/device_collectives.hpp"
#include "collectives/suite.hpp"
#include "core/c_api.hpp"
#include "core/communicator.hpp"
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

// ---------------------------------------------------------------------------
// C API
// ---------------------------------------------------------------------------
namespace {

using antdt::detail::c_api_comm;
using antdt::detail::c_api_dtype;
using antdt::detail::c_api_op;
using antdt::detail::c_api_guarded;


}  // namespace

extern "C" {

antdtStatus_t antdtReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, antdtDataType_t dtype,
                                 antdtReduceOp_t op, antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).reduce_scatter(sendbuf, recvbuf, recvcount, c_api_dtype(dtype), c_api_op(op)); });
}

antdtStatus_t antdtAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, antdtDataType_t dtype,
                             antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).allgather(sendbuf, recvbuf, sendcount, c_api_dtype(dtype)); });
}

antdtStatus_t antdtAllGatherV(const void* sendbuf, void* recvbuf, const size_t* recvcounts, const size_t* displs,
                              antdtDataType_t dtype, antdtComm_t comm) {
  return c_api_guarded([&] {
    antdt::Communicator& c = c_api_comm(comm);
    ANTDT_CHECK_ARG(recvcounts != nullptr, "antdtAllGatherV: recvcounts is null");
    const auto n = static_cast<std::size_t>(c.size());
    c.allgatherv(sendbuf, recvbuf, std::span(recvcounts, n),
                 displs != nullptr ? std::span(displs, n) : std::span<const std::size_t>(), c_api_dtype(dtype));
  });
}

antdtStatus_t antdtReduce(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                          antdtReduceOp_t op, int root, antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).reduce(sendbuf, recvbuf, count, c_api_dtype(dtype), c_api_op(op), root); });
}

antdtStatus_t antdtAlltoAll(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                            antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).alltoall(sendbuf, recvbuf, count, c_api_dtype(dtype)); });
}

antdtStatus_t antdtSend(const void* sendbuf, size_t count, antdtDataType_t dtype, int peer, antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).send(sendbuf, count, c_api_dtype(dtype), peer); });
}

antdtStatus_t antdtRecv(void* recvbuf, size_t count, antdtDataType_t dtype, int peer, antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).recv(recvbuf, count, c_api_dtype(dtype), peer); });
}

antdtStatus_t antdtGroupStart(antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).group_start(); });
}

antdtStatus_t antdtGroupEnd(antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).group_end(); });
}

antdtStatus_t antdtAllReduceStream(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                                   antdtReduceOp_t op, antdtComm_t comm, void* stream) {
  return c_api_guarded(
      [&] { c_api_comm(comm).allreduce(sendbuf, recvbuf, count, c_api_dtype(dtype), c_api_op(op), stream); });
}

antdtStatus_t antdtBroadcastStream(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype, int root,
                                   antdtComm_t comm, void* stream) {
  return c_api_guarded([&] { c_api_comm(comm).broadcast(sendbuf, recvbuf, count, c_api_dtype(dtype), root, stream); });
}

antdtStatus_t antdtReduceStream(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                                antdtReduceOp_t op, int root, antdtComm_t comm, void* stream) {
  return c_api_guarded(
      [&] { c_api_comm(comm).reduce(sendbuf, recvbuf, count, c_api_dtype(dtype), c_api_op(op), root, stream); });
}

antdtStatus_t antdtReduceScatterStream(const void* sendbuf, void* recvbuf, size_t recvcount, antdtDataType_t dtype,
                                       antdtReduceOp_t op, antdtComm_t comm, void* stream) {
  return c_api_guarded(
      [&] { c_api_comm(comm).reduce_scatter(sendbuf, recvbuf, recvcount, c_api_dtype(dtype), c_api_op(op), stream); });
}

antdtStatus_t antdtAllGatherStream(const void* sendbuf, void* recvbuf, size_t sendcount, antdtDataType_t dtype,
                                   antdtComm_t comm, void* stream) {
  return c_api_guarded([&] { c_api_comm(comm).allgather(sendbuf, recvbuf, sendcount, c_api_dtype(dtype), stream); });
}

}  // extern "C"
