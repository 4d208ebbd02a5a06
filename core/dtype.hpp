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
// out = in[0] op in[1] op ... op in[k-1] element by element, left to right, over
// out.size() / dtype_size(t) elements of each input. f16/bf16 are carried in
// f32 across all k inputs and rounded once (a chain of reduce_into rounds k - 1
// times); for the other types the result equals that chain bit for bit. out may
// be one of the inputs; no other overlap.
void reduce_many(DataType t, ReduceOp op, std::span<std::byte> out, std::span<const std::byte* const> inputs);
// After an avg reduction of `nranks` contributions: divide every element by nranks
// (integer types: truncating division).
void finish_avg(DataType t, std::span<std::byte> data, std::size_t nranks);

// out = in * factor, for floating-point t only (InvalidArgument otherwise):
// f32 multiplied in double and rounded once, f64 in double, f16/bf16 in f32.
// out may be in; no other overlap.
void scale_into(DataType t, std::span<std::byte> out, std::span<const std::byte> in, double factor);

// Weighted sums (push-pull servers). The aggregate is kept in
// weighted_sum_type(t): f32 for f16/bf16, t itself otherwise.
DataType weighted_sum_type(DataType t) noexcept;
// acc[0, n) = (first ? 0 : acc) + weight * src[0, n) (src in t), element by
// element; integer sums wrap and take the weight as an integer. acc and src
// must not overlap.
void accumulate_weighted(DataType t, std::byte* acc, const std::byte* src, std::size_t n, double weight, bool first);
// out[0, n) (t) = acc (sum) or acc / total_weight (avg; zeros when total_weight
// is 0), rounded to t. avg needs a floating-point t (InvalidArgument otherwise).
void finish_weighted(DataType t, ReduceOp op, const std::byte* acc, std::byte* out, std::size_t n,
                     double total_weight);

// Scalar conversions used by kernels and tests.
float half_to_float(std::uint16_t h) noexcept;
std::uint16_t float_to_half(float f) noexcept;
float bf16_to_float(std::uint16_t b) noexcept;
std::uint16_t float_to_bf16(float f) noexcept;

}  // namespace antdt
