// antdt_pushpull_perf: push-pull (parameter-server mode) rounds, nccl-tests style.
// Launch one process per rank (mpirun, or ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT);
// rank 0 prints the table. Exits non-zero when a result is wrong or on error.
//
// One timed iteration is one synchronous round of a single key of `size`
// bytes: every rank pushes its tensor (weight 1) and pulls the aggregate (-o
// sum or avg). Every rank serves a shard: the key's partitions
// (ANTDT_PS_PARTITION_BYTES, default 4 MiB) are spread by range over all ranks.
// Out of place pulls into another buffer, in place into the pushed one.
//
// algbw = size / time. busbw = algbw * 2(n-1)/n: with the partitions spread
// evenly, each rank sends (n-1)/n of the tensor to the other servers on push
// and receives as much on pull, the traffic of a ring allreduce, so the
// column compares with antdt_allreduce_perf's. A key of one partition (size
// up to the partition size) has one server, which moves (n-1) x size each way:
// busbw then shows what that imbalance costs (docs/collectives.md#push-pull).
//
// -G or ANTDT_MEM=device (CUDA builds): the pushed and pulled tensors are in
// GPU memory (GPU = local rank mod GPU count); each round is issued on a CUDA
// stream and followed by a synchronisation of that stream, so the time is
// until the pulled result is usable (docs/pushpull.md#device-buffers). Inputs
// are written and results checked through host copies.
#include "perf_common.hpp"

#include <antdt/comm.hpp>
#include <antdt/pushpull.hpp>

#ifndef ANTDT_PUSHPULL_PERF_CUDA
#define ANTDT_PUSHPULL_PERF_CUDA 0  // perf/pushpull.cmake sets 1 in CUDA builds
#endif
#if ANTDT_PUSHPULL_PERF_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

using antdt::Communicator;
using antdt::DataType;
using antdt::ReduceOp;
namespace perf = antdt::perf;

constexpr const char* kToolName = "antdt_pushpull_perf";
constexpr std::uint64_t kKey = 1;

#if ANTDT_PUSHPULL_PERF_CUDA
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw antdt::InternalError(std::string(kToolName) + ": " + what + ": " + cudaGetErrorString(status));
}

class Stream {
 public:
  Stream() { check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { static_cast<void>(cudaStreamDestroy(stream_)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* get() const { return stream_; }
  void synchronize() const { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
};

void select_device(const Communicator& comm) {
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices == 0) throw antdt::UnsupportedError(std::string(kToolName) + ": no CUDA device visible");
  // One GPU per local rank when there are several; ranks share it otherwise.
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const int local_rank = local != nullptr ? std::atoi(local) : comm.rank();
  check_cuda(cudaSetDevice(local_rank % devices), "cudaSetDevice");
}
#endif

// A tensor in host memory, or (-G) in device memory written and read through
// host copies.
class Buffer {
 public:
  Buffer(std::size_t bytes, bool device) {
    if (!device) {
      host_.resize(bytes);
      return;
    }
#if ANTDT_PUSHPULL_PERF_CUDA
    void* raw = nullptr;
    check_cuda(cudaMalloc(&raw, bytes), "cudaMalloc");
    device_.reset(static_cast<std::byte*>(raw));
#else
    throw antdt::UnsupportedError(std::string(kToolName) + ": device memory needs a CUDA build");
#endif
  }
  std::byte* data() { return device_ ? device_.get() : host_.data(); }
  void write(std::span<const std::byte> from) {
#if ANTDT_PUSHPULL_PERF_CUDA
    if (device_) {
      check_cuda(cudaMemcpy(data(), from.data(), from.size(), cudaMemcpyHostToDevice), "cudaMemcpy (fill)");
      return;
    }
#endif
    std::copy(from.begin(), from.end(), data());
  }
  void read(std::span<std::byte> to) {
#if ANTDT_PUSHPULL_PERF_CUDA
    if (device_) {
      check_cuda(cudaMemcpy(to.data(), data(), to.size(), cudaMemcpyDeviceToHost), "cudaMemcpy (check)");
      return;
    }
#endif
    std::copy(data(), data() + to.size(), to.begin());
  }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept {
#if ANTDT_PUSHPULL_PERF_CUDA
      static_cast<void>(cudaFree(p));
#else
      static_cast<void>(p);
#endif
    }
  };
  std::unique_ptr<std::byte, Free> device_;
  std::vector<std::byte> host_;
};

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op, perf::Totals& totals) {
  if (op != ReduceOp::sum && op != ReduceOp::avg)
    throw antdt::InvalidArgument(std::string(kToolName) + ": -o must be sum or avg (a pull returns the sum or the "
                                 "weighted average), not " + std::string(perf::op_label(op)));
  const bool on_device = opts.device_memory;
#if ANTDT_PUSHPULL_PERF_CUDA
  if (on_device) select_device(comm);
  // Device rounds are issued on a stream and waited for (host memory runs without CUDA).
  std::optional<Stream> stream;
  if (on_device) stream.emplace();
  void* const stream_handle = stream ? stream->get() : nullptr;
  const auto synchronize = [&] {
    if (stream) stream->synchronize();
  };
#else
  void* const stream_handle = nullptr;
  const auto synchronize = [] {};
#endif
  const std::size_t width = antdt::dtype_size(dtype);
  const std::size_t max_count = opts.sweep.max_bytes / width;
  const std::size_t capacity = std::max<std::size_t>(max_count, 1) * width;
  const perf::ReducePattern pattern(dtype, op, comm.size());
  std::vector<std::byte> host_input(capacity), host_result(capacity), expected(capacity);
  pattern.fill_input(comm.rank(), host_input);
  pattern.fill_expected(expected);
  Buffer input(capacity, on_device), result(capacity, on_device), work(capacity, on_device);
  input.write(host_input);

  for (const std::size_t size : opts.sizes) {
    const std::size_t count = size / width;
    const std::size_t bytes = count * width;
    const antdt::PushPullKey key{kKey, count, dtype};
    antdt::PushPull pp(comm, std::span(&key, 1));
    const std::span<const std::byte> want(expected.data(), bytes);
    const std::span<std::byte> got(host_result.data(), bytes);
    const auto round = [&](std::byte* send, std::byte* recv) {
      pp.push(kKey, send, 1.0, stream_handle);
      pp.pull(kKey, recv, op, stream_handle);
      synchronize();
    };

    const perf::RowLabel row{kToolName, dtype, op, bytes};
    const perf::LocalResult oop =
        perf::measure(comm, opts, row,
                      {.name = "out-of-place",
                       .call = [&] { round(input.data(), result.data()); },
                       .result = got,
                       .expected = want,
                       .store_result = [&](std::span<const std::byte> host) { result.write(host); },
                       .load_result = [&](std::span<std::byte> host) { result.read(host); }});
    // In place: repeated rounds of the check data would grow without bound
    // (sum), so time on data whose aggregate is itself, then check once.
    const perf::LocalResult ip = perf::measure(
        comm, opts, row,
        {.name = "in-place",
         .call = [&] { round(work.data(), work.data()); },
         .prepare_timing =
             [&] {
               pattern.fill_repeatable(comm.rank(), got);
               work.write(got);
             },
         .result = got,
         .expected = want,
         .restore_inputs = [&] { work.write(std::span<const std::byte>(host_input.data(), bytes)); },
         .store_result = [&](std::span<const std::byte> host) { work.write(host); },
         .load_result = [&](std::span<std::byte> host) { work.read(host); }});
    perf::finish_row(comm, totals, bytes, count, dtype, perf::op_label(op), -1,
                     perf::allreduce_busbw_factor(comm.size()), oop, ip);
  }
}

}  // namespace

int main(int argc, char** argv) {
  perf::ToolSpec spec{kToolName, "Push-pull (parameter server) round bandwidth and correctness, nccl-tests style",
                      true, false};
  // -G / ANTDT_MEM=device only where the tool can allocate device memory;
  // elsewhere tool_main refuses them rather than timing host memory.
  spec.device_memory = ANTDT_PUSHPULL_PERF_CUDA != 0;
  return perf::tool_main(argc, argv, spec,
                         [](Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op,
                            perf::Totals& totals) { run_sweep(comm, opts, dtype, op, totals); });
}
