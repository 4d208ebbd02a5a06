// torch's element types and reduce ops in antdt's terms. A reduction needs
// antdt to know the element type; moving data (broadcast, gathers, scatter,
// all-to-all, send/recv) does not, so those move any dtype as bytes.
#pragma once

#include <antdt/comm.hpp>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <ATen/core/Tensor.h>

#include <string_view>

namespace antdt::pytorch {

// The antdt type that reduces `tensor`'s elements; a c10::Error naming the
// operation and the dtype (and the supported ones) when there is none.
DataType reduction_dtype(const at::Tensor& tensor, std::string_view operation);

// The antdt op for `op`; a c10::Error naming it when antdt has none
// (bitwise ops, PREMUL_SUM).
ReduceOp reduction_op(const c10d::ReduceOp& op, std::string_view operation);

// What a data-moving operation hands antdt for `tensor`: its bytes.
constexpr DataType kBytes = DataType::u8;

}  // namespace antdt::pytorch
