#include "cuda/reduce_kernels.hpp"

#include "core/error.hpp"
#include "cuda/cuda_check.hpp"

#include <algorithm>
#include <cstdint>

namespace antdt::cuda {
namespace {

constexpr unsigned kThreadsPerBlock = 256;
// Enough blocks to fill any current GPU several times over; the grid-stride
// loops cover larger inputs.
constexpr std::size_t kMaxBlocks = 4096;

// Elements [0, head) and [head + 4 * n4, count) are summed one float at a time;
// the n4 float4 groups in between with 16-byte loads and stores. The caller
// picks `head` so that acc + head and in + head are both 16-byte aligned (or
// head == count when they can never be aligned together).
__global__ void sum_f32_kernel(float* acc, const float* in, std::size_t head, std::size_t n4,
                               std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;

  auto* acc4 = reinterpret_cast<float4*>(acc + head);
  const auto* in4 = reinterpret_cast<const float4*>(in + head);
  for (std::size_t i = first; i < n4; i += stride) {
    float4 a = acc4[i];
    const float4 b = in4[i];
    a.x += b.x;
    a.y += b.y;
    a.z += b.z;
    a.w += b.w;
    acc4[i] = a;
  }

  const std::size_t tail_begin = head + 4 * n4;
  const std::size_t scalar_count = head + (count - tail_begin);
  for (std::size_t k = first; k < scalar_count; k += stride) {
    const std::size_t i = k < head ? k : tail_begin + (k - head);
    acc[i] += in[i];
  }
}

}  // namespace

void reduce_sum_f32(float* acc, const float* in, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  ANTDT_CHECK_ARG(acc != nullptr && in != nullptr, "reduce_sum_f32: null buffer (acc=",
                  static_cast<const void*>(acc), ", in=", static_cast<const void*>(in), ") with count ",
                  count);
  const auto acc_addr = reinterpret_cast<std::uintptr_t>(acc);
  const auto in_addr = reinterpret_cast<std::uintptr_t>(in);
  const std::size_t bytes = count * sizeof(float);
  ANTDT_CHECK_ARG(acc == in || acc_addr + bytes <= in_addr || in_addr + bytes <= acc_addr,
                  "reduce_sum_f32: acc and in overlap without being the same buffer (acc=",
                  static_cast<const void*>(acc), ", in=", static_cast<const void*>(in), ", ", count,
                  " floats)");

  constexpr std::uintptr_t kVectorBytes = sizeof(float4);
  std::size_t head = count;
  std::size_t n4 = 0;
  if (acc_addr % kVectorBytes == in_addr % kVectorBytes && acc_addr % sizeof(float) == 0) {
    head = std::min(count, static_cast<std::size_t>((kVectorBytes - acc_addr % kVectorBytes) % kVectorBytes /
                                                    sizeof(float)));
    n4 = (count - head) / 4;
  }
  const std::size_t scalar_count = count - 4 * n4;
  const std::size_t work_items = std::max(n4, scalar_count);
  const std::size_t blocks = std::min(kMaxBlocks, (work_items + kThreadsPerBlock - 1) / kThreadsPerBlock);

  sum_f32_kernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(acc, in, head, n4, count);
  check_cuda(cudaGetLastError(), "reduce_sum_f32 kernel launch");
}

}  // namespace antdt::cuda
