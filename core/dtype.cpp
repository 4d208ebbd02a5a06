// CPU reduction kernels (core/dtype.hpp).
//
// Semantics:
//  - Integer sum and prod wrap modulo 2^bits (two's complement for signed
//    types); they are computed in the unsigned type so overflow is defined.
//  - Float min/max propagate NaN: if either input is NaN the result is NaN
//    (as IEEE 754-2019 minimum/maximum do; fmin/fmax drop it instead), so a
//    NaN gradient on one rank is never silently hidden by a reduction. Between
//    -0 and +0, which compare equal, either may be returned.
//  - f16/bf16 are widened to f32, combined, and rounded back to nearest-even.
//
// Speed: the element loops are plain contiguous loops over typed pointers,
// marked __restrict where the buffers are distinct, so GCC vectorizes them at
// -O3. f16/bf16 (and buffers that are misaligned for their type, or an output
// that is both inputs at once) go through small stack blocks: load a block into a
// typed buffer, combine, store it back. The conversions are branch-free integer
// and float arithmetic so those loops vectorize too; f16 uses the F16C
// instructions where the CPU has them. On x86-64 the kernels are compiled for
// the baseline ISA and for x86-64-v3 (AVX2), picked at load time.
// The portable f16 rounding assumes the default round-to-nearest FP mode.
#include "core/dtype.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace antdt {
namespace {

// ---------------------------------------------------------------------------
// f16 / bf16 <-> f32, branch-free so the block loops vectorize.
// ---------------------------------------------------------------------------
// cond ? x : y on bit patterns, as mask arithmetic: every operand is computed
// unconditionally, so GCC vectorizes without speculating float operations
// (which -ftrapping-math forbids) and without branches.
inline std::uint32_t select_bits(bool cond, std::uint32_t x, std::uint32_t y) noexcept {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(cond);
  return (x & mask) | (y & ~mask);
}

inline float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t magnitude = h & 0x7fffu;
  // Normal: move the fields up and rebias the exponent by 127 - 15.
  const std::uint32_t normal = (magnitude << 13) + 0x38000000u;
  // Inf/NaN: exponent all ones, payload kept; a NaN comes out quiet (as
  // vcvtph2ps does, so both conversion paths agree bit for bit).
  const std::uint32_t quiet = select_bits(magnitude > 0x7c00u, 0x00400000u, 0u);
  const std::uint32_t inf_nan = (magnitude << 13) | 0x7f800000u | quiet;
  // Zero/subnormal: the mantissa counts units of 2^-24; the product is exact.
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(magnitude)) * 0x1p-24f);
  const std::uint32_t bits = select_bits(magnitude >= 0x7c00u, inf_nan, select_bits(magnitude < 0x0400u, subnormal, normal));
  return std::bit_cast<float>(sign | bits);
}

inline std::uint16_t float_to_half_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  // NaN stays NaN (quiet), keeping the top payload bits.
  const std::uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  // Normal results: rebias, then round to nearest even on the 13 dropped bits;
  // a carry out of the mantissa correctly bumps the exponent.
  const std::uint32_t normal = (ax - 0x38000000u + 0x0fffu + ((ax >> 13) & 1u)) >> 13;
  // Subnormal results (|f| < 2^-14): adding 0.5 puts the value where the f32
  // ulp is 2^-24, the f16 subnormal step, so the FPU rounds to nearest even.
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(std::bit_cast<float>(ax) + 0.5f) - 0x3f000000u;
  // 65520 = the midpoint between the largest half (65504) and 2^16: ties to even -> inf.
  const std::uint32_t bits =
      select_bits(ax > 0x7f800000u, nan,
                  select_bits(ax >= 0x477ff000u, 0x7c00u, select_bits(ax >= 0x38800000u, normal, subnormal)));
  return static_cast<std::uint16_t>(sign | bits);
}

inline float bf16_bits_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t float_to_bf16_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
  // The rounding carry may run into the exponent (up to inf), never past the sign.
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (x >> 16) | 0x0040u;
  return static_cast<std::uint16_t>(select_bits(is_nan, quiet_nan, rounded));
}

// Block conversions for f16: the F16C instructions where the CPU has them (one
// instruction per 8 values), else the portable functions above. Both round to
// nearest even, keep NaN payloads and give bit-identical results, so ranks on
// different CPUs still agree.
void half_block_to_float_portable(float* __restrict dst, const std::uint16_t* __restrict src, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
}
void float_block_to_half_portable(std::uint16_t* __restrict dst, const float* __restrict src, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_half_bits(src[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define ANTDT_HAVE_X86_DISPATCH 1
// target_clones resolves through an ifunc, which the dynamic loader runs before
// a sanitizer runtime is initialised (TSan dies at start-up): sanitizer builds
// (ANTDT_SANITIZE, CMakeLists.txt) define ANTDT_NO_ISA_CLONES and get the
// baseline copy only. The F16C conversions below dispatch at run time and stay.
#ifndef ANTDT_NO_ISA_CLONES
#define ANTDT_HAVE_ISA_CLONES 1
#endif
__attribute__((target("avx,f16c"))) void half_block_to_float_f16c(float* __restrict dst,
                                                                     const std::uint16_t* __restrict src,
                                                                     std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  half_block_to_float_portable(dst + i, src + i, n - i);
}
__attribute__((target("avx,f16c"))) void float_block_to_half_f16c(std::uint16_t* __restrict dst,
                                                                     const float* __restrict src,
                                                                     std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  float_block_to_half_portable(dst + i, src + i, n - i);
}
// F16C is read from CPUID leaf 1 (ECX bit 29) directly: clang 14's
// __builtin_cpu_supports does not know "f16c" (the libFuzzer build uses clang).
// "avx" stays with the builtin, which also checks that the OS saves YMM state.
bool cpuid_has_f16c() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
bool cpu_has_f16c() noexcept {
  static const bool has = __builtin_cpu_supports("avx") && cpuid_has_f16c();
  return has;
}
#endif

void half_block_to_float(float* dst, const std::uint16_t* src, std::size_t n) noexcept {
#ifdef ANTDT_HAVE_X86_DISPATCH
  if (cpu_has_f16c()) return half_block_to_float_f16c(dst, src, n);
#endif
  half_block_to_float_portable(dst, src, n);
}
void float_block_to_half(std::uint16_t* dst, const float* src, std::size_t n) noexcept {
#ifdef ANTDT_HAVE_X86_DISPATCH
  if (cpu_has_f16c()) return float_block_to_half_f16c(dst, src, n);
#endif
  float_block_to_half_portable(dst, src, n);
}

void bf16_block_to_float(float* __restrict dst, const std::uint16_t* __restrict src, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
}
void float_block_to_bf16(std::uint16_t* __restrict dst, const float* __restrict src, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_bf16_bits(src[i]);
}

// ---------------------------------------------------------------------------
// Storage codecs: how elements are loaded into the type the op works in.
// ---------------------------------------------------------------------------
template <class T>
struct NativeCodec {
  using Storage = T;
  using Work = T;
  static constexpr bool native = true;
  static void load(Work* dst, const std::byte* src, std::size_t n) noexcept { std::memcpy(dst, src, n * sizeof(T)); }
  static void store(std::byte* dst, const Work* src, std::size_t n) noexcept { std::memcpy(dst, src, n * sizeof(T)); }
};

template <void (*ToFloat)(float*, const std::uint16_t*, std::size_t) noexcept,
          void (*FromFloat)(std::uint16_t*, const float*, std::size_t) noexcept>
struct Float16Codec {
  using Storage = std::uint16_t;
  using Work = float;
  static constexpr bool native = false;
  static constexpr std::size_t kMaxBlock = 256;
  // Aligned storage (the usual case) is converted in place; a misaligned one
  // goes through a stack copy, which compiles to rep movs and costs more than
  // the conversion (bf16 a += b: 17 GB/s with the copy, 25 without, one core).
  static void load(float* dst, const std::byte* src, std::size_t n) noexcept {
    if (reinterpret_cast<std::uintptr_t>(src) % alignof(std::uint16_t) == 0) {
      ToFloat(dst, reinterpret_cast<const std::uint16_t*>(src), n);
      return;
    }
    std::uint16_t bits[kMaxBlock];
    std::memcpy(bits, src, n * sizeof(std::uint16_t));
    ToFloat(dst, bits, n);
  }
  static void store(std::byte* dst, const float* src, std::size_t n) noexcept {
    if (reinterpret_cast<std::uintptr_t>(dst) % alignof(std::uint16_t) == 0) {
      FromFloat(reinterpret_cast<std::uint16_t*>(dst), src, n);
      return;
    }
    std::uint16_t bits[kMaxBlock];
    FromFloat(bits, src, n);
    std::memcpy(dst, bits, n * sizeof(std::uint16_t));
  }
};
using HalfCodec = Float16Codec<half_block_to_float, float_block_to_half>;
using Bf16Codec = Float16Codec<bf16_block_to_float, float_block_to_bf16>;

// Elements per block in the blocked path: 1 KiB of work values per operand.
template <class Codec>
constexpr std::size_t block_elements() {
  return 1024 / sizeof(typename Codec::Work);
}
static_assert(block_elements<HalfCodec>() <= HalfCodec::kMaxBlock);

// ---------------------------------------------------------------------------
// Operations.
// ---------------------------------------------------------------------------
struct SumOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};
struct ProdOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};
struct MinOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_floating_point_v<T>) {
      return (a < b || a != a) ? a : b;  // a NaN in either operand wins
    } else {
      return a < b ? a : b;
    }
  }
};
struct MaxOp {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_floating_point_v<T>) {
      return (a > b || a != a) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

// ---------------------------------------------------------------------------
// Kernels.
// ---------------------------------------------------------------------------
template <class T, class Op>
void combine_distinct(T* __restrict out, const T* __restrict a, const T* __restrict b, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

template <class T, class Op>
void combine_into_acc(T* __restrict acc, const T* __restrict in, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], in[i]);
}

// acc = in op acc: keeps the operand order when the output is the second input
// (min/max choose between equal-comparing values, e.g. -0 and +0, by order).
template <class T, class Op>
void combine_into_acc_reversed(T* __restrict acc, const T* __restrict in, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] = Op::apply(in[i], acc[i]);
}

// out = a op b through stack blocks: each block of a and b is loaded before
// the block of out is stored, so out may be a or b (or both).
template <class Codec, class Op>
void combine_blocked(std::byte* out, const std::byte* a, const std::byte* b, std::size_t n) noexcept {
  using Work = typename Codec::Work;
  constexpr std::size_t kBlock = block_elements<Codec>();
  constexpr std::size_t kStride = sizeof(typename Codec::Storage);
  Work wa[kBlock];
  Work wb[kBlock];
  for (std::size_t done = 0; done < n; done += kBlock) {
    const std::size_t m = std::min(kBlock, n - done);
    Codec::load(wa, a + done * kStride, m);
    Codec::load(wb, b + done * kStride, m);
    combine_into_acc<Work, Op>(wa, wb, m);
    Codec::store(out + done * kStride, wa, m);
  }
}

template <class T>
bool aligned_for(const void* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % alignof(T) == 0;
}

template <class Codec, class Op>
void combine(std::byte* out, const std::byte* a, const std::byte* b, std::size_t n) noexcept {
  if constexpr (Codec::native) {
    using T = typename Codec::Storage;
    if (aligned_for<T>(out) && aligned_for<T>(a) && aligned_for<T>(b)) {
      // Inputs are only read, so a and b may be the same buffer under __restrict.
      if (out != a && out != b) {
        combine_distinct<T, Op>(reinterpret_cast<T*>(out), reinterpret_cast<const T*>(a),
                                reinterpret_cast<const T*>(b), n);
        return;
      }
      if (out == a && out != b) {
        combine_into_acc<T, Op>(reinterpret_cast<T*>(out), reinterpret_cast<const T*>(b), n);
        return;
      }
      if (out == b && out != a) {
        combine_into_acc_reversed<T, Op>(reinterpret_cast<T*>(out), reinterpret_cast<const T*>(a), n);
        return;
      }
    }
  }
  combine_blocked<Codec, Op>(out, a, b, n);
}

template <class Codec>
void divide_blocked(std::byte* data, std::size_t n, std::size_t nranks) noexcept {
  using Work = typename Codec::Work;
  constexpr std::size_t kBlock = block_elements<Codec>();
  constexpr std::size_t kStride = sizeof(typename Codec::Storage);
  Work w[kBlock];
  for (std::size_t done = 0; done < n; done += kBlock) {
    const std::size_t m = std::min(kBlock, n - done);
    Codec::load(w, data + done * kStride, m);
    if constexpr (std::is_floating_point_v<Work>) {
      const Work divisor = static_cast<Work>(nranks);
      for (std::size_t i = 0; i < m; ++i) w[i] /= divisor;
    } else if constexpr (std::is_signed_v<Work>) {
      // nranks <= INT_MAX (checked), so the 64-bit quotient is exact truncation.
      const auto divisor = static_cast<std::int64_t>(nranks);
      for (std::size_t i = 0; i < m; ++i) w[i] = static_cast<Work>(static_cast<std::int64_t>(w[i]) / divisor);
    } else {
      const auto divisor = static_cast<std::uint64_t>(nranks);
      for (std::size_t i = 0; i < m; ++i) w[i] = static_cast<Work>(static_cast<std::uint64_t>(w[i]) / divisor);
    }
    Codec::store(data + done * kStride, w, m);
  }
}

// ---------------------------------------------------------------------------
// Dispatch.
// ---------------------------------------------------------------------------
template <class T>
struct Tag {
  using type = T;
};

template <class F>
void with_codec(DataType t, F&& f) {
  switch (t) {
    case DataType::f32: return f(Tag<NativeCodec<float>>{});
    case DataType::f64: return f(Tag<NativeCodec<double>>{});
    case DataType::f16: return f(Tag<HalfCodec>{});
    case DataType::bf16: return f(Tag<Bf16Codec>{});
    case DataType::i8: return f(Tag<NativeCodec<std::int8_t>>{});
    case DataType::u8: return f(Tag<NativeCodec<std::uint8_t>>{});
    case DataType::i32: return f(Tag<NativeCodec<std::int32_t>>{});
    case DataType::u32: return f(Tag<NativeCodec<std::uint32_t>>{});
    case DataType::i64: return f(Tag<NativeCodec<std::int64_t>>{});
    case DataType::u64: return f(Tag<NativeCodec<std::uint64_t>>{});
  }
  // Unreachable: callers validate t with check_dtype() first.
}

template <class F>
void with_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return f(Tag<SumOp>{});
    case ReduceOp::prod: return f(Tag<ProdOp>{});
    case ReduceOp::min: return f(Tag<MinOp>{});
    case ReduceOp::max: return f(Tag<MaxOp>{});
  }
  // Unreachable: callers validate op with check_op() first.
}

// The validated reduction. On x86-64 it is compiled twice, for the baseline
// ISA and for x86-64-v3 (AVX2, FMA, F16C), and the loader picks one for the
// CPU; flatten inlines every kernel so each copy is vectorized for its ISA.
#ifdef ANTDT_HAVE_ISA_CLONES
__attribute__((flatten, target_clones("arch=x86-64-v3", "default")))
#endif
void reduce_validated(DataType t, ReduceOp op, std::byte* out, const std::byte* a, const std::byte* b,
                      std::size_t n) noexcept {
  with_codec(t, [&](auto codec) {
    with_op(op, [&](auto operation) {
      combine<typename decltype(codec)::type, typename decltype(operation)::type>(out, a, b, n);
    });
  });
}

template <class T>
void copy_distinct(T* __restrict out, const T* __restrict in, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = in[i];
}

// out = in[0] op in[1] op ... op in[k-1], block by block: the block's
// accumulator stays in the work type (f32 for f16/bf16) across every input and
// is rounded to the storage type once, when it is stored. Each block of out is
// written after every input's block was read, so out may be one of the inputs.

template <class Codec, class Op>
void combine_many_blocked(std::byte* out, const std::byte* const* in, std::size_t k, std::size_t n) noexcept {
  using Work = typename Codec::Work;
  if constexpr (Codec::native) {
    // Aligned native storage, out distinct from every input: accumulate in out
    // itself, one cache-resident block at a time (no stack copies).
    bool direct = reinterpret_cast<std::uintptr_t>(out) % alignof(Work) == 0;
    for (std::size_t j = 0; j < k && direct; ++j)
      direct = in[j] != out && reinterpret_cast<std::uintptr_t>(in[j]) % alignof(Work) == 0;
    if (direct) {
      constexpr std::size_t kBlock = block_elements<Codec>();
      auto* acc = reinterpret_cast<Work*>(out);
      for (std::size_t done = 0; done < n; done += kBlock) {
        const std::size_t m = std::min(kBlock, n - done);
        copy_distinct(acc + done, reinterpret_cast<const Work*>(in[0]) + done, m);
        for (std::size_t j = 1; j < k; ++j)
          combine_into_acc<Work, Op>(acc + done, reinterpret_cast<const Work*>(in[j]) + done, m);
      }
      return;
    }
  }
  constexpr std::size_t kBlock = block_elements<Codec>();
  constexpr std::size_t kStride = sizeof(typename Codec::Storage);
  Work acc[kBlock];
  Work next[kBlock];
  for (std::size_t done = 0; done < n; done += kBlock) {
    const std::size_t m = std::min(kBlock, n - done);
    Codec::load(acc, in[0] + done * kStride, m);
    for (std::size_t j = 1; j < k; ++j) {
      Codec::load(next, in[j] + done * kStride, m);
      combine_into_acc<Work, Op>(acc, next, m);
    }
    Codec::store(out + done * kStride, acc, m);
  }
}

#ifdef ANTDT_HAVE_ISA_CLONES
__attribute__((flatten, target_clones("arch=x86-64-v3", "default")))
#endif
void reduce_many_validated(DataType t, ReduceOp op, std::byte* out, const std::byte* const* in, std::size_t k,
                           std::size_t n) noexcept {
  with_codec(t, [&](auto codec) {
    with_op(op, [&](auto operation) {
      combine_many_blocked<typename decltype(codec)::type, typename decltype(operation)::type>(out, in, k, n);
    });
  });
}

// ---------------------------------------------------------------------------
// Weighted sums (push-pull servers): acc = [acc +] w * src, acc in the work
// type (f32 for f16/bf16). Plain loops over distinct buffers, so they
// vectorize; each element is one multiply and one add, as written, whatever
// the ISA (core/CMakeLists.txt builds this file with -ffp-contract=off: no FMA).
// ---------------------------------------------------------------------------
template <class T>
void weighted_distinct(T* __restrict acc, const T* __restrict src, std::size_t n, T w, bool first) noexcept {
  if (first)
    for (std::size_t i = 0; i < n; ++i) acc[i] = w * src[i];
  else
    for (std::size_t i = 0; i < n; ++i) acc[i] += w * src[i];
}

// Integer sums wrap (two's complement): computed in the unsigned type.
template <class T>
void weighted_integer(T* __restrict acc, const T* __restrict src, std::size_t n, std::make_unsigned_t<T> w,
                      bool first) noexcept {
  using U = std::make_unsigned_t<T>;
  for (std::size_t i = 0; i < n; ++i) {
    const U term = static_cast<U>(static_cast<U>(src[i]) * w);
    acc[i] = static_cast<T>(first ? term : static_cast<U>(static_cast<U>(acc[i]) + term));
  }
}

// f16/bf16 inputs, widened block by block.
template <class Codec>
void weighted_blocked(float* acc, const std::byte* src, std::size_t n, float w, bool first) noexcept {
  constexpr std::size_t kBlock = block_elements<Codec>();
  float in[kBlock];
  for (std::size_t i = 0; i < n; i += kBlock) {
    const std::size_t m = std::min(kBlock, n - i);
    Codec::load(in, src + i * sizeof(typename Codec::Storage), m);
    weighted_distinct(acc + i, in, m, w, first);
  }
}

template <class T>
void quotient_distinct(T* __restrict out, const T* __restrict acc, std::size_t n, T w) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = acc[i] / w;
}

// A finished f32 aggregate (divided by w when `divide`) stored as f16/bf16.
template <class Codec>
void finish_blocked(std::byte* out, const float* acc, std::size_t n, bool divide, float w) noexcept {
  constexpr std::size_t kBlock = block_elements<Codec>();
  float value[kBlock];
  for (std::size_t i = 0; i < n; i += kBlock) {
    const std::size_t m = std::min(kBlock, n - i);
    if (divide)
      quotient_distinct(value, acc + i, m, w);
    else
      std::memcpy(value, acc + i, m * sizeof(float));
    Codec::store(out + i * sizeof(typename Codec::Storage), value, m);
  }
}

// out = in * factor (partial steps with unequal weights). f32 is multiplied
// in double and rounded once to float; f16/bf16 in float, block by block.
// out may be in (no __restrict: the compiler checks the overlap at run time).
template <class T, class F>
void scale_elements(T* out, const T* in, std::size_t n, F factor) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<F>(in[i]) * factor);
}

template <class Codec>
void scale_blocked(std::byte* out, const std::byte* in, std::size_t n, float factor) noexcept {
  constexpr std::size_t kBlock = block_elements<Codec>();
  constexpr std::size_t kStride = sizeof(typename Codec::Storage);
  float block[kBlock];
  for (std::size_t done = 0; done < n; done += kBlock) {
    const std::size_t m = std::min(kBlock, n - done);
    Codec::load(block, in + done * kStride, m);
    scale_elements(block, block, m, factor);
    Codec::store(out + done * kStride, block, m);
  }
}

#ifdef ANTDT_HAVE_ISA_CLONES
__attribute__((flatten, target_clones("arch=x86-64-v3", "default")))
#endif
void scale_validated(DataType t, std::byte* out, const std::byte* in, std::size_t n, double factor) noexcept {
  switch (t) {
    case DataType::f32:
      return scale_elements(reinterpret_cast<float*>(out), reinterpret_cast<const float*>(in), n, factor);
    case DataType::f64:
      return scale_elements(reinterpret_cast<double*>(out), reinterpret_cast<const double*>(in), n, factor);
    case DataType::f16: return scale_blocked<HalfCodec>(out, in, n, static_cast<float>(factor));
    case DataType::bf16: return scale_blocked<Bf16Codec>(out, in, n, static_cast<float>(factor));
    default: return;
  }
}

#ifdef ANTDT_HAVE_ISA_CLONES
__attribute__((flatten, target_clones("arch=x86-64-v3", "default")))
#endif
void accumulate_validated(DataType t, std::byte* acc, const std::byte* src, std::size_t n, double weight,
                          bool first) noexcept {
  switch (t) {
    case DataType::f32:
      return weighted_distinct(reinterpret_cast<float*>(acc), reinterpret_cast<const float*>(src), n,
                               static_cast<float>(weight), first);
    case DataType::f64:
      return weighted_distinct(reinterpret_cast<double*>(acc), reinterpret_cast<const double*>(src), n, weight, first);
    case DataType::f16:
      return weighted_blocked<HalfCodec>(reinterpret_cast<float*>(acc), src, n, static_cast<float>(weight), first);
    case DataType::bf16:
      return weighted_blocked<Bf16Codec>(reinterpret_cast<float*>(acc), src, n, static_cast<float>(weight), first);
    case DataType::i8:
    case DataType::u8:
    case DataType::i32:
    case DataType::u32:
    case DataType::i64:
    case DataType::u64: break;
  }
  const auto integral = static_cast<std::uint64_t>(static_cast<std::int64_t>(weight));
  switch (t) {
    case DataType::i8:
      return weighted_integer(reinterpret_cast<std::int8_t*>(acc), reinterpret_cast<const std::int8_t*>(src), n,
                              static_cast<std::uint8_t>(integral), first);
    case DataType::u8:
      return weighted_integer(reinterpret_cast<std::uint8_t*>(acc), reinterpret_cast<const std::uint8_t*>(src), n,
                              static_cast<std::uint8_t>(integral), first);
    case DataType::i32:
      return weighted_integer(reinterpret_cast<std::int32_t*>(acc), reinterpret_cast<const std::int32_t*>(src), n,
                              static_cast<std::uint32_t>(integral), first);
    case DataType::u32:
      return weighted_integer(reinterpret_cast<std::uint32_t*>(acc), reinterpret_cast<const std::uint32_t*>(src), n,
                              static_cast<std::uint32_t>(integral), first);
    case DataType::i64:
      return weighted_integer(reinterpret_cast<std::int64_t*>(acc), reinterpret_cast<const std::int64_t*>(src), n,
                              integral, first);
    case DataType::u64:
      return weighted_integer(reinterpret_cast<std::uint64_t*>(acc), reinterpret_cast<const std::uint64_t*>(src), n,
                              integral, first);
    default: return;
  }
}

#ifdef ANTDT_HAVE_ISA_CLONES
__attribute__((flatten, target_clones("arch=x86-64-v3", "default")))
#endif
void finish_validated(DataType t, bool divide, const std::byte* acc, std::byte* out, std::size_t n,
                      double total_weight) noexcept {
  // f32 and f64 arrive here only to be divided: their sum is a plain copy.
  switch (t) {
    case DataType::f64:
      return quotient_distinct(reinterpret_cast<double*>(out), reinterpret_cast<const double*>(acc), n, total_weight);
    case DataType::f32:
      return quotient_distinct(reinterpret_cast<float*>(out), reinterpret_cast<const float*>(acc), n,
                               static_cast<float>(total_weight));
    case DataType::f16:
      return finish_blocked<HalfCodec>(out, reinterpret_cast<const float*>(acc), n, divide,
                                       static_cast<float>(total_weight));
    case DataType::bf16:
      return finish_blocked<Bf16Codec>(out, reinterpret_cast<const float*>(acc), n, divide,
                                       static_cast<float>(total_weight));
    default: return;
  }
}

// Two byte ranges either are the same range or do not overlap at all.
bool same_or_disjoint(const std::byte* x, const std::byte* y, std::size_t bytes) noexcept {
  if (x == y || bytes == 0) return true;
  const std::less<const std::byte*> before;
  return !before(x, y + bytes) || !before(y, x + bytes);
}

std::size_t element_count(DataType t, std::span<const std::byte> buffer, const char* what) {
  const std::size_t element = dtype_size(t);
  ANTDT_CHECK_ARG(buffer.size() % element == 0, what, " has ", buffer.size(), " bytes, not a multiple of the ",
                  element, "-byte element size of ", dtype_name(t));
  return buffer.size() / element;
}

}  // namespace

void check_dtype(DataType t) {
  ANTDT_CHECK_ARG(static_cast<unsigned>(t) <= static_cast<unsigned>(DataType::u64), "invalid data type ",
                  static_cast<unsigned>(t), ": expected 0..9 (f32, f64, f16, bf16, i8, u8, i32, u32, i64, u64)");
}

void check_op(ReduceOp op) {
  ANTDT_CHECK_ARG(static_cast<unsigned>(op) <= static_cast<unsigned>(ReduceOp::avg), "invalid reduction op ",
                  static_cast<unsigned>(op), ": expected 0..4 (sum, prod, min, max, avg)");
}

void reduce_into(DataType t, ReduceOp op, std::span<std::byte> out, std::span<const std::byte> a,
                 std::span<const std::byte> b) {
  check_dtype(t);
  check_op(op);
  const std::size_t n = element_count(t, out, "the output buffer");
  ANTDT_CHECK_ARG(a.size() == out.size() && b.size() == out.size(), "reduction buffers differ in size: output ",
                  out.size(), " bytes, inputs ", a.size(), " and ", b.size(), " bytes");
  if (n == 0) return;
  ANTDT_CHECK_ARG(same_or_disjoint(out.data(), a.data(), out.size()) && same_or_disjoint(out.data(), b.data(), out.size()),
                  "the output buffer of a reduction partially overlaps an input (it may only be the same buffer)");
  reduce_validated(t, op, out.data(), a.data(), b.data(), n);
}

void reduce_many(DataType t, ReduceOp op, std::span<std::byte> out, std::span<const std::byte* const> inputs) {
  check_dtype(t);
  check_op(op);
  ANTDT_CHECK_ARG(!inputs.empty(), "reduce_many: no inputs");
  const std::size_t n = element_count(t, out, "the output buffer");
  if (n == 0) return;
  for (const std::byte* in : inputs) {
    ANTDT_CHECK_ARG(in != nullptr, "reduce_many: null input");
    ANTDT_CHECK_ARG(same_or_disjoint(out.data(), in, out.size()),
                    "the output buffer of a reduction partially overlaps an input (it may only be the same buffer)");
  }
  reduce_many_validated(t, op, out.data(), inputs.data(), inputs.size(), n);
}

void reduce_inplace(DataType t, ReduceOp op, std::span<std::byte> acc, std::span<const std::byte> in) {
  reduce_into(t, op, acc, acc, in);
}

void finish_avg(DataType t, std::span<std::byte> data, std::size_t nranks) {
  check_dtype(t);
  ANTDT_CHECK_ARG(nranks >= 1 && nranks <= static_cast<std::size_t>(INT_MAX), "finish_avg: the rank count ", nranks,
                  " is outside [1, ", INT_MAX, "]");
  const std::size_t n = element_count(t, data, "the averaged buffer");
  if (n == 0 || nranks == 1) return;
  with_codec(t, [&](auto codec) { divide_blocked<typename decltype(codec)::type>(data.data(), n, nranks); });
}

void scale_into(DataType t, std::span<std::byte> out, std::span<const std::byte> in, double factor) {
  check_dtype(t);
  const bool is_float = t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
  ANTDT_CHECK_ARG(is_float, "weighted avg needs a floating-point dtype, not ", dtype_name(t));
  const std::size_t n = element_count(t, out, "the scaled output");
  ANTDT_CHECK_ARG(in.size() == out.size(), "scale_into: input of ", in.size(), " bytes for an output of ", out.size());
  ANTDT_CHECK_ARG(same_or_disjoint(out.data(), in.data(), out.size()),
                  "scale_into: the output partially overlaps the input (it may only be the same buffer)");
  if (n > 0) scale_validated(t, out.data(), in.data(), n, factor);
}

DataType weighted_sum_type(DataType t) noexcept {
  return t == DataType::f16 || t == DataType::bf16 ? DataType::f32 : t;
}

void accumulate_weighted(DataType t, std::byte* acc, const std::byte* src, std::size_t n, double weight, bool first) {
  check_dtype(t);
  if (n > 0) accumulate_validated(t, acc, src, n, weight, first);
}

void finish_weighted(DataType t, ReduceOp op, const std::byte* acc, std::byte* out, std::size_t n,
                     double total_weight) {
  check_dtype(t);
  ANTDT_CHECK_ARG(op == ReduceOp::sum || op == ReduceOp::avg, "finish_weighted: op must be sum or avg");
  if (n == 0) return;
  if (op == ReduceOp::sum && weighted_sum_type(t) == t) {
    if (acc != out) std::memcpy(out, acc, n * dtype_size(t));
    return;
  }
  const bool is_float = t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
  ANTDT_CHECK_ARG(is_float, "push-pull: avg needs a floating-point dtype, not ", dtype_name(t));
  if (op == ReduceOp::avg && total_weight == 0) {  // nothing pushed this round: zeros
    std::memset(out, 0, n * dtype_size(t));
    return;
  }
  finish_validated(t, op == ReduceOp::avg, acc, out, n, total_weight);
}

float half_to_float(std::uint16_t h) noexcept { return half_bits_to_float(h); }
std::uint16_t float_to_half(float f) noexcept { return float_to_half_bits(f); }
float bf16_to_float(std::uint16_t b) noexcept { return bf16_bits_to_float(b); }
std::uint16_t float_to_bf16(float f) noexcept { return float_to_bf16_bits(f); }

}  // namespace antdt
