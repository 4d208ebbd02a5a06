// Streaming copies (core/stream_copy.hpp): every byte arrives, for every
// alignment of source and destination and sizes around the 16-byte stores and
// the 64-byte loop, and nothing outside the destination is written.
#include "core/stream_copy.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace antdt {
namespace {

TEST(StreamCopy, EveryAlignmentAndSizeCopiesExactlyTheBytes) {
  constexpr std::size_t kGuard = 80;
  for (std::size_t bytes : {0u, 1u, 15u, 16u, 17u, 63u, 64u, 65u, 127u, 1000u, 4103u, 65536u + 9u}) {
    for (std::size_t dst_offset = 0; dst_offset < 18; ++dst_offset) {
      for (std::size_t src_offset : {0u, 1u, 3u, 8u}) {
        std::vector<std::byte> src(bytes + src_offset), dst(kGuard + dst_offset + bytes + kGuard, std::byte{0xee});
        for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>((i * 131 + bytes) % 251);
        std::byte* out = dst.data() + kGuard + dst_offset;
        stream_copy(out, src.data() + src_offset, bytes);
        stream_fence();
        for (std::size_t i = 0; i < bytes; ++i)
          ASSERT_EQ(out[i], src[src_offset + i]) << bytes << " bytes, offsets " << dst_offset << "/" << src_offset
                                                 << ", byte " << i;
        for (std::size_t i = 0; i < kGuard + dst_offset; ++i) ASSERT_EQ(dst[i], std::byte{0xee}) << "before, " << i;
        for (std::size_t i = kGuard + dst_offset + bytes; i < dst.size(); ++i)
          ASSERT_EQ(dst[i], std::byte{0xee}) << "after, " << i;
      }
    }
  }
}

}  // namespace
}  // namespace antdt
