// Whole-buffer staging copies through the pinned slots (staged_copy.hpp).
#include "collectives/device/staged_copy.hpp"

#include "core/error.hpp"

#include <cstring>

namespace antdt::coll::device {
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

}  // namespace antdt::coll::device
