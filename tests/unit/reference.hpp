// Independent references for collective tests: element access through
// doubles, per-rank inputs chosen so that every result is exact, and the
// expected reduction computed here, never by the library's kernels.
#pragma once

#include <antdt/comm.hpp>

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace antdt::test {

inline constexpr DataType kAllTypes[] = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16, DataType::i8,
                                  DataType::u8,  DataType::i32, DataType::u32, DataType::i64,  DataType::u64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};

inline bool is_signed_or_float(DataType t) {
  return t != DataType::u8 && t != DataType::u32 && t != DataType::u64;
}
inline bool is_float(DataType t) {
  return t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
}

// Element access through doubles: every value used here is a small integer (or
// a quotient for avg), exactly representable in double.
inline void store(DataType t, std::byte* base, std::size_t i, double v) {
  switch (t) {
    case DataType::f32: { float x = static_cast<float>(v); std::memcpy(base + 4 * i, &x, 4); break; }
    case DataType::f64: std::memcpy(base + 8 * i, &v, 8); break;
    case DataType::f16: { auto x = float_to_half(static_cast<float>(v)); std::memcpy(base + 2 * i, &x, 2); break; }
    case DataType::bf16: { auto x = float_to_bf16(static_cast<float>(v)); std::memcpy(base + 2 * i, &x, 2); break; }
    case DataType::i8: { auto x = static_cast<std::int8_t>(v); std::memcpy(base + i, &x, 1); break; }
    case DataType::u8: { auto x = static_cast<std::uint8_t>(v); std::memcpy(base + i, &x, 1); break; }
    case DataType::i32: { auto x = static_cast<std::int32_t>(v); std::memcpy(base + 4 * i, &x, 4); break; }
    case DataType::u32: { auto x = static_cast<std::uint32_t>(v); std::memcpy(base + 4 * i, &x, 4); break; }
    case DataType::i64: { auto x = static_cast<std::int64_t>(v); std::memcpy(base + 8 * i, &x, 8); break; }
    case DataType::u64: { auto x = static_cast<std::uint64_t>(v); std::memcpy(base + 8 * i, &x, 8); break; }
  }
}

template <class T>
inline double read_as(const std::byte* p) {
  T x;
  std::memcpy(&x, p, sizeof x);
  return static_cast<double>(x);
}

inline double load(DataType t, const std::byte* base, std::size_t i) {
  switch (t) {
    case DataType::f32: return read_as<float>(base + 4 * i);
    case DataType::f64: return read_as<double>(base + 8 * i);
    case DataType::f16: { std::uint16_t x; std::memcpy(&x, base + 2 * i, 2); return half_to_float(x); }
    case DataType::bf16: { std::uint16_t x; std::memcpy(&x, base + 2 * i, 2); return bf16_to_float(x); }
    case DataType::i8: return read_as<std::int8_t>(base + i);
    case DataType::u8: return read_as<std::uint8_t>(base + i);
    case DataType::i32: return read_as<std::int32_t>(base + 4 * i);
    case DataType::u32: return read_as<std::uint32_t>(base + 4 * i);
    case DataType::i64: return read_as<std::int64_t>(base + 8 * i);
    case DataType::u64: return read_as<std::uint64_t>(base + 8 * i);
  }
  return 0;
}

// Rank r's input element i for op: small values so every result is exact.
inline double input(DataType t, ReduceOp op, int r, std::size_t i) {
  if (op == ReduceOp::prod) return ((static_cast<std::size_t>(r) + i) % 3 == 0) ? 2.0 : 1.0;
  double v = static_cast<double>((static_cast<std::size_t>(r) * 7 + i * 3) % 5 + 1);  // 1..5
  return is_signed_or_float(t) ? v - 3.0 : v;                                           // -2..2 where signed
}

inline double expected(DataType t, ReduceOp op, int n, std::size_t i) {
  double acc = input(t, op, 0, i);
  for (int r = 1; r < n; ++r) {
    double v = input(t, op, r, i);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: acc += v; break;
      case ReduceOp::prod: acc *= v; break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::avg) acc = is_float(t) ? acc / n : std::trunc(acc / n);
  return acc;
}

inline bool close_enough(DataType t, ReduceOp op, double got, double want) {
  if (op == ReduceOp::avg && is_float(t)) {
    // The quotient is rounded to the element type (f16/bf16 through f32).
    double tol = t == DataType::bf16 ? 1.0 / 64 : t == DataType::f16 ? 1.0 / 512 : 1e-6;
    return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
  }
  return got == want;
}

// What a failing check names: the call, dtype, op, count and placement.
inline std::string where(const char* what, DataType t, ReduceOp op, std::size_t count, bool in_place) {
  return cat(what, " ", dtype_name(t), " ", op_name(op), " count ", count, in_place ? " in place" : " out of place");
}

inline void expect_element(const std::string& what, std::size_t i, double got, double want, DataType t, ReduceOp op) {
  if (!close_enough(t, op, got, want))
    throw std::runtime_error(cat(what, ": element ", i, " is ", got, ", expected ", want));
}

// A value every dtype holds exactly, distinct for nearby (a, b, i).
inline double tag_value(DataType t, std::size_t a, std::size_t b, std::size_t i) {
  const double v = static_cast<double>((a * 31 + b * 7 + i * 3) % 100);
  return is_signed_or_float(t) ? v - 50 : v;
}

}  // namespace antdt::test
