// The staging pipeline (cuda/staging.hpp): chunk scheduling against a fake
// copy engine on every machine (data, order, slot reuse, overlap, timeouts),
// and the CUDA engine (cuda/staging_engine.hpp) where a GPU is present.
#include "core/dtype.hpp"
#include "cuda/cuda_runtime.hpp"
#include "cuda/staging.hpp"

#include <antdt/comm.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#if ANTDT_HAVE_CUDA
#include "cuda/device_memory.hpp"
#include "cuda/sleep_kernel.hpp"
#include "cuda/staging_engine.hpp"

#include <cuda_runtime_api.h>
#endif

namespace {

using antdt::cuda::StagedChunk;
using namespace std::chrono_literals;

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(gen());
  return v;
}

// What happened, in order: ("start", k), ("ready", k), ("release", k), ...
struct Log {
  std::vector<std::pair<std::string, std::size_t>> events;
  void add(const char* what, std::size_t chunk) { events.emplace_back(what, chunk); }
  std::optional<std::size_t> position(const std::string& what, std::size_t chunk) const {
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (events[i].first == what && events[i].second == chunk) return i;
    }
    return std::nullopt;
  }
};

// Copies take `latency` polls of slot_done() and move the bytes only when they
// complete, as a DMA engine would: a slot reused too early shows up as wrong data.
class FakeEngine final : public antdt::cuda::CopyEngine {
 public:
  FakeEngine(std::size_t slots, std::size_t slot_bytes, std::vector<std::byte>& device, int latency, Log& log,
             std::optional<antdt::ReduceOp> op = std::nullopt, antdt::DataType dtype = antdt::DataType::u8)
      : slots_(slots, std::vector<std::byte>(slot_bytes)),
        pending_(slots),
        device_(device),
        latency_(latency),
        log_(log),
        op_(op),
        dtype_(dtype) {}

  std::size_t slot_count() const override { return slots_.size(); }
  std::size_t slot_bytes() const override { return slots_[0].size(); }
  std::span<std::byte> slot(std::size_t s) override { return slots_.at(s); }

  void start_download(std::size_t s, std::size_t offset, std::size_t bytes) override { start(s, offset, bytes, true); }
  void start_upload(std::size_t s, std::size_t offset, std::size_t bytes) override { start(s, offset, bytes, false); }

  bool slot_done(std::size_t s) override {
    Pending& p = pending_.at(s);
    if (!p.active) return true;
    if (p.polls_left > 0) {
      --p.polls_left;
      return false;
    }
    if (fail_) throw antdt::InternalError("fake copy failed");
    const std::span<std::byte> device = std::span(device_).subspan(p.offset, p.bytes);
    const std::span<std::byte> host = std::span(slots_[s]).first(p.bytes);
    if (p.download) {
      std::copy(device.begin(), device.end(), host.begin());
    } else if (op_) {
      antdt::reduce_inplace(dtype_, *op_, device, host);
    } else {
      std::copy(host.begin(), host.end(), device.begin());
    }
    p.active = false;
    --in_flight_;
    log_.add("done", p.offset / std::max<std::size_t>(chunk_hint, 1));
    return true;
  }

  bool busy(std::size_t s) const { return pending_.at(s).active; }
  std::size_t in_flight() const { return in_flight_; }
  std::size_t max_in_flight() const { return max_in_flight_; }
  std::set<std::size_t> held;  // slots the caller holds (filled by the sinks below)
  bool fail_ = false;

 private:
  struct Pending {
    bool active = false;
    bool download = false;
    std::size_t offset = 0;
    std::size_t bytes = 0;
    int polls_left = 0;
  };

  void start(std::size_t s, std::size_t offset, std::size_t bytes, bool download) {
    ASSERT_LT(s, slots_.size());
    EXPECT_FALSE(pending_[s].active) << "slot " << s << " reused while its previous copy runs";
    EXPECT_EQ(held.count(s), 0u) << "slot " << s << " reused while the caller holds it";
    EXPECT_LE(offset + bytes, device_.size());
    EXPECT_LE(bytes, slot_bytes());
    pending_[s] = Pending{true, download, offset, bytes, latency_};
    max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    log_.add("start", offset / std::max<std::size_t>(chunk_hint, 1));
  }

 public:
  std::size_t chunk_hint = 1;  // chunk size, to log chunk numbers

 private:
  std::vector<std::vector<std::byte>> slots_;
  std::vector<Pending> pending_;
  std::vector<std::byte>& device_;
  int latency_;
  Log& log_;
  std::optional<antdt::ReduceOp> op_;
  antdt::DataType dtype_;
  std::size_t in_flight_ = 0;
  std::size_t max_in_flight_ = 0;
};

// Collects chunks into `received`, holding each for `hold` polls (a send in
// flight), and checks that the slot kept its bytes while held.
class CollectingSink final : public antdt::cuda::DownloadSink {
 public:
  CollectingSink(FakeEngine& engine, std::size_t total, int hold, Log& log)
      : received(total), engine_(engine), hold_(hold), log_(log) {}

  void chunk_ready(const StagedChunk& c) override {
    EXPECT_EQ(c.index, next_ready_++) << "chunks must arrive in order";
    EXPECT_FALSE(engine_.busy(c.slot)) << "chunk " << c.index << " handed out before its copy finished";
    std::copy(c.host.begin(), c.host.end(), received.begin() + static_cast<std::ptrdiff_t>(c.offset));
    snapshots_[c.index].assign(c.host.begin(), c.host.end());
    polls_left_[c.index] = hold_;
    engine_.held.insert(c.slot);
    log_.add("ready", c.index);
  }

  bool chunk_released(const StagedChunk& c) override {
    int& left = polls_left_.at(c.index);
    if (left-- > 0) return false;
    EXPECT_TRUE(std::equal(c.host.begin(), c.host.end(), snapshots_[c.index].begin()))
        << "chunk " << c.index << "'s slot changed while the caller held it";
    engine_.held.erase(c.slot);
    log_.add("release", c.index);
    return true;
  }

  std::vector<std::byte> received;

 private:
  FakeEngine& engine_;
  int hold_;
  Log& log_;
  std::size_t next_ready_ = 0;
  std::map<std::size_t, std::vector<std::byte>> snapshots_;
  std::map<std::size_t, int> polls_left_;
};

// Fills chunks from `remote` after `delay` polls (a receive in flight).
class RemoteSource final : public antdt::cuda::UploadSource {
 public:
  RemoteSource(FakeEngine& engine, const std::vector<std::byte>& remote, int delay, Log& log)
      : engine_(engine), remote_(remote), delay_(delay), log_(log) {}

  void fill_chunk(const StagedChunk& c) override {
    EXPECT_EQ(c.index, next_fill_++) << "slots must be offered in chunk order";
    EXPECT_FALSE(engine_.busy(c.slot)) << "slot " << c.slot << " offered while its upload runs";
    polls_left_[c.index] = delay_;
    log_.add("fill", c.index);
  }

  bool chunk_filled(const StagedChunk& c) override {
    int& left = polls_left_.at(c.index);
    if (left-- > 0) return false;
    std::copy_n(remote_.begin() + static_cast<std::ptrdiff_t>(c.offset), c.bytes, c.host.begin());
    log_.add("filled", c.index);
    return true;
  }

 private:
  FakeEngine& engine_;
  const std::vector<std::byte>& remote_;
  int delay_;
  Log& log_;
  std::size_t next_fill_ = 0;
  std::map<std::size_t, int> polls_left_;
};

constexpr auto kGenerous = 10s;

std::chrono::steady_clock::time_point deadline_in(std::chrono::nanoseconds d) {
  return std::chrono::steady_clock::now() + d;
}

TEST(StagingPipeline, DownloadDeliversEveryByteInOrderForAllShapes) {
  for (std::size_t total : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{4096}, std::size_t{4097},
                            std::size_t{10 * 4096 + 123}}) {
    for (std::size_t chunk : {std::size_t{4096}, std::size_t{1000}}) {
      for (std::size_t slots : {1u, 2u, 3u}) {
        for (int latency : {0, 2}) {
          for (int hold : {0, 3}) {
            SCOPED_TRACE(testing::Message() << "total=" << total << " chunk=" << chunk << " slots=" << slots
                                            << " latency=" << latency << " hold=" << hold);
            std::vector<std::byte> device = random_bytes(total, static_cast<unsigned>(total + slots));
            Log log;
            FakeEngine engine(slots, 4096, device, latency, log);
            engine.chunk_hint = chunk;
            CollectingSink sink(engine, total, hold, log);
            antdt::cuda::StagedDownload download(engine, sink, total, chunk);
            EXPECT_EQ(download.chunks(), (total + chunk - 1) / chunk);
            ASSERT_TRUE(download.run_until(deadline_in(kGenerous)));
            EXPECT_EQ(sink.received, device);
            EXPECT_LE(engine.max_in_flight(), slots);
            EXPECT_TRUE(engine.held.empty());
          }
        }
      }
    }
  }
}

// With two or more slots, chunk k+1's copy starts while chunk k is still held
// by the caller (its send in flight); with one slot it cannot.
TEST(StagingPipeline, DownloadCopiesTheNextChunkWhileTheCallerHoldsThisOne) {
  for (std::size_t slots : {1u, 2u, 3u}) {
    SCOPED_TRACE(testing::Message() << "slots=" << slots);
    const std::size_t chunk = 512;
    const std::size_t chunks = 8;
    std::vector<std::byte> device = random_bytes(chunk * chunks, 3);
    Log log;
    FakeEngine engine(slots, chunk, device, /*latency=*/1, log);
    engine.chunk_hint = chunk;
    CollectingSink sink(engine, device.size(), /*hold=*/2, log);
    antdt::cuda::StagedDownload download(engine, sink, device.size());
    ASSERT_TRUE(download.run_until(deadline_in(kGenerous)));
    std::size_t overlapped = 0;
    for (std::size_t k = 0; k + 1 < chunks; ++k) {
      const auto next_start = log.position("start", k + 1);
      const auto release = log.position("release", k);
      ASSERT_TRUE(next_start && release);
      if (*next_start < *release) ++overlapped;
    }
    if (slots == 1) {
      EXPECT_EQ(overlapped, 0u) << "one slot cannot overlap";
    } else {
      EXPECT_EQ(overlapped, chunks - 1) << "every next copy should start before the previous chunk is released";
    }
  }
}

TEST(StagingPipeline, UploadReducesEveryChunkIntoTheDeviceRange) {
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1024}, std::size_t{1025},
                            std::size_t{10 * 1024 + 7}}) {
    for (std::size_t slots : {1u, 2u, 4u}) {
      for (int latency : {0, 3}) {
        for (int delay : {0, 2}) {
          SCOPED_TRACE(testing::Message() << "count=" << count << " slots=" << slots << " latency=" << latency
                                          << " delay=" << delay);
          const std::size_t bytes = count * sizeof(float);
          std::vector<float> local(count);
          std::vector<float> remote(count);
          for (std::size_t i = 0; i < count; ++i) {
            local[i] = static_cast<float>(i) * 0.25f;
            remote[i] = 1000.0f - static_cast<float>(i);
          }
          std::vector<std::byte> device(bytes);
          std::vector<std::byte> remote_bytes(bytes);
          if (bytes > 0) {
            std::memcpy(device.data(), local.data(), bytes);
            std::memcpy(remote_bytes.data(), remote.data(), bytes);
          }
          std::vector<std::byte> expected = device;
          antdt::reduce_inplace(antdt::DataType::f32, antdt::ReduceOp::sum, expected, remote_bytes);

          Log log;
          FakeEngine engine(slots, 4096, device, latency, log, antdt::ReduceOp::sum, antdt::DataType::f32);
          engine.chunk_hint = 4096;
          RemoteSource source(engine, remote_bytes, delay, log);
          antdt::cuda::StagedUpload upload(engine, source, bytes);
          ASSERT_TRUE(upload.run_until(deadline_in(kGenerous)));
          EXPECT_EQ(device, expected);
          EXPECT_LE(engine.max_in_flight(), slots);
        }
      }
    }
  }
}

TEST(StagingPipeline, UploadFillsTheNextSlotWhileThisChunkIsUploaded) {
  const std::size_t chunk = 256;
  const std::size_t chunks = 6;
  std::vector<std::byte> device(chunk * chunks);
  const std::vector<std::byte> remote = random_bytes(device.size(), 9);
  Log log;
  FakeEngine engine(2, chunk, device, /*latency=*/2, log);
  engine.chunk_hint = chunk;
  RemoteSource source(engine, remote, /*delay=*/1, log);
  antdt::cuda::StagedUpload upload(engine, source, device.size());
  ASSERT_TRUE(upload.run_until(deadline_in(kGenerous)));
  EXPECT_EQ(device, remote) << "an engine without an op copies";
  for (std::size_t k = 0; k + 1 < chunks; ++k) {
    // Chunk k+1 is being received into the other slot before chunk k's
    // upload has finished.
    const auto next_fill = log.position("fill", k + 1);
    const auto upload_done = log.position("done", k);
    ASSERT_TRUE(next_fill && upload_done);
    EXPECT_LT(*next_fill, *upload_done) << "chunk " << k;
  }
}

TEST(StagingPipeline, ACallerThatNeverReleasesTimesOutWithoutHanging) {
  std::vector<std::byte> device = random_bytes(4096, 1);
  Log log;
  FakeEngine engine(2, 1024, device, 0, log);
  CollectingSink sink(engine, device.size(), /*hold=*/1 << 30, log);
  antdt::cuda::StagedDownload download(engine, sink, device.size());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(download.run_until(deadline_in(50ms)));
  EXPECT_FALSE(download.done());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(engine.max_in_flight(), 2u) << "both slots filled, then it waited";
  engine.held.clear();
}

TEST(StagingPipeline, AnEngineFailureSurfacesFromProgress) {
  std::vector<std::byte> device = random_bytes(4096, 2);
  Log log;
  FakeEngine engine(2, 1024, device, 0, log);
  CollectingSink sink(engine, device.size(), 0, log);
  antdt::cuda::StagedDownload download(engine, sink, device.size());
  engine.fail_ = true;
  EXPECT_THROW(download.progress(), antdt::InternalError);
}

TEST(StagingPipeline, ChunkLargerThanASlotOrZeroSlotsIsRejected) {
  std::vector<std::byte> device(64);
  Log log;
  FakeEngine engine(2, 16, device, 0, log);
  CollectingSink sink(engine, device.size(), 0, log);
  EXPECT_THROW(antdt::cuda::StagedDownload(engine, sink, device.size(), 17), antdt::InvalidArgument);
  antdt::cuda::StagedDownload whole_slots(engine, sink, device.size());
  EXPECT_EQ(whole_slots.chunks(), 4u) << "chunk size 0 means the slot size";
}

#if ANTDT_HAVE_CUDA

class CudaStaging : public testing::Test {
 protected:
  void SetUp() override {
    if (!antdt::cuda::available()) GTEST_SKIP() << "no CUDA GPU available: " << antdt::cuda::unavailable_reason();
  }
};

// Copies chunks into a host vector and releases them at once.
class VectorSink final : public antdt::cuda::DownloadSink {
 public:
  explicit VectorSink(std::size_t total) : received(total) {}
  void chunk_ready(const StagedChunk& c) override {
    std::copy(c.host.begin(), c.host.end(), received.begin() + static_cast<std::ptrdiff_t>(c.offset));
  }
  bool chunk_released(const StagedChunk&) override { return true; }
  std::vector<std::byte> received;
};

class VectorSource final : public antdt::cuda::UploadSource {
 public:
  explicit VectorSource(const std::vector<std::byte>& remote) : remote_(remote) {}
  void fill_chunk(const StagedChunk& c) override {
    std::copy_n(remote_.begin() + static_cast<std::ptrdiff_t>(c.offset), c.bytes, c.host.begin());
  }
  bool chunk_filled(const StagedChunk&) override { return true; }

 private:
  const std::vector<std::byte>& remote_;
};

TEST_F(CudaStaging, DownloadAfterTheCallersStreamWorkRoundTrips) {
  const std::size_t total = 10 * 65536 + 300;
  antdt::cuda::DeviceBuffer device(total);
  antdt::cuda::Stream caller;
  // The caller's stream is busy, then writes the buffer: the engine must wait for it.
  antdt::cuda::device_sleep(100ms, caller.get());
  ASSERT_EQ(cudaMemsetAsync(device.data(), 0x5a, total, caller.get()), cudaSuccess);
  antdt::cuda::CudaCopyEngine engine(2, 65536);
  engine.bind(device.data(), total, antdt::DataType::u8);
  engine.order_after(caller.get());
  VectorSink sink(total);
  antdt::cuda::StagedDownload download(engine, sink, total);
  ASSERT_TRUE(download.run_until(deadline_in(kGenerous)));
  EXPECT_EQ(sink.received, std::vector<std::byte>(total, std::byte{0x5a}));
}

TEST_F(CudaStaging, UploadReducesIntoDeviceMemoryLikeTheCpu) {
  for (auto [dtype, op] : {std::pair{antdt::DataType::f32, antdt::ReduceOp::sum},
                           std::pair{antdt::DataType::bf16, antdt::ReduceOp::sum},
                           std::pair{antdt::DataType::i32, antdt::ReduceOp::max}}) {
    SCOPED_TRACE(std::string(antdt::dtype_name(dtype)));
    const std::size_t total = 7 * 16384 + 4 * 13;  // a partial last chunk, whole elements
    const std::vector<std::byte> local = random_bytes(total, 5);
    std::vector<std::byte> remote = random_bytes(total, 6);
    if (dtype != antdt::DataType::i32) {
      // Finite values, so the comparison is not about NaN payloads.
      for (std::size_t i = 0; i + 1 < total; i += 2) remote[i + 1] &= std::byte{0x3f};
    }
    std::vector<std::byte> local_finite = local;
    if (dtype != antdt::DataType::i32) {
      for (std::size_t i = 0; i + 1 < total; i += 2) local_finite[i + 1] &= std::byte{0x3f};
    }
    std::vector<std::byte> expected = local_finite;
    antdt::reduce_inplace(dtype, op, expected, remote);

    antdt::cuda::DeviceBuffer device(total);
    ASSERT_EQ(cudaMemcpy(device.data(), local_finite.data(), total, cudaMemcpyHostToDevice), cudaSuccess);
    antdt::cuda::CudaCopyEngine engine(3, 16384);
    engine.bind(device.data(), total, dtype, op);
    VectorSource source(remote);
    antdt::cuda::StagedUpload upload(engine, source, total);
    ASSERT_TRUE(upload.run_until(deadline_in(kGenerous)));
    antdt::cuda::Stream caller;
    engine.complete_on(caller.get());
    std::vector<std::byte> result(total);
    ASSERT_EQ(cudaMemcpyAsync(result.data(), device.data(), total, cudaMemcpyDeviceToHost, caller.get()),
              cudaSuccess);
    ASSERT_TRUE(caller.wait_for(kGenerous));
    EXPECT_EQ(result, expected);
  }
}

TEST_F(CudaStaging, UploadWithoutAnOpCopies) {
  const std::size_t total = 3 * 4096 + 1;
  const std::vector<std::byte> remote = random_bytes(total, 8);
  antdt::cuda::DeviceBuffer device(total);
  antdt::cuda::CudaCopyEngine engine(2, 4096);
  engine.bind(device.data(), total, antdt::DataType::u8);
  VectorSource source(remote);
  antdt::cuda::StagedUpload upload(engine, source, total);
  ASSERT_TRUE(upload.run_until(deadline_in(kGenerous)));
  std::vector<std::byte> result(total);
  ASSERT_EQ(cudaMemcpy(result.data(), device.data(), total, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(result, remote);
}

TEST_F(CudaStaging, OutOfRangeChunksAreRejected) {
  antdt::cuda::DeviceBuffer device(1000);
  antdt::cuda::CudaCopyEngine engine(2, 512);
  engine.bind(device.data(), 1000, antdt::DataType::f32, antdt::ReduceOp::sum);
  EXPECT_THROW(engine.start_download(0, 600, 512), antdt::InvalidArgument);
  EXPECT_THROW(engine.start_download(2, 0, 16), antdt::InvalidArgument);
  EXPECT_THROW(engine.start_upload(0, 2, 16), antdt::InvalidArgument) << "not on an element boundary";
  EXPECT_THROW(engine.bind(device.data(), 1001, antdt::DataType::f32, antdt::ReduceOp::sum),
               antdt::InvalidArgument);
}

#endif  // ANTDT_HAVE_CUDA

}  // namespace
