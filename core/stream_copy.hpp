// Copies that bypass the caches on the way out (non-temporal stores), for
// results written once and not read again soon: a cached store first reads
// the destination's line from memory (read for ownership), so a copy into a
// buffer far larger than the caches moves its bytes three times; a streaming
// store moves them twice. glibc's memcpy streams only above a threshold near
// the cache size, and the shared-memory AllReduce copies in blocks below it
// (docs/collectives.md, "the bulk area").
#pragma once

#include <cstddef>

namespace antdt {

// dst and src do not overlap (either may be null when bytes is 0). The stores are weakly ordered: call
// stream_fence() before another thread or process may read dst.
void stream_copy(void* dst, const void* src, std::size_t bytes) noexcept;
void stream_fence() noexcept;

}  // namespace antdt
