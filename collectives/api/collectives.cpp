// The public API of the collective suite: antdt::Request, the Communicator
// methods and the C functions for reduce-scatter, allgather(v), reduce,
// alltoall, send/recv, group calls and the non-blocking variants.
#include <antdt/comm.h>
#include <antdt/comm.hpp>

#include "collectives/collectives.hpp"
#include "collectives/request.hpp"
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
// Communicator: each method fills the call's argument record and hands it to
// the one entry, coll::execute (collectives/execute.hpp), in its mode.
// ---------------------------------------------------------------------------
namespace {

using coll::CollectiveArgs;
using coll::Kind;
using coll::Mode;

void run(detail::CommImpl& comm, const CollectiveArgs& args) { coll::execute(comm, args, Mode::blocking); }
Request issue(detail::CommImpl& comm, const CollectiveArgs& args) {
  return Request(coll::execute(comm, args, Mode::nonblocking).request);
}

}  // namespace

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op) {
  run(*impl_,
      {.kind = Kind::reduce_scatter, .send = send, .recv = recv, .count = recv_count, .dtype = dtype, .op = op});
}
void Communicator::allgather(const void* send, void* recv, std::size_t send_count, DataType dtype) {
  run(*impl_, {.kind = Kind::allgather, .send = send, .recv = recv, .count = send_count, .dtype = dtype});
}
void Communicator::allgatherv(const void* send, void* recv, std::span<const std::size_t> counts,
                              std::span<const std::size_t> displs, DataType dtype) {
  run(*impl_,
      {.kind = Kind::allgatherv, .send = send, .recv = recv, .dtype = dtype, .counts = counts, .displs = displs});
}
void Communicator::reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root) {
  run(*impl_,
      {.kind = Kind::reduce, .send = send, .recv = recv, .count = count, .dtype = dtype, .op = op, .root = root});
}
void Communicator::alltoall(const void* send, void* recv, std::size_t count, DataType dtype) {
  run(*impl_, {.kind = Kind::alltoall, .send = send, .recv = recv, .count = count, .dtype = dtype});
}
void Communicator::send(const void* buf, std::size_t count, DataType dtype, int peer) {
  coll::transfer(*impl_, true, buf, count, dtype, peer, Mode::blocking);
}
void Communicator::recv(void* buf, std::size_t count, DataType dtype, int peer) {
  coll::transfer(*impl_, false, buf, count, dtype, peer, Mode::blocking);
}
void Communicator::group_start() { coll::issued_calls(*impl_).group_start(); }
void Communicator::group_end() { coll::issued_calls(*impl_).group_end(); }

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                             void* stream) {
  run(*impl_, {.kind = Kind::allreduce, .send = send, .recv = recv, .count = count, .dtype = dtype, .op = op,
               .stream = stream});
}
void Communicator::broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                             void* stream) {
  run(*impl_, {.kind = Kind::broadcast, .send = send, .recv = recv, .count = count, .dtype = dtype, .root = root,
               .stream = stream});
}
void Communicator::reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root,
                          void* stream) {
  run(*impl_, {.kind = Kind::reduce, .send = send, .recv = recv, .count = count, .dtype = dtype, .op = op,
               .root = root, .stream = stream});
}
void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op,
                                  void* stream) {
  run(*impl_, {.kind = Kind::reduce_scatter, .send = send, .recv = recv, .count = recv_count, .dtype = dtype,
               .op = op, .stream = stream});
}
void Communicator::allgather(const void* send, void* recv, std::size_t send_count, DataType dtype, void* stream) {
  run(*impl_, {.kind = Kind::allgather, .send = send, .recv = recv, .count = send_count, .dtype = dtype,
               .stream = stream});
}

Request Communicator::iallreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  return issue(*impl_, {.kind = Kind::allreduce, .send = send, .recv = recv, .count = count, .dtype = dtype, .op = op});
}
Request Communicator::ibroadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root) {
  return issue(*impl_, {.kind = Kind::broadcast, .send = send, .recv = recv, .count = count, .dtype = dtype,
                        .root = root});
}
Request Communicator::ibarrier() { return issue(*impl_, {.kind = Kind::barrier}); }
Request Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype,
                                      ReduceOp op) {
  return issue(*impl_, {.kind = Kind::reduce_scatter, .send = send, .recv = recv, .count = recv_count,
                        .dtype = dtype, .op = op});
}
Request Communicator::iallgather(const void* send, void* recv, std::size_t send_count, DataType dtype) {
  return issue(*impl_, {.kind = Kind::allgather, .send = send, .recv = recv, .count = send_count, .dtype = dtype});
}
Request Communicator::iallgatherv(const void* send, void* recv, std::span<const std::size_t> counts,
                                  std::span<const std::size_t> displs, DataType dtype) {
  return issue(*impl_, {.kind = Kind::allgatherv, .send = send, .recv = recv, .dtype = dtype, .counts = counts,
                        .displs = displs});
}
Request Communicator::ireduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                              int root) {
  return issue(*impl_, {.kind = Kind::reduce, .send = send, .recv = recv, .count = count, .dtype = dtype, .op = op,
                        .root = root});
}
Request Communicator::ialltoall(const void* send, void* recv, std::size_t count, DataType dtype) {
  return issue(*impl_, {.kind = Kind::alltoall, .send = send, .recv = recv, .count = count, .dtype = dtype});
}
Request Communicator::isend(const void* buf, std::size_t count, DataType dtype, int peer) {
  return Request(coll::transfer(*impl_, true, buf, count, dtype, peer, Mode::nonblocking));
}
Request Communicator::irecv(void* buf, std::size_t count, DataType dtype, int peer) {
  return Request(coll::transfer(*impl_, false, buf, count, dtype, peer, Mode::nonblocking));
}

}  // namespace antdt
