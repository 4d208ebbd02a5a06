// Whole-buffer staging copies, for the collectives whose blocks are not
// elementwise segments: a device range to host bytes and host bytes to a
// device range, through the engine's pinned slots (cuda::StagedDownload /
// StagedUpload), bounded by a deadline.
#pragma once

#include "collectives/device/bounded_poll.hpp"
#include "cuda/staging.hpp"

#include <cstddef>
#include <span>

namespace antdt::coll::device {

// host <- the engine's device range [0, host.size()). TimeoutError naming
// `what` past the deadline.
void download_all(cuda::CopyEngine& engine, std::span<std::byte> host, Clock::time_point deadline, const char* what);
// The engine's device range [0, host.size()) <- host, once every slot's
// previous copy has finished. TimeoutError naming `what` past the deadline.
void upload_all(cuda::CopyEngine& engine, std::span<const std::byte> host, Clock::time_point deadline,
                const char* what);

}  // namespace antdt::coll::device
