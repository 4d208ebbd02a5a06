#include "tensor_types.hpp"

#include <c10/util/Exception.h>

namespace antdt::pytorch {

DataType reduction_dtype(const at::Tensor& tensor, std::string_view operation) {
  switch (tensor.scalar_type()) {
    case at::kFloat: return DataType::f32;
    case at::kDouble: return DataType::f64;
    case at::kHalf: return DataType::f16;
    case at::kBFloat16: return DataType::bf16;
    case at::kChar: return DataType::i8;
    case at::kByte: return DataType::u8;
    case at::kInt: return DataType::i32;
    case at::kLong: return DataType::i64;
    default: break;
  }
  TORCH_CHECK(false, "antdt: ", operation, " cannot reduce ", tensor.scalar_type(),
              " tensors; the reducible dtypes are float32, float64, float16, bfloat16, int8, uint8, int32 and int64");
}

ReduceOp reduction_op(const c10d::ReduceOp& op, std::string_view operation) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::sum;
    case c10d::ReduceOp::AVG: return ReduceOp::avg;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::prod;
    case c10d::ReduceOp::MIN: return ReduceOp::min;
    case c10d::ReduceOp::MAX: return ReduceOp::max;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(false, "antdt: ", operation, " does not support the bitwise ops (BAND, BOR, BXOR); "
                  "antdt reduces with SUM, AVG, PRODUCT, MIN and MAX");
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK(false, "antdt: ", operation, " does not support PREMUL_SUM (an NCCL extension); "
                  "multiply the tensor by the factor and use SUM");
    default: break;
  }
  TORCH_CHECK(false, "antdt: ", operation, " got an unknown reduce op (", static_cast<int>(op.op_), ")");
}

}  // namespace antdt::pytorch
