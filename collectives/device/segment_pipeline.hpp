// The segment pipeline of the staged path (docs/gpu.md): a device range cut
// into segments that move through the pinned staging slots, the download of
// the next segments and the upload of the last one overlapping the host work
// on the current one. No CUDA here: it drives cuda::CopyEngine, and the unit
// tests drive it with fakes.
#pragma once

#include "collectives/device/bounded_poll.hpp"
#include "cuda/staging.hpp"

#include <cstddef>
#include <span>

namespace antdt::coll::device {

// Bytes per staged segment: the largest whole number of `esize`-byte
// elements that fits one slot (a segment is one host collective).
std::size_t segment_bytes(std::size_t slot_bytes, std::size_t esize);

// The host side of a segmented staged call.
class SegmentWork {
 public:
  virtual ~SegmentWork() = default;
  // Runs the host collective on one segment: `host` holds bytes [offset,
  // offset + host.size()) of the device range (downloaded, when the pipeline
  // downloads); what it leaves there is uploaded (when it uploads).
  virtual void run(std::size_t index, std::size_t offset, std::span<std::byte> host) = 0;
};

// Runs `work` on every segment of the device range the engine is bound to
// (total_bytes, cut into segments of seg_bytes): download segment k into slot
// k % slots (when `download`), run the host collective on it, upload it back
// (when `upload`). Downloads of the next segments overlap the host work on
// segment k, and the upload of k overlaps the host work on k + 1. A slot is
// reused only once everything started on it has finished (this also guards
// against a previous call's uploads still in flight on the same engine).
// Returns without waiting for the last uploads (the caller orders them with
// its stream). Throws TimeoutError naming `what` when a copy does not finish
// by `deadline`.
void run_segments(cuda::CopyEngine& engine, std::size_t total_bytes, std::size_t seg_bytes, bool download,
                  bool upload, SegmentWork& work, Clock::time_point deadline, const char* what);

}  // namespace antdt::coll::device
