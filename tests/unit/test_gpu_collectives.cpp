// Collectives on real device buffers (docs/gpu.md): ranks as threads sharing
// GPU 0, each with its own stream, over the in-process transport. AllReduce
// through the staged and the IPC path for every dtype x op against the
// reference in reference.hpp, ordering after the caller's stream, and the
// other collectives staged. Skips, naming the reason, without a usable GPU.
// The same logic runs on any machine against a fake device in test_gpu_paths.cpp.
#include "comm_fixture.hpp"
#include "gpu_test_util.hpp"
#include "reference.hpp"

#include "collectives/device/device_collectives.hpp"
#include "cuda/cuda_runtime.hpp"

#include <gtest/gtest.h>

#if ANTDT_HAVE_CUDA
#include "cuda/device_memory.hpp"
#include "cuda/sleep_kernel.hpp"

#include <cuda_runtime_api.h>
#endif

#include <cstring>
#include <string>
#include <vector>

namespace antdt::test {
namespace {

using namespace std::chrono_literals;
using coll::device::LastPath;

class GpuCollectives : public GpuTest {};

#if ANTDT_HAVE_CUDA

Config config_with(GpuPath path) {
  Config cfg = test_config();
  cfg.gpu_path = path;
  return cfg;
}

// The in-process fabric's copy of device payloads: with it the direct path
// (device memory handed to the transport) runs between ranks as threads.
void cuda_payload_copy(void* dst, const void* src, std::size_t bytes) {
  check_cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy (device payload)");
}

// Every dtype x op at small counts (and one count over several staging
// segments for sum), in place and out of place, results read after the
// caller's stream is synchronised.
void allreduce_every_dtype_op(int n, GpuPath setting, LastPath want) {
  const std::vector<std::size_t> counts = {1, 7, 1003, 65537};
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        cuda::ScopedDevice on(0);
        cuda::Stream stream;
        for (DataType t : kAllTypes) {
          const std::size_t es = dtype_size(t);
          for (ReduceOp op : kAllOps) {
            std::vector<std::size_t> these = counts;
            if (op == ReduceOp::sum && t == DataType::f32) these.push_back((cuda::kStagingSlotBytes / 4) * 2 + 333);
            for (std::size_t count : these) {
              for (bool in_place : {false, true}) {
                cuda::DeviceBuffer send(count * es), recv_own(in_place ? 0 : count * es);
                void* recv = in_place ? send.data() : recv_own.data();
                std::vector<std::byte> host(count * es);
                for (std::size_t i = 0; i < count; ++i) store(t, host.data(), i, input(t, op, comm.rank(), i));
                to_device(send.data(), host);
                comm.allreduce(send.data(), recv, count, t, op, stream.get());
                wait_stream(stream);
                if (coll::device::last_allreduce_path() != want)
                  throw std::runtime_error(cat("allreduce took the wrong path for ", dtype_name(t)));
                const std::vector<std::byte> got = to_host(recv, count * es);
                for (std::size_t i = 0; i < count; ++i) {
                  const double g = load(t, got.data(), i), w = expected(t, op, n, i);
                  if (!close_enough(t, op, g, w))
                    throw std::runtime_error(cat("GPU allreduce ", dtype_name(t), " ", op_name(op), " count ", count,
                                                 in_place ? " in place" : " out of place", ": element ", i, " is ", g,
                                                 ", expected ", w));
                }
              }
            }
          }
        }
      },
      config_with(setting), nullptr, setting == GpuPath::direct ? cuda_payload_copy : nullptr);
  expect_all_ok(outcomes);
}

TEST_F(GpuCollectives, StagedAllreduceEveryDtypeOpTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n) allreduce_every_dtype_op(n, GpuPath::staged, LastPath::staged);
}

TEST_F(GpuCollectives, IpcAllreduceEveryDtypeOpTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n) allreduce_every_dtype_op(n, GpuPath::ipc, LastPath::ipc);
}

// The direct path on the device: the ring's payloads handed to the transport
// in device memory (here the in-process fabric's cudaMemcpy), the reductions
// by the kernels.
TEST_F(GpuCollectives, DirectAllreduceEveryDtypeOpTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n) allreduce_every_dtype_op(n, GpuPath::direct, LastPath::direct);
}

// The input is written by the caller's stream after a long kernel: the
// collective must wait for it on the device, not read stale data.
TEST_F(GpuCollectives, AllreduceIsOrderedAfterTheCallersStreamOnEveryPath) {
  for (GpuPath setting : {GpuPath::staged, GpuPath::ipc, GpuPath::direct}) {
    const std::size_t count = 4096;
    auto outcomes = run_ranks(
        2, TransportKind::inproc,
        [&](Communicator& comm) {
          cuda::ScopedDevice on(0);
          cuda::Stream stream;
          cuda::DeviceBuffer buf(count * 4);
          check_cuda_ok(cudaMemset(buf.data(), 0, count * 4), "cudaMemset");
          cuda::device_sleep(100ms, stream.get());
          // 0x01010101 as i32, written only after the sleep.
          check_cuda_ok(cudaMemsetAsync(buf.data(), 0x01, count * 4, stream.get()), "cudaMemsetAsync");
          comm.allreduce(buf.data(), buf.data(), count, DataType::i32, ReduceOp::sum, stream.get());
          wait_stream(stream);
          const std::vector<std::byte> got = to_host(buf.data(), count * 4);
          for (std::size_t i = 0; i < count; ++i)
            if (load(DataType::i32, got.data(), i) != 2.0 * 0x01010101)
              throw std::runtime_error(cat("element ", i, " is ", load(DataType::i32, got.data(), i)));
        },
        config_with(setting), nullptr, setting == GpuPath::direct ? cuda_payload_copy : nullptr);
    expect_all_ok(outcomes);
  }
}

// Broadcast through CUDA IPC (non-roots copy from the root's buffer), every
// root, in place and out of place, a few dtypes, 2-4 ranks on this GPU.
TEST_F(GpuCollectives, IpcBroadcastEveryRootTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n) {
    auto outcomes = run_ranks(
        n, TransportKind::inproc,
        [&](Communicator& comm) {
          cuda::ScopedDevice on(0);
          cuda::Stream stream;
          for (DataType t : {DataType::f32, DataType::bf16, DataType::i8, DataType::u64}) {
            const std::size_t es = dtype_size(t);
            for (int root = 0; root < n; ++root) {
              for (std::size_t count : {std::size_t{1}, std::size_t{1003}, (cuda::kStagingSlotBytes / es) + 77}) {
                for (bool in_place : {false, true}) {
                  cuda::DeviceBuffer src(count * es), dst_own(in_place ? 0 : count * es);
                  void* dst = in_place ? src.data() : dst_own.data();
                  const auto value = [&](std::size_t i) { return static_cast<double>((root * 7 + i) % 50); };
                  std::vector<std::byte> host(count * es);
                  for (std::size_t i = 0; i < count; ++i) store(t, host.data(), i, comm.rank() == root ? value(i) : 99);
                  to_device(src.data(), host);
                  comm.broadcast(src.data(), dst, count, t, root, stream.get());
                  wait_stream(stream);
                  if (coll::device::last_broadcast_path() != LastPath::ipc)
                    throw std::runtime_error("broadcast did not take the IPC path");
                  const std::vector<std::byte> got = to_host(dst, count * es);
                  for (std::size_t i = 0; i < count; ++i)
                    if (load(t, got.data(), i) != value(i))
                      throw std::runtime_error(cat("IPC broadcast ", dtype_name(t), " root ", root, " count ", count,
                                                   ": element ", i, " is ", load(t, got.data(), i)));
                }
              }
            }
          }
        },
        config_with(GpuPath::ipc));
    expect_all_ok(outcomes);
  }
}

// Broadcast, Reduce, ReduceScatter and AllGather of 3 ranks on GPU 0 through
// `path` against the reference.
void check_broadcast_reduce_reduce_scatter_allgather(GpuPath path) {
  const LastPath want_path = path == GpuPath::ipc      ? LastPath::ipc
                        : path == GpuPath::direct ? LastPath::direct
                                                  : LastPath::staged;
  const int n = 3;
  const DataType t = DataType::f32;
  const std::size_t count = 3001;
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        cuda::ScopedDevice on(0);
        cuda::Stream stream;
        const int me = comm.rank();
        const auto expect_values = [&](const char* what, const std::vector<std::byte>& got, auto&& want) {
          for (std::size_t i = 0; i < got.size() / 4; ++i)
            if (load(t, got.data(), i) != want(i))
              throw std::runtime_error(
                  cat(what, ": element ", i, " is ", load(t, got.data(), i), ", expected ", want(i)));
        };
        std::vector<std::byte> host(count * 4 * static_cast<std::size_t>(n));
        // Broadcast from rank 1.
        cuda::DeviceBuffer b(count * 4);
        for (std::size_t i = 0; i < count; ++i)
          store(t, host.data(), i, me == 1 ? static_cast<double>(i % 1000) : -1.0);
        to_device(b.data(),
                  std::vector<std::byte>(host.begin(), host.begin() + static_cast<std::ptrdiff_t>(count * 4)));
        comm.broadcast(b.data(), b.data(), count, t, 1, stream.get());
        wait_stream(stream);
        expect_values("broadcast", to_host(b.data(), count * 4),
                      [](std::size_t i) { return static_cast<double>(i % 1000); });
        if (coll::device::last_broadcast_path() != want_path) throw std::runtime_error("broadcast: wrong path");
        // Reduce (max) to rank 2, out of place.
        cuda::DeviceBuffer rs(count * 4), rr(count * 4);
        for (std::size_t i = 0; i < count; ++i) store(t, host.data(), i, input(t, ReduceOp::max, me, i));
        to_device(rs.data(),
                  std::vector<std::byte>(host.begin(), host.begin() + static_cast<std::ptrdiff_t>(count * 4)));
        comm.reduce(rs.data(), rr.data(), count, t, ReduceOp::max, 2, stream.get());
        wait_stream(stream);
        if (me == 2)
          expect_values("reduce", to_host(rr.data(), count * 4),
                        [&](std::size_t i) { return expected(t, ReduceOp::max, n, i); });
        if (coll::device::last_reduce_path() != want_path) throw std::runtime_error("reduce: wrong path");
        // ReduceScatter (sum).
        cuda::DeviceBuffer ss(count * 4 * static_cast<std::size_t>(n)), sr(count * 4);
        for (std::size_t i = 0; i < count * static_cast<std::size_t>(n); ++i)
          store(t, host.data(), i, input(t, ReduceOp::sum, me, i));
        to_device(ss.data(), host);
        comm.reduce_scatter(ss.data(), sr.data(), count, t, ReduceOp::sum, stream.get());
        wait_stream(stream);
        expect_values("reduce_scatter", to_host(sr.data(), count * 4), [&](std::size_t i) {
          return expected(t, ReduceOp::sum, n, static_cast<std::size_t>(me) * count + i);
        });
        if (coll::device::last_reduce_scatter_path() != want_path)
          throw std::runtime_error("reduce_scatter: wrong path");
        // AllGather.
        cuda::DeviceBuffer gs(count * 4), gr(count * 4 * static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < count; ++i)
          store(t, host.data(), i, static_cast<double>(me * 10000 + static_cast<int>(i)));
        to_device(gs.data(),
                  std::vector<std::byte>(host.begin(), host.begin() + static_cast<std::ptrdiff_t>(count * 4)));
        comm.allgather(gs.data(), gr.data(), count, t, stream.get());
        wait_stream(stream);
        expect_values("allgather", to_host(gr.data(), count * 4 * static_cast<std::size_t>(n)), [&](std::size_t i) {
          return static_cast<double>(static_cast<int>(i / count) * 10000 + static_cast<int>(i % count));
        });
        if (coll::device::last_allgather_path() != want_path) throw std::runtime_error("allgather: wrong path");
      },
      config_with(path), nullptr, path == GpuPath::direct ? cuda_payload_copy : nullptr);
  expect_all_ok(outcomes);
}

TEST_F(GpuCollectives, BroadcastReduceReduceScatterAllgatherStaged) {
  check_broadcast_reduce_reduce_scatter_allgather(GpuPath::staged);
}

TEST_F(GpuCollectives, BroadcastReduceReduceScatterAllgatherThroughIpc) {
  check_broadcast_reduce_reduce_scatter_allgather(GpuPath::ipc);
}

TEST_F(GpuCollectives, BroadcastReduceReduceScatterAllgatherDirect) {
  check_broadcast_reduce_reduce_scatter_allgather(GpuPath::direct);
}

#else

TEST_F(GpuCollectives, NeedACudaBuild) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace antdt::test
