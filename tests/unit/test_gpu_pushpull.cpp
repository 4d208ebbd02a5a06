// Push-pull on real device buffers (docs/pushpull.md#device-buffers): ranks as
// threads sharing GPU 0, each with its own stream, over the in-process
// transport. Every dtype for sum and (floats) avg with weights, keys across
// partition, piece and staging-segment boundaries, against a reference and
// against the same aggregate pulled into host memory; ordering after the
// caller's stream; mixed placements, ipush/ipull and partial push. Skips,
// naming the reason, without a usable GPU. The same logic runs on any machine
// against a fake device in test_gpu_paths.cpp (DevicePushPull.*).
#include "comm_fixture.hpp"
#include "gpu_test_util.hpp"
#include "reference.hpp"

#include <antdt/pushpull.hpp>

#include "cuda/cuda_runtime.hpp"

#include <gtest/gtest.h>

#if ANTDT_HAVE_CUDA
#include "cuda/device_memory.hpp"
#include "cuda/device_work.hpp"
#include "cuda/sleep_kernel.hpp"

#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace antdt::test {
namespace {

using namespace std::chrono_literals;

class GpuPushPull : public GpuTest {};

#if ANTDT_HAVE_CUDA

// Small integers and integral weights: every sum is exact in every dtype.
double value_of(DataType t, int rank, std::uint64_t key, std::size_t i) {
  const double v = static_cast<double>((i * 3 + static_cast<std::size_t>(rank) * 7 + key * 5) % 6);
  return is_signed_or_float(t) ? v - 3.0 : v;
}
double weight_of(int rank) { return static_cast<double>(rank % 4 + 1); }
double reference(DataType t, ReduceOp op, int n, std::uint64_t key, std::size_t i) {
  double sum = 0, total = 0;
  for (int r = 0; r < n; ++r) {
    sum += weight_of(r) * value_of(t, r, key, i);
    total += weight_of(r);
  }
  return op == ReduceOp::sum ? sum : sum / total;
}

std::vector<std::byte> inputs(DataType t, int rank, const PushPullKey& k) {
  std::vector<std::byte> host(k.count * dtype_size(t));
  for (std::size_t i = 0; i < k.count; ++i) store(t, host.data(), i, value_of(t, rank, k.key, i));
  return host;
}

void expect_reference(const std::string& what, DataType t, ReduceOp op, int n, const PushPullKey& k,
                      const std::vector<std::byte>& got) {
  for (std::size_t i = 0; i < k.count; ++i) {
    const double g = load(t, got.data(), i), w = reference(t, op, n, k.key, i);
    if (!close_enough(t, op, g, w))
      throw std::runtime_error(cat(what, ": element ", i, " is ", g, ", expected ", w));
  }
}

// Every dtype, sum and (floats) avg, device push and device pull, checked
// against the reference and against the same aggregate pulled to host memory.
// The largest f32 key spans three staging segments.
TEST_F(GpuPushPull, EveryDtypeSumAvgOnDeviceBuffersOneToFourRanks) {
  for (int n = 1; n <= 4; ++n) {
    auto outcomes = run_ranks(n, TransportKind::inproc, [&](Communicator& comm) {
      cuda::ScopedDevice on(0);
      cuda::Stream stream;
      for (DataType t : kAllTypes) {
        const std::size_t es = dtype_size(t);
        std::vector<PushPullKey> table = {{1, 1, t}, {2, 4096 / es + 3, t}, {3, 3 * 4096 / es + 17, t}};
        if (t == DataType::f32) table.push_back({4, (cuda::kStagingSlotBytes / 4) * 2 + 333, t});
        PushPull pp(comm, table, PushPullOptions{{}, 4096});
        for (const auto& k : table) {
          const std::size_t bytes = k.count * es;
          cuda::DeviceBuffer data(bytes), out(bytes);
          to_device(data.data(), inputs(t, comm.rank(), k));
          pp.push(k.key, data.data(), weight_of(comm.rank()), stream.get());
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
            if (op == ReduceOp::avg && !is_float(t)) continue;
            pp.pull(k.key, out.data(), op, stream.get());
            wait_stream(stream);
            const std::vector<std::byte> got = to_host(out.data(), bytes);
            std::vector<std::byte> host(bytes);
            pp.pull(k.key, host.data(), op);
            const std::string what = cat(n, " ranks, ", dtype_name(t), " ", op_name(op), " key ", k.key);
            if (got != host) throw std::runtime_error(what + ": the device pull differs from the host pull");
            expect_reference(what, t, op, n, k, got);
          }
        }
      }
    });
    expect_all_ok(outcomes);
  }
}

// The pushed tensor is written by the caller's stream after a long kernel:
// the push must wait for it on the device, not read stale data.
TEST_F(GpuPushPull, PushIsOrderedAfterTheCallersStream) {
  const std::size_t count = 5000;
  auto outcomes = run_ranks(2, TransportKind::inproc, [&](Communicator& comm) {
    cuda::ScopedDevice on(0);
    cuda::Stream stream;
    const PushPullKey key{7, count, DataType::i32};
    PushPull pp(comm, std::span(&key, 1), PushPullOptions{{}, 4096});
    cuda::DeviceBuffer buf(count * 4);
    check_cuda_ok(cudaMemset(buf.data(), 0, count * 4), "cudaMemset");
    cuda::device_sleep(100ms, stream.get());
    check_cuda_ok(cudaMemsetAsync(buf.data(), 0x01, count * 4, stream.get()), "cudaMemsetAsync");
    pp.push(7, buf.data(), 1.0, stream.get());
    pp.pull(7, buf.data(), ReduceOp::sum, stream.get());
    wait_stream(stream);
    const std::vector<std::byte> got = to_host(buf.data(), count * 4);
    for (std::size_t i = 0; i < count; ++i)
      if (load(DataType::i32, got.data(), i) != 2.0 * 0x01010101)
        throw std::runtime_error(cat("element ", i, " is ", load(DataType::i32, got.data(), i)));
  });
  expect_all_ok(outcomes);
}

// Device push with host pull and the reverse, ranks on different placements,
// ipush/ipull, and a partial push on device buffers.
TEST_F(GpuPushPull, MixedPlacementsNonBlockingAndPartialPush) {
  const int n = 3;
  const DataType t = DataType::f32;
  const PushPullKey k{5, 3 * 1024 + 77, t};
  const std::size_t bytes = k.count * 4;
  Config cfg = test_config();
  cfg.partial_warmup = 2;
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        cuda::ScopedDevice on(0);
        cuda::Stream stream;
        const int me = comm.rank();
        PushPull pp(comm, std::span(&k, 1), PushPullOptions{{}, 4096});
        const std::vector<std::byte> host_in = inputs(t, me, k);
        cuda::DeviceBuffer data(bytes), out(bytes);
        to_device(data.data(), host_in);
        // Device push, host pull; then host push, device pull; then ranks differ.
        std::vector<std::byte> host_out(bytes);
        pp.push(k.key, data.data(), weight_of(me), stream.get());
        pp.pull(k.key, host_out.data(), ReduceOp::avg, stream.get());
        expect_reference("device push, host pull", t, ReduceOp::avg, n, k, host_out);
        pp.push(k.key, host_in.data(), weight_of(me), stream.get());
        pp.pull(k.key, out.data(), ReduceOp::sum, stream.get());
        wait_stream(stream);
        expect_reference("host push, device pull", t, ReduceOp::sum, n, k, to_host(out.data(), bytes));
        const bool device = me % 2 == 0;
        pp.push(k.key, device ? static_cast<const void*>(data.data()) : host_in.data(), weight_of(me), stream.get());
        pp.pull(k.key, device ? static_cast<void*>(host_out.data()) : out.data(), ReduceOp::sum, stream.get());
        wait_stream(stream);
        expect_reference("ranks on different placements", t, ReduceOp::sum, n, k,
                         device ? host_out : to_host(out.data(), bytes));
        // Non-blocking.
        Request pushed = pp.ipush(k.key, data.data(), weight_of(me), stream.get());
        Request pulled = pp.ipull(k.key, out.data(), ReduceOp::avg, stream.get());
        pushed.wait();
        pulled.wait();
        wait_stream(stream);
        expect_reference("ipush/ipull", t, ReduceOp::avg, n, k, to_host(out.data(), bytes));
        // Partial push (wait policy: every rank included).
        const PartialResult r = pp.partial_push(k.key, data.data(), out.data(), ReduceOp::avg,
                                                PartialOptions{LatePolicy::wait, weight_of(me), 1, 0}, stream.get());
        wait_stream(stream);
        if (r.fate != Fate::included || r.participants != n)
          throw std::runtime_error(cat("partial push: fate ", static_cast<int>(r.fate)));
        expect_reference("partial push", t, ReduceOp::avg, n, k, to_host(out.data(), bytes));
        comm.partial_finish();
      },
      cfg);
  expect_all_ok(outcomes);
}

#else

TEST_F(GpuPushPull, NeedACudaBuild) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace antdt::test
