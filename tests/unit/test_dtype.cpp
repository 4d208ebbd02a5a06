// Reduction kernels and f16/bf16 conversions (core/dtype.cpp, core/types.cpp)
// against references written here independently: floats are combined in
// double and rounded with this file's own encoders; integers wrap through
// 64-bit unsigned arithmetic.
#include "core/dtype.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace antdt {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------
// Independent f16 / bf16 references (value arithmetic, not bit tricks).
// ---------------------------------------------------------------------------
double ref_half_value(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? kNaN : sign * kInf;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

double ref_bf16_value(std::uint16_t b) {
  const int exponent = (b >> 7) & 0xff;
  const int mantissa = b & 0x7f;
  const double sign = (b & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0xff) return mantissa ? kNaN : sign * kInf;
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 134);
}

// Rounds |x| to a binary format with `bits` significand bits (hidden bit
// included), minimum normal exponent `emin`, overflow threshold `overflow`
// (the midpoint above the largest finite value, which ties to infinity), to
// nearest with ties to even. Returns the encoding without the sign.
std::uint16_t ref_encode_magnitude(double x, int bits, int emin, int exponent_bias, double overflow,
                                   std::uint16_t inf_bits) {
  if (x >= overflow) return inf_bits;
  const int fraction_bits = bits - 1;
  if (x < std::ldexp(1.0, emin)) {
    // Subnormal: count units of the smallest subnormal, 2^(emin - fraction_bits).
    return static_cast<std::uint16_t>(std::nearbyint(std::ldexp(x, fraction_bits - emin)));
  }
  int e2 = 0;
  std::frexp(x, &e2);
  int exponent = e2 - 1;  // x = 1.f * 2^exponent
  double significand = std::nearbyint(std::ldexp(x, fraction_bits - exponent));
  if (significand == std::ldexp(1.0, bits)) {
    significand = std::ldexp(1.0, fraction_bits);
    ++exponent;
  }
  const auto field = static_cast<std::uint16_t>(exponent + exponent_bias);
  return static_cast<std::uint16_t>((field << fraction_bits) |
                                    (static_cast<std::uint16_t>(significand) - (1u << fraction_bits)));
}

std::uint16_t ref_half_from_float(float f) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7e00;
  return sign | ref_encode_magnitude(std::fabs(static_cast<double>(f)), 11, -14, 15, 65520.0, 0x7c00);
}

std::uint16_t ref_bf16_from_float(float f) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7fc0;
  return sign | ref_encode_magnitude(std::fabs(static_cast<double>(f)), 8, -126, 127,
                                     std::ldexp(2.0 - std::ldexp(1.0, -8), 127), 0x7f80);
}

bool half_is_nan(std::uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16_is_nan(std::uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// double -> float with IEEE overflow to infinity (a plain cast of an
// out-of-range double is undefined behaviour in C++).
float to_float(double r) {
  if (std::isnan(r)) return std::numeric_limits<float>::quiet_NaN();
  const double limit = std::ldexp(2.0 - std::ldexp(1.0, -24), 127);  // ties above FLT_MAX go to inf
  if (r >= limit) return std::numeric_limits<float>::infinity();
  if (r <= -limit) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(r);
}

// ---------------------------------------------------------------------------
// Per-type references. `combine` is the exact semantics of one element step.
// ---------------------------------------------------------------------------
double ref_float_op(ReduceOp op, double x, double y) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return x + y;
    case ReduceOp::prod: return x * y;
    case ReduceOp::min:
      if (std::isnan(x) || std::isnan(y)) return kNaN;
      return y < x ? y : x;
    case ReduceOp::max:
      if (std::isnan(x) || std::isnan(y)) return kNaN;
      return y > x ? y : x;
  }
  return kNaN;
}

template <class Derived, class S>
struct FloatRefBase {
  using Storage = S;
  static constexpr bool is_float = true;
  static S combine(ReduceOp op, S a, S b) {
    return Derived::encode(ref_float_op(op, Derived::value(a), Derived::value(b)));
  }
  static S divide(S a, std::size_t n) { return Derived::encode(Derived::value(a) / static_cast<double>(n)); }
  static bool same(ReduceOp op, S got, S want) {
    const double g = Derived::value(got), w = Derived::value(want);
    if (std::isnan(w)) return std::isnan(g);
    // min/max may pick either of -0 and +0; sums and products are bit-exact.
    if (op == ReduceOp::min || op == ReduceOp::max) return g == w;
    return std::memcmp(&got, &want, sizeof(S)) == 0;
  }
  static std::string show(S v) { return std::to_string(Derived::value(v)); }
};

struct F32Ref : FloatRefBase<F32Ref, float> {
  static constexpr DataType type = DataType::f32;
  static double value(float v) { return v; }
  static float encode(double r) { return to_float(r); }
  static float random(std::mt19937_64& rng) {
    static const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                                     std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::denorm_min(), 1e-40f, 3.0f};
    switch (rng() % 4) {
      case 0: return specials[rng() % std::size(specials)];
      case 1: return std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
      default: return std::uniform_real_distribution<float>(-100.0f, 100.0f)(rng);
    }
  }
};

struct F64Ref : FloatRefBase<F64Ref, double> {
  static constexpr DataType type = DataType::f64;
  static double value(double v) { return v; }
  static double encode(double r) { return r; }
  static double random(std::mt19937_64& rng) {
    static const double specials[] = {0.0, -0.0, kInf, -kInf, kNaN, std::numeric_limits<double>::max(),
                                      -std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min()};
    switch (rng() % 4) {
      case 0: return specials[rng() % std::size(specials)];
      case 1: return std::bit_cast<double>(static_cast<std::uint64_t>(rng()));
      default: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
    }
  }
};

// f16/bf16: the kernel works in f32, so the reference rounds the double
// result to float first, then to the 16-bit format.
struct F16Ref : FloatRefBase<F16Ref, std::uint16_t> {
  static constexpr DataType type = DataType::f16;
  static double value(std::uint16_t v) { return ref_half_value(v); }
  static std::uint16_t encode(double r) { return ref_half_from_float(to_float(r)); }
  static std::uint16_t random(std::mt19937_64& rng) {
    if (rng() % 2) return static_cast<std::uint16_t>(rng());
    return ref_half_from_float(std::uniform_real_distribution<float>(-64.0f, 64.0f)(rng));
  }
};

struct Bf16Ref : FloatRefBase<Bf16Ref, std::uint16_t> {
  static constexpr DataType type = DataType::bf16;
  static double value(std::uint16_t v) { return ref_bf16_value(v); }
  static std::uint16_t encode(double r) { return ref_bf16_from_float(to_float(r)); }
  static std::uint16_t random(std::mt19937_64& rng) {
    if (rng() % 2) return static_cast<std::uint16_t>(rng());
    return ref_bf16_from_float(std::uniform_real_distribution<float>(-64.0f, 64.0f)(rng));
  }
};

template <class T, DataType DT>
struct IntRef {
  using Storage = T;
  static constexpr DataType type = DT;
  static constexpr bool is_float = false;
  // Signed values are sign-extended to 64 bits, combined modulo 2^64, and
  // truncated: that is two's complement wrap-around.
  static std::uint64_t wide(T v) {
    if constexpr (std::is_signed_v<T>) return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
    return static_cast<std::uint64_t>(v);
  }
  static T combine(ReduceOp op, T a, T b) {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: return static_cast<T>(wide(a) + wide(b));
      case ReduceOp::prod: return static_cast<T>(wide(a) * wide(b));
      case ReduceOp::min: return std::min(a, b);
      case ReduceOp::max: return std::max(a, b);
    }
    return 0;
  }
  static T divide(T a, std::size_t n) {
    if constexpr (std::is_signed_v<T>) return static_cast<T>(static_cast<std::int64_t>(a) / static_cast<std::int64_t>(n));
    return static_cast<T>(static_cast<std::uint64_t>(a) / n);
  }
  static bool same(ReduceOp, T got, T want) { return got == want; }
  static std::string show(T v) { return std::to_string(v); }
  static T random(std::mt19937_64& rng) {
    if (rng() % 4 == 0) {
      const T edges[] = {std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), 0, 1, static_cast<T>(-1)};
      return edges[rng() % std::size(edges)];
    }
    return static_cast<T>(rng());
  }
};
using I8Ref = IntRef<std::int8_t, DataType::i8>;
using U8Ref = IntRef<std::uint8_t, DataType::u8>;
using I32Ref = IntRef<std::int32_t, DataType::i32>;
using U32Ref = IntRef<std::uint32_t, DataType::u32>;
using I64Ref = IntRef<std::int64_t, DataType::i64>;
using U64Ref = IntRef<std::uint64_t, DataType::u64>;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};
constexpr std::size_t kLengths[] = {0, 1, 7, 63, 64, 65, 1003, 4099};

template <class T>
std::span<std::byte> bytes_of(std::vector<T>& v) {
  return std::as_writable_bytes(std::span<T>(v));
}
template <class T>
std::span<const std::byte> cbytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

template <class R>
std::vector<typename R::Storage> random_values(std::mt19937_64& rng, std::size_t n) {
  std::vector<typename R::Storage> v(n);
  for (auto& x : v) x = R::random(rng);
  return v;
}

// Compares element by element; reports the first mismatch only.
template <class R>
::testing::AssertionResult same_elements(ReduceOp op, const std::vector<typename R::Storage>& got,
                                         const std::vector<typename R::Storage>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!R::same(op, got[i], want[i])) {
      return ::testing::AssertionFailure() << dtype_name(R::type) << " " << op_name(op) << " element " << i << " of "
                                           << got.size() << ": got " << R::show(got[i]) << ", want "
                                           << R::show(want[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

// Every op, length and buffer arrangement for one dtype.
template <class R>
void check_all_ops(std::uint64_t seed) {
  using S = typename R::Storage;
  std::mt19937_64 rng(seed);
  for (const ReduceOp op : kOps) {
    for (const std::size_t n : kLengths) {
      SCOPED_TRACE(std::string(dtype_name(R::type)) + " " + std::string(op_name(op)) + " n=" + std::to_string(n));
      const auto a = random_values<R>(rng, n);
      const auto b = random_values<R>(rng, n);
      std::vector<S> want(n), want_self(n);
      for (std::size_t i = 0; i < n; ++i) {
        want[i] = R::combine(op, a[i], b[i]);
        want_self[i] = R::combine(op, a[i], a[i]);
      }

      std::vector<S> out(n);
      reduce_into(R::type, op, bytes_of(out), cbytes_of(a), cbytes_of(b));
      EXPECT_TRUE(same_elements<R>(op, out, want)) << "out of place";

      auto acc = a;
      reduce_inplace(R::type, op, bytes_of(acc), cbytes_of(b));
      EXPECT_TRUE(same_elements<R>(op, acc, want)) << "reduce_inplace";

      acc = a;
      reduce_into(R::type, op, bytes_of(acc), cbytes_of(acc), cbytes_of(b));
      EXPECT_TRUE(same_elements<R>(op, acc, want)) << "reduce_into, out aliases a";

      auto second = b;
      reduce_into(R::type, op, bytes_of(second), cbytes_of(a), cbytes_of(second));
      EXPECT_TRUE(same_elements<R>(op, second, want)) << "reduce_into, out aliases b";

      acc = a;
      reduce_into(R::type, op, bytes_of(acc), cbytes_of(acc), cbytes_of(acc));
      EXPECT_TRUE(same_elements<R>(op, acc, want_self)) << "reduce_into, out aliases a and b";

      acc = a;
      reduce_inplace(R::type, op, bytes_of(acc), cbytes_of(acc));
      EXPECT_TRUE(same_elements<R>(op, acc, want_self)) << "reduce_inplace, acc aliases in";

      out.assign(n, S{});
      reduce_into(R::type, op, bytes_of(out), cbytes_of(a), cbytes_of(a));
      EXPECT_TRUE(same_elements<R>(op, out, want_self)) << "out of place, a aliases b";

      // Buffers misaligned for the element type (offset by one byte).
      if (n == 0) continue;
      const std::size_t bytes = n * sizeof(S);
      std::vector<std::byte> ma(bytes + 1), mb(bytes + 3), mo(bytes + 5);
      std::memcpy(ma.data() + 1, a.data(), bytes);
      std::memcpy(mb.data() + 3, b.data(), bytes);
      reduce_into(R::type, op, std::span(mo).subspan(5, bytes), std::span<const std::byte>(ma).subspan(1, bytes),
                  std::span<const std::byte>(mb).subspan(3, bytes));
      std::memcpy(out.data(), mo.data() + 5, bytes);
      EXPECT_TRUE(same_elements<R>(op, out, want)) << "misaligned out of place";
      reduce_inplace(R::type, op, std::span(ma).subspan(1, bytes), std::span<const std::byte>(mb).subspan(3, bytes));
      std::memcpy(out.data(), ma.data() + 1, bytes);
      EXPECT_TRUE(same_elements<R>(op, out, want)) << "misaligned in place";
    }
  }
}

// avg = sum of every contribution, then one division by the rank count.
template <class R>
void check_avg(std::uint64_t seed) {
  using S = typename R::Storage;
  std::mt19937_64 rng(seed);
  for (const std::size_t ranks : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}}) {
    for (const std::size_t n : kLengths) {
      SCOPED_TRACE(std::string(dtype_name(R::type)) + " avg ranks=" + std::to_string(ranks) + " n=" + std::to_string(n));
      auto acc = random_values<R>(rng, n);
      auto want = acc;
      for (std::size_t r = 1; r < ranks; ++r) {
        const auto contribution = random_values<R>(rng, n);
        for (std::size_t i = 0; i < n; ++i) want[i] = R::combine(ReduceOp::sum, want[i], contribution[i]);
        reduce_inplace(R::type, ReduceOp::avg, bytes_of(acc), cbytes_of(contribution));
      }
      for (auto& w : want) w = R::divide(w, ranks);
      finish_avg(R::type, bytes_of(acc), ranks);
      EXPECT_TRUE(same_elements<R>(ReduceOp::sum, acc, want));
    }
  }
  // More ranks than any small integer value: integer averages truncate to 0.
  std::vector<S> big = random_values<R>(rng, 100);
  std::vector<S> want = big;
  for (auto& w : want) w = R::divide(w, 1000000);
  finish_avg(R::type, bytes_of(big), 1000000);
  EXPECT_TRUE(same_elements<R>(ReduceOp::sum, big, want));
}

TEST(DtypeReduce, F32) { check_all_ops<F32Ref>(1); }
TEST(DtypeReduce, F64) { check_all_ops<F64Ref>(2); }
TEST(DtypeReduce, F16) { check_all_ops<F16Ref>(3); }
TEST(DtypeReduce, Bf16) { check_all_ops<Bf16Ref>(4); }
TEST(DtypeReduce, I8) { check_all_ops<I8Ref>(5); }
TEST(DtypeReduce, U8) { check_all_ops<U8Ref>(6); }
TEST(DtypeReduce, I32) { check_all_ops<I32Ref>(7); }
TEST(DtypeReduce, U32) { check_all_ops<U32Ref>(8); }
TEST(DtypeReduce, I64) { check_all_ops<I64Ref>(9); }
TEST(DtypeReduce, U64) { check_all_ops<U64Ref>(10); }

TEST(DtypeAvg, F32) { check_avg<F32Ref>(11); }
TEST(DtypeAvg, F64) { check_avg<F64Ref>(12); }
TEST(DtypeAvg, F16) { check_avg<F16Ref>(13); }
TEST(DtypeAvg, Bf16) { check_avg<Bf16Ref>(14); }
TEST(DtypeAvg, I8) { check_avg<I8Ref>(15); }
TEST(DtypeAvg, U8) { check_avg<U8Ref>(16); }
TEST(DtypeAvg, I32) { check_avg<I32Ref>(17); }
TEST(DtypeAvg, U32) { check_avg<U32Ref>(18); }
TEST(DtypeAvg, I64) { check_avg<I64Ref>(19); }
TEST(DtypeAvg, U64) { check_avg<U64Ref>(20); }

// reduce_many: k inputs left to right in one pass. Every type but f16/bf16
// equals the chain of pairwise combines bit for bit; f16/bf16 are carried in
// f32 and rounded once at the end.
template <class R>
typename R::Storage many_reference(ReduceOp op, const std::vector<std::vector<typename R::Storage>>& in,
                                   std::size_t k, std::size_t i) {
  if constexpr (R::type == DataType::f16 || R::type == DataType::bf16) {
    float w = static_cast<float>(R::value(in[0][i]));
    for (std::size_t j = 1; j < k; ++j) w = to_float(ref_float_op(op, w, R::value(in[j][i])));
    return R::type == DataType::f16 ? ref_half_from_float(w) : ref_bf16_from_float(w);
  } else {
    auto acc = in[0][i];
    for (std::size_t j = 1; j < k; ++j) acc = R::combine(op, acc, in[j][i]);
    return acc;
  }
}

template <class R>
void check_reduce_many(std::uint64_t seed) {
  using S = typename R::Storage;
  std::mt19937_64 rng(seed);
  for (const ReduceOp op : kOps) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{300}, std::size_t{1029}}) {
      for (const std::size_t k : {std::size_t{1}, std::size_t{2}, std::size_t{4}}) {
        SCOPED_TRACE(std::string(dtype_name(R::type)) + " " + std::string(op_name(op)) + " n=" + std::to_string(n) +
                     " k=" + std::to_string(k));
        std::vector<std::vector<S>> in(k);
        for (auto& v : in) v = random_values<R>(rng, n);
        std::vector<S> want(n);
        for (std::size_t i = 0; i < n; ++i) want[i] = many_reference<R>(op, in, k, i);
        std::vector<const std::byte*> ptrs(k);
        for (std::size_t j = 0; j < k; ++j) ptrs[j] = reinterpret_cast<const std::byte*>(in[j].data());

        std::vector<S> out(n);
        reduce_many(R::type, op, bytes_of(out), ptrs);
        EXPECT_TRUE(same_elements<R>(op, out, want)) << "distinct output";

        // The output is one of the inputs (the first, or the last).
        for (const std::size_t alias : {std::size_t{0}, k - 1}) {
          auto copy = in;
          std::vector<const std::byte*> aliased(k);
          for (std::size_t j = 0; j < k; ++j) aliased[j] = reinterpret_cast<const std::byte*>(copy[j].data());
          reduce_many(R::type, op, bytes_of(copy[alias]), aliased);
          EXPECT_TRUE(same_elements<R>(op, copy[alias], want)) << "output is input " << alias;
        }

        // Inputs and output misaligned for the element type (offset by one byte).
        if (n > 0 && sizeof(S) > 1) {
          std::vector<std::vector<std::byte>> raw(k, std::vector<std::byte>(n * sizeof(S) + 1));
          std::vector<const std::byte*> moved(k);
          for (std::size_t j = 0; j < k; ++j) {
            std::memcpy(raw[j].data() + 1, in[j].data(), n * sizeof(S));
            moved[j] = raw[j].data() + 1;
          }
          std::vector<std::byte> raw_out(n * sizeof(S) + 1);
          reduce_many(R::type, op, std::span(raw_out.data() + 1, n * sizeof(S)), moved);
          std::vector<S> got(n);
          std::memcpy(got.data(), raw_out.data() + 1, n * sizeof(S));
          EXPECT_TRUE(same_elements<R>(op, got, want)) << "misaligned";
        }
      }
    }
  }
}

TEST(DtypeReduceMany, EveryTypeAndOp) {
  check_reduce_many<F32Ref>(31);
  check_reduce_many<F64Ref>(32);
  check_reduce_many<F16Ref>(33);
  check_reduce_many<Bf16Ref>(34);
  check_reduce_many<I8Ref>(35);
  check_reduce_many<U8Ref>(36);
  check_reduce_many<I32Ref>(37);
  check_reduce_many<U32Ref>(38);
  check_reduce_many<I64Ref>(39);
  check_reduce_many<U64Ref>(40);
}

// scale_into: f32 multiplied in double and rounded once, f16/bf16 in f32;
// in place or out of place alike; integers refused.
TEST(DtypeScale, MatchesTheElementwiseReferenceInAndOutOfPlace) {
  std::mt19937_64 rng(77);
  const std::size_t n = 1031;
  const double factor = 1.0 / 3.0;
  std::vector<float> f(n), f_out(n), f_want(n);
  for (auto& v : f) v = std::uniform_real_distribution<float>(-100.0f, 100.0f)(rng);
  for (std::size_t i = 0; i < n; ++i) f_want[i] = static_cast<float>(static_cast<double>(f[i]) * factor);
  scale_into(DataType::f32, bytes_of(f_out), cbytes_of(f), factor);
  EXPECT_EQ(std::memcmp(f_out.data(), f_want.data(), n * sizeof(float)), 0) << "f32 out of place";
  scale_into(DataType::f32, bytes_of(f), cbytes_of(f), factor);
  EXPECT_EQ(std::memcmp(f.data(), f_want.data(), n * sizeof(float)), 0) << "f32 in place";

  std::vector<double> d(n), d_want(n);
  for (auto& v : d) v = std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
  for (std::size_t i = 0; i < n; ++i) d_want[i] = d[i] * factor;
  scale_into(DataType::f64, bytes_of(d), cbytes_of(d), factor);
  EXPECT_EQ(std::memcmp(d.data(), d_want.data(), n * sizeof(double)), 0) << "f64";

  for (DataType t : {DataType::f16, DataType::bf16}) {
    const bool half = t == DataType::f16;
    std::vector<std::uint16_t> h(n), h_want(n), h_out(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float v = std::uniform_real_distribution<float>(-60.0f, 60.0f)(rng);
      h[i] = half ? float_to_half(v) : float_to_bf16(v);
      const float scaled = (half ? half_to_float(h[i]) : bf16_to_float(h[i])) * static_cast<float>(factor);
      h_want[i] = half ? float_to_half(scaled) : float_to_bf16(scaled);
    }
    scale_into(t, bytes_of(h_out), cbytes_of(h), factor);
    EXPECT_EQ(h_out, h_want) << dtype_name(t);
  }
  std::vector<std::int32_t> ints(4, 3);
  EXPECT_THROW(scale_into(DataType::i32, bytes_of(ints), cbytes_of(ints), 0.5), InvalidArgument);
}

TEST(DtypeReduceMany, RejectsNoInputsAndPartialOverlap) {
  std::vector<float> a(8, 1.0f), out(8);
  const std::byte* none[] = {nullptr};
  EXPECT_THROW(reduce_many(DataType::f32, ReduceOp::sum, bytes_of(out), std::span<const std::byte* const>()),
               InvalidArgument);
  EXPECT_THROW(reduce_many(DataType::f32, ReduceOp::sum, bytes_of(out), none), InvalidArgument);
  const std::byte* shifted[] = {reinterpret_cast<const std::byte*>(a.data() + 1)};
  EXPECT_THROW(reduce_many(DataType::f32, ReduceOp::sum, bytes_of(a), shifted), InvalidArgument);
}

// Every f16 / bf16 bit pattern against a shuffled partner, so the block
// conversions see every input, including NaN, inf and subnormals.
template <class R>
void check_every_pattern(std::uint64_t seed) {
  std::vector<std::uint16_t> a(65536);
  std::iota(a.begin(), a.end(), 0);
  auto b = a;
  std::mt19937_64 rng(seed);
  std::shuffle(b.begin(), b.end(), rng);
  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max}) {
    std::vector<std::uint16_t> want(a.size()), out(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) want[i] = R::combine(op, a[i], b[i]);
    reduce_into(R::type, op, bytes_of(out), cbytes_of(a), cbytes_of(b));
    EXPECT_TRUE(same_elements<R>(op, out, want));
  }
  // x + (-0) == x exactly: the block path round-trips every pattern.
  std::vector<std::uint16_t> negative_zero(a.size(), 0x8000), out(a.size());
  reduce_into(R::type, ReduceOp::sum, bytes_of(out), cbytes_of(a), cbytes_of(negative_zero));
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(R::value(a[i]))) {
      EXPECT_TRUE(std::isnan(R::value(out[i]))) << i;
    } else {
      ASSERT_EQ(out[i], a[i]) << "pattern " << i;
    }
  }
}

TEST(DtypeReduce, F16EveryPattern) { check_every_pattern<F16Ref>(21); }
TEST(DtypeReduce, Bf16EveryPattern) { check_every_pattern<Bf16Ref>(22); }

// ---------------------------------------------------------------------------
// Special values and wrap-around, spelled out
// ---------------------------------------------------------------------------
template <class T>
std::vector<T> reduce_pair(DataType t, ReduceOp op, std::vector<T> a, const std::vector<T>& b) {
  reduce_inplace(t, op, bytes_of(a), cbytes_of(b));
  return a;
}

TEST(DtypeSpecial, NaNPropagatesThroughMinMax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const ReduceOp op : {ReduceOp::min, ReduceOp::max}) {
    const auto r = reduce_pair<float>(DataType::f32, op, {nan, 1.0f, nan, -inf, inf}, {1.0f, nan, nan, inf, -inf});
    EXPECT_TRUE(std::isnan(r[0]));
    EXPECT_TRUE(std::isnan(r[1]));
    EXPECT_TRUE(std::isnan(r[2]));
    EXPECT_EQ(r[3], op == ReduceOp::min ? -inf : inf);
    EXPECT_EQ(r[4], op == ReduceOp::min ? -inf : inf);
    const auto d = reduce_pair<double>(DataType::f64, op, {kNaN, 2.0}, {2.0, kNaN});
    EXPECT_TRUE(std::isnan(d[0]));
    EXPECT_TRUE(std::isnan(d[1]));
    const auto h = reduce_pair<std::uint16_t>(DataType::f16, op, {0x7e00, 0x3c00}, {0x3c00, 0x7e00});
    EXPECT_TRUE(half_is_nan(h[0]));
    EXPECT_TRUE(half_is_nan(h[1]));
    const auto bf = reduce_pair<std::uint16_t>(DataType::bf16, op, {0x7fc0, 0x3f80}, {0x3f80, 0x7fc0});
    EXPECT_TRUE(bf16_is_nan(bf[0]));
    EXPECT_TRUE(bf16_is_nan(bf[1]));
  }
}

TEST(DtypeSpecial, InfinityArithmetic) {
  const float inf = std::numeric_limits<float>::infinity();
  const auto s = reduce_pair<float>(DataType::f32, ReduceOp::sum, {inf, inf, -inf, 3e38f}, {-inf, 1.0f, -1.0f, 3e38f});
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_EQ(s[1], inf);
  EXPECT_EQ(s[2], -inf);
  EXPECT_EQ(s[3], inf);  // overflow
  const auto p = reduce_pair<float>(DataType::f32, ReduceOp::prod, {inf, 0.0f}, {0.0f, -inf});
  EXPECT_TRUE(std::isnan(p[0]));
  EXPECT_TRUE(std::isnan(p[1]));
  // f16: 65504 + 65504 overflows to inf; 60000 + 5504 = 65504 stays finite.
  const auto h = reduce_pair<std::uint16_t>(DataType::f16, ReduceOp::sum, {0x7bff, float_to_half(60000.0f)},
                                            {0x7bff, float_to_half(5504.0f)});
  EXPECT_EQ(h[0], 0x7c00);
  EXPECT_EQ(h[1], 0x7bff);
}

TEST(DtypeSpecial, IntegerWrapAround) {
  EXPECT_EQ(reduce_pair<std::uint8_t>(DataType::u8, ReduceOp::sum, {250}, {10})[0], 4);
  EXPECT_EQ(reduce_pair<std::uint8_t>(DataType::u8, ReduceOp::prod, {16}, {17})[0], 16);
  EXPECT_EQ(reduce_pair<std::int8_t>(DataType::i8, ReduceOp::sum, {127}, {1})[0], -128);
  EXPECT_EQ(reduce_pair<std::int8_t>(DataType::i8, ReduceOp::prod, {-128}, {-1})[0], -128);
  EXPECT_EQ(reduce_pair<std::int32_t>(DataType::i32, ReduceOp::sum, {INT32_MAX}, {1})[0], INT32_MIN);
  EXPECT_EQ(reduce_pair<std::int32_t>(DataType::i32, ReduceOp::prod, {65536}, {65536})[0], 0);
  EXPECT_EQ(reduce_pair<std::uint32_t>(DataType::u32, ReduceOp::sum, {UINT32_MAX}, {2})[0], 1u);
  EXPECT_EQ(reduce_pair<std::int64_t>(DataType::i64, ReduceOp::sum, {INT64_MIN}, {-1})[0], INT64_MAX);
  EXPECT_EQ(reduce_pair<std::int64_t>(DataType::i64, ReduceOp::prod, {INT64_MIN}, {-1})[0], INT64_MIN);
  EXPECT_EQ(reduce_pair<std::uint64_t>(DataType::u64, ReduceOp::prod, {UINT64_MAX}, {2})[0], UINT64_MAX - 1);
}

TEST(DtypeSpecial, IntegerAverageTruncatesTowardZero) {
  std::vector<std::int32_t> v = {7, -7, 8, -8, 0};
  finish_avg(DataType::i32, bytes_of(v), 3);
  EXPECT_EQ(v, (std::vector<std::int32_t>{2, -2, 2, -2, 0}));
  std::vector<std::uint8_t> u = {255, 2};
  finish_avg(DataType::u8, bytes_of(u), 2);
  EXPECT_EQ(u, (std::vector<std::uint8_t>{127, 1}));
}

// ---------------------------------------------------------------------------
// Argument checking
// ---------------------------------------------------------------------------
TEST(DtypeArgs, MismatchedLengthsThrow) {
  std::vector<float> a(4), b(4), c(3);
  EXPECT_THROW(reduce_inplace(DataType::f32, ReduceOp::sum, bytes_of(a), cbytes_of(c)), InvalidArgument);
  EXPECT_THROW(reduce_into(DataType::f32, ReduceOp::sum, bytes_of(a), cbytes_of(b), cbytes_of(c)), InvalidArgument);
  EXPECT_THROW(reduce_into(DataType::f32, ReduceOp::sum, bytes_of(c), cbytes_of(a), cbytes_of(b)), InvalidArgument);
  std::vector<std::byte> six(6), six2(6);
  EXPECT_THROW(reduce_inplace(DataType::f32, ReduceOp::sum, six, six2), InvalidArgument);
  EXPECT_THROW(finish_avg(DataType::f64, six, 2), InvalidArgument);
  EXPECT_NO_THROW(reduce_inplace(DataType::f16, ReduceOp::sum, six, six2));
  try {
    reduce_inplace(DataType::i64, ReduceOp::max, six, six2);
    ADD_FAILURE() << "accepted 6 bytes of i64";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("i64"), std::string::npos) << e.what();
    EXPECT_EQ(e.status(), Status::invalid_argument);
  }
}

TEST(DtypeArgs, PartialOverlapThrows) {
  std::vector<std::int32_t> buffer(24);
  const auto all = bytes_of(buffer);
  EXPECT_THROW(reduce_into(DataType::i32, ReduceOp::sum, all.subspan(0, 32), all.subspan(4, 32), all.subspan(32, 32)),
               InvalidArgument);
  EXPECT_THROW(reduce_inplace(DataType::i32, ReduceOp::sum, all.subspan(8, 32), all.subspan(0, 32)), InvalidArgument);
  // Inputs may overlap each other; the output may be exactly one of them.
  EXPECT_NO_THROW(reduce_into(DataType::i32, ReduceOp::sum, all.subspan(64, 32), all.subspan(0, 32), all.subspan(4, 32)));
}

TEST(DtypeArgs, InvalidEnumsThrow) {
  std::vector<float> a(2), b(2);
  EXPECT_THROW(check_dtype(static_cast<DataType>(10)), InvalidArgument);
  EXPECT_THROW(check_op(static_cast<ReduceOp>(5)), InvalidArgument);
  EXPECT_NO_THROW(check_dtype(DataType::u64));
  EXPECT_NO_THROW(check_op(ReduceOp::avg));
  EXPECT_THROW(reduce_inplace(static_cast<DataType>(200), ReduceOp::sum, bytes_of(a), cbytes_of(b)), InvalidArgument);
  EXPECT_THROW(reduce_inplace(DataType::f32, static_cast<ReduceOp>(9), bytes_of(a), cbytes_of(b)), InvalidArgument);
  EXPECT_THROW(finish_avg(static_cast<DataType>(11), bytes_of(a), 2), InvalidArgument);
  EXPECT_THROW(finish_avg(DataType::f32, bytes_of(a), 0), InvalidArgument);
  EXPECT_THROW(dtype_size(static_cast<DataType>(10)), InvalidArgument);
}

TEST(DtypeNames, SizesAndNames) {
  const std::pair<DataType, std::size_t> sizes[] = {
      {DataType::f32, 4}, {DataType::f64, 8}, {DataType::f16, 2}, {DataType::bf16, 2}, {DataType::i8, 1},
      {DataType::u8, 1},  {DataType::i32, 4}, {DataType::u32, 4}, {DataType::i64, 8},  {DataType::u64, 8}};
  for (const auto& [t, size] : sizes) {
    EXPECT_EQ(dtype_size(t), size) << dtype_name(t);
    EXPECT_NE(dtype_name(t), "unknown");
  }
  EXPECT_EQ(dtype_name(DataType::bf16), "bf16");
  EXPECT_EQ(dtype_name(static_cast<DataType>(10)), "unknown");
  EXPECT_EQ(op_name(ReduceOp::avg), "avg");
  EXPECT_EQ(op_name(static_cast<ReduceOp>(5)), "unknown");
  EXPECT_STREQ(status_name(Status::ok), "ok");
  EXPECT_STREQ(status_name(Status::timeout), "timeout");
  EXPECT_STRNE(status_name(Status::internal), status_name(Status::config));
  EXPECT_STREQ(status_name(static_cast<Status>(99)), "unknown status");
}

// ---------------------------------------------------------------------------
// Scalar conversions
// ---------------------------------------------------------------------------
TEST(DtypeConvert, HalfEveryPatternDecodesAndRoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = half_to_float(h);
    const double want = ref_half_value(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      const std::uint16_t back = float_to_half(f);
      ASSERT_TRUE(half_is_nan(back)) << std::hex << bits;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << std::hex << bits;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << bits;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << bits;
      ASSERT_EQ(float_to_half(f), h) << std::hex << bits;
    }
  }
}

TEST(DtypeConvert, Bf16EveryPatternDecodesAndRoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const float f = bf16_to_float(b);
    const double want = ref_bf16_value(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      const std::uint16_t back = float_to_bf16(f);
      ASSERT_TRUE(bf16_is_nan(back)) << std::hex << bits;
      ASSERT_EQ(back & 0x8000, b & 0x8000) << std::hex << bits;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << bits;
      ASSERT_EQ(std::signbit(f), (b & 0x8000) != 0) << std::hex << bits;
      ASSERT_EQ(float_to_bf16(f), b) << std::hex << bits;
    }
  }
}

// Midpoints between neighbouring values must tie to even; a hair either side
// must go to the nearer one.
TEST(DtypeConvert, HalfRoundsToNearestEven) {
  for (std::uint32_t bits = 0; bits < 0x7c00; ++bits) {
    const double lo = ref_half_value(static_cast<std::uint16_t>(bits));
    const double hi = bits + 1 == 0x7c00 ? 65536.0 : ref_half_value(static_cast<std::uint16_t>(bits + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const std::uint16_t even = (bits % 2 == 0) ? static_cast<std::uint16_t>(bits) : static_cast<std::uint16_t>(bits + 1);
    ASSERT_EQ(float_to_half(mid), even) << std::hex << bits;
    ASSERT_EQ(float_to_half(-mid), even | 0x8000) << std::hex << bits;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 0.0f)), bits) << std::hex << bits;
    ASSERT_EQ(float_to_half(std::nextafter(mid, std::numeric_limits<float>::infinity())), bits + 1) << std::hex << bits;
  }
}

TEST(DtypeConvert, Bf16RoundsToNearestEven) {
  for (std::uint32_t bits = 0; bits < 0x7f80; ++bits) {
    const float lo = static_cast<float>(ref_bf16_value(static_cast<std::uint16_t>(bits)));
    const double hi_value = bits + 1 == 0x7f80 ? std::ldexp(1.0, 128) : ref_bf16_value(static_cast<std::uint16_t>(bits + 1));
    const double mid_value = (static_cast<double>(lo) + hi_value) / 2;
    const auto mid = static_cast<float>(mid_value);  // exact: 9 significant bits
    ASSERT_EQ(static_cast<double>(mid), mid_value);
    const std::uint16_t even = (bits % 2 == 0) ? static_cast<std::uint16_t>(bits) : static_cast<std::uint16_t>(bits + 1);
    ASSERT_EQ(float_to_bf16(mid), even) << std::hex << bits;
    ASSERT_EQ(float_to_bf16(-mid), even | 0x8000) << std::hex << bits;
    if (bits > 0) {
      ASSERT_EQ(float_to_bf16(std::nextafter(mid, 0.0f)), bits) << std::hex << bits;
    }
    ASSERT_EQ(float_to_bf16(std::nextafter(mid, std::numeric_limits<float>::infinity())), bits + 1) << std::hex << bits;
  }
}

TEST(DtypeConvert, RandomFloatsMatchReferenceEncoders) {
  std::mt19937_64 rng(23);
  for (int i = 0; i < 1'000'000; ++i) {
    const auto f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    const std::uint16_t h = float_to_half(f);
    const std::uint16_t b = float_to_bf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(half_is_nan(h));
      ASSERT_TRUE(bf16_is_nan(b));
    } else {
      ASSERT_EQ(h, ref_half_from_float(f)) << f;
      ASSERT_EQ(b, ref_bf16_from_float(f)) << f;
    }
  }
  // Values near the f16 range edges.
  for (const float f : {65504.0f, 65519.99f, 65520.0f, 1e9f, 6.1035156e-05f, 6.0e-05f, 5.96e-08f, 2.98e-08f,
                        2.9802322e-08f, 1e-10f, std::numeric_limits<float>::denorm_min()}) {
    ASSERT_EQ(float_to_half(f), ref_half_from_float(f)) << f;
    ASSERT_EQ(float_to_half(-f), ref_half_from_float(-f)) << f;
  }
}

TEST(DtypeConvert, HalfSpotValues) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // ties to even -> inf
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));
}

// ---------------------------------------------------------------------------
// Weighted sums (push-pull): accumulate_weighted / finish_weighted against an
// element-by-element reference computed in the accumulator type, one multiply
// and one add per element (no FMA), over lengths that cover vector bodies and
// tails, with unaligned starting elements.
// ---------------------------------------------------------------------------
// memcmp of n = 0 elements: the empty vectors' data() may be null, which
// memcmp must never be given (UBSan: nonnull argument).
bool same_bytes(const void* a, const void* b, std::size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

template <class T>
void check_weighted_native(DataType t, unsigned seed) {
  std::mt19937 rng(seed);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{33}, std::size_t{1027}}) {
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      std::vector<T> src(n + offset), acc(n + offset), want(n + offset);
      std::uniform_int_distribution<int> value(-1000, 1000);
      for (std::size_t i = 0; i < n + offset; ++i) {
        // Integers convert from int (modular for i8/u8); a double out of the
        // type's range would be undefined (UBSan float-cast-overflow).
        src[i] = std::is_floating_point_v<T> ? static_cast<T>(value(rng) / 7.0) : static_cast<T>(value(rng));
        acc[i] = want[i] = std::is_floating_point_v<T> ? static_cast<T>(value(rng) / 3.0) : static_cast<T>(value(rng));
      }
      const double weight = std::is_floating_point_v<T> ? 0.3 : 3;
      for (bool first : {false, true}) {
        std::vector<T> got = acc, expect = want;
        for (std::size_t i = offset; i < n + offset; ++i) {
          if constexpr (std::is_floating_point_v<T>) {
            const T product = static_cast<T>(weight) * src[i];  // rounded to T before the add
            expect[i] = first ? product : static_cast<T>(expect[i] + product);
          } else {
            using U = std::make_unsigned_t<T>;
            const U term = static_cast<U>(static_cast<U>(src[i]) * static_cast<U>(weight));
            expect[i] = static_cast<T>(first ? term : static_cast<U>(static_cast<U>(expect[i]) + term));
          }
        }
        accumulate_weighted(t, reinterpret_cast<std::byte*>(got.data() + offset),
                            reinterpret_cast<const std::byte*>(src.data() + offset), n, weight, first);
        ASSERT_TRUE(same_bytes(got.data(), expect.data(), got.size() * sizeof(T)))
            << dtype_name(t) << " n=" << n << " offset=" << offset << " first=" << first;
      }
      if constexpr (std::is_floating_point_v<T>) {
        std::vector<T> out(n + offset, T{-1}), expect(n + offset, T{-1});
        const double total = 2.5;
        for (std::size_t i = offset; i < n + offset; ++i) expect[i] = acc[i] / static_cast<T>(total);
        finish_weighted(t, ReduceOp::avg, reinterpret_cast<const std::byte*>(acc.data() + offset),
                        reinterpret_cast<std::byte*>(out.data() + offset), n, total);
        ASSERT_TRUE(same_bytes(out.data(), expect.data(), out.size() * sizeof(T))) << dtype_name(t) << " avg";
        finish_weighted(t, ReduceOp::sum, reinterpret_cast<const std::byte*>(acc.data() + offset),
                        reinterpret_cast<std::byte*>(out.data() + offset), n, total);
        ASSERT_TRUE(same_bytes(out.data() + offset, acc.data() + offset, n * sizeof(T))) << dtype_name(t) << " sum";
        finish_weighted(t, ReduceOp::avg, reinterpret_cast<const std::byte*>(acc.data() + offset),
                        reinterpret_cast<std::byte*>(out.data() + offset), n, 0.0);
        for (std::size_t i = offset; i < n + offset; ++i) ASSERT_EQ(out[i], T{0}) << "avg of nothing is zero";
      }
    }
  }
}

TEST(DtypeWeighted, NativeTypesMatchTheElementwiseReference) {
  EXPECT_EQ(weighted_sum_type(DataType::f32), DataType::f32);
  check_weighted_native<float>(DataType::f32, 1);
  check_weighted_native<double>(DataType::f64, 2);
  check_weighted_native<std::int8_t>(DataType::i8, 3);
  check_weighted_native<std::uint8_t>(DataType::u8, 4);
  check_weighted_native<std::int32_t>(DataType::i32, 5);
  check_weighted_native<std::uint32_t>(DataType::u32, 6);
  check_weighted_native<std::int64_t>(DataType::i64, 7);
  check_weighted_native<std::uint64_t>(DataType::u64, 8);
}

// f16/bf16 inputs accumulate in f32 and finish rounded back.
TEST(DtypeWeighted, HalfTypesAccumulateInF32AndRoundOnFinish) {
  for (DataType t : {DataType::f16, DataType::bf16}) {
    EXPECT_EQ(weighted_sum_type(t), DataType::f32);
    const bool half = t == DataType::f16;
    const std::size_t n = 1029;  // several 256-element blocks and a tail
    std::vector<std::uint16_t> src(n);
    std::vector<float> acc(n), expect(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(static_cast<int>(i % 97) - 48) / 8.0f;
      src[i] = half ? float_to_half(v) : float_to_bf16(v);
      acc[i] = expect[i] = static_cast<float>(i % 13) * 0.25f;
    }
    const float w = 0.7f;
    for (std::size_t i = 0; i < n; ++i) {
      const float product = w * (half ? half_to_float(src[i]) : bf16_to_float(src[i]));
      expect[i] = expect[i] + product;
    }
    accumulate_weighted(t, reinterpret_cast<std::byte*>(acc.data()), reinterpret_cast<const std::byte*>(src.data()),
                        n, w, false);
    ASSERT_EQ(std::memcmp(acc.data(), expect.data(), n * sizeof(float)), 0) << dtype_name(t);
    std::vector<std::uint16_t> out(n);
    finish_weighted(t, ReduceOp::avg, reinterpret_cast<const std::byte*>(acc.data()),
                    reinterpret_cast<std::byte*>(out.data()), n, 3.0);
    for (std::size_t i = 0; i < n; ++i) {
      const float q = acc[i] / 3.0f;
      ASSERT_EQ(out[i], half ? float_to_half(q) : float_to_bf16(q)) << dtype_name(t) << " element " << i;
    }
  }
  std::vector<std::int32_t> ints(4, 1), out(4);
  EXPECT_THROW(finish_weighted(DataType::i32, ReduceOp::avg, reinterpret_cast<const std::byte*>(ints.data()),
                               reinterpret_cast<std::byte*>(out.data()), 4, 2.0),
               InvalidArgument);
}

}  // namespace
}  // namespace antdt
