#include "collectives/device/device_plan.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <thread>

#include <unistd.h>

namespace antdt::coll::device {
namespace {

// Polls `done()` until it holds or the deadline passes (then TimeoutError).
// Yields between polls, sleeping briefly once the wait is long, so a rank
// waiting for its copies leaves the core to the transport.
template <class Done>
void poll_or_timeout(Done&& done, Clock::time_point deadline, const char* what, const char* waiting_for) {
  for (unsigned attempt = 0;; ++attempt) {
    if (done()) return;
    if (Clock::now() >= deadline)
      raise<TimeoutError>(what, ": ", waiting_for, " did not finish within ANTDT_TIMEOUT_MS");
    if (attempt < 1024)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// FNV-1a, 64-bit.
std::uint64_t fnv1a(std::uint64_t h, std::string_view text) noexcept {
  for (char c : text) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

}  // namespace

// ---------------------------------------------------------------------------
// Staged path
// ---------------------------------------------------------------------------
std::size_t segment_bytes(std::size_t slot_bytes, std::size_t esize) {
  ANTDT_CHECK_ARG(esize > 0 && slot_bytes >= esize, "a staging slot of ", slot_bytes,
                  " bytes cannot hold one element of ", esize, " bytes");
  return slot_bytes / esize * esize;
}

void run_segments(cuda::CopyEngine& engine, std::size_t total_bytes, std::size_t seg_bytes, bool download,
                  bool upload, SegmentWork& work, Clock::time_point deadline, const char* what) {
  ANTDT_CHECK_ARG(seg_bytes > 0 && seg_bytes <= engine.slot_bytes(), what, ": segment of ", seg_bytes,
                  " bytes does not fit the staging slots of ", engine.slot_bytes(), " bytes");
  const std::size_t slots = engine.slot_count();
  ANTDT_CHECK_ARG(slots >= 1, what, ": the staging engine has no slots");
  const std::size_t segments = total_bytes / seg_bytes + (total_bytes % seg_bytes != 0 ? 1 : 0);
  const auto offset_of = [&](std::size_t k) { return k * seg_bytes; };
  const auto bytes_of = [&](std::size_t k) { return std::min(seg_bytes, total_bytes - offset_of(k)); };

  // Segment j may claim slot j % slots once everything started on that slot
  // (segment j - slots's upload, or a previous call's work) has finished.
  std::size_t claimed = 0;
  const auto claim = [&](bool block) {
    const std::size_t slot = claimed % slots;
    if (!engine.slot_done(slot)) {
      if (!block) return false;
      poll_or_timeout([&] { return engine.slot_done(slot); }, deadline, what, "a staging slot's upload");
    }
    if (download) engine.start_download(slot, offset_of(claimed), bytes_of(claimed));
    ++claimed;
    return true;
  };

  for (std::size_t k = 0; k < segments; ++k) {
    while (claimed <= k) claim(true);
    // Look ahead: start the next downloads while this segment's host work runs.
    while (claimed < segments && claimed < k + slots && claim(false)) {
    }
    const std::size_t slot = k % slots;
    if (download) poll_or_timeout([&] { return engine.slot_done(slot); }, deadline, what, "a staging download");
    work.run(k, offset_of(k), engine.slot(slot).first(bytes_of(k)));
    if (upload) engine.start_upload(slot, offset_of(k), bytes_of(k));
  }
}

namespace {

class CopyOutSink final : public cuda::DownloadSink {
 public:
  explicit CopyOutSink(std::span<std::byte> host) : host_(host) {}
  void chunk_ready(const cuda::StagedChunk& chunk) override {
    std::memcpy(host_.data() + chunk.offset, chunk.host.data(), chunk.bytes);
  }
  bool chunk_released(const cuda::StagedChunk&) override { return true; }

 private:
  std::span<std::byte> host_;
};

class CopyInSource final : public cuda::UploadSource {
 public:
  explicit CopyInSource(std::span<const std::byte> host) : host_(host) {}
  void fill_chunk(const cuda::StagedChunk& chunk) override {
    std::memcpy(chunk.host.data(), host_.data() + chunk.offset, chunk.bytes);
  }
  bool chunk_filled(const cuda::StagedChunk&) override { return true; }

 private:
  std::span<const std::byte> host_;
};

}  // namespace

void download_all(cuda::CopyEngine& engine, std::span<std::byte> host, Clock::time_point deadline, const char* what) {
  if (host.empty()) return;
  CopyOutSink sink(host);
  cuda::StagedDownload transfer(engine, sink, host.size());
  if (!transfer.run_until(deadline))
    raise<TimeoutError>(what, ": staging ", host.size(),
                        " bytes from the device did not finish within ANTDT_TIMEOUT_MS");
}

void upload_all(cuda::CopyEngine& engine, std::span<const std::byte> host, Clock::time_point deadline,
                const char* what) {
  if (host.empty()) return;
  // The previous user of the slots (a download on this engine) must be done:
  // StagedUpload fills slots from the host as soon as it offers them.
  for (std::size_t s = 0; s < engine.slot_count(); ++s)
    poll_or_timeout([&] { return engine.slot_done(s); }, deadline, what, "a staging slot's previous copy");
  CopyInSource source(host);
  cuda::StagedUpload transfer(engine, source, host.size());
  if (!transfer.run_until(deadline))
    raise<TimeoutError>(what, ": staging ", host.size(), " bytes to the device did not finish within ANTDT_TIMEOUT_MS");
}

// ---------------------------------------------------------------------------
// IPC path
// ---------------------------------------------------------------------------
Slice ipc_slice(std::size_t count, int nranks, int rank) {
  ANTDT_CHECK_ARG(nranks >= 1 && rank >= 0 && rank < nranks, "ipc_slice: rank ", rank, " of ", nranks);
  const auto n = static_cast<std::size_t>(nranks), r = static_cast<std::size_t>(rank);
  const std::size_t base = count / n, extra = count % n;
  return Slice{r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

std::uint64_t node_identity() {
  static const std::uint64_t id = [] {
    std::array<char, 256> host{};
    if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
    std::string boot;
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    if (in) std::getline(in, boot);
    return fnv1a(fnv1a(0xcbf29ce484222325ULL, host.data()), boot);
  }();
  return id;
}

namespace {

void put_u32(std::byte* out, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
void put_u64(std::byte* out, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
std::uint32_t get_u32(const std::byte* in) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(in[i]) << (8 * i);
  return v;
}
std::uint64_t get_u64(const std::byte* in) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return v;
}

constexpr std::size_t kHandleBytes = cuda::IpcHandle::kWireBytes;
// Flags (the record's second word).
constexpr std::uint32_t kExportable = 1, kDeviceBuffers = 2, kTransportMovesDeviceMemory = 4;
constexpr std::size_t kSendAt = 16, kRecvAt = kSendAt + kHandleBytes, kReasonAt = kRecvAt + kHandleBytes;

}  // namespace

PeerRecord::Wire PeerRecord::serialize() const noexcept {
  Wire out{};
  put_u32(out.data(), kMagic);
  put_u32(out.data() + 4, (exportable ? kExportable : 0) | (device_buffers ? kDeviceBuffers : 0) |
                              (transport_moves_device_memory ? kTransportMovesDeviceMemory : 0));
  put_u64(out.data() + 8, node);
  if (exportable) {
    const cuda::IpcHandle::Wire s = send.serialize(), r = recv.serialize();
    std::memcpy(out.data() + kSendAt, s.data(), kHandleBytes);
    std::memcpy(out.data() + kRecvAt, r.data(), kHandleBytes);
  }
  std::memcpy(out.data() + kReasonAt, reason.data(), std::min(reason.size(), kReasonBytes));
  return out;
}

PeerRecord PeerRecord::deserialize(std::span<const std::byte> wire) {
  ANTDT_CHECK_ARG(wire.size() == kWireBytes, "device peer record of ", wire.size(), " bytes (expected ", kWireBytes,
                  ")");
  ANTDT_CHECK_ARG(get_u32(wire.data()) == kMagic, "device peer record: wrong magic (not an antdt peer record)");
  PeerRecord rec;
  const std::uint32_t flags = get_u32(wire.data() + 4);
  ANTDT_CHECK_ARG((flags & ~(kExportable | kDeviceBuffers | kTransportMovesDeviceMemory)) == 0,
                  "device peer record: unknown flags ", flags);
  rec.exportable = (flags & kExportable) != 0;
  rec.device_buffers = (flags & kDeviceBuffers) != 0;
  rec.transport_moves_device_memory = (flags & kTransportMovesDeviceMemory) != 0;
  rec.node = get_u64(wire.data() + 8);
  if (rec.exportable) {
    rec.send = cuda::IpcHandle::deserialize(wire.subspan(kSendAt, kHandleBytes));
    rec.recv = cuda::IpcHandle::deserialize(wire.subspan(kRecvAt, kHandleBytes));
  }
  const auto* reason = reinterpret_cast<const char*>(wire.data() + kReasonAt);
  rec.reason.assign(reason, strnlen(reason, kReasonBytes));
  return rec;
}

bool exchanges_records(GpuPath setting, int nranks) { return setting != GpuPath::staged && nranks > 1; }

Path resolve_path(GpuPath setting, std::span<const PeerRecord> records) {
  ANTDT_CHECK_ARG(!records.empty(), "resolve_path: no peer records");
  std::string ipc_obstacle, direct_obstacle;
  for (std::size_t r = 0; r < records.size(); ++r) {
    const PeerRecord& rec = records[r];
    if (ipc_obstacle.empty() && !rec.exportable)
      ipc_obstacle = cat("rank ", r, " cannot export its buffers for CUDA IPC (",
                         rec.reason.empty() ? "no reason given" : rec.reason, ")");
    else if (ipc_obstacle.empty() && rec.node != records[0].node)
      ipc_obstacle = cat("rank ", r, " is on another node than rank 0");
    if (direct_obstacle.empty() && !rec.device_buffers)
      direct_obstacle = cat("rank ", r, " passed host memory");
    else if (direct_obstacle.empty() && !rec.transport_moves_device_memory)
      direct_obstacle = cat("rank ", r, "'s transport cannot move device memory (UCX without CUDA support)");
  }
  if (setting == GpuPath::direct) {
    if (direct_obstacle.empty()) return Path::direct;
    raise<UnsupportedError>("ANTDT_GPU_PATH=direct, but ", direct_obstacle, "; use ANTDT_GPU_PATH=auto or staged");
  }
  if (ipc_obstacle.empty()) return Path::ipc;
  if (setting == GpuPath::ipc)
    raise<UnsupportedError>("ANTDT_GPU_PATH=ipc, but ", ipc_obstacle, "; use ANTDT_GPU_PATH=auto or staged");
  return direct_obstacle.empty() ? Path::direct : Path::staged;
}

}  // namespace antdt::coll::device
