// The CUB side of antdt_reduce_kernel_bench (reduce_kernel_bench_cub.cu),
// kept apart so only that file pays for the CUB headers.
#pragma once

#include <antdt/comm.hpp>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace antdt::perf {

// Whether cub_add_inplace supports `t` (f32, bf16, f16).
bool cub_supports(DataType t) noexcept;

// a[i] += b[i] with cub::DeviceTransform (f16/bf16 computed in f32), on `stream`.
cudaError_t cub_add_inplace(DataType t, void* a, const void* b, std::size_t count, cudaStream_t stream);

}  // namespace antdt::perf
