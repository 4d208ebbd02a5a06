// The logic of collectives and push-pull on device buffers
// (collectives/device/*, collectives/pushpull/), run on any
// machine: a fake DeviceBackend whose "device" memory is host memory
// registered with it, and whose copies and reductions run only when the code
// waits for them (or polls a staging slot), in order, as on a CUDA stream. A
// missing wait, a slot reused too early or a peer's buffer read before its
// owner finished shows up as wrong data. Results are checked against
// tests/unit/reference.hpp.
#include "comm_fixture.hpp"
#include "reference.hpp"

#include <antdt/pushpull.h>
#include <antdt/pushpull.hpp>

#include "collectives/device/device_collectives.hpp"
#include "collectives/device/ipc_path.hpp"
#include "collectives/device/path_choice.hpp"
#include "collectives/device/peer_record.hpp"
#include "collectives/device/segment_pipeline.hpp"
#include "collectives/device/staged_copy.hpp"
#include "collectives/api/c_api.hpp"
#include "core/dtype.hpp"
#include "core/node_identity.hpp"
#include "cuda/device_work.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

namespace antdt::test {
namespace {

using namespace std::chrono_literals;
using coll::device::LastPath;
using coll::device::PeerRecord;
using coll::device::Slice;

// ---------------------------------------------------------------------------
// The fake device
// ---------------------------------------------------------------------------
class FakeDevice;

// One call's work: a FIFO of deferred operations, run by wait() or by polling
// a staging slot (everything up to that slot's last operation).
class FakeWork final : public cuda::DeviceWork, public cuda::CopyEngine {
 public:
  FakeWork(FakeDevice& device, const void* stream_key, std::deque<std::function<void()>> earlier);
  ~FakeWork() override;

  // DeviceWork
  cuda::CopyEngine& staging(void* range, std::size_t bytes) override;
  std::byte* scratch(std::size_t bytes) override;
  void bind_staging(void* range, std::size_t bytes) {
    range_ = static_cast<std::byte*>(range);
    range_bytes_ = bytes;
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    enqueue([dst, src, bytes] { std::memmove(dst, src, bytes); });
  }
  void reduce_into(DataType dtype, ReduceOp op, void* out, const void* a, const void* b, std::size_t count) override {
    const std::size_t n = count * dtype_size(dtype);
    const ReduceOp as = op == ReduceOp::avg ? ReduceOp::sum : op;
    enqueue([=] {
      antdt::reduce_into(dtype, as, std::span(static_cast<std::byte*>(out), n),
                         std::span(static_cast<const std::byte*>(a), n),
                         std::span(static_cast<const std::byte*>(b), n));
    });
  }
  void finish_avg(DataType dtype, void* data, std::size_t count, std::size_t nranks) override {
    const std::size_t n = count * dtype_size(dtype);
    enqueue([=] { antdt::finish_avg(dtype, std::span(static_cast<std::byte*>(data), n), nranks); });
  }
  bool wait(std::chrono::nanoseconds) override {
    run_through(enqueued_);
    return true;
  }
  void complete() override;
  std::optional<cuda::IpcHandle> ipc_export(const void* p, std::size_t bytes, std::string* why) override;
  std::byte* ipc_map(const cuda::IpcHandle& handle) override;

  // CopyEngine: two slots of the device's slot size.
  std::size_t slot_count() const override { return slots_->size(); }
  std::size_t slot_bytes() const override { return (*slots_)[0].size(); }
  std::span<std::byte> slot(std::size_t s) override { return slots_->at(s); }
  // The operations hold the slots: as pinned slots in the real engine pool,
  // they outlive the call whose copies may still be pending.
  void start_download(std::size_t s, std::size_t offset, std::size_t bytes) override {
    check_range(offset, bytes);
    std::byte* from = range_ + offset;
    slot_end_[s] = enqueue([=, slots = slots_] { std::memcpy(slots->at(s).data(), from, bytes); }) + 1;
  }
  void start_upload(std::size_t s, std::size_t offset, std::size_t bytes) override {
    check_range(offset, bytes);
    std::byte* to = range_ + offset;
    slot_end_[s] = enqueue([=, slots = slots_] { std::memcpy(to, slots->at(s).data(), bytes); }) + 1;
  }
  bool slot_done(std::size_t s) override {
    if (executed_ >= slot_end_.at(s)) return true;
    // A copy takes one more poll than it was asked, as a DMA engine would.
    if (!polled_once_[s]) {
      polled_once_[s] = true;
      return false;
    }
    polled_once_[s] = false;
    run_through(slot_end_[s]);
    return true;
  }

 private:
  std::size_t enqueue(std::function<void()> op) {
    queue_.push_back(std::move(op));
    return enqueued_++;
  }
  // Runs queued operations [executed_, end).
  void run_through(std::size_t end) {
    while (executed_ < end) {
      queue_.front()();
      queue_.pop_front();
      ++executed_;
    }
  }
  void check_range(std::size_t offset, std::size_t bytes) const {
    if (offset > range_bytes_ || bytes > range_bytes_ - offset) throw InternalError("fake staging: out of range");
  }

  FakeDevice& device_;
  const void* stream_key_;  // the caller's stream (FakeDevice::key_of)
  std::deque<std::function<void()>> queue_;
  std::size_t enqueued_ = 0, executed_ = 0;
  std::shared_ptr<std::vector<std::vector<std::byte>>> slots_;
  std::vector<std::size_t> slot_end_;  // the queue position after the slot's last operation
  std::vector<bool> polled_once_;
  std::byte* range_ = nullptr;
  std::size_t range_bytes_ = 0;
};

class FakeDevice final : public cuda::DeviceBackend {
 public:
  explicit FakeDevice(std::size_t slot_bytes = 40) : slot_bytes_(slot_bytes) {}

  // "Device" memory: host bytes registered as device.
  std::byte* allocate(std::size_t bytes) {
    std::lock_guard lock(mu_);
    auto& block = blocks_.emplace_back(bytes + 1);
    return block.data();
  }
  void deny_export(const void* p) {
    std::lock_guard lock(mu_);
    no_export_.insert(p);
  }
  // The caller's stream synchronised: runs the operations still pending on
  // it (this thread's legacy default stream, or a named stream).
  void drain_this_thread() { drain_stream(nullptr); }
  void drain_stream(void* stream) {
    std::deque<std::function<void()>> pending = take_pending(key_of(stream));
    for (auto& op : pending) op();
  }
  // Pending work is kept per caller's stream: a named stream's own key, or,
  // for the legacy default stream, the calling thread (each rank is a thread).
  static const void* key_of(const void* stream) {
    static thread_local const char this_thread = 0;
    return stream != nullptr ? stream : &this_thread;
  }

  bool is_device(const void* p) override {
    std::lock_guard lock(mu_);
    const auto* b = static_cast<const std::byte*>(p);
    for (const auto& block : blocks_)
      if (b >= block.data() && b < block.data() + block.size()) return true;
    return false;
  }
  std::unique_ptr<cuda::DeviceWork> begin(const void* buffer, void* stream) override {
    if (!is_device(buffer)) throw InternalError("fake begin: not device memory");
    ++begins;
    return std::make_unique<FakeWork>(*this, key_of(stream), take_pending(key_of(stream)));
  }
  bool synchronize(void*, std::chrono::nanoseconds) override {
    ++synchronizes;
    return true;
  }

  std::size_t slot_bytes() const { return slot_bytes_; }
  bool may_export(const void* p) {
    std::lock_guard lock(mu_);
    return no_export_.count(p) == 0;
  }
  // A finished work's operations not yet run: the next work on the same
  // caller's stream runs them first (the caller's stream waits for them).
  void leave_pending(const void* stream_key, std::deque<std::function<void()>> ops) {
    std::lock_guard lock(mu_);
    auto& mine = pending_[stream_key];
    for (auto& op : ops) mine.push_back(std::move(op));
  }

  std::atomic<int> begins{0}, completes{0}, synchronizes{0}, exports{0}, stagings{0};

  // The transports' copy of device payloads (the direct path): counts them,
  // and counts those whose source or destination is not device memory.
  transport::InprocFabric::DeviceCopy payload_copy() {
    return [this](void* dst, const void* src, std::size_t bytes) {
      if (!is_device(dst) || !is_device(src)) ++host_payloads;
      std::memcpy(dst, src, bytes);
      ++device_payloads;
    };
  }
  std::atomic<int> device_payloads{0}, host_payloads{0};

 private:
  std::deque<std::function<void()>> take_pending(const void* stream_key) {
    std::lock_guard lock(mu_);
    auto it = pending_.find(stream_key);
    if (it == pending_.end()) return {};
    std::deque<std::function<void()>> ops = std::move(it->second);
    pending_.erase(it);
    return ops;
  }

  std::size_t slot_bytes_;
  std::mutex mu_;
  std::deque<std::vector<std::byte>> blocks_;
  std::set<const void*> no_export_;
  std::map<const void*, std::deque<std::function<void()>>> pending_;
};

FakeWork::FakeWork(FakeDevice& device, const void* stream_key, std::deque<std::function<void()>> earlier)
    : device_(device),
      stream_key_(stream_key),
      queue_(std::move(earlier)),
      enqueued_(queue_.size()),
      slots_(std::make_shared<std::vector<std::vector<std::byte>>>(2, std::vector<std::byte>(device.slot_bytes()))),
      slot_end_(2, 0),
      polled_once_(2, false) {}

FakeWork::~FakeWork() { device_.leave_pending(stream_key_, std::move(queue_)); }

void FakeWork::complete() { ++device_.completes; }

cuda::CopyEngine& FakeWork::staging(void* range, std::size_t bytes) {
  ++device_.stagings;
  bind_staging(range, bytes);
  return *this;
}

std::byte* FakeWork::scratch(std::size_t bytes) { return device_.allocate(bytes); }

std::optional<cuda::IpcHandle> FakeWork::ipc_export(const void* p, std::size_t bytes, std::string* why) {
  if (!device_.may_export(p)) {
    *why = "fake: export denied";
    return std::nullopt;
  }
  ++device_.exports;
  cuda::IpcHandle h;
  h.bytes = bytes;
  h.exporter_address = reinterpret_cast<std::uintptr_t>(p);
  h.exporter = cuda::this_process();
  h.device = 0;
  return h;
}

std::byte* FakeWork::ipc_map(const cuda::IpcHandle& handle) {
  auto* p = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(handle.exporter_address));
  if (!handle.from_this_process() || !device_.is_device(p)) throw InternalError("fake ipc_map: bad handle");
  return p;
}

// ---------------------------------------------------------------------------
// Plain logic
// ---------------------------------------------------------------------------
TEST(DevicePlan, SegmentsHoldWholeElements) {
  EXPECT_EQ(coll::device::segment_bytes(40, 8), 40u);
  EXPECT_EQ(coll::device::segment_bytes(40, 16), 32u);
  EXPECT_EQ(coll::device::segment_bytes(8u << 20, 2), 8u << 20);
  EXPECT_THROW(coll::device::segment_bytes(4, 8), InvalidArgument);
}

TEST(DevicePlan, IpcSlicesTileTheBufferInRankOrder) {
  for (std::size_t count : {0u, 1u, 5u, 7u, 8u, 1001u}) {
    for (int n = 1; n <= 5; ++n) {
      std::size_t next = 0, largest = 0, smallest = count;
      for (int r = 0; r < n; ++r) {
        const Slice s = coll::device::ipc_slice(count, n, r);
        EXPECT_EQ(s.first, next) << count << " elements, " << n << " ranks, rank " << r;
        next = s.first + s.count;
        largest = std::max(largest, s.count);
        smallest = std::min(smallest, s.count);
      }
      EXPECT_EQ(next, count);
      EXPECT_LE(largest - smallest, 1u);
    }
  }
  EXPECT_THROW(coll::device::ipc_slice(4, 2, 2), InvalidArgument);
}

TEST(DevicePlan, PeerRecordsRoundTripAndRejectGarbage) {
  PeerRecord rec;
  rec.exportable = true;
  rec.node = 0x1122334455667788ULL;
  rec.send.bytes = 123;
  rec.send.offset = 16;
  rec.send.exporter_address = 0xdeadbeef00ULL;
  rec.send.exporter = cuda::this_process();
  rec.send.device = 3;
  rec.send.cuda_handle[5] = std::byte{0x42};
  rec.recv = rec.send;
  rec.recv.exporter_address += 4096;
  const PeerRecord back = PeerRecord::deserialize(rec.serialize());
  EXPECT_TRUE(back.exportable);
  EXPECT_EQ(back.node, rec.node);
  EXPECT_EQ(back.send.bytes, 123u);
  EXPECT_EQ(back.send.offset, 16u);
  EXPECT_EQ(back.send.device, 3);
  EXPECT_EQ(back.send.cuda_handle[5], std::byte{0x42});
  EXPECT_EQ(back.recv.exporter_address, rec.send.exporter_address + 4096);
  EXPECT_TRUE(back.send.from_this_process());

  PeerRecord no;
  no.node = 7;
  no.reason = std::string(200, 'x');  // truncated on the wire
  const PeerRecord no_back = PeerRecord::deserialize(no.serialize());
  EXPECT_FALSE(no_back.exportable);
  EXPECT_EQ(no_back.reason, std::string(PeerRecord::kReasonBytes, 'x'));

  PeerRecord::Wire wire = rec.serialize();
  wire[0] = std::byte{0};
  EXPECT_THROW(PeerRecord::deserialize(wire), InvalidArgument);
  EXPECT_THROW(PeerRecord::deserialize(std::span(wire).first(10)), InvalidArgument);
}

TEST(DevicePlan, PathIsIpcOnlyWhenEveryRankCanAndSharesANode) {
  using coll::device::Path;
  using coll::device::resolve_path;
  std::vector<PeerRecord> recs(3);
  for (auto& r : recs) {
    r.exportable = true;
    r.node = 9;
  }
  EXPECT_EQ(resolve_path(GpuPath::automatic, recs), Path::ipc);
  EXPECT_EQ(resolve_path(GpuPath::ipc, recs), Path::ipc);
  recs[2].node = 10;
  EXPECT_EQ(resolve_path(GpuPath::automatic, recs), Path::staged);
  try {
    resolve_path(GpuPath::ipc, recs);
    ADD_FAILURE() << "forced IPC across nodes must fail";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  recs[2].node = 9;
  recs[1].exportable = false;
  recs[1].reason = "pool memory";
  EXPECT_EQ(resolve_path(GpuPath::automatic, recs), Path::staged);
  try {
    resolve_path(GpuPath::ipc, recs);
    ADD_FAILURE() << "forced IPC with an unexportable buffer must fail";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pool memory"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(coll::device::exchanges_records(GpuPath::staged, 4));
  EXPECT_TRUE(coll::device::exchanges_records(GpuPath::direct, 2));
  EXPECT_FALSE(coll::device::exchanges_records(GpuPath::automatic, 1));
  EXPECT_TRUE(coll::device::exchanges_records(GpuPath::automatic, 2));
  EXPECT_EQ(node_identity(), node_identity());
}

TEST(DevicePlan, DirectPathWhenEveryTransportMovesDeviceMemoryAndIpcCannot) {
  using coll::device::Path;
  using coll::device::resolve_path;
  std::vector<PeerRecord> recs(3);
  for (auto& r : recs) {
    r.exportable = true;
    r.device_buffers = true;
    r.transport_moves_device_memory = true;
    r.node = 9;
  }
  // One node, IPC possible: auto prefers IPC; direct is taken only when asked for.
  EXPECT_EQ(resolve_path(GpuPath::automatic, recs), Path::ipc);
  EXPECT_EQ(resolve_path(GpuPath::direct, recs), Path::direct);
  // Across nodes: direct under auto.
  recs[1].node = 10;
  EXPECT_EQ(resolve_path(GpuPath::automatic, recs), Path::direct);
  // One transport that cannot: auto stages, direct fails naming the rank and why.
  recs[2].transport_moves_device_memory = false;
  EXPECT_EQ(resolve_path(GpuPath::automatic, recs), Path::staged);
  try {
    resolve_path(GpuPath::direct, recs);
    ADD_FAILURE() << "forced direct with a transport that cannot move device memory must fail";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2's transport cannot move device memory"), std::string::npos)
        << e.what();
  }
  // A rank whose buffer is host memory comes first, and is named as such.
  recs[0].device_buffers = false;
  try {
    resolve_path(GpuPath::direct, recs);
    ADD_FAILURE() << "forced direct with a host buffer must fail";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 passed host memory"), std::string::npos) << e.what();
  }

  // The flags travel in the record, each on its own.
  for (int bits = 0; bits < 8; ++bits) {
    PeerRecord rec;
    rec.exportable = (bits & 1) != 0;
    rec.device_buffers = (bits & 2) != 0;
    rec.transport_moves_device_memory = (bits & 4) != 0;
    const PeerRecord back = PeerRecord::deserialize(rec.serialize());
    EXPECT_EQ(back.exportable, rec.exportable) << bits;
    EXPECT_EQ(back.device_buffers, rec.device_buffers) << bits;
    EXPECT_EQ(back.transport_moves_device_memory, rec.transport_moves_device_memory) << bits;
  }
}

// A segment's host work that records what it saw and transforms it, so the
// uploaded bytes prove the download, the order and the upload.
class RecordingSegments final : public coll::device::SegmentWork {
 public:
  void run(std::size_t index, std::size_t offset, std::span<std::byte> host) override {
    indexes.push_back(index);
    offsets.push_back(offset);
    for (auto& b : host) b = static_cast<std::byte>(static_cast<unsigned>(b) + 1);
  }
  std::vector<std::size_t> indexes, offsets;
};

TEST(DevicePlan, SegmentPipelineDownloadsTransformsAndUploadsEverySegmentOnce) {
  FakeDevice dev(40);
  coll::device::ScopedBackend use(dev);
  for (std::size_t total : {0u, 1u, 39u, 40u, 41u, 400u, 1003u}) {
    std::byte* range = dev.allocate(total);
    for (std::size_t i = 0; i < total; ++i) range[i] = static_cast<std::byte>(i * 7);
    {
      auto work = dev.begin(range, nullptr);
      cuda::CopyEngine& engine = work->staging(range, total);
      RecordingSegments segs;
      coll::device::run_segments(engine, total, 40, true, true, segs, coll::device::Clock::now() + 10s, "test");
      ASSERT_EQ(segs.indexes.size(), (total + 39) / 40);
      for (std::size_t k = 0; k < segs.indexes.size(); ++k) {
        EXPECT_EQ(segs.indexes[k], k);
        EXPECT_EQ(segs.offsets[k], 40 * k);
      }
      ASSERT_TRUE(work->wait(1s));
    }
    for (std::size_t i = 0; i < total; ++i)
      ASSERT_EQ(range[i], static_cast<std::byte>(i * 7 + 1)) << "byte " << i << " of " << total;
  }
}

TEST(DevicePlan, SegmentPipelineWithoutDownloadWaitsForTheSlotsPreviousUpload) {
  // Upload only (a broadcast's receiving side): the host writes the slot, so
  // the slot's previous upload must have finished, in this call or the last.
  FakeDevice dev(16);
  coll::device::ScopedBackend use(dev);
  const std::size_t total = 16 * 9 + 5;
  std::byte* range = dev.allocate(total);
  struct Fill final : coll::device::SegmentWork {
    void run(std::size_t index, std::size_t, std::span<std::byte> host) override {
      for (auto& b : host) b = static_cast<std::byte>(index + 1);
    }
  } fill;
  for (int call = 0; call < 2; ++call) {
    auto work = dev.begin(range, nullptr);
    coll::device::run_segments(work->staging(range, total), total, 16, false, true, fill,
                               coll::device::Clock::now() + 10s, "test");
  }
  dev.drain_this_thread();
  for (std::size_t i = 0; i < total; ++i) ASSERT_EQ(range[i], static_cast<std::byte>(i / 16 + 1)) << i;
}

TEST(DevicePlan, WholeBufferStagingRoundTrips) {
  FakeDevice dev(24);
  coll::device::ScopedBackend use(dev);
  const std::size_t total = 24 * 5 + 7;
  std::byte* range = dev.allocate(total);
  for (std::size_t i = 0; i < total; ++i) range[i] = static_cast<std::byte>(i);
  std::vector<std::byte> host(total);
  auto work = dev.begin(range, nullptr);
  coll::device::download_all(work->staging(range, total), host, coll::device::Clock::now() + 10s, "test");
  for (std::size_t i = 0; i < total; ++i) ASSERT_EQ(host[i], static_cast<std::byte>(i));
  for (auto& b : host) b = static_cast<std::byte>(static_cast<unsigned>(b) ^ 0xff);
  coll::device::upload_all(work->staging(range, total), host, coll::device::Clock::now() + 10s, "test");
  ASSERT_TRUE(work->wait(1s));
  for (std::size_t i = 0; i < total; ++i) ASSERT_EQ(range[i], static_cast<std::byte>(i ^ 0xff));
}

// ---------------------------------------------------------------------------
// Whole collectives through the fake device, ranks as threads
// ---------------------------------------------------------------------------
Config config_with(GpuPath path) {
  Config cfg = test_config();
  cfg.gpu_path = path;
  return cfg;
}

// What the path moved: the direct path hands the transport device memory
// (never host memory posing as it) and stages nothing; the others hand it no
// device memory. `counted`: the transport copies payloads through the fake
// (inproc; UCX takes them as host memory without it).
void expect_traffic_of(const FakeDevice& dev, LastPath want, bool counted = true) {
  EXPECT_EQ(dev.host_payloads.load(), 0) << "the transport was handed host memory as device memory";
  if (want == LastPath::direct) {
    if (counted) {
      EXPECT_GT(dev.device_payloads.load(), 0) << "the direct path handed the transport no device memory";
    }
    EXPECT_EQ(dev.stagings.load(), 0) << "the direct path staged through host memory";
  } else {
    EXPECT_EQ(dev.device_payloads.load(), 0);
  }
}

// The frame of the collective path tests: `body` runs on n ranks (threads)
// over a fake device with 40-byte slots, so modest counts span several staging
// segments. The transports move device payloads (through the fake's copy) when
// `moves_device_memory`, by default when ANTDT_GPU_PATH=direct asks for it.
// Afterwards every rank must have succeeded, every call must have made the
// caller's stream wait for it, and the traffic must fit `want`
// (expect_traffic_of).
void run_device_ranks(int n, GpuPath setting, LastPath want,
                      const std::function<void(Communicator&, FakeDevice&)>& body,
                      std::optional<bool> moves_device_memory = std::nullopt,
                      TransportKind kind = TransportKind::inproc) {
  FakeDevice dev(40);
  coll::device::ScopedBackend use(dev);
  const bool moves = moves_device_memory.value_or(setting == GpuPath::direct);
  auto outcomes = run_ranks(
      n, kind, [&](Communicator& comm) { body(comm, dev); }, config_with(setting), nullptr,
      moves ? dev.payload_copy() : nullptr);
  expect_all_ok(outcomes);
  EXPECT_EQ(dev.begins.load(), dev.completes.load()) << "every call makes the caller's stream wait for it";
  expect_traffic_of(dev, want, kind == TransportKind::inproc);
}

// Every dtype x op, several counts, in place and out of place, on fake device
// buffers; checks the path taken. `moves_device_memory`: the transports
// accept device payloads (the direct path), through the fake's payload copy.
void check_allreduce_paths(int n, GpuPath setting, LastPath want, bool moves_device_memory = false,
                           std::vector<std::size_t> counts = {1, 7, 45, 301},
                           TransportKind kind = TransportKind::inproc) {
  run_device_ranks(
      n, setting, want,
      [&](Communicator& comm, FakeDevice& dev) {
        for (DataType t : kAllTypes) {
          const std::size_t es = dtype_size(t);
          for (ReduceOp op : kAllOps) {
            for (std::size_t count : counts) {
              for (bool in_place : {false, true}) {
                std::byte* send = dev.allocate(count * es);
                std::byte* recv = in_place ? send : dev.allocate(count * es);
                for (std::size_t i = 0; i < count; ++i) store(t, send, i, input(t, op, comm.rank(), i));
                if (!in_place) std::memset(recv, 0x5a, count * es + 1);
                comm.allreduce(send, recv, count, t, op);
                dev.drain_this_thread();
                if (coll::device::last_allreduce_path() != want)
                  throw std::runtime_error(cat("allreduce took the wrong path (", static_cast<int>(want), " wanted)"));
                for (std::size_t i = 0; i < count; ++i) {
                  const double got = load(t, recv, i), wanted = expected(t, op, n, i);
                  if (!close_enough(t, op, got, wanted))
                    throw std::runtime_error(cat("device allreduce ", dtype_name(t), " ", op_name(op), " count ", count,
                                                 in_place ? " in place" : " out of place", ": element ", i, " is ", got,
                                                 ", expected ", wanted));
                }
                if (!in_place && recv[count * es] != std::byte{0x5a})
                  throw std::runtime_error(cat("device allreduce wrote past the end of recv, count ", count));
              }
            }
          }
        }
      },
      moves_device_memory, kind);
}

TEST(DevicePaths, StagedAllreduceEveryDtypeOpOnTwoAndThreeRanks) {
  check_allreduce_paths(2, GpuPath::staged, LastPath::staged);
  check_allreduce_paths(3, GpuPath::staged, LastPath::staged);
}

TEST(DevicePaths, IpcAllreduceEveryDtypeOpOnTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n) check_allreduce_paths(n, GpuPath::ipc, LastPath::ipc);
}

TEST(DevicePaths, AutoTakesIpcOnOneNode) {
  check_allreduce_paths(2, GpuPath::automatic, LastPath::ipc);
  check_allreduce_paths(2, GpuPath::automatic, LastPath::ipc, /*moves_device_memory=*/true);
}

// The direct path: the ring over device buffers, payloads handed to the
// transport in device memory, reductions on the (fake) device. The fake runs a
// reduction only when the code waits for it, so a reduced chunk sent before
// its kernel finished arrives stale and the result is wrong. 3001 elements
// make several chunks per segment (4 KiB chunks), so the pipeline runs.
TEST(DevicePaths, DirectAllreduceEveryDtypeOpOnTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n)
    check_allreduce_paths(n, GpuPath::direct, LastPath::direct, true, {1, 7, 45, 301, 3001});
}

// The same over UCX: its bare device-payload messages (here as host memory).
TEST(DevicePaths, DirectAllreduceOverUcx) {
  check_allreduce_paths(3, GpuPath::direct, LastPath::direct, true, {1, 45, 3001}, TransportKind::ucx);
}

// With auto, a rank that cannot export for IPC makes every rank take the
// direct path when every transport moves device memory.
TEST(DevicePaths, AutoTakesDirectWhenIpcIsImpossible) {
  FakeDevice dev(40);
  coll::device::ScopedBackend use(dev);
  constexpr int n = 3;
  constexpr std::size_t count = 2000;
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        std::byte* buf = dev.allocate(count * 4);
        if (comm.rank() == 1) dev.deny_export(buf);
        for (std::size_t i = 0; i < count; ++i)
          store(DataType::f32, buf, i, input(DataType::f32, ReduceOp::sum, comm.rank(), i));
        comm.allreduce(buf, buf, count, DataType::f32, ReduceOp::sum);
        dev.drain_this_thread();
        if (coll::device::last_allreduce_path() != LastPath::direct)
          throw std::runtime_error("auto did not take the direct path");
        for (std::size_t i = 0; i < count; ++i)
          if (load(DataType::f32, buf, i) != expected(DataType::f32, ReduceOp::sum, n, i))
            throw std::runtime_error(cat("element ", i, " is wrong"));
      },
      config_with(GpuPath::automatic), nullptr, dev.payload_copy());
  expect_all_ok(outcomes);
  EXPECT_EQ(dev.stagings.load(), 0);
}

// ANTDT_GPU_PATH=direct where the transports cannot move device memory:
// every rank fails alike, naming the first such rank, and the communicator
// stays usable (the next call, on host memory, works).
TEST(DevicePaths, ForcedDirectFailsTogetherWhenATransportCannot) {
  FakeDevice dev(40);
  coll::device::ScopedBackend use(dev);
  constexpr int n = 3;
  constexpr std::size_t count = 10;
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        std::byte* buf = dev.allocate(count * 4);
        for (std::size_t i = 0; i < count; ++i) store(DataType::i32, buf, i, 1.0);
        try {
          comm.allreduce(buf, buf, count, DataType::i32, ReduceOp::sum);
          throw std::runtime_error("forced direct without device payloads did not fail");
        } catch (const UnsupportedError& e) {
          if (std::string(e.what()).find("rank 0's transport cannot move device memory") == std::string::npos)
            throw std::runtime_error(cat("wrong reason: ", e.what()));
        }
        dev.drain_this_thread();
        std::int32_t host = comm.rank() + 1;
        comm.allreduce(&host, &host, 1, DataType::i32, ReduceOp::sum);  // host memory: no device path needed
        if (host != n * (n + 1) / 2) throw std::runtime_error("the communicator is not usable after the refusal");
      },
      config_with(GpuPath::direct));
  expect_all_ok(outcomes);
}

// One rank (`denier`) cannot export its buffer: with auto every rank stages
// the call (and gets the right result), with ipc every rank fails with
// UnsupportedError naming that rank. `call` runs the collective on a
// `bytes`-byte device buffer, lets the device finish, checks the result, and
// returns the path taken.
void expect_stage_or_fail_together(int denier, std::size_t bytes,
                                   const std::function<LastPath(Communicator&, FakeDevice&, std::byte* buf)>& call) {
  for (GpuPath setting : {GpuPath::automatic, GpuPath::ipc}) {
    FakeDevice dev(40);
    coll::device::ScopedBackend use(dev);
    const int n = 3;
    std::atomic<int> staged{0};
    auto outcomes = run_ranks(
        n, TransportKind::inproc,
        [&](Communicator& comm) {
          std::byte* buf = dev.allocate(bytes);
          if (comm.rank() == denier) dev.deny_export(buf);
          if (call(comm, dev, buf) == LastPath::staged) ++staged;
        },
        config_with(setting));
    if (setting == GpuPath::automatic) {
      expect_all_ok(outcomes);
      EXPECT_EQ(staged.load(), n);
    } else {
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(outcomes[static_cast<std::size_t>(r)]) << "rank " << r << " should have failed";
        try {
          std::rethrow_exception(outcomes[static_cast<std::size_t>(r)]);
        } catch (const UnsupportedError& e) {
          EXPECT_NE(std::string(e.what()).find(cat("rank ", denier)), std::string::npos) << e.what();
        } catch (const std::exception& e) {
          ADD_FAILURE() << "rank " << r << ": expected UnsupportedError, got " << e.what();
        }
      }
    }
  }
}

TEST(DevicePaths, OneRankThatCannotExportMakesEveryRankStageOrFail) {
  const std::size_t count = 50;
  expect_stage_or_fail_together(1, count * 4, [&](Communicator& comm, FakeDevice& dev, std::byte* buf) {
    for (std::size_t i = 0; i < count; ++i)
      store(DataType::i32, buf, i, input(DataType::i32, ReduceOp::sum, comm.rank(), i));
    comm.allreduce(buf, buf, count, DataType::i32, ReduceOp::sum);
    dev.drain_this_thread();
    const LastPath path = coll::device::last_allreduce_path();
    for (std::size_t i = 0; i < count; ++i)
      if (load(DataType::i32, buf, i) != expected(DataType::i32, ReduceOp::sum, 3, i))
        throw std::runtime_error(cat("element ", i, " is wrong"));
    return path;
  });
}

// Broadcast through IPC (or staged): every dtype and root, in place and out
// of place; the root's source must come out unchanged and nothing past recv
// written. The fake runs a non-root's copy from the root's buffer only when
// it waits, so a missing wait, or a root that returns before its peers have
// read its buffer, shows up as wrong data.
void check_broadcast_paths(int n, GpuPath setting, LastPath want) {
  run_device_ranks(
      n, setting, want,
      [&](Communicator& comm, FakeDevice& dev) {
        const int me = comm.rank();
        for (DataType t : kAllTypes) {
          const std::size_t es = dtype_size(t);
          for (int root = 0; root < n; ++root) {
            for (std::size_t count : {1u, 45u, 301u}) {
              for (bool in_place : {false, true}) {
                std::byte* src = dev.allocate(count * es);
                std::byte* dst = in_place ? src : dev.allocate(count * es);
                const auto value = [&](std::size_t i) { return static_cast<double>((root * 7 + i) % 50); };
                const double stale = is_signed_or_float(t) ? -1.0 : 99.0;  // never a broadcast value
                for (std::size_t i = 0; i < count; ++i) store(t, src, i, me == root ? value(i) : stale);
                if (!in_place) std::memset(dst, 0x5a, count * es + 1);
                comm.broadcast(src, dst, count, t, root);
                dev.drain_this_thread();
                const std::string what = cat("broadcast ", dtype_name(t), " root ", root, " count ", count,
                                             in_place ? " in place" : " out of place", " on rank ", me);
                if (coll::device::last_broadcast_path() != want) throw std::runtime_error(what + ": wrong path");
                for (std::size_t i = 0; i < count; ++i)
                  if (load(t, dst, i) != value(i))
                    throw std::runtime_error(cat(what, ": element ", i, " is ", load(t, dst, i), ", expected ", value(i)));
                if (!in_place && dst[count * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past recv");
                if (me == root && !in_place)
                  for (std::size_t i = 0; i < count; ++i)
                    if (load(t, src, i) != value(i)) throw std::runtime_error(what + ": the root's source changed");
                // The root reuses its buffer at once: peers must have read it
                // before the root's call returned.
                if (me == root) std::memset(src, 0x77, count * es);
              }
            }
          }
        }
      });
}

TEST(DevicePaths, IpcBroadcastEveryDtypeAndRootOnTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n) check_broadcast_paths(n, GpuPath::ipc, LastPath::ipc);
  check_broadcast_paths(3, GpuPath::automatic, LastPath::ipc);
}

TEST(DevicePaths, StagedBroadcastEveryDtypeAndRoot) { check_broadcast_paths(3, GpuPath::staged, LastPath::staged); }

TEST(DevicePaths, BroadcastStagesOrFailsTogetherWhenOneRankCannotExport) {
  const std::size_t count = 50;
  const int root = 0;
  expect_stage_or_fail_together(2, count * 4, [&](Communicator& comm, FakeDevice& dev, std::byte* buf) {
    for (std::size_t i = 0; i < count; ++i)  // rank 2 (the denier) is a non-root
      store(DataType::f32, buf, i, comm.rank() == root ? static_cast<double>(i) : -1.0);
    comm.broadcast(buf, buf, count, DataType::f32, root);
    dev.drain_this_thread();
    const LastPath path = coll::device::last_broadcast_path();
    for (std::size_t i = 0; i < count; ++i)
      if (load(DataType::f32, buf, i) != static_cast<double>(i))
        throw std::runtime_error(cat("element ", i, " is ", load(DataType::f32, buf, i)));
    return path;
  });
}

// ReduceScatter through IPC (or staged): every dtype x op, in place (recv is
// this rank's block of send) and out of place. Each rank overwrites its send
// buffer as soon as its call returns: peers must have read it by then.
void check_reduce_scatter_paths(int n, GpuPath setting, LastPath want) {
  run_device_ranks(
      n, setting, want,
      [&](Communicator& comm, FakeDevice& dev) {
        const auto me = static_cast<std::size_t>(comm.rank());
        const auto un = static_cast<std::size_t>(n);
        for (DataType t : kAllTypes) {
          const std::size_t es = dtype_size(t);
          for (ReduceOp op : kAllOps) {
            for (std::size_t count : {1u, 7u, 45u}) {
              for (bool in_place : {false, true}) {
                std::byte* send = dev.allocate(un * count * es);
                std::byte* recv = in_place ? send + me * count * es : dev.allocate(count * es);
                for (std::size_t i = 0; i < un * count; ++i) store(t, send, i, input(t, op, comm.rank(), i));
                if (!in_place) std::memset(recv, 0x5a, count * es + 1);
                comm.reduce_scatter(send, recv, count, t, op);
                dev.drain_this_thread();
                const std::string what = cat("reduce_scatter ", dtype_name(t), " ", op_name(op), " count ", count,
                                             in_place ? " in place" : " out of place", " on rank ", me);
                if (coll::device::last_reduce_scatter_path() != want) throw std::runtime_error(what + ": wrong path");
                for (std::size_t i = 0; i < count; ++i) {
                  const double got = load(t, recv, i), wanted = expected(t, op, n, me * count + i);
                  if (!close_enough(t, op, got, wanted))
                    throw std::runtime_error(cat(what, ": element ", i, " is ", got, ", expected ", wanted));
                }
                if (!in_place && recv[count * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past recv");
                std::memset(send, 0x77, un * count * es);  // reused at once
              }
            }
          }
        }
      });
}

TEST(DevicePaths, IpcReduceScatterEveryDtypeOpOnTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n) check_reduce_scatter_paths(n, GpuPath::ipc, LastPath::ipc);
  check_reduce_scatter_paths(3, GpuPath::automatic, LastPath::ipc);
  check_reduce_scatter_paths(3, GpuPath::staged, LastPath::staged);
}

// AllGatherV through IPC (or staged): rank r gives r + 1 + count elements
// (rank 1 gives none when count is 0), blocks placed in reverse rank order
// with a one-element gap between them that must keep its contents; then the
// plain AllGather in place. Each rank overwrites its send buffer at once.
void check_allgather_paths(int n, GpuPath setting, LastPath want) {
  run_device_ranks(
      n, setting, want,
      [&](Communicator& comm, FakeDevice& dev) {
        const auto me = static_cast<std::size_t>(comm.rank());
        const auto un = static_cast<std::size_t>(n);
        const auto value = [](std::size_t rank, std::size_t i) { return static_cast<double>((rank * 13 + i) % 60); };
        for (DataType t : kAllTypes) {
          const std::size_t es = dtype_size(t);
          for (std::size_t base : {0u, 5u, 40u}) {
            std::vector<std::size_t> counts(un), displs(un);
            std::size_t at = 0;
            for (std::size_t k = un; k-- > 0;) {  // reverse rank order, gaps of one element
              counts[k] = base == 0 && k == 1 ? 0 : k + 1 + base;
              displs[k] = at;
              at += counts[k] + 1;
            }
            const std::size_t extent = at;
            std::byte* send = dev.allocate(std::max<std::size_t>(counts[me], 1) * es);
            std::byte* recv = dev.allocate(extent * es);
            for (std::size_t i = 0; i < counts[me]; ++i) store(t, send, i, value(me, i));
            std::memset(recv, 0x5a, extent * es);
            comm.allgatherv(send, recv, counts, displs, t);
            dev.drain_this_thread();
            const std::string what = cat("allgatherv ", dtype_name(t), " base ", base, " on rank ", me);
            if (coll::device::last_allgather_path() != want) throw std::runtime_error(what + ": wrong path");
            for (std::size_t q = 0; q < un; ++q) {
              for (std::size_t i = 0; i < counts[q]; ++i)
                if (load(t, recv + displs[q] * es, i) != value(q, i))
                  throw std::runtime_error(cat(what, ": rank ", q, "'s element ", i, " is wrong"));
              const std::byte* gap = recv + (displs[q] + counts[q]) * es;
              for (std::size_t b = 0; b < es; ++b)
                if (gap[b] != std::byte{0x5a}) throw std::runtime_error(cat(what, ": the gap after rank ", q, " changed"));
            }
            std::memset(send, 0x77, std::max<std::size_t>(counts[me], 1) * es);  // reused at once
          }
          // Plain AllGather in place: this rank's block already sits in recv.
          const std::size_t count = 9;
          std::byte* all = dev.allocate(un * count * es);
          for (std::size_t i = 0; i < count; ++i) store(t, all + me * count * es, i, value(me, i));
          comm.allgather(all + me * count * es, all, count, t);
          dev.drain_this_thread();
          for (std::size_t q = 0; q < un; ++q)
            for (std::size_t i = 0; i < count; ++i)
              if (load(t, all + q * count * es, i) != value(q, i))
                throw std::runtime_error(cat("allgather in place ", dtype_name(t), ": rank ", q, "'s element ", i));
        }
      });
}

TEST(DevicePaths, IpcAllgatherEveryDtypeOnTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n) check_allgather_paths(n, GpuPath::ipc, LastPath::ipc);
  check_allgather_paths(3, GpuPath::automatic, LastPath::ipc);
  check_allgather_paths(3, GpuPath::staged, LastPath::staged);
}

// Reduce through IPC (or staged) to every root: every dtype x op, in place at
// the root and out of place; every rank rewrites its send buffer as soon as
// its call returns (the root must have read it by then), and the root's recv
// must not be written past its end.
void check_reduce_paths(int n, GpuPath setting, LastPath want) {
  run_device_ranks(
      n, setting, want,
      [&](Communicator& comm, FakeDevice& dev) {
        const int me = comm.rank();
        for (DataType t : kAllTypes) {
          const std::size_t es = dtype_size(t);
          for (ReduceOp op : kAllOps) {
            for (int root = 0; root < n; ++root) {
              for (bool in_place : {false, true}) {
                const std::size_t count = 45;
                std::byte* send = dev.allocate(count * es);
                std::byte* recv = in_place ? send : dev.allocate(count * es);
                for (std::size_t i = 0; i < count; ++i) store(t, send, i, input(t, op, me, i));
                if (!in_place) std::memset(recv, 0x5a, count * es + 1);
                comm.reduce(send, recv, count, t, op, root);
                dev.drain_this_thread();
                const std::string what = cat("reduce ", dtype_name(t), " ", op_name(op), " root ", root,
                                             in_place ? " in place" : " out of place", " on rank ", me);
                if (coll::device::last_reduce_path() != want) throw std::runtime_error(what + ": wrong path");
                if (me == root) {
                  for (std::size_t i = 0; i < count; ++i) {
                    const double got = load(t, recv, i), wanted = expected(t, op, n, i);
                    if (!close_enough(t, op, got, wanted))
                      throw std::runtime_error(cat(what, ": element ", i, " is ", got, ", expected ", wanted));
                  }
                  if (!in_place && recv[count * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past recv");
                }
                std::memset(send, 0x77, count * es);  // reused at once
              }
            }
          }
        }
      });
}

TEST(DevicePaths, IpcReduceEveryDtypeOpAndRootOnTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n) check_reduce_paths(n, GpuPath::ipc, LastPath::ipc);
  check_reduce_paths(3, GpuPath::staged, LastPath::staged);
}

// AlltoAll through IPC out of place, staged in place under auto (a rank would
// overwrite blocks its peers still read), direct both ways under direct; every
// rank rewrites its send buffer at once.
void check_alltoall_paths(int n, GpuPath setting) {
  // In place and out of place take different paths under auto; only direct's traffic differs from both.
  run_device_ranks(
      n, setting, setting == GpuPath::direct ? LastPath::direct : LastPath::staged,
      [&](Communicator& comm, FakeDevice& dev) {
        const auto me = static_cast<std::size_t>(comm.rank());
        const auto un = static_cast<std::size_t>(n);
        // Block j of rank r's send: values (r * 10 + j) * 100 + i, for rank j.
        const auto value = [](std::size_t from, std::size_t to, std::size_t i) {
          return static_cast<double>(((from * 10 + to) * 100 + i) % 120);
        };
        for (DataType t : kAllTypes) {
          const std::size_t es = dtype_size(t);
          for (bool in_place : {false, true}) {
            const std::size_t count = 7;
            std::byte* send = dev.allocate(un * count * es);
            std::byte* recv = in_place ? send : dev.allocate(un * count * es);
            for (std::size_t j = 0; j < un; ++j)
              for (std::size_t i = 0; i < count; ++i) store(t, send + j * count * es, i, value(me, j, i));
            comm.alltoall(send, recv, count, t);
            dev.drain_this_thread();
            const std::string what = cat("alltoall ", dtype_name(t), in_place ? " in place" : " out of place",
                                         " on rank ", me);
            const LastPath want = setting == GpuPath::direct                 ? LastPath::direct
                                  : setting == GpuPath::staged || in_place ? LastPath::staged
                                                                           : LastPath::ipc;
            if (coll::device::last_alltoall_path() != want) throw std::runtime_error(what + ": wrong path");
            for (std::size_t q = 0; q < un; ++q)
              for (std::size_t i = 0; i < count; ++i)
                if (load(t, recv + q * count * es, i) != value(q, me, i))
                  throw std::runtime_error(cat(what, ": block from rank ", q, " element ", i, " is wrong"));
            if (!in_place) std::memset(send, 0x77, un * count * es);  // reused at once
          }
        }
      });
}

TEST(DevicePaths, IpcAlltoallOnTwoToFourRanksAndStagedInPlace) {
  for (int n = 2; n <= 4; ++n) check_alltoall_paths(n, GpuPath::automatic);
  check_alltoall_paths(3, GpuPath::staged);
}

// The direct path for every other collective: its host algorithm on the
// device buffers, payloads handed to the transport in device memory, copies
// and reductions on the (fake) device, which runs them only when waited for,
// so a copy or reduction sent on before it ran arrives stale.
TEST(DevicePaths, DirectBroadcastReduceReduceScatterAllgatherAlltoallOnTwoToFourRanks) {
  for (int n = 2; n <= 4; ++n) {
    SCOPED_TRACE(cat(n, " ranks"));
    check_broadcast_paths(n, GpuPath::direct, LastPath::direct);
    check_reduce_paths(n, GpuPath::direct, LastPath::direct);
    check_reduce_scatter_paths(n, GpuPath::direct, LastPath::direct);
    check_allgather_paths(n, GpuPath::direct, LastPath::direct);
    check_alltoall_paths(n, GpuPath::direct);
  }
}

TEST(DevicePaths, IpcAllgathervWithDifferentCountsFailsWithMismatch) {
  FakeDevice dev(40);
  coll::device::ScopedBackend use(dev);
  const int n = 3;
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        // Rank 1 believes rank 0 gives 20 elements; the others, 10.
        const std::vector<std::size_t> counts = {comm.rank() == 1 ? 20u : 10u, 10u, 10u};
        std::byte* send = dev.allocate(counts[static_cast<std::size_t>(comm.rank())] * 4);
        std::byte* recv = dev.allocate(40 * 4);
        comm.allgatherv(send, recv, counts, {}, DataType::f32);
      },
      config_with(GpuPath::ipc));
  for (int r = 0; r < n; ++r) EXPECT_TRUE(failed_with<MismatchError>(outcomes, r)) << r << ": " << failure_of(outcomes, r);
}

TEST(DevicePaths, EveryOtherCollectiveOnDeviceBuffers) {
  FakeDevice dev(24);
  coll::device::ScopedBackend use(dev);
  const int n = 3;
  const DataType t = DataType::f32;
  const std::size_t count = 37;  // several 24-byte segments of f32
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        const int me = comm.rank();
        const auto check = [&](const char* what, const std::byte* got, std::size_t i, double want) {
          if (load(t, got, i) != want)
            throw std::runtime_error(cat(what, ": element ", i, " is ", load(t, got, i), ", expected ", want));
        };
        for (int root = 0; root < n; ++root) {
          // Broadcast, out of place at the root.
          std::byte* src = dev.allocate(count * 4);
          std::byte* dst = dev.allocate(count * 4);
          for (std::size_t i = 0; i < count; ++i) store(t, src, i, static_cast<double>(root * 100 + i));
          comm.broadcast(src, dst, count, t, root);
          dev.drain_this_thread();
          for (std::size_t i = 0; i < count; ++i) check("broadcast", dst, i, static_cast<double>(root * 100 + i));
          // Reduce, in place at the root.
          std::byte* buf = dev.allocate(count * 4);
          for (std::size_t i = 0; i < count; ++i) store(t, buf, i, input(t, ReduceOp::max, me, i));
          comm.reduce(buf, buf, count, t, ReduceOp::max, root);
          dev.drain_this_thread();
          if (me == root)
            for (std::size_t i = 0; i < count; ++i) check("reduce", buf, i, expected(t, ReduceOp::max, n, i));
          else
            for (std::size_t i = 0; i < count; ++i)
              check("reduce leaves a non-root's send", buf, i, input(t, ReduceOp::max, me, i));
        }
        // ReduceScatter.
        std::byte* rs_send = dev.allocate(count * 4 * n);
        std::byte* rs_recv = dev.allocate(count * 4);
        for (std::size_t i = 0; i < count * static_cast<std::size_t>(n); ++i)
          store(t, rs_send, i, input(t, ReduceOp::sum, me, i));
        comm.reduce_scatter(rs_send, rs_recv, count, t, ReduceOp::sum);
        dev.drain_this_thread();
        for (std::size_t i = 0; i < count; ++i)
          check("reduce_scatter", rs_recv, i, expected(t, ReduceOp::sum, n, static_cast<std::size_t>(me) * count + i));
        // AllGather, in place.
        std::byte* ag = dev.allocate(count * 4 * n);
        for (std::size_t i = 0; i < count; ++i)
          store(t, ag + static_cast<std::size_t>(me) * count * 4, i, static_cast<double>(me * 1000 + i));
        comm.allgather(ag + static_cast<std::size_t>(me) * count * 4, ag, count, t);
        dev.drain_this_thread();
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < count; ++i)
            check("allgather", ag + static_cast<std::size_t>(r) * count * 4, i, static_cast<double>(r * 1000 + i));
        // AlltoAll.
        std::byte* a_send = dev.allocate(count * 4 * n);
        std::byte* a_recv = dev.allocate(count * 4 * n);
        for (int j = 0; j < n; ++j)
          for (std::size_t i = 0; i < count; ++i)
            store(t, a_send + static_cast<std::size_t>(j) * count * 4, i,
                  static_cast<double>(me * 10000 + j * 100 + i));
        comm.alltoall(a_send, a_recv, count, t);
        dev.drain_this_thread();
        for (int j = 0; j < n; ++j)
          for (std::size_t i = 0; i < count; ++i)
            check("alltoall", a_recv + static_cast<std::size_t>(j) * count * 4, i,
                  static_cast<double>(j * 10000 + me * 100 + i));
      },
      config_with(GpuPath::automatic));
  expect_all_ok(outcomes);
}

TEST(DevicePaths, MixedPlacementsGroupsAndRequests) {
  FakeDevice dev(40);
  coll::device::ScopedBackend use(dev);
  const int n = 2;
  const DataType t = DataType::i64;
  const std::size_t count = 23;
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        const auto fill = [&](std::byte* p) {
          for (std::size_t i = 0; i < count; ++i) store(t, p, i, input(t, ReduceOp::sum, comm.rank(), i));
        };
        const auto verify = [&](const char* what, const std::byte* p) {
          for (std::size_t i = 0; i < count; ++i)
            if (load(t, p, i) != expected(t, ReduceOp::sum, n, i)) throw std::runtime_error(cat(what, ": element ", i));
        };
        // Device send, host recv: the host sees the result when the call returns.
        std::byte* send = dev.allocate(count * 8);
        fill(send);
        std::vector<std::byte> host(count * 8);
        comm.allreduce(send, host.data(), count, t, ReduceOp::sum);
        verify("device send, host recv", host.data());
        dev.drain_this_thread();
        // Host send, device recv.
        std::vector<std::byte> host_send(count * 8);
        fill(host_send.data());
        std::byte* recv = dev.allocate(count * 8);
        comm.allreduce(host_send.data(), recv, count, t, ReduceOp::sum);
        dev.drain_this_thread();
        verify("host send, device recv", recv);
        // In a group, beside a host allreduce (which may be fused with others).
        std::byte* a = dev.allocate(count * 8);
        std::vector<std::byte> b(count * 8);
        fill(a);
        fill(b.data());
        comm.group_start();
        comm.allreduce(a, a, count, t, ReduceOp::sum);
        comm.allreduce(b.data(), b.data(), count, t, ReduceOp::sum);
        comm.group_end();
        dev.drain_this_thread();
        verify("grouped device allreduce", a);
        verify("grouped host allreduce", b.data());
        // Non-blocking.
        std::byte* c = dev.allocate(count * 8);
        fill(c);
        Request req = comm.iallreduce(c, c, count, t, ReduceOp::sum);
        req.wait();
        dev.drain_this_thread();
        verify("iallreduce", c);
        // A stream with host buffers: its work is waited for first.
        const int before = dev.synchronizes.load();
        std::vector<std::byte> h(count * 8);
        fill(h.data());
        int fake_stream = 0;
        comm.allreduce(h.data(), h.data(), count, t, ReduceOp::sum, &fake_stream);
        verify("host buffers with a stream", h.data());
        if (dev.synchronizes.load() <= before) throw std::runtime_error("the stream was not synchronised");
      },
      config_with(GpuPath::automatic));
  expect_all_ok(outcomes);
}

TEST(DevicePaths, PartialAllreduceOnDeviceBuffers) {
  FakeDevice dev(40);
  coll::device::ScopedBackend use(dev);
  const int n = 3;
  const DataType t = DataType::f32;
  const std::size_t count = 29;
  auto outcomes = run_ranks(n, TransportKind::inproc, [&](Communicator& comm) {
    std::byte* grad = dev.allocate(count * 4);
    std::byte* out = dev.allocate(count * 4);
    for (int step = 1; step <= 3; ++step) {
      for (std::size_t i = 0; i < count; ++i) store(t, grad, i, input(t, ReduceOp::sum, comm.rank(), i));
      const PartialResult r = comm.partial_allreduce(grad, out, count, t, ReduceOp::sum);
      dev.drain_this_thread();
      if (r.fate != Fate::included || r.participants != n)
        throw std::runtime_error(
            cat("step ", step, ": fate ", static_cast<int>(r.fate), ", participants ", r.participants));
      for (std::size_t i = 0; i < count; ++i)
        if (load(t, out, i) != expected(t, ReduceOp::sum, n, i))
          throw std::runtime_error(cat("step ", step, ": element ", i, " is ", load(t, out, i)));
    }
    comm.partial_finish();
  });
  expect_all_ok(outcomes);
  EXPECT_GT(dev.begins.load(), 0);
}

TEST(DevicePaths, PointToPointRefusesDeviceBuffers) {
  FakeDevice dev(40);
  coll::device::ScopedBackend use(dev);
  auto outcomes = run_ranks(2, TransportKind::inproc, [&](Communicator& comm) {
    std::byte* buf = dev.allocate(64);
    const int peer = 1 - comm.rank();
    EXPECT_THROW(comm.send(buf, 16, DataType::f32, peer), UnsupportedError);
    EXPECT_THROW(comm.recv(buf, 16, DataType::f32, peer), UnsupportedError);
    EXPECT_THROW(static_cast<void>(comm.isend(buf, 16, DataType::f32, peer)), UnsupportedError);
    // The communicator is still usable.
    comm.allreduce(buf, buf, 16, DataType::f32, ReduceOp::sum);
  });
  expect_all_ok(outcomes);
}

TEST(DevicePaths, HostBuffersNeverTouchTheDeviceBackend) {
  FakeDevice dev(40);
  coll::device::ScopedBackend use(dev);
  auto outcomes = run_ranks(2, TransportKind::inproc, [&](Communicator& comm) {
    std::vector<float> v(100, 1.0f);
    comm.allreduce(v.data(), v.data(), v.size(), DataType::f32, ReduceOp::sum);
    comm.broadcast(v.data(), v.data(), v.size(), DataType::f32, 0);
    if (v[0] != 2.0f) throw std::runtime_error("host allreduce result");
  });
  expect_all_ok(outcomes);
  EXPECT_EQ(dev.begins.load(), 0);
  EXPECT_EQ(dev.synchronizes.load(), 0);
}


// ---------------------------------------------------------------------------
// Push-pull on device buffers (collectives/pushpull/, docs/pushpull.md)
// ---------------------------------------------------------------------------
// Inputs are small integers and weights small integers, so every sum is exact
// in every dtype (at most 4 ranks x weight 4 x |value| 5 = 80: fits i8, u8,
// f16, bf16) and the reference does not depend on the order of additions.
double pp_value(DataType t, int rank, std::uint64_t key, int push, std::size_t i) {
  const double v = static_cast<double>((i * 3 + static_cast<std::size_t>(rank) * 7 + key * 5 + push * 11) % 6);
  return is_signed_or_float(t) ? v - 3.0 : v;  // -3..2 where signed, 0..5 otherwise
}
double pp_weight(int rank, int round) { return static_cast<double>((rank + round) % 4 + 1); }

// The pull a worker must see after pushes of rounds `pushes` of weight
// pp_weight(w, round) by every worker in `workers`.
double pp_expected(DataType t, ReduceOp op, const std::vector<int>& workers, std::uint64_t key, int round, int pushes,
                   std::size_t i) {
  double sum = 0, total = 0;
  for (int w : workers)
    for (int push = 0; push < pushes; ++push) {
      sum += pp_weight(w, round) * pp_value(t, w, key, push, i);
      total += pp_weight(w, round);
    }
  return op == ReduceOp::sum ? sum : sum / total;
}

// Keys whose tensors cross partition (4096 B), piece (the chunk size, 1000 B
// below) and staging segment (the fake's slot size) boundaries at odd places.
std::vector<PushPullKey> pp_table(DataType t) {
  const std::size_t es = dtype_size(t);
  return {{1, 0, t}, {2, 1, t}, {3, 4096 / es + 3, t}, {4, 3 * 4096 / es + 17, t}};
}

Config pp_config() {
  Config cfg = test_config();
  cfg.chunk_bytes = 1000;  // pieces that straddle the fake's 1536-byte segments
  return cfg;
}

// Where rank r puts its buffers in one variant of the placement test.
struct Placement {
  bool push_on_device;
  bool pull_on_device;
  bool in_place;  // pull into the buffer that was pushed (same placement)
};
Placement placement_of(int variant, int rank) {
  switch (variant) {
    case 0: return {true, true, false};
    case 1: return {true, true, true};
    case 2: return {true, false, false};   // device push, host pull
    case 3: return {false, true, false};   // host push, device pull
    default: return {rank % 2 == 0, rank % 2 == 1, false};  // ranks differ
  }
}
constexpr int kPlacements = 5;

// Two rounds (one push, then two pushes that add up) for every dtype, sum and
// (floats) avg, per placement variant. Each device pull is followed by a pull
// of the same aggregate into host memory: the two must be the same bytes, and
// both must match the reference.
void check_pushpull_placements(int n, std::vector<int> servers) {
  FakeDevice dev(1536);
  coll::device::ScopedBackend use(dev);
  std::vector<int> workers;
  for (int r = 0; r < n; ++r)
    if (std::find(servers.begin(), servers.end(), r) == servers.end()) workers.push_back(r);
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        const int me = comm.rank();
        for (DataType t : kAllTypes) {
          const std::size_t es = dtype_size(t);
          const std::vector<PushPullKey> table = pp_table(t);
          PushPull pp(comm, table, PushPullOptions{servers, 4096});
          const bool worker = pp.is_worker();
          for (int variant = 0; variant < kPlacements; ++variant) {
            const Placement where = placement_of(variant, me);
            for (int round = 0; round < 2; ++round) {
              const int pushes = round + 1;
              for (const auto& k : table) {
                const std::size_t bytes = k.count * es;
                std::vector<std::byte> host_data(bytes + 1), host_out(bytes + 1), check(bytes + 1);
                std::byte* data = where.push_on_device ? dev.allocate(bytes) : host_data.data();
                for (int push = 0; push < pushes; ++push) {
                  for (std::size_t i = 0; i < k.count; ++i) store(t, data, i, pp_value(t, me, k.key, push, i));
                  pp.push(k.key, worker ? data : nullptr, pp_weight(me, round));
                  dev.drain_this_thread();  // the caller's stream synchronised
                }
                for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
                  if (op == ReduceOp::avg && !is_float(t)) continue;
                  std::byte* out = where.in_place ? data : where.pull_on_device ? dev.allocate(bytes) : host_out.data();
                  std::memset(out, 0x5a, bytes + 1);
                  pp.pull(k.key, worker ? out : nullptr, op);
                  dev.drain_this_thread();
                  std::memset(check.data(), 0x33, bytes);
                  pp.pull(k.key, worker ? check.data() : nullptr, op);  // the same aggregate, host memory
                  if (!worker) continue;
                  const std::string what = cat(n, " ranks, rank ", me, " ", dtype_name(t), " ", op_name(op), " key ",
                                               k.key, " placement ", variant, " round ", round);
                  if (out[bytes] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past the end of out");
                  if (bytes > 0 && std::memcmp(out, check.data(), bytes) != 0)
                    throw std::runtime_error(what + ": the device-path result differs from the host-path result");
                  for (std::size_t i = 0; i < k.count; ++i) {
                    const double got = load(t, out, i), want = pp_expected(t, op, workers, k.key, round, pushes, i);
                    if (!close_enough(t, op, got, want))
                      throw std::runtime_error(cat(what, ": element ", i, " is ", got, ", expected ", want));
                  }
                }
              }
            }
          }
        }
      },
      pp_config());
  expect_all_ok(outcomes);
  EXPECT_GT(dev.begins.load(), 0);
  EXPECT_EQ(dev.begins.load(), dev.completes.load()) << "every device call makes the caller's stream wait for it";
}

TEST(DevicePushPull, EveryDtypeSumAvgWeightsAndPlacementsOnOneToFourRanks) {
  for (int n = 1; n <= 4; ++n) check_pushpull_placements(n, {});
}

TEST(DevicePushPull, DedicatedServersServeDeviceWorkersFromHostMemory) {
  check_pushpull_placements(3, {1});
  check_pushpull_placements(4, {0, 3});
}

TEST(DevicePushPull, NonBlockingGroupedAndOnAStream) {
  FakeDevice dev(1536);
  coll::device::ScopedBackend use(dev);
  const int n = 3;
  const DataType t = DataType::f32;
  const std::vector<PushPullKey> table = pp_table(t);
  const std::vector<int> all = {0, 1, 2};
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        const int me = comm.rank();
        PushPull pp(comm, table, PushPullOptions{{}, 4096});
        int stream = 0;  // the fake ignores streams; a non-null one must be accepted
        const auto verify = [&](const char* what, const PushPullKey& k, const std::byte* out, ReduceOp op) {
          for (std::size_t i = 0; i < k.count; ++i) {
            const double got = load(t, out, i), want = pp_expected(t, op, all, k.key, 0, 1, i);
            if (!close_enough(t, op, got, want))
              throw std::runtime_error(cat(what, " key ", k.key, ": element ", i, " is ", got, ", expected ", want));
          }
        };
        for (const auto& k : table) {
          const std::size_t bytes = k.count * 4;
          std::byte* data = dev.allocate(bytes);
          std::byte* out = dev.allocate(bytes);
          for (std::size_t i = 0; i < k.count; ++i) store(t, data, i, pp_value(t, me, k.key, 0, i));
          // ipush / ipull on a stream, waited for in reverse order.
          // (The progress thread runs them: the pulled result's last uploads
          // are pending on `stream`, not on this thread.)
          Request pushed = pp.ipush(k.key, data, pp_weight(me, 0), &stream);
          Request pulled = pp.ipull(k.key, out, ReduceOp::avg, &stream);
          pulled.wait();
          pushed.wait();
          dev.drain_stream(&stream);
          verify("ipush/ipull", k, out, ReduceOp::avg);
          // The same round in a group, in place, without a stream.
          comm.group_start();
          pp.push(k.key, data, pp_weight(me, 0));
          pp.pull(k.key, data, ReduceOp::sum);
          comm.group_end();
          dev.drain_this_thread();
          verify("grouped push/pull in place", k, data, ReduceOp::sum);
          // Host buffers with a stream: the stream is synchronised first.
          const int before = dev.synchronizes.load();
          std::vector<std::byte> h(bytes + 1);
          for (std::size_t i = 0; i < k.count; ++i) store(t, h.data(), i, pp_value(t, me, k.key, 0, i));
          pp.push(k.key, h.data(), pp_weight(me, 0), &stream);
          pp.pull(k.key, h.data(), ReduceOp::avg, &stream);
          verify("host buffers on a stream", k, h.data(), ReduceOp::avg);
          if (k.count > 0 && dev.synchronizes.load() < before + 2)
            throw std::runtime_error("a host push/pull with a stream did not synchronise it");
        }
      },
      pp_config());
  expect_all_ok(outcomes);
  EXPECT_EQ(dev.begins.load(), dev.completes.load());
}

TEST(DevicePushPull, PartialPushOnDeviceBuffersEqualsThePlainRound) {
  FakeDevice dev(1536);
  coll::device::ScopedBackend use(dev);
  const int n = 3;
  const std::vector<int> all = {0, 1, 2};
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        const int me = comm.rank();
        for (DataType t : {DataType::f32, DataType::bf16, DataType::f64, DataType::i32}) {
          const std::size_t es = dtype_size(t);
          const std::vector<PushPullKey> table = pp_table(t);
          PushPull pp(comm, table, PushPullOptions{{}, 4096});
          const ReduceOp op = is_float(t) ? ReduceOp::avg : ReduceOp::sum;
          for (const auto& k : table) {
            if (k.count == 0) continue;
            const std::size_t bytes = k.count * es;
            for (int variant = 0; variant < 3; ++variant) {
              // Device data and result; device data, host result; host data, device result.
              std::vector<std::byte> host_data(bytes), host_result(bytes), plain(bytes);
              std::byte* data = variant != 2 ? dev.allocate(bytes) : host_data.data();
              std::byte* result = variant == 0 || variant == 2 ? dev.allocate(bytes) : host_result.data();
              for (std::size_t i = 0; i < k.count; ++i) store(t, data, i, pp_value(t, me, k.key, 0, i));
              int stream = 0;
              const PartialResult r = pp.partial_push(k.key, data, result, op,
                                                      PartialOptions{LatePolicy::wait, pp_weight(me, 0), 1, 0},
                                                      &stream);
              dev.drain_stream(&stream);
              if (r.fate != Fate::included || r.participants != n)
                throw std::runtime_error(cat("partial push: fate ", static_cast<int>(r.fate), ", participants ",
                                             r.participants));
              pp.push(k.key, data, pp_weight(me, 0));
              pp.pull(k.key, plain.data(), op);
              if (std::memcmp(result, plain.data(), bytes) != 0)
                throw std::runtime_error(cat("partial push on device buffers (", dtype_name(t), ", key ", k.key,
                                             ", variant ", variant, ") differs from the plain round"));
              for (std::size_t i = 0; i < k.count; ++i) {
                const double got = load(t, result, i), want = pp_expected(t, op, all, k.key, 0, 1, i);
                if (!close_enough(t, op, got, want))
                  throw std::runtime_error(cat("partial push ", dtype_name(t), " key ", k.key, ": element ", i,
                                               " is ", got, ", expected ", want));
              }
            }
            comm.partial_finish();  // a run of partial steps is for one key and op
          }
        }
      },
      pp_config());
  expect_all_ok(outcomes);
  EXPECT_GT(dev.begins.load(), 0);
  EXPECT_EQ(dev.begins.load(), dev.completes.load());
}

TEST(DevicePushPull, CApiStreamVariants) {
  FakeDevice dev(1536);
  coll::device::ScopedBackend use(dev);
  const int n = 2;
  auto outcomes = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& thread_comm) {
        antdtComm handle{std::move(thread_comm)};
        const int rank = handle.comm.rank();
        const auto expect_ok = [](antdtStatus_t got, const char* what) {
          if (got != ANTDT_OK) throw std::runtime_error(cat(what, ": status ", got, " (", antdtLastError(), ")"));
        };
        antdtPushPullKey keys[] = {{8, 5000, ANTDT_F32}};
        antdtPushPullOptions opts{};
        opts.struct_size = sizeof opts;
        opts.partition_bytes = 4096;
        antdtPushPull_t pp = nullptr;
        expect_ok(antdtPushPullCreate(&pp, &handle, keys, 1, &opts), "create");
        const std::size_t bytes = 5000 * 4;
        std::byte* data = dev.allocate(bytes);
        std::byte* out = dev.allocate(bytes);
        for (std::size_t i = 0; i < 5000; ++i) store(DataType::f32, data, i, static_cast<double>(rank + 1));
        int stream = 0;
        expect_ok(antdtPushStream(pp, 8, data, 2.0, &stream), "push (stream)");
        expect_ok(antdtPullStream(pp, 8, out, ANTDT_AVG, &stream), "pull (stream)");
        dev.drain_stream(&stream);
        if (load(DataType::f32, out, 0) != 1.5 || load(DataType::f32, out, 4999) != 1.5)
          throw std::runtime_error(cat("C pull: ", load(DataType::f32, out, 0)));
        expect_ok(antdtPush(pp, 8, data, 1.0), "push (default stream)");
        expect_ok(antdtPull(pp, 8, out, ANTDT_SUM), "pull (default stream)");
        dev.drain_this_thread();
        if (load(DataType::f32, out, 4321) != 3.0) throw std::runtime_error("C pull sum");
        antdtPartialOptions popts{};
        popts.struct_size = sizeof popts;
        popts.policy = ANTDT_LATE_WAIT;
        popts.weight = rank + 1.0;
        antdtPartialResult info{};
        info.struct_size = sizeof info;
        expect_ok(antdtPartialPushStream(pp, 8, data, out, ANTDT_SUM, &popts, &info, &stream), "partial push");
        dev.drain_stream(&stream);
        if (info.fate != ANTDT_FATE_INCLUDED || info.total_weight != 3.0 || load(DataType::f32, out, 7) != 5.0)
          throw std::runtime_error(cat("C partial push: fate ", info.fate, ", out ", load(DataType::f32, out, 7)));
        expect_ok(antdtPartialFinish(&handle, nullptr), "partial finish");
        expect_ok(antdtPushPullDestroy(pp), "destroy");
      },
      pp_config());
  expect_all_ok(outcomes);
  EXPECT_EQ(dev.begins.load(), dev.completes.load());
}

TEST(DevicePushPull, HostBuffersNeverTouchTheDeviceBackend) {
  FakeDevice dev(1536);
  coll::device::ScopedBackend use(dev);
  auto outcomes = run_ranks(2, TransportKind::inproc, [&](Communicator& comm) {
    const std::vector<PushPullKey> table = pp_table(DataType::f64);
    PushPull pp(comm, table, PushPullOptions{{}, 4096});
    for (const auto& k : table) {
      std::vector<double> v(k.count, comm.rank() + 1.0), out(k.count);
      pp.push(k.key, v.data(), 1.0);
      pp.pull(k.key, out.data(), ReduceOp::sum);
      for (double x : out)
        if (x != 3.0) throw std::runtime_error(cat("host push-pull: ", x));
    }
  });
  expect_all_ok(outcomes);
  EXPECT_EQ(dev.begins.load(), 0);
  EXPECT_EQ(dev.synchronizes.load(), 0);
}

}  // namespace
}  // namespace antdt::test
