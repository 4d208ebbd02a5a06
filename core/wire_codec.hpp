// The byte codec of the control-plane messages (bootstrap, partial
// collectives, coordinator): fixed-width fields in host byte order — every
// rank of a job runs the same build on the same architecture, and each
// protocol's magic number and version catch anything else — and
// length-prefixed text; little-endian integers for a message whose bytes are
// specified so (UCX's abort message). Reading past the end, an over-long text
// or trailing bytes raise BootstrapError naming the message, so a peer's
// garbage is refused, never trusted. Also the HMAC both authenticated protocols use.
#pragma once

#include <antdt/comm.hpp>

#include "core/error.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace antdt::wire {

using Bytes = std::vector<std::byte>;

class ByteWriter {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    // resize + memcpy rather than insert(raw, raw + n), which GCC 12 at -O3
    // reports (falsely) as an overflow.
    const std::size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  // An unsigned integer, least significant byte first, whatever the host.
  template <std::unsigned_integral T>
  void put_le(T v) {
    for (std::size_t i = 0; i < sizeof(T); ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  }
  void bytes(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  // A u32 length and the text, cut to max_bytes.
  void text(std::string_view s, std::size_t max_bytes) {
    const std::string_view cut = s.substr(0, max_bytes);
    put(static_cast<std::uint32_t>(cut.size()));
    bytes(std::as_bytes(std::span(cut.data(), cut.size())));
  }
  Bytes& buffer() noexcept { return out_; }
  Bytes take() { return std::move(out_); }

 private:
  Bytes out_;
};

class ByteReader {
 public:
  // `what` names the message in errors: "malformed <what>: ...".
  ByteReader(std::span<const std::byte> in, std::string what) : in_(in), what_(std::move(what)) {}

  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // An unsigned integer written by ByteWriter::put_le.
  template <std::unsigned_integral T>
  T get_le() {
    need(sizeof(T));
    T v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(std::to_integer<T>(in_[pos_ + i]) << (8 * i));
    pos_ += sizeof(T);
    return v;
  }
  void bytes(std::span<std::byte> out) {
    need(out.size());
    std::memcpy(out.data(), in_.data() + pos_, out.size());
    pos_ += out.size();
  }
  std::string text(std::size_t max_bytes) {
    const auto len = get<std::uint32_t>();
    if (len > max_bytes) fail("text of ", len, " bytes exceeds ", max_bytes);
    need(len);
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), len);
    pos_ += len;
    return s;
  }
  bool flag() {
    const auto v = get<std::uint8_t>();
    if (v > 1) fail("flag byte ", int{v});
    return v == 1;
  }
  void skip(std::size_t n) {
    need(n);
    pos_ += n;
  }
  std::size_t left() const noexcept { return in_.size() - pos_; }
  // The bytes not read yet (a nested message), all taken.
  std::span<const std::byte> rest() noexcept {
    auto out = in_.subspan(pos_);
    pos_ = in_.size();
    return out;
  }
  // Everything was read.
  void done() const {
    if (pos_ != in_.size()) fail(in_.size() - pos_, " unexpected trailing bytes");
  }
  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    raise<BootstrapError>("malformed ", what_, ": ", parts...);
  }

 private:
  void need(std::size_t n) const {
    if (in_.size() - pos_ < n) fail("truncated (", in_.size(), " bytes)");
  }
  std::span<const std::byte> in_;
  std::string what_;
  std::size_t pos_ = 0;
};

inline constexpr std::size_t kHmacBytes = 32;
using Hmac = std::array<std::byte, kHmacBytes>;
// HMAC-SHA256 of `message` keyed by `secret` (OpenSSL). InternalError if OpenSSL fails.
Hmac hmac_sha256(std::span<const std::byte> secret, std::span<const std::byte> message);
// Constant-time comparison.
bool same_mac(const Hmac& a, const Hmac& b) noexcept;

}  // namespace antdt::wire
