#include "core/bootstrap_wire.hpp"

#include "core/error.hpp"
#include "core/wire_codec.hpp"

#include <cstring>

namespace antdt::wire {
namespace {

template <class T>
void put(std::vector<std::byte>& out, T v) {
  ByteWriter w;
  w.buffer() = std::move(out);
  w.put(v);
  out = w.take();
}

template <class T>
T get(std::span<const std::byte> in, std::size_t offset) {
  T v;
  std::memcpy(&v, in.data() + offset, sizeof(T));
  return v;
}

std::vector<std::byte> prefix(Kind kind) {
  std::vector<std::byte> out;
  put(out, kMagic);
  put(out, kVersion);
  put(out, static_cast<std::uint16_t>(kind));
  return out;
}

void check_prefix(std::span<const std::byte> in, std::size_t need, Kind expected, const char* what) {
  if (in.size() < need) raise<BootstrapError>("malformed bootstrap ", what, ": ", in.size(), " bytes, expected ", need);
  auto magic = get<std::uint32_t>(in, 0);
  if (magic != kMagic) raise<BootstrapError>("malformed bootstrap ", what, ": bad magic 0x", std::hex, magic);
  auto version = get<std::uint16_t>(in, 4);
  if (version != kVersion)
    raise<BootstrapError>("bootstrap ", what, " has protocol version ", version, ", this library speaks ", kVersion,
                          " (mixed antdt versions in one job?)");
  auto kind = get<std::uint16_t>(in, 6);
  if (kind != static_cast<std::uint16_t>(expected))
    raise<BootstrapError>("malformed bootstrap ", what, ": message kind ", kind, ", expected ",
                          static_cast<int>(expected));
}

}  // namespace

std::vector<std::byte> encode(const Challenge& c) {
  auto out = prefix(Kind::challenge);
  out.insert(out.end(), c.nonce.begin(), c.nonce.end());
  return out;
}

std::vector<std::byte> encode(const Hello& h) {
  auto out = prefix(Kind::hello);
  put(out, h.rank);
  put(out, h.size);
  out.insert(out.end(), h.mac.begin(), h.mac.end());
  return out;
}

std::vector<std::byte> encode(const Verdict& v) {
  auto out = prefix(Kind::verdict);
  std::string reason = v.reason.substr(0, kMaxReasonBytes);
  put(out, static_cast<std::uint32_t>(v.accepted ? 1 : 0));
  put(out, static_cast<std::uint32_t>(reason.size()));
  const auto* p = reinterpret_cast<const std::byte*>(reason.data());
  out.insert(out.end(), p, p + reason.size());
  return out;
}

std::array<std::byte, kFrameHeadBytes> encode_frame_head(Kind kind, std::uint64_t payload_bytes) {
  auto v = prefix(kind);
  put(v, payload_bytes);
  std::array<std::byte, kFrameHeadBytes> out{};
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

Challenge decode_challenge(std::span<const std::byte> bytes) {
  check_prefix(bytes, kChallengeBytes, Kind::challenge, "challenge");
  Challenge c;
  std::memcpy(c.nonce.data(), bytes.data() + kPrefixBytes, kNonceBytes);
  return c;
}

Hello decode_hello(std::span<const std::byte> bytes) {
  check_prefix(bytes, kHelloBytes, Kind::hello, "hello");
  Hello h;
  h.rank = get<std::uint32_t>(bytes, kPrefixBytes);
  h.size = get<std::uint32_t>(bytes, kPrefixBytes + 4);
  std::memcpy(h.mac.data(), bytes.data() + kPrefixBytes + 8, kMacBytes);
  return h;
}

std::pair<bool, std::size_t> decode_verdict_head(std::span<const std::byte> bytes) {
  check_prefix(bytes, kVerdictHeadBytes, Kind::verdict, "verdict");
  auto accepted = get<std::uint32_t>(bytes, kPrefixBytes);
  auto reason_len = get<std::uint32_t>(bytes, kPrefixBytes + 4);
  if (accepted > 1) raise<BootstrapError>("malformed bootstrap verdict: accepted flag ", accepted);
  if (reason_len > kMaxReasonBytes)
    raise<BootstrapError>("malformed bootstrap verdict: reason of ", reason_len, " bytes exceeds ", kMaxReasonBytes);
  return {accepted == 1, reason_len};
}

std::uint64_t decode_frame_head(Kind expected, std::span<const std::byte> bytes) {
  check_prefix(bytes, kFrameHeadBytes, expected, "frame");
  auto len = get<std::uint64_t>(bytes, kPrefixBytes);
  if (len > kMaxFrameBytes)
    raise<BootstrapError>("malformed bootstrap frame: ", len, " bytes exceeds the limit of ", kMaxFrameBytes);
  return len;
}

std::vector<std::byte> encode_gathered(const std::vector<std::vector<std::byte>>& parts) {
  std::vector<std::byte> out;
  for (const auto& p : parts) {
    put(out, static_cast<std::uint64_t>(p.size()));
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

std::vector<std::vector<std::byte>> decode_gathered(std::span<const std::byte> bytes, std::size_t expected_parts) {
  std::vector<std::vector<std::byte>> parts;
  parts.reserve(expected_parts);
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 8) raise<BootstrapError>("malformed gathered bootstrap data: truncated length field");
    auto len = get<std::uint64_t>(bytes, pos);
    pos += 8;
    if (len > bytes.size() - pos)
      raise<BootstrapError>("malformed gathered bootstrap data: part of ", len, " bytes overruns the frame");
    if (parts.size() == expected_parts)
      raise<BootstrapError>("malformed gathered bootstrap data: more than ", expected_parts, " parts");
    parts.emplace_back(bytes.begin() + static_cast<std::ptrdiff_t>(pos),
                       bytes.begin() + static_cast<std::ptrdiff_t>(pos + len));
    pos += len;
  }
  if (parts.size() != expected_parts)
    raise<BootstrapError>("malformed gathered bootstrap data: ", parts.size(), " parts, expected ", expected_parts);
  return parts;
}

std::array<std::byte, kMacBytes> prove(std::span<const std::byte> secret, const Challenge& c, std::uint32_t rank,
                                       std::uint32_t size) {
  std::vector<std::byte> msg(c.nonce.begin(), c.nonce.end());
  put(msg, rank);
  put(msg, size);
  return hmac_sha256(secret, msg);
}

bool verify(std::span<const std::byte> secret, const Challenge& c, const Hello& h) {
  auto expected = prove(secret, c, h.rank, h.size);
  return same_mac(expected, h.mac);
}

}  // namespace antdt::wire
