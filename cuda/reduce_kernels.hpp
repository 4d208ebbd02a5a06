// GPU reduction kernels. Only compiled in CUDA builds.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace antdt::cuda {

// acc[i] += in[i] for i in [0, count), enqueued on `stream` (asynchronous).
// Both pointers must be device-accessible. `acc` may equal `in` (doubling it);
// any other overlap is rejected, as is a null pointer with count > 0.
// Uses 16-byte float4 loads when both pointers share their alignment modulo 16.
void reduce_sum_f32(float* acc, const float* in, std::size_t count, cudaStream_t stream);

}  // namespace antdt::cuda
