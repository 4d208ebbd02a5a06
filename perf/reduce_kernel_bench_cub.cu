#include "reduce_kernel_bench.hpp"

#include <cub/device/device_transform.cuh>
#include <cuda/std/tuple>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace antdt::perf {
namespace {

struct AddF32 {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct AddBf16 {
  __device__ __nv_bfloat16 operator()(__nv_bfloat16 a, __nv_bfloat16 b) const {
    return __float2bfloat16_rn(__bfloat162float(a) + __bfloat162float(b));
  }
};
struct AddF16 {
  __device__ __half operator()(__half a, __half b) const { return __float2half_rn(__half2float(a) + __half2float(b)); }
};

template <class T, class Op>
cudaError_t transform(void* a, const void* b, std::size_t count, cudaStream_t stream) {
  T* out = static_cast<T*>(a);
  const T* in = static_cast<const T*>(b);
  // In place: the output is the first input, which DeviceTransform allows.
  return cub::DeviceTransform::Transform(cuda::std::make_tuple(static_cast<const T*>(out), in), out,
                                         static_cast<std::int64_t>(count), Op{}, stream);
}

}  // namespace

bool cub_supports(DataType t) noexcept { return t == DataType::f32 || t == DataType::bf16 || t == DataType::f16; }

cudaError_t cub_add_inplace(DataType t, void* a, const void* b, std::size_t count, cudaStream_t stream) {
  switch (t) {
    case DataType::f32: return transform<float, AddF32>(a, b, count, stream);
    case DataType::bf16: return transform<__nv_bfloat16, AddBf16>(a, b, count, stream);
    case DataType::f16: return transform<__half, AddF16>(a, b, count, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace antdt::perf
