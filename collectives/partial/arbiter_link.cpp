#include "collectives/partial/arbiter_link.hpp"

#include "core/error.hpp"

#include <climits>
#include <cmath>
#include <cstring>
#include <unistd.h>

namespace antdt::coll::partial {
namespace {

enum class Kind : std::uint16_t { hello = 1, answer = 2 };
constexpr std::string_view kDomain = "antdt-arbiter-v1";
constexpr std::size_t kMaxReason = 1024;

// The limits a hello's settings must keep (core/config.cpp reads the same
// variables with these ranges, and the Arbiter and Monitor check them again).
constexpr std::uint64_t kMaxResultCache = 1024;
constexpr std::uint32_t kMaxWarmup = 100'000;
constexpr std::uint64_t kMaxMonitorWindow = 65536;
constexpr std::uint32_t kMaxShortSteps = 100'000;

class Writer : public wire::ByteWriter {
 public:
  explicit Writer(Kind kind) {
    put(kArbiterLinkMagic);
    put(kArbiterLinkVersion);
    put(static_cast<std::uint16_t>(kind));
  }
};

class Reader : public wire::ByteReader {
 public:
  Reader(std::span<const std::byte> in, Kind expected) : ByteReader(in, "arbiter link message") {
    if (get<std::uint32_t>() != kArbiterLinkMagic) fail("bad magic");
    if (const auto version = get<std::uint16_t>(); version != kArbiterLinkVersion)
      fail("version ", version, ", expected ", kArbiterLinkVersion);
    if (const auto kind = get<std::uint16_t>(); kind != static_cast<std::uint16_t>(expected))
      fail("kind ", kind, ", expected ", static_cast<std::uint16_t>(expected));
  }
  double real(const char* name, double lo, double hi, bool lo_open) {
    const auto v = get<double>();
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
      fail(name, " ", v, " is out of range ", lo_open ? "(" : "[", lo, ", ", hi, "]");
    return v;
  }
  template <class T>
  T whole(const char* name, T lo, T hi) {
    const auto v = get<T>();
    if (v < lo || v > hi) fail(name, " ", v, " is out of range [", lo, ", ", hi, "]");
    return v;
  }
};

// Every field but the MAC, in wire order: what the MAC covers.
void put_fields(wire::ByteWriter& w, const ArbiterHello& h) {
  w.bytes(h.key);
  w.put(h.rank);
  w.put(h.size);
  w.text(h.who, kMaxWhoBytes);
  w.put(h.result_cache);
  w.put(h.quorum);
  w.put(h.grace_s);
  w.put(h.warmup_steps);
  w.put(h.monitor_window);
  w.put(h.monitor_alpha);
  w.put(h.monitor_theta);
  w.put(h.monitor_short_steps);
  w.put(h.monitor_grace_margin);
}

std::string who_am_i() {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return cat("pid ", ::getpid(), " on host ", host);
}

}  // namespace

GroupKey group_key_of(std::span<const std::byte> unique_id) {
  constexpr std::string_view domain = "antdt-arbiter-group";
  const auto mac = wire::hmac_sha256(std::as_bytes(std::span(domain.data(), domain.size())), unique_id);
  GroupKey key;
  std::copy_n(mac.begin(), key.size(), key.begin());
  return key;
}

ArbiterConfig ArbiterHello::config() const {
  ArbiterConfig c;
  c.ranks = static_cast<int>(size);
  c.result_cache = static_cast<std::size_t>(result_cache);
  c.quorum = quorum;
  c.grace_s = grace_s;
  c.warmup_steps = static_cast<int>(warmup_steps);
  c.monitor.window = static_cast<std::size_t>(monitor_window);
  c.monitor.alpha = monitor_alpha;
  c.monitor.theta = monitor_theta;
  c.monitor.short_steps = monitor_short_steps;
  c.monitor.grace_margin = monitor_grace_margin;
  return c;
}

ArbiterHello make_arbiter_hello(const GroupKey& key, int rank, int size, const ArbiterConfig& cfg) {
  ArbiterHello h;
  h.key = key;
  h.rank = static_cast<std::uint32_t>(rank);
  h.size = static_cast<std::uint32_t>(size);
  h.who = who_am_i();
  h.result_cache = cfg.result_cache;
  h.quorum = cfg.quorum;
  h.grace_s = cfg.grace_s;
  h.warmup_steps = static_cast<std::uint32_t>(cfg.warmup_steps);
  h.monitor_window = cfg.monitor.window;
  h.monitor_alpha = cfg.monitor.alpha;
  h.monitor_theta = cfg.monitor.theta;
  h.monitor_short_steps = cfg.monitor.short_steps;
  h.monitor_grace_margin = cfg.monitor.grace_margin;
  return h;
}

bool is_arbiter_hello(std::span<const std::byte> frame) noexcept {
  std::uint32_t magic = 0;
  if (frame.size() < sizeof magic) return false;
  std::memcpy(&magic, frame.data(), sizeof magic);
  return magic == kArbiterLinkMagic;
}

wire::Bytes encode(const ArbiterHello& hello) {
  Writer w(Kind::hello);
  put_fields(w, hello);
  w.bytes(hello.mac);
  return w.take();
}

ArbiterHello decode_arbiter_hello(std::span<const std::byte> frame) {
  Reader r(frame, Kind::hello);
  ArbiterHello h;
  r.bytes(h.key);
  h.rank = r.get<std::uint32_t>();
  h.size = r.whole<std::uint32_t>("size", 1, kMaxArbiterRanks);
  if (h.rank >= h.size) r.fail("rank ", h.rank, " is out of range [0, ", h.size, ")");
  h.who = r.text(kMaxWhoBytes);
  h.result_cache = r.whole<std::uint64_t>("result cache", 2, kMaxResultCache);
  h.quorum = r.real("quorum", 0, 1, true);
  h.grace_s = r.real("grace", 0, 600, false);
  h.warmup_steps = r.whole<std::uint32_t>("warm-up", 0, kMaxWarmup);
  h.monitor_window = r.whole<std::uint64_t>("monitor window", 1, kMaxMonitorWindow);
  h.monitor_alpha = r.real("monitor alpha", 0, 1, true);
  h.monitor_theta = r.real("monitor theta", 1, 100, true);
  h.monitor_short_steps = r.whole<std::uint32_t>("monitor short steps", 1, kMaxShortSteps);
  h.monitor_grace_margin = r.real("monitor grace margin", 0, 100, true);
  r.bytes(h.mac);
  r.done();
  return h;
}

wire::Hmac prove_arbiter_hello(std::span<const std::byte> secret, std::span<const std::byte> challenge,
                               const ArbiterHello& hello) {
  wire::ByteWriter w;
  w.bytes(std::as_bytes(std::span(kDomain.data(), kDomain.size())));
  w.text(std::string_view(reinterpret_cast<const char*>(challenge.data()), challenge.size()), kMaxChallengeBytes);
  put_fields(w, hello);
  return wire::hmac_sha256(secret, w.buffer());
}

bool verify_arbiter_hello(std::span<const std::byte> secret, std::span<const std::byte> challenge,
                          const ArbiterHello& hello) {
  return challenge.size() <= kMaxChallengeBytes && wire::same_mac(prove_arbiter_hello(secret, challenge, hello), hello.mac);
}

wire::Bytes encode(const ArbiterAnswer& answer) {
  Writer w(Kind::answer);
  w.put(static_cast<std::uint8_t>(answer.accepted ? 1 : 0));
  w.text(answer.reason, kMaxReason);
  return w.take();
}

ArbiterAnswer decode_arbiter_answer(std::span<const std::byte> frame) {
  Reader r(frame, Kind::answer);
  ArbiterAnswer a;
  a.accepted = r.flag();
  a.reason = r.text(kMaxReason);
  r.done();
  return a;
}

net::Fd connect_to_arbiter(const net::Endpoint& address, std::span<const std::byte> secret, ArbiterHello hello,
                           net::Clock::time_point deadline) {
  const std::string where = address.to_string();
  net::Fd fd;
  try {
    fd = net::connect_to(address, deadline);  // retries a refused connection (a coordinator restarting) until then
  } catch (const Error& e) {
    throw_status(e.status(), cat("rank ", hello.rank, " cannot reach its arbiter at antdt-coordinator ", where,
                                 " (ANTDT_COORDINATOR; ANTDT_PARTIAL_ARBITER=rank0 keeps it in rank 0): ", e.what()));
  }
  control::Link link(std::move(fd));
  auto challenge = link.receive(deadline);
  if (!challenge) raise<TimeoutError>("the arbiter at ", where, " (ANTDT_COORDINATOR) sent no challenge in time");
  if (challenge->size() > kMaxChallengeBytes)
    raise<BootstrapError>("the arbiter at ", where, " (ANTDT_COORDINATOR) opened with ", challenge->size(),
                          " bytes, not a challenge: is it an antdt-coordinator?");
  hello.mac = prove_arbiter_hello(secret, *challenge, hello);
  link.send(encode(hello), deadline);
  auto frame = link.receive(deadline);
  if (!frame) raise<TimeoutError>("the arbiter at ", where, " (ANTDT_COORDINATOR) did not answer rank ", hello.rank);
  const ArbiterAnswer answer = decode_arbiter_answer(*frame);
  if (!answer.accepted)
    raise<BootstrapError>("the arbiter at ", where, " (ANTDT_COORDINATOR) refused rank ", hello.rank, ": ",
                          answer.reason);
  // The link's descriptor, now carrying the partial protocol.
  return link.release();
}

}  // namespace antdt::coll::partial
