#include "collectives/api/c_api.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <cstddef>
#include <new>
#include <string>

namespace antdt::api {
namespace {
thread_local std::string last_error;
}  // namespace

antdtStatus_t c_api_call(void (*body)(void*), void* context) noexcept {
  try {
    last_error.clear();
    body(context);
    return ANTDT_OK;
  } catch (const Error& e) {
    last_error = e.what();
    return static_cast<antdtStatus_t>(e.status());
  } catch (const std::bad_alloc&) {
    last_error = "out of memory";
    return ANTDT_ERR_INTERNAL;
  } catch (const std::exception& e) {
    last_error = e.what();
    return ANTDT_ERR_INTERNAL;
  }
}

const char* c_api_last_error() noexcept { return last_error.c_str(); }

Communicator& c_api_comm(antdtComm_t comm) {
  ANTDT_CHECK_ARG(comm != nullptr, "communicator handle is null");
  return comm->comm;
}

DataType c_api_dtype(antdtDataType_t t) {
  auto d = static_cast<DataType>(t);
  check_dtype(d);
  return d;
}

ReduceOp c_api_op(antdtReduceOp_t o) {
  auto op = static_cast<ReduceOp>(o);
  check_op(op);
  return op;
}

// antdtPartialResult grew lost_ranks: a caller compiled before passes the
// size without it, and is served everything up to steps_behind.
constexpr std::size_t kPartialResultSizeBeforeLostRanks = offsetof(antdtPartialResult, lost_ranks);

void c_api_check_partial_result(const antdtPartialResult* out) {
  ANTDT_CHECK_ARG(out == nullptr || out->struct_size >= kPartialResultSizeBeforeLostRanks,
                  "antdtPartialResult.struct_size is ", out ? out->struct_size : 0, ", expected at least ",
                  kPartialResultSizeBeforeLostRanks, " (set it to sizeof(antdtPartialResult))");
}

void c_api_partial_result(const PartialResult& r, antdtPartialResult* out) {
  c_api_check_partial_result(out);
  if (out == nullptr) return;
  out->step = r.step;
  out->fate = static_cast<antdtFate_t>(r.fate);
  out->contribution_step = r.contribution_step;
  out->participants = r.participants;
  out->total_weight = r.total_weight;
  out->steps_behind = r.steps_behind;
  if (out->struct_size >= offsetof(antdtPartialResult, lost_ranks) + sizeof out->lost_ranks)
    out->lost_ranks = r.lost_ranks;
}

}  // namespace antdt::api
