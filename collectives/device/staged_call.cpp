// StagedCall: segment-by-segment staging around the caller's messages
// (staged_call.hpp), on the segment pipeline.
#include "collectives/device/staged_call.hpp"

#include "collectives/device/backend.hpp"
#include "collectives/device/device_call.hpp"
#include "collectives/device/segment_pipeline.hpp"
#include "cuda/nvtx.hpp"

#include <cstring>

namespace antdt::coll::device {
namespace {

// A segment's host side: copies between the pinned slot and the caller's host
// copy, and tells the caller (download: after the bytes landed; upload:
// before they are staged).
class CopyOutSegments final : public SegmentWork {
 public:
  CopyOutSegments(std::span<std::byte> host, const std::function<void(std::size_t)>& arrived)
      : host_(host), arrived_(arrived) {}
  void run(std::size_t, std::size_t offset, std::span<std::byte> slot) override {
    std::memcpy(host_.data() + offset, slot.data(), slot.size());
    arrived_(offset + slot.size());
  }

 private:
  std::span<std::byte> host_;
  const std::function<void(std::size_t)>& arrived_;
};

class CopyInSegments final : public SegmentWork {
 public:
  CopyInSegments(std::span<const std::byte> host, const std::function<void(std::size_t, std::size_t)>& await)
      : host_(host), await_(await) {}
  void run(std::size_t, std::size_t offset, std::span<std::byte> slot) override {
    await_(offset, offset + slot.size());
    std::memcpy(slot.data(), host_.data() + offset, slot.size());
  }

 private:
  std::span<const std::byte> host_;
  const std::function<void(std::size_t, std::size_t)>& await_;
};

}  // namespace

StagedCall::StagedCall(detail::CommImpl& comm, const void* buffer, void* stream, const char* what)
    : comm_(comm), work_(backend().begin(buffer, stream)), what_(what) {}

StagedCall::~StagedCall() = default;

void StagedCall::download(const void* device, std::span<std::byte> host,
                          const std::function<void(std::size_t)>& arrived) {
  if (host.empty()) return;
  cuda::NvtxRange range("antdt staged download (segments)");
  failing_together(comm_, what_, [&] {
    cuda::CopyEngine& engine = work_->staging(const_cast<void*>(device), host.size());
    CopyOutSegments segments(host, arrived);
    // Download only: the engine never writes the caller's device buffer.
    run_segments(engine, host.size(), segment_bytes(engine.slot_bytes(), 1), true, false, segments,
                 deadline_of(comm_), what_);
  });
}

void StagedCall::upload(void* device, std::span<const std::byte> host,
                        const std::function<void(std::size_t, std::size_t)>& await) {
  if (host.empty()) return;
  cuda::NvtxRange range("antdt staged upload (segments)");
  failing_together(comm_, what_, [&] {
    cuda::CopyEngine& engine = work_->staging(device, host.size());
    CopyInSegments segments(host, await);
    run_segments(engine, host.size(), segment_bytes(engine.slot_bytes(), 1), false, true, segments,
                 deadline_of(comm_), what_);
  });
}

void StagedCall::finish() { finish_call(*work_, comm_, nullptr, what_); }

}  // namespace antdt::coll::device
