// The order in which an epoch hands out a dataset's samples: a keyed
// permutation of the sample ids drawn from the seed and the epoch
// (DdsOptions::shuffle), computed on demand instead of stored as a table, and
// the same with every compiler and standard library. Checkpoints store
// positions in this order, so its values must never change.
#pragma once

#include "scheduler/dds.hpp"

#include <cstdint>

namespace antdt::sched {

// The sample id at `position` (< n) of epoch `epoch`'s order over n samples:
// a bijection of 0..n-1 for each epoch.
std::uint64_t shuffled_sample(std::uint64_t n, const DdsOptions& options, std::uint32_t epoch,
                              std::uint64_t position) noexcept;

}  // namespace antdt::sched
