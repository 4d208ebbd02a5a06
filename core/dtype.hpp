// CPU reduction kernels for every DataType x ReduceOp. f16 and bf16 are
// computed in f32 and rounded to nearest-even on store. `avg` reduces as `sum`;
// the collective divides once at the end with finish_avg().
// Integer sum/prod wrap (two's complement); float min/max propagate NaN (if
// either input is NaN the result is NaN, unlike fmin/fmax).
#pragma once

#include <antdt/comm.hpp>

#include <cstddef>
#include <span>

namespace antdt {

// Throws InvalidArgument for a value outside the enum (e.g. from the C API).
void check_dtype(DataType t);
void check_op(ReduceOp op);

// acc[i] = acc[i] (op) in[i] for count = acc.size() / dtype_size(t) elements.
void reduce_inplace(DataType t, ReduceOp op, std::span<std::byte> acc, std::span<const std::byte> in);
// out[i] = a[i] (op) b[i]; out may alias a or b.
void reduce_into(DataType t, ReduceOp op, std::span<std::byte> out, std::span<const std::byte> a,
                 std::span<const std::byte> b);
// After an avg reduction of `nranks` contributions: divide every element by nranks
// (integer types: truncating division).
void finish_avg(DataType t, std::span<std::byte> data, std::size_t nranks);

// Scalar conversions used by kernels and tests.
float half_to_float(std::uint16_t h) noexcept;
std::uint16_t float_to_half(float f) noexcept;
float bf16_to_float(std::uint16_t b) noexcept;
std::uint16_t float_to_bf16(float f) noexcept;

}  // namespace antdt
