// Names and sizes of the public enums (include/antdt/comm.hpp).
#include <antdt/comm.hpp>

#include "core/error.hpp"

namespace antdt {

const char* status_name(Status s) noexcept {
  switch (s) {
    case Status::ok: return "ok";
    case Status::invalid_argument: return "invalid argument";
    case Status::config: return "configuration error";
    case Status::bootstrap: return "bootstrap error";
    case Status::transport: return "transport error";
    case Status::timeout: return "timeout";
    case Status::mismatch: return "mismatched collective call";
    case Status::remote_abort: return "aborted by a remote rank";
    case Status::aborted: return "aborted";
    case Status::unsupported: return "unsupported";
    case Status::internal: return "internal error";
    case Status::resync: return "resync needed";
    case Status::peer_lost: return "peer lost";
  }
  return "unknown status";
}

std::size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::f32: return 4;
    case DataType::f64: return 8;
    case DataType::f16: return 2;
    case DataType::bf16: return 2;
    case DataType::i8: return 1;
    case DataType::u8: return 1;
    case DataType::i32: return 4;
    case DataType::u32: return 4;
    case DataType::i64: return 8;
    case DataType::u64: return 8;
  }
  raise<InvalidArgument>("invalid data type ", static_cast<int>(t),
                         ": expected 0..9 (f32, f64, f16, bf16, i8, u8, i32, u32, i64, u64)");
}

std::string_view dtype_name(DataType t) noexcept {
  switch (t) {
    case DataType::f32: return "f32";
    case DataType::f64: return "f64";
    case DataType::f16: return "f16";
    case DataType::bf16: return "bf16";
    case DataType::i8: return "i8";
    case DataType::u8: return "u8";
    case DataType::i32: return "i32";
    case DataType::u32: return "u32";
    case DataType::i64: return "i64";
    case DataType::u64: return "u64";
  }
  return "unknown";
}

std::string_view op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::avg: return "avg";
  }
  return "unknown";
}

}  // namespace antdt

namespace antdt {

std::string_view straggler_class_name(StragglerClass c) noexcept {
  switch (c) {
    case StragglerClass::healthy: return "healthy";
    case StragglerClass::leader: return "leader";
    case StragglerClass::deterministic: return "deterministic";
    case StragglerClass::transient: return "transient";
    case StragglerClass::persistent: return "persistent";
    case StragglerClass::lost: return "lost";
  }
  return "unknown";
}

}  // namespace antdt
