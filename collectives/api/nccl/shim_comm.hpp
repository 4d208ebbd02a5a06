// The communicator behind an ncclComm_t in native mode, and the conversions
// between NCCL's and antdt's vocabulary. Built only on the public C++ API
// (<antdt/comm.hpp>): the shim is a client of libantdt_comm like any other.
#pragma once

#include <antdt/comm.hpp>
#include <nccl.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

namespace antdt_nccl {

// A PreMulSum operator: sum of scalar * x (ncclRedOpCreatePreMulSum).
struct PreMulSum {
  ncclDataType_t dtype;
  ncclScalarResidence_t residence;
  double scalar;               // read at creation (host-immediate)
  const void* scalar_ptr;      // read at each call (device residence: host-visible memory here)
};

// Options for every communicator this process makes (read once from the environment).
struct ShimOptions {
  bool defer = false;           // ANTDT_NCCL_LATE=defer
  bool partial = false;         // ANTDT_NCCL_LATE=wait or defer: AllReduce as a partial collective
  std::uint32_t staleness = 3;  // ANTDT_NCCL_STALENESS (1..64; in effect at most ANTDT_RESULT_CACHE - 1)
  bool steps = true;            // ANTDT_NCCL_STEPS=0: no Monitor step per AllReduce
};
const ShimOptions& shim_options();

}  // namespace antdt_nccl

// nccl.h's opaque communicator.
struct ncclComm {
  // The antdt communicator; empty while a non-blocking init runs, after abort or on failure.
  std::optional<antdt::Communicator> comm;
  std::string transport = "ucx";
  int rank = -1;
  int nranks = 0;
  int device = -1;
  bool blocking = true;
  // ncclInProgress while a non-blocking init runs, then its result; a failure of
  // a collective or an abort by a peer is kept here too (ncclCommGetAsyncError).
  std::atomic<ncclResult_t> async{ncclSuccess};
  std::thread init_thread;
  bool finalized = false;
  bool revoked = false;
  bool step_open = false;  // the Monitor step that the next AllReduce closes
  std::uint64_t allreduce_calls = 0;
  // (count, dtype, op) of the running partial run: a partial run keeps one
  // signature, so an AllReduce with another ends the run first (partial_finish).
  std::optional<std::tuple<size_t, int, int>> partial_signature;
  std::mutex mu;  // last_error, ops
  std::string last_error;
  std::map<int, antdt_nccl::PreMulSum> ops;
  int next_op = ncclNumOps;
};
