// GPU reduction kernels (cuda/reduce_kernels.hpp).
//
// One kernel template per (dtype, op) for out = a op b (device_reduce is the
// out == a case), and one per dtype for the avg division: 40 + 10 kernels,
// which keeps this file quick to compile for several architectures.
//
// Shape: a grid-stride loop over 16-byte vectors (uint4) for the part of the
// buffers where every pointer is 16-byte aligned, two vectors per operand in
// flight per thread, and one grid-stride loop over single elements for the
// head before the first aligned address and the tail after the last full
// vector. Pointers that do not share their address modulo 16 take the scalar
// loop for everything (still coalesced, just more instructions).
//
// Why plain kernels and not cub::DeviceTransform (which this CCCL has): a
// transform instantiation costs about 0.6 s of nvcc time per (dtype, op) and
// architecture on top of a 7 s header cost, against ~0.1 s for these kernels;
// the launch shape here is computed from a cached SM count with no per-call
// device queries; and the aliasing rules (out == a or out == b) are ours to
// state. perf/reduce_kernel_bench measures the CUB transform beside these
// kernels so the choice can be revisited with numbers from a GPU.
//
// Exactness: nothing here may be compiled with --use_fast_math (the IEEE
// division and the non-flushed subnormals are what make results equal to the
// CPU kernels); no expression has a multiply feeding an add, so FMA
// contraction cannot change a result either.
#include "cuda/reduce_kernels.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cuda/cuda_check.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace antdt::cuda {
namespace {

constexpr unsigned kThreadsPerBlock = 256;
// 8 x 256 = 2048 threads: the most an SM of sm_80/sm_90 keeps resident.
constexpr unsigned kBlocksPerSm = 8;
constexpr std::size_t kVectorBytes = sizeof(uint4);
// Vectors per operand loaded before any is combined: more bytes in flight per
// thread without more threads.
constexpr std::size_t kUnroll = 2;

// ---------------------------------------------------------------------------
// Storage codecs: how an element in memory becomes the value the op works on.
// ---------------------------------------------------------------------------
template <class T>
struct NativeCodec {
  using Storage = T;
  using Work = T;
  __device__ static T load(T x) { return x; }
  __device__ static T store(T x) { return x; }
};

struct HalfCodec {
  using Storage = std::uint16_t;
  using Work = float;
  __device__ static float load(std::uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
  __device__ static std::uint16_t store(float value) { return __half_as_ushort(__float2half_rn(value)); }
};

struct Bf16Codec {
  using Storage = std::uint16_t;
  using Work = float;
  __device__ static float load(std::uint16_t bits) { return __bfloat162float(__ushort_as_bfloat16(bits)); }
  __device__ static std::uint16_t store(float value) { return __bfloat16_as_ushort(__float2bfloat16_rn(value)); }
};

// ---------------------------------------------------------------------------
// Operations: the same expressions as core/dtype.cpp.
// ---------------------------------------------------------------------------
struct SumOp {
  template <class T>
  __device__ static T apply(T a, T b) {
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
  __device__ static T apply(T a, T b) {
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
  __device__ static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a < b || a != a) ? a : b;  // a NaN in either operand wins
    } else {
      return a < b ? a : b;
    }
  }
};
struct MaxOp {
  template <class T>
  __device__ static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a > b || a != a) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

template <class Codec, class Op>
__device__ typename Codec::Storage combine(typename Codec::Storage a, typename Codec::Storage b) {
  return Codec::store(Op::apply(Codec::load(a), Codec::load(b)));
}

// The type avg divides in: the element's own float type, else an integer
// type that holds both the element and any rank count in [1, INT_MAX]. For
// elements of up to 32 bits the 32-bit quotient equals the CPU kernel's 64-bit
// one exactly, and 32-bit division is much faster than the emulated 64-bit one.
template <class Work>
using DivisorOf = std::conditional_t<
    std::is_floating_point_v<Work>, Work,
    std::conditional_t<(sizeof(Work) < 8), std::conditional_t<std::is_signed_v<Work>, std::int32_t, std::uint32_t>,
                       std::conditional_t<std::is_signed_v<Work>, std::int64_t, std::uint64_t>>>;

template <class Codec>
__device__ typename Codec::Storage divide(typename Codec::Storage x, DivisorOf<typename Codec::Work> divisor) {
  using Work = typename Codec::Work;
  using Divisor = DivisorOf<Work>;
  return Codec::store(static_cast<Work>(static_cast<Divisor>(Codec::load(x)) / divisor));
}

// Element-wise over the lanes of one 16-byte vector. The memcpy calls are
// register moves after optimisation (no local memory).
template <class Codec, class Op>
__device__ uint4 combine_vector(uint4 a, uint4 b) {
  using Storage = typename Codec::Storage;
  constexpr std::size_t kLanes = kVectorBytes / sizeof(Storage);
  Storage ea[kLanes];
  Storage eb[kLanes];
  memcpy(ea, &a, kVectorBytes);
  memcpy(eb, &b, kVectorBytes);
#pragma unroll
  for (std::size_t lane = 0; lane < kLanes; ++lane) ea[lane] = combine<Codec, Op>(ea[lane], eb[lane]);
  uint4 result;
  memcpy(&result, ea, kVectorBytes);
  return result;
}

template <class Codec>
__device__ uint4 divide_vector(uint4 v, DivisorOf<typename Codec::Work> divisor) {
  using Storage = typename Codec::Storage;
  constexpr std::size_t kLanes = kVectorBytes / sizeof(Storage);
  Storage e[kLanes];
  memcpy(e, &v, kVectorBytes);
#pragma unroll
  for (std::size_t lane = 0; lane < kLanes; ++lane) e[lane] = divide<Codec>(e[lane], divisor);
  uint4 result;
  memcpy(&result, e, kVectorBytes);
  return result;
}

// Which elements go through 16-byte vectors: [head, head + vectors * lanes).
struct Split {
  std::size_t head = 0;
  std::size_t vectors = 0;
  std::size_t count = 0;
};

// The element index of the k-th scalar work item: the head, then the tail.
__device__ std::size_t scalar_index(const Split& split, std::size_t lanes, std::size_t k) {
  const std::size_t tail_begin = split.head + split.vectors * lanes;
  return k < split.head ? k : tail_begin + (k - split.head);
}

__device__ std::size_t first_thread() { return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ std::size_t grid_threads() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

template <class Codec, class Op>
__global__ void __launch_bounds__(kThreadsPerBlock)
    combine_kernel(typename Codec::Storage* out, const typename Codec::Storage* a,
                   const typename Codec::Storage* b, Split split) {
  using Storage = typename Codec::Storage;
  constexpr std::size_t kLanes = kVectorBytes / sizeof(Storage);
  const std::size_t stride = grid_threads();
  const std::size_t first = first_thread();

  // out may be a or b: every element is read and written by one thread, all
  // loads of an iteration before its stores, so aliasing is harmless.
  auto* out_v = reinterpret_cast<uint4*>(out + split.head);
  const auto* a_v = reinterpret_cast<const uint4*>(a + split.head);
  const auto* b_v = reinterpret_cast<const uint4*>(b + split.head);
  std::size_t i = first;
  for (; i + (kUnroll - 1) * stride < split.vectors; i += kUnroll * stride) {
    uint4 va[kUnroll];
    uint4 vb[kUnroll];
#pragma unroll
    for (std::size_t u = 0; u < kUnroll; ++u) {
      va[u] = a_v[i + u * stride];
      vb[u] = b_v[i + u * stride];
    }
#pragma unroll
    for (std::size_t u = 0; u < kUnroll; ++u) out_v[i + u * stride] = combine_vector<Codec, Op>(va[u], vb[u]);
  }
  for (; i < split.vectors; i += stride) out_v[i] = combine_vector<Codec, Op>(a_v[i], b_v[i]);

  const std::size_t scalars = split.count - split.vectors * kLanes;
  for (std::size_t k = first; k < scalars; k += stride) {
    const std::size_t e = scalar_index(split, kLanes, k);
    out[e] = combine<Codec, Op>(a[e], b[e]);
  }
}

template <class Codec>
__global__ void __launch_bounds__(kThreadsPerBlock)
    divide_kernel(typename Codec::Storage* data, Split split, DivisorOf<typename Codec::Work> divisor) {
  using Storage = typename Codec::Storage;
  constexpr std::size_t kLanes = kVectorBytes / sizeof(Storage);
  const std::size_t stride = grid_threads();
  const std::size_t first = first_thread();

  auto* data_v = reinterpret_cast<uint4*>(data + split.head);
  for (std::size_t i = first; i < split.vectors; i += stride) data_v[i] = divide_vector<Codec>(data_v[i], divisor);

  const std::size_t scalars = split.count - split.vectors * kLanes;
  for (std::size_t k = first; k < scalars; k += stride) {
    const std::size_t e = scalar_index(split, kLanes, k);
    data[e] = divide<Codec>(data[e], divisor);
  }
}

// ---------------------------------------------------------------------------
// Host side: argument checks, split, launch shape, dispatch.
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

std::uintptr_t address(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

// The vectorized middle shared by every pointer: they must agree modulo 16,
// otherwise no element index is 16-byte aligned in all of them at once.
template <std::size_t N>
Split split_for(std::size_t element_bytes, std::size_t count, const std::array<const void*, N>& pointers) {
  Split split{count, 0, count};
  const std::uintptr_t phase = address(pointers[0]) % kVectorBytes;
  for (const void* p : pointers) {
    if (address(p) % kVectorBytes != phase) return split;
  }
  // Pointers are element-aligned (checked), so the gap to the next 16-byte
  // boundary is a whole number of elements.
  const std::size_t head = (kVectorBytes - phase) % kVectorBytes / element_bytes;
  split.head = std::min(count, head);
  split.vectors = (count - split.head) * element_bytes / kVectorBytes;
  return split;
}

// SM counts of the devices seen so far (0 = not asked yet). The attribute is
// fixed for the life of the process, so it is read once per device.
constexpr int kMaxCachedDevices = 64;
std::array<std::atomic<int>, kMaxCachedDevices> g_sm_counts{};

int sm_count_of_current_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  if (device >= 0 && device < kMaxCachedDevices) {
    if (const int cached = g_sm_counts[static_cast<std::size_t>(device)].load(std::memory_order_relaxed)) {
      return cached;
    }
  }
  int sms = 0;
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
             "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)");
  sms = std::max(sms, 1);
  if (device >= 0 && device < kMaxCachedDevices) {
    g_sm_counts[static_cast<std::size_t>(device)].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

// Enough blocks for one work item per thread, at most one resident wave: the
// grid-stride loops cover the rest.
unsigned grid_for(std::size_t work_items) {
  const std::size_t wanted = std::max<std::size_t>(1, (work_items + kThreadsPerBlock - 1) / kThreadsPerBlock);
  const std::size_t resident = static_cast<std::size_t>(sm_count_of_current_device()) * kBlocksPerSm;
  return static_cast<unsigned>(std::min(wanted, resident));
}

std::size_t checked_bytes(DataType t, std::size_t count, const char* what) {
  const std::size_t element = dtype_size(t);
  ANTDT_CHECK_ARG(count <= SIZE_MAX / element, what, ": ", count, " elements of ", dtype_name(t),
                  " overflow a byte count");
  return count * element;
}

void check_buffer(const void* p, DataType t, std::size_t count, const char* what, const char* name) {
  ANTDT_CHECK_ARG(p != nullptr, what, ": the ", name, " buffer is null with count ", count);
  ANTDT_CHECK_ARG(address(p) % dtype_size(t) == 0, what, ": the ", name, " buffer ", p,
                  " is not aligned to the ", dtype_size(t), "-byte element size of ", dtype_name(t),
                  " (GPU loads of misaligned elements fault)");
}

bool same_or_disjoint(const void* x, const void* y, std::size_t bytes) noexcept {
  if (x == y) return true;
  const std::uintptr_t ax = address(x);
  const std::uintptr_t ay = address(y);
  return ax + bytes <= ay || ay + bytes <= ax;
}

std::size_t elements_per_vector(DataType t) { return kVectorBytes / dtype_size(t); }

}  // namespace

void device_reduce_into(DataType t, ReduceOp op, void* out, const void* a, const void* b, std::size_t count,
                        cudaStream_t stream) {
  check_dtype(t);
  check_op(op);
  if (count == 0) return;
  constexpr const char* kWhat = "device reduction";
  const std::size_t bytes = checked_bytes(t, count, kWhat);
  check_buffer(out, t, count, kWhat, "output");
  check_buffer(a, t, count, kWhat, "first input");
  check_buffer(b, t, count, kWhat, "second input");
  ANTDT_CHECK_ARG(same_or_disjoint(out, a, bytes) && same_or_disjoint(out, b, bytes), kWhat,
                  ": the output buffer ", out, " partially overlaps an input (", a, ", ", b, ") of ", bytes,
                  " bytes; it may only be the same buffer");

  const Split split = split_for(dtype_size(t), count, std::array<const void*, 3>{out, a, b});
  const std::size_t scalars = count - split.vectors * elements_per_vector(t);
  const unsigned blocks = grid_for(std::max(split.vectors, scalars));
  with_codec(t, [&](auto codec) {
    using Codec = typename decltype(codec)::type;
    using Storage = typename Codec::Storage;
    with_op(op, [&](auto operation) {
      using Op = typename decltype(operation)::type;
      combine_kernel<Codec, Op><<<blocks, kThreadsPerBlock, 0, stream>>>(
          static_cast<Storage*>(out), static_cast<const Storage*>(a), static_cast<const Storage*>(b), split);
    });
  });
  check_cuda(cudaGetLastError(), "device reduction kernel launch");
}

void device_reduce(DataType t, ReduceOp op, void* acc, const void* in, std::size_t count, cudaStream_t stream) {
  device_reduce_into(t, op, acc, acc, in, count, stream);
}

void device_finish_avg(DataType t, void* data, std::size_t count, std::size_t nranks, cudaStream_t stream) {
  check_dtype(t);
  ANTDT_CHECK_ARG(nranks >= 1 && nranks <= static_cast<std::size_t>(INT_MAX), "device_finish_avg: the rank count ",
                  nranks, " is outside [1, ", INT_MAX, "]");
  if (count == 0 || nranks == 1) return;
  constexpr const char* kWhat = "device_finish_avg";
  checked_bytes(t, count, kWhat);
  check_buffer(data, t, count, kWhat, "averaged");

  const Split split = split_for(dtype_size(t), count, std::array<const void*, 1>{data});
  const std::size_t scalars = count - split.vectors * elements_per_vector(t);
  const unsigned blocks = grid_for(std::max(split.vectors, scalars));
  with_codec(t, [&](auto codec) {
    using Codec = typename decltype(codec)::type;
    using Storage = typename Codec::Storage;
    // Converted as core/dtype.cpp converts it (floats: to the element's float type).
    const auto divisor = static_cast<DivisorOf<typename Codec::Work>>(nranks);
    divide_kernel<Codec><<<blocks, kThreadsPerBlock, 0, stream>>>(static_cast<Storage*>(data), split, divisor);
  });
  check_cuda(cudaGetLastError(), "device_finish_avg kernel launch");
}

}  // namespace antdt::cuda
