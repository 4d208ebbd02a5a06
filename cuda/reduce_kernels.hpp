// GPU reduction kernels for every DataType x ReduceOp, with the semantics of
// the CPU kernels in core/dtype.hpp: f16/bf16 are computed in f32 and rounded
// to nearest even, float min/max propagate NaN, integer sum/prod wrap, `avg`
// reduces as `sum` and device_finish_avg() divides once at the end (truncating
// for integers). Results are bit-identical to the CPU kernels except for NaN
// payloads (GPUs return the canonical NaN; a NaN stays a NaN).
// Only compiled in CUDA builds. All calls are asynchronous on `stream`.
#pragma once

#include <antdt/comm.hpp>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace antdt::cuda {

// acc[i] = acc[i] (op) in[i] for i in [0, count). Both pointers must be
// device-accessible (device, managed or mapped pinned memory) and aligned to
// the element size. `acc` may equal `in`; any other overlap is rejected.
void device_reduce(DataType t, ReduceOp op, void* acc, const void* in, std::size_t count, cudaStream_t stream);

// out[i] = a[i] (op) b[i]. `out` may equal `a` or `b` (or both); any partial
// overlap of `out` with an input is rejected. `a` and `b` may overlap freely.
void device_reduce_into(DataType t, ReduceOp op, void* out, const void* a, const void* b, std::size_t count,
                        cudaStream_t stream);

// After an avg reduction of `nranks` contributions: data[i] /= nranks
// (integers: truncating division). nranks must be in [1, INT_MAX].
void device_finish_avg(DataType t, void* data, std::size_t count, std::size_t nranks, cudaStream_t stream);

}  // namespace antdt::cuda
