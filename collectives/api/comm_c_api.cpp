// The C functions of include/antdt/comm.h: communicators, the collectives,
// steps and partial collectives. Each runs its body through c_api_guarded
// (collectives/api/c_api.hpp), which turns an antdt::Error into its status code.
#include <antdt/comm.h>
#include <antdt/comm.hpp>

#include "collectives/api/c_api.hpp"
#include "core/error.hpp"

#include <cstring>
#include <memory>

namespace {

using antdt::api::c_api_check_partial_result;
using antdt::api::c_api_comm;
using antdt::api::c_api_dtype;
using antdt::api::c_api_guarded;
using antdt::api::c_api_last_error;
using antdt::api::c_api_op;
using antdt::api::c_api_partial_result;

template <class Make>
antdtStatus_t make_handle(antdtComm_t* out, Make&& make) {
  return c_api_guarded([&] {
    ANTDT_CHECK_ARG(out != nullptr, "output communicator pointer is null");
    *out = nullptr;
    auto handle = std::make_unique<antdtComm>(antdtComm{make()});
    *out = handle.release();  // owned by the caller until antdtCommDestroy
  });
}

}  // namespace

extern "C" {

antdtStatus_t antdtGetVersion(int* version) {
  return c_api_guarded([&] {
    ANTDT_CHECK_ARG(version != nullptr, "version pointer is null");
    *version = ANTDT_VERSION_CODE;
  });
}

const char* antdtStatusString(antdtStatus_t status) { return antdt::status_name(static_cast<antdt::Status>(status)); }

const char* antdtLastError(void) { return c_api_last_error(); }

antdtStatus_t antdtGetUniqueId(antdtUniqueId* id) {
  return c_api_guarded([&] {
    ANTDT_CHECK_ARG(id != nullptr, "unique id pointer is null");
    auto made = antdt::UniqueId::create();
    std::memcpy(id->internal, made.bytes.data(), sizeof id->internal);
  });
}

antdtStatus_t antdtCommInitRank(antdtComm_t* comm, int nranks, const antdtUniqueId* id, int rank) {
  return make_handle(comm, [&] {
    ANTDT_CHECK_ARG(id != nullptr, "unique id pointer is null");
    antdt::UniqueId uid;
    std::memcpy(uid.bytes.data(), id->internal, uid.bytes.size());
    return antdt::Communicator::create(uid, rank, nranks);
  });
}

antdtStatus_t antdtCommInitFromEnv(antdtComm_t* comm) {
  return make_handle(comm, [] { return antdt::Communicator::from_env(); });
}

antdtStatus_t antdtCommDestroy(antdtComm_t comm) {
  return c_api_guarded([&] {
    ANTDT_CHECK_ARG(comm != nullptr, "communicator handle is null");
    std::unique_ptr<antdtComm> owned(comm);
  });
}

antdtStatus_t antdtCommAbort(antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).abort("antdtCommAbort"); });
}

antdtStatus_t antdtCommRank(antdtComm_t comm, int* rank) {
  return c_api_guarded([&] {
    ANTDT_CHECK_ARG(rank != nullptr, "rank pointer is null");
    *rank = c_api_comm(comm).rank();
  });
}

antdtStatus_t antdtCommSize(antdtComm_t comm, int* size) {
  return c_api_guarded([&] {
    ANTDT_CHECK_ARG(size != nullptr, "size pointer is null");
    *size = c_api_comm(comm).size();
  });
}

antdtStatus_t antdtAllReduce(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                             antdtReduceOp_t op, antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).allreduce(sendbuf, recvbuf, count, c_api_dtype(dtype), c_api_op(op)); });
}

antdtStatus_t antdtBroadcast(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype, int root,
                             antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).broadcast(sendbuf, recvbuf, count, c_api_dtype(dtype), root); });
}

antdtStatus_t antdtBarrier(antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).barrier(); });
}

antdtStatus_t antdtStepBegin(antdtComm_t comm) {
  return c_api_guarded([&] { c_api_comm(comm).begin_step(); });
}
antdtStatus_t antdtComputeBegin(antdtComm_t comm, void* stream) {
  return c_api_guarded([&] { c_api_comm(comm).begin_compute(stream); });
}
antdtStatus_t antdtComputeEnd(antdtComm_t comm, void* stream) {
  return c_api_guarded([&] { c_api_comm(comm).end_compute(stream); });
}
antdtStatus_t antdtStepEnd(antdtComm_t comm, uint64_t samples) {
  return c_api_guarded([&] { c_api_comm(comm).end_step(samples); });
}


antdtStatus_t antdtPartialAllReduce(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                                    antdtReduceOp_t op, const antdtPartialOptions* opts, antdtPartialResult* result,
                                    antdtComm_t comm) {
  return c_api_guarded([&] {
    ANTDT_CHECK_ARG(opts != nullptr, "partial options pointer is null");
    ANTDT_CHECK_ARG(opts->struct_size >= sizeof(antdtPartialOptions), "antdtPartialOptions.struct_size is ",
                    opts->struct_size, ", expected at least ", sizeof(antdtPartialOptions));
    antdt::PartialOptions o{static_cast<antdt::LatePolicy>(opts->policy), opts->weight, opts->staleness, opts->samples};
    c_api_check_partial_result(result);
    c_api_partial_result(c_api_comm(comm).partial_allreduce(sendbuf, recvbuf, count, c_api_dtype(dtype), c_api_op(op), o), result);
  });
}

antdtStatus_t antdtPartialFinish(antdtComm_t comm, antdtPartialResult* result) {
  return c_api_guarded([&] {
    c_api_check_partial_result(result);
    c_api_partial_result(c_api_comm(comm).partial_finish(), result);
  });
}

static_assert(static_cast<int>(antdt::StragglerClass::lost) == ANTDT_STRAGGLER_LOST &&
                  static_cast<int>(antdt::StragglerClass::persistent) == ANTDT_STRAGGLER_PERSISTENT &&
                  static_cast<int>(antdt::StragglerClass::healthy) == ANTDT_STRAGGLER_HEALTHY,
              "antdtStragglerClass_t mirrors antdt::StragglerClass");

antdtStatus_t antdtStragglerClass(antdtComm_t comm, int rank, antdtStragglerClass_t* cls) {
  return c_api_guarded([&] {
    ANTDT_CHECK_ARG(cls != nullptr, "straggler class pointer is null");
    *cls = static_cast<antdtStragglerClass_t>(c_api_comm(comm).straggler_class(rank));
  });
}

}  // extern "C"

extern "C" {  // the rest of the collective suite

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
