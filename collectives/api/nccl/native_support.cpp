#include "native_support.hpp"

#include <cstdlib>
#include <cstring>

namespace antdt_nccl {
namespace {
std::mutex process_error_mu;
std::string process_error;  // ncclGetLastError(NULL)
}  // namespace

const ShimOptions& shim_options() {
  static const ShimOptions options = [] {
    ShimOptions o;
    if (const char* steps = std::getenv("ANTDT_NCCL_STEPS")) o.steps = std::strcmp(steps, "0") != 0;
    if (const char* late = std::getenv("ANTDT_NCCL_LATE")) {
      o.defer = std::strcmp(late, "defer") == 0;
      o.partial = o.defer || std::strcmp(late, "wait") == 0;
    }
    if (const char* s = std::getenv("ANTDT_NCCL_STALENESS")) {
      const long v = std::strtol(s, nullptr, 10);
      // A rank S steps behind needs S + 1 kept results: the bound in effect is
      // min(S, ANTDT_RESULT_CACHE - 1) (the cache's default of 4 allows the default S of 3).
      if (v >= 1 && v <= 64) o.staleness = static_cast<std::uint32_t>(v);
    }
    return o;
  }();
  return options;
}

ncclResult_t fail(ncclComm_t comm, ncclResult_t code, const std::string& message) {
  if (comm != nullptr) {
    std::lock_guard lock(comm->mu);
    comm->last_error = message;
  }
  std::lock_guard lock(process_error_mu);
  process_error = message;
  return code;
}

std::string last_error(ncclComm_t comm) {
  if (comm != nullptr) {
    std::lock_guard lock(comm->mu);
    if (!comm->last_error.empty()) return comm->last_error;
  }
  std::lock_guard lock(process_error_mu);
  return process_error;
}

ncclResult_t code_of(const antdt::Error& e) {
  using antdt::Status;
  switch (e.status()) {
    case Status::invalid_argument:
    case Status::unsupported: return ncclInvalidArgument;
    case Status::config:
    case Status::mismatch:
    case Status::aborted:
    case Status::resync: return ncclInvalidUsage;
    case Status::remote_abort:
    case Status::transport: return ncclRemoteError;
    case Status::bootstrap:
    case Status::timeout: return ncclSystemError;
    default: return ncclInternalError;
  }
}

ncclResult_t current_exception_code(ncclComm_t comm, const char* what) {
  try {
    throw;
  } catch (const antdt::Error& e) {
    const ncclResult_t code = code_of(e);
    if (comm != nullptr && (code == ncclRemoteError || code == ncclSystemError)) comm->async = code;
    return fail(comm, code, std::string(what) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return fail(comm, ncclSystemError, std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(comm, ncclInternalError, std::string(what) + ": " + e.what());
  }
}

bool to_dtype(ncclComm_t comm, ncclDataType_t t, antdt::DataType& out) {
  using antdt::DataType;
  switch (t) {
    case ncclInt8: out = DataType::i8; return true;
    case ncclUint8: out = DataType::u8; return true;
    case ncclInt32: out = DataType::i32; return true;
    case ncclUint32: out = DataType::u32; return true;
    case ncclInt64: out = DataType::i64; return true;
    case ncclUint64: out = DataType::u64; return true;
    case ncclFloat16: out = DataType::f16; return true;
    case ncclFloat32: out = DataType::f32; return true;
    case ncclFloat64: out = DataType::f64; return true;
    case ncclBfloat16: out = DataType::bf16; return true;
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      fail(comm, ncclInvalidArgument,
           "datatype " + std::to_string(static_cast<int>(t)) +
               " (fp8) is not supported by antdt (libantdt_nccl native mode); use passthrough mode for fp8");
      return false;
    default:
      fail(comm, ncclInvalidArgument, "invalid datatype " + std::to_string(static_cast<int>(t)));
      return false;
  }
}

std::size_t nccl_dtype_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

ncclResult_t usable(ncclComm_t comm, const char* what) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string(what) + ": comm is NULL");
  if (comm->init_thread.joinable()) comm->init_thread.join();  // a non-blocking init finishes first
  if (comm->revoked) return fail(comm, ncclInvalidUsage, std::string(what) + ": the communicator was revoked");
  if (comm->finalized) return fail(comm, ncclInvalidUsage, std::string(what) + ": the communicator was finalized");
  if (!comm->comm) {
    const ncclResult_t a = comm->async.load();
    return fail(comm, a == ncclSuccess ? ncclInvalidUsage : a,
                std::string(what) + ": the communicator is not usable (aborted or its init failed: " +
                    last_error(comm) + ")");
  }
  return ncclSuccess;
}

int& group_depth() {
  thread_local int depth = 0;
  return depth;
}

std::vector<GroupedCall>& group_calls() {
  thread_local std::vector<GroupedCall> calls;
  return calls;
}

ncclResult_t record(ncclComm_t comm, std::function<void(antdt::Communicator&)> run, CallKind kind) {
  GroupedCall call{comm, std::move(run), {}};
  call.point_to_point = kind == CallKind::point_to_point;
  group_calls().push_back(std::move(call));
  return ncclSuccess;
}

void end_partial_run(ncclComm_t comm) {
  if (!comm->partial_signature || !comm->comm) return;
  comm->partial_signature.reset();
  comm->comm->partial_finish();
}

}  // namespace antdt_nccl
