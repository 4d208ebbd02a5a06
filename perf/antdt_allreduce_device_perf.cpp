// antdt_allreduce_device_perf: antdt_allreduce_perf with the buffers in GPU
// memory (-G or ANTDT_MEM=device; host memory otherwise, for a like-for-like
// comparison from the same binary). Each timed call is issued on a CUDA stream
// and followed by a synchronisation of that stream, so the time per call is
// the time until the result is usable. Inputs are written and results checked
// through host copies. ANTDT_GPU_PATH chooses IPC or staging (docs/gpu.md).
// Built only in CUDA builds (perf/cuda.cmake).
#include "perf_common.hpp"

#include <antdt/comm.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
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

constexpr const char* kToolName = "antdt_allreduce_device_perf";

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw antdt::InternalError(std::string(kToolName) + ": " + what + ": " + cudaGetErrorString(status));
}

// Device memory, or host memory when the run times host buffers.
class Buffer {
 public:
  Buffer(std::size_t bytes, bool device) : device_(device) {
    if (device) {
      void* raw = nullptr;
      check(cudaMalloc(&raw, bytes), "cudaMalloc");
      device_data_.reset(static_cast<std::byte*>(raw));
    } else {
      host_data_.resize(bytes);
    }
  }
  std::byte* data() { return device_ ? device_data_.get() : host_data_.data(); }
  void write(std::span<const std::byte> from) {
    if (device_)
      check(cudaMemcpy(data(), from.data(), from.size(), cudaMemcpyHostToDevice), "cudaMemcpy (fill)");
    else
      std::copy(from.begin(), from.end(), data());
  }
  void read(std::span<std::byte> to) {
    if (device_)
      check(cudaMemcpy(to.data(), data(), to.size(), cudaMemcpyDeviceToHost), "cudaMemcpy (check)");
    else
      std::copy(data(), data() + to.size(), to.begin());
  }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept { static_cast<void>(cudaFree(p)); }
  };
  bool device_;
  std::unique_ptr<std::byte, Free> device_data_;
  std::vector<std::byte> host_data_;
};

class Stream {
 public:
  Stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { static_cast<void>(cudaStreamDestroy(stream_)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
};

void select_device(const Communicator& comm) {
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices == 0) throw antdt::UnsupportedError(std::string(kToolName) + ": no CUDA device visible");
  // One GPU per local rank when there are several; ranks share it otherwise.
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const int local_rank = local != nullptr ? std::atoi(local) : comm.rank();
  check(cudaSetDevice(local_rank % devices), "cudaSetDevice");
}

void run_sweep(Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op,
               perf::Totals& totals) {
  const bool on_device = opts.device_memory;
  if (on_device) select_device(comm);
  const std::size_t width = antdt::dtype_size(dtype);
  const std::size_t capacity = std::max<std::size_t>(opts.sweep.max_bytes / width, 1) * width;
  const perf::ReducePattern pattern(dtype, op, comm.size());
  std::vector<std::byte> host_input(capacity), host_result(capacity), expected;
  pattern.fill_input(comm.rank(), host_input);
  if (opts.check) {
    expected.resize(capacity);
    pattern.fill_expected(expected);
  }
  Buffer input(capacity, on_device), result(capacity, on_device);
  input.write(host_input);
  // Host memory runs without CUDA (a machine without a driver can compare).
  std::optional<Stream> stream;
  if (on_device) stream.emplace();
  const double busbw_factor = perf::allreduce_busbw_factor(comm.size());

  for (const std::size_t size : opts.sizes) {
    const std::size_t count = size / width;
    const std::size_t bytes = count * width;
    const std::span<std::byte> got(host_result.data(), bytes);
    const std::span<const std::byte> want =
        opts.check ? std::span<const std::byte>(expected.data(), bytes) : std::span<const std::byte>{};
    const auto call = [&](std::byte* send, std::byte* recv) {
      if (stream) {
        comm.allreduce(send, recv, count, dtype, op, stream->get());
        stream->synchronize();
      } else {
        comm.allreduce(send, recv, count, dtype, op);
      }
    };

    const perf::RowLabel row{kToolName, dtype, op, bytes};
    const auto store = [&](std::span<const std::byte> host) { result.write(host); };
    const auto load = [&](std::span<std::byte> host) { result.read(host); };
    const perf::LocalResult oop = perf::measure(comm, opts, row,
                                                {.name = "out-of-place",
                                                 .call = [&] { call(input.data(), result.data()); },
                                                 .result = got,
                                                 .expected = want,
                                                 .store_result = store,
                                                 .load_result = load});
    // In place: time on data that reduces to itself, then check once.
    const perf::LocalResult ip = perf::measure(
        comm, opts, row,
        {.name = "in-place",
         .call = [&] { call(result.data(), result.data()); },
         .prepare_timing =
             [&] {
               pattern.fill_repeatable(comm.rank(), got);
               result.write(got);
             },
         .result = got,
         .expected = want,
         .restore_inputs = [&] { result.write(std::span<const std::byte>(host_input.data(), bytes)); },
         .store_result = store,
         .load_result = load});
    perf::finish_row(comm, totals, bytes, count, dtype, perf::op_label(op), -1, busbw_factor, oop, ip);
  }
}

}  // namespace

int main(int argc, char** argv) {
  perf::ToolSpec spec{kToolName, "AllReduce bandwidth and correctness from GPU memory (-G), nccl-tests style", true,
                      false};
  spec.device_memory = true;
  return perf::tool_main(argc, argv, spec,
                         [](Communicator& comm, const perf::ResolvedOptions& opts, DataType dtype, ReduceOp op,
                            perf::Totals& totals) { run_sweep(comm, opts, dtype, op, totals); });
}
