// The segment pipeline through the staging slots (segment_pipeline.hpp).
#include "collectives/device/segment_pipeline.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace antdt::coll::device {

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

}  // namespace antdt::coll::device
