#include "scheduler/coordinator/wire.hpp"

#include "collectives/communicator.hpp"
#include "core/error.hpp"
#include "core/wire_codec.hpp"

#include <cmath>
#include <cstring>
#include <string_view>
#include <type_traits>

namespace antdt::sched::coord {
namespace {

constexpr std::size_t kPrefixBytes = 8;
constexpr std::string_view kMacDomain = "antdt-coordinator-v1";

// The codec is core/wire_codec.hpp; these add the protocol's prefix and limits.
class Writer : public wire::ByteWriter {
 public:
  explicit Writer(Kind kind) {
    put(kMagic);
    put(kVersion);
    put(static_cast<std::uint16_t>(kind));
  }
  void text(const std::string& s) { ByteWriter::text(s, kMaxTextBytes); }
};

class Reader : public wire::ByteReader {
 public:
  Reader(std::span<const std::byte> in, Kind expected, const char* what) : ByteReader(in, cat("coordinator ", what)) {
    const Kind kind = peek_kind(in);
    if (kind != expected) fail("message kind ", static_cast<int>(kind), ", expected ", static_cast<int>(expected));
    skip(kPrefixBytes);
  }
  double real() {
    const auto v = get<double>();
    if (!std::isfinite(v) || v < 0) fail("time ", v, " is not a finite non-negative number");
    return v;
  }
  template <std::size_t N>
  void bytes(std::array<std::byte, N>& out) {
    ByteReader::bytes(std::span(out));
  }
  std::string text() { return ByteReader::text(kMaxTextBytes); }
};

Fate fate_from(std::uint8_t v, const char* what) {
  if (v > static_cast<std::uint8_t>(Fate::none)) raise<BootstrapError>("malformed coordinator ", what, ": fate ", int{v});
  return static_cast<Fate>(v);
}

LatePolicy late_from(std::uint8_t v) {
  if (v > static_cast<std::uint8_t>(LatePolicy::defer)) raise<BootstrapError>("malformed coordinator plan: late policy ", int{v});
  return static_cast<LatePolicy>(v);
}

// A reply in the place of `expected` may be an error: thrown as its antdt::Error.
void throw_if_error(std::span<const std::byte> bytes) {
  if (peek_kind(bytes) != Kind::error) return;
  ErrorReply e = decode_error(bytes);
  throw_status(e.status, "coordinator: " + e.message);
}

// A step report's fields (a report frame's, or the head of a with_report frame).
void put_report(Writer& w, const Report& m) {
  w.put(m.step);
  w.put(m.compute_s);
  w.put(m.wait_s);
  w.put(m.transfer_s);
  w.put(m.samples);
  w.put(static_cast<std::uint8_t>(m.fate));
}
Report get_report(Reader& r) {
  Report m;
  m.step = r.get<std::uint64_t>();
  m.compute_s = r.real();
  m.wait_s = r.real();
  m.transfer_s = r.real();
  m.samples = r.get<std::uint64_t>();
  m.fate = fate_from(r.get<std::uint8_t>(), "step report");
  return m;
}

// A batch's fields, the last ones of a batch reply or of a plan that carries one.
void put_batch(Writer& w, const BatchReply& m) {
  ANTDT_CHECK_ARG(m.samples.size() <= kMaxBatchSamples, "a batch of ", m.samples.size(), " samples exceeds the limit of ",
                  kMaxBatchSamples);
  w.put(m.status);
  w.put(m.lease);
  w.put(m.epoch);
  w.put(static_cast<std::uint64_t>(m.samples.size()));
  w.bytes(std::as_bytes(std::span(m.samples)));
}

BatchReply read_batch(Reader& r) {
  BatchReply m;
  m.status = r.get<std::uint8_t>();
  if (m.status > 2) raise<BootstrapError>("malformed coordinator batch: status ", int{m.status});
  m.lease = r.get<std::uint64_t>();
  m.epoch = r.get<std::uint32_t>();
  const auto count = r.get<std::uint64_t>();
  if (count > kMaxBatchSamples || count * 8 != r.left())
    raise<BootstrapError>("malformed coordinator batch: ", count, " samples in ", r.left(), " bytes");
  if ((count > 0) != (m.status == 0))
    raise<BootstrapError>("malformed coordinator batch: ", count, " samples with status ", int{m.status});
  m.samples.resize(count);
  for (auto& id : m.samples) id = r.get<std::uint64_t>();
  return m;
}

}  // namespace

Kind peek_kind(std::span<const std::byte> bytes) {
  if (bytes.size() < kPrefixBytes)
    raise<BootstrapError>("malformed coordinator message: ", bytes.size(), " bytes, shorter than its prefix");
  std::uint32_t magic;
  std::uint16_t version, kind;
  std::memcpy(&magic, bytes.data(), 4);
  std::memcpy(&version, bytes.data() + 4, 2);
  std::memcpy(&kind, bytes.data() + 6, 2);
  if (magic != kMagic) raise<BootstrapError>("malformed coordinator message: bad magic 0x", std::hex, magic);
  if (version != kVersion)
    raise<BootstrapError>("coordinator message has protocol version ", version, ", this library speaks ", kVersion,
                          " (mixed antdt versions in one job?)");
  const bool known = (kind >= 1 && kind <= 3) || (kind >= 10 && kind <= 25);
  if (!known) raise<BootstrapError>("malformed coordinator message: unknown kind ", kind);
  return static_cast<Kind>(kind);
}

Bytes encode(const Challenge& m) {
  Writer w(Kind::challenge);
  w.bytes(m.nonce);
  return w.take();
}

Bytes encode(const Hello& m) {
  Writer w(Kind::hello);
  w.put(m.rank);
  w.put(m.world_size);
  w.put(m.incarnation);
  w.put(m.generation);
  w.put(static_cast<std::uint8_t>(m.reconnect));
  w.bytes(m.mac);
  return w.take();
}

Bytes encode(const Welcome& m) {
  Writer w(Kind::welcome);
  w.put(static_cast<std::uint8_t>(m.accepted));
  w.text(m.reason);
  w.put(m.generation);
  w.put(m.resume_step);
  return w.take();
}

Bytes encode(const Request& request) {
  return std::visit(
      [](const auto& m) -> Bytes {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, PlanRequest>) {
          Writer w(Kind::plan_request);
          w.put(m.step);
          w.put(m.fetch_max);
          return w.take();
        } else if constexpr (std::is_same_v<T, Report>) {
          Writer w(Kind::report);
          put_report(w, m);
          return w.take();
        } else if constexpr (std::is_same_v<T, Fetch>) {
          Writer w(Kind::fetch);
          w.put(m.max_samples);
          return w.take();
        } else if constexpr (std::is_same_v<T, Commit>) {
          Writer w(Kind::commit);
          w.put(m.lease);
          return w.take();
        } else if constexpr (std::is_same_v<T, GiveBack>) {
          Writer w(Kind::give_back);
          w.put(m.lease);
          return w.take();
        } else if constexpr (std::is_same_v<T, RequestRestart>) {
          return Writer(Kind::request_restart).take();
        } else if constexpr (std::is_same_v<T, OfferId>) {
          Writer w(Kind::offer_id);
          w.put(m.generation);
          w.bytes(m.id.bytes);
          return w.take();
        } else if constexpr (std::is_same_v<T, JoinGeneration>) {
          Writer w(Kind::join_generation);
          w.put(m.generation);
          return w.take();
        } else if constexpr (std::is_same_v<T, CommFailed>) {
          Writer w(Kind::comm_failed);
          w.put(m.generation);
          w.put(m.step);
          w.put(static_cast<std::uint32_t>(m.lost.size()));
          for (std::uint32_t r : m.lost) w.put(r);
          return w.take();
        } else {
          static_assert(std::is_same_v<T, Bye>);
          Writer w(Kind::bye);
          w.put(static_cast<std::uint8_t>(m.restarting));
          return w.take();
        }
      },
      request);
}

Bytes encode(const Envelope& m) {
  if (!m.report) return encode(m.request);
  ANTDT_CHECK_ARG(!std::holds_alternative<Report>(m.request), "coordinator wire: a report cannot carry another");
  Writer w(Kind::with_report);
  put_report(w, *m.report);
  const Bytes inner = encode(m.request);
  w.bytes(std::span(inner));
  return w.take();
}

Bytes encode(const Plan& m) {
  Writer w(Kind::plan);
  w.put(m.step);
  w.put(m.plan.local_batch);
  w.put(m.plan.micro_batches);
  w.put(m.plan.micro_batch);
  w.put(static_cast<std::uint8_t>(m.plan.late));
  w.put(m.plan.staleness);
  w.put(static_cast<std::uint8_t>(m.plan.restart));
  w.put(static_cast<std::uint8_t>(m.plan.resplit));
  w.put(static_cast<std::uint8_t>(m.stop));
  w.put(m.generation);
  w.put(static_cast<std::uint8_t>(m.batch.has_value()));
  if (m.batch) put_batch(w, *m.batch);
  return w.take();
}

Bytes encode(const BatchReply& m) {
  Writer w(Kind::batch);
  put_batch(w, m);
  return w.take();
}

Bytes encode(const GenerationId& m) {
  Writer w(Kind::generation_id);
  w.put(static_cast<std::uint8_t>(m.ready));
  w.put(static_cast<std::uint8_t>(m.abandoned));
  w.put(m.generation);
  w.bytes(m.id.bytes);
  w.put(static_cast<std::uint32_t>(m.members.size()));
  for (std::uint32_t r : m.members) w.put(r);
  return w.take();
}

Bytes encode(const Ack& m) {
  Writer w(Kind::ack);
  w.put(static_cast<std::uint8_t>(m.ok));
  return w.take();
}

Bytes encode(const ErrorReply& m) {
  Writer w(Kind::error);
  w.put(static_cast<std::int32_t>(m.status));
  w.text(m.message);
  return w.take();
}

Challenge decode_challenge(std::span<const std::byte> bytes) {
  Reader r(bytes, Kind::challenge, "challenge");
  Challenge m;
  r.bytes(m.nonce);
  r.done();
  return m;
}

Hello decode_hello(std::span<const std::byte> bytes) {
  Reader r(bytes, Kind::hello, "hello");
  Hello m;
  m.rank = r.get<std::uint32_t>();
  m.world_size = r.get<std::uint32_t>();
  m.incarnation = r.get<std::uint32_t>();
  m.generation = r.get<std::uint64_t>();
  m.reconnect = r.flag();
  r.bytes(m.mac);
  r.done();
  return m;
}

Welcome decode_welcome(std::span<const std::byte> bytes) {
  Reader r(bytes, Kind::welcome, "welcome");
  Welcome m;
  m.accepted = r.flag();
  m.reason = r.text();
  m.generation = r.get<std::uint64_t>();
  m.resume_step = r.get<std::uint64_t>();
  r.done();
  return m;
}

Request decode_request(std::span<const std::byte> bytes) {
  const Kind kind = peek_kind(bytes);
  switch (kind) {
    case Kind::plan_request: {
      Reader r(bytes, kind, "plan request");
      PlanRequest m;
      m.step = r.get<std::uint64_t>();
      m.fetch_max = r.get<std::uint64_t>();
      r.done();
      if (m.step == 0) raise<BootstrapError>("malformed coordinator plan request: step 0 (steps start at 1)");
      return m;
    }
    case Kind::report: {
      Reader r(bytes, kind, "step report");
      Report m = get_report(r);
      r.done();
      return m;
    }
    case Kind::fetch: {
      Reader r(bytes, kind, "fetch");
      Fetch m{r.get<std::uint64_t>()};
      r.done();
      if (m.max_samples > kMaxBatchSamples)
        raise<BootstrapError>("malformed coordinator fetch: ", m.max_samples, " samples exceeds the limit of ",
                              kMaxBatchSamples);
      return m;
    }
    case Kind::commit: {
      Reader r(bytes, kind, "commit");
      Commit m{r.get<std::uint64_t>()};
      r.done();
      return m;
    }
    case Kind::give_back: {
      Reader r(bytes, kind, "give back");
      GiveBack m{r.get<std::uint64_t>()};
      r.done();
      return m;
    }
    case Kind::request_restart: {
      Reader r(bytes, kind, "restart request");
      r.done();
      return RequestRestart{};
    }
    case Kind::offer_id: {
      Reader r(bytes, kind, "id offer");
      OfferId m;
      m.generation = r.get<std::uint64_t>();
      r.bytes(m.id.bytes);
      r.done();
      return m;
    }
    case Kind::join_generation: {
      Reader r(bytes, kind, "join");
      JoinGeneration m{r.get<std::uint64_t>()};
      r.done();
      return m;
    }
    case Kind::comm_failed: {
      Reader r(bytes, kind, "communicator failure");
      CommFailed m;
      m.generation = r.get<std::uint64_t>();
      m.step = r.get<std::uint64_t>();
      const auto count = r.get<std::uint32_t>();
      if (std::uint64_t{count} * 4 != r.left())
        raise<BootstrapError>("malformed coordinator communicator failure: ", count, " lost ranks in ", r.left(),
                              " bytes");
      m.lost.resize(count);
      for (auto& rank : m.lost) rank = r.get<std::uint32_t>();
      r.done();
      return m;
    }
    case Kind::bye: {
      Reader r(bytes, kind, "bye");
      Bye m{r.flag()};
      r.done();
      return m;
    }
    default:
      raise<BootstrapError>("malformed coordinator request: message kind ", static_cast<int>(kind),
                            " is not a request");
  }
}

Envelope decode_envelope(std::span<const std::byte> bytes) {
  if (peek_kind(bytes) != Kind::with_report) return Envelope{std::nullopt, decode_request(bytes)};
  Reader r(bytes, Kind::with_report, "request with report");
  Envelope m;
  m.report = get_report(r);
  // The inner frame is checked whole by its own decoder; one with a report
  // inside, or a report, is refused: a frame carries one report at most.
  const std::span<const std::byte> inner = r.rest();
  if (peek_kind(inner) == Kind::report)
    raise<BootstrapError>("malformed coordinator request with report: it carries a second report");
  m.request = decode_request(inner);
  return m;
}

Plan decode_plan(std::span<const std::byte> bytes) {
  throw_if_error(bytes);
  Reader r(bytes, Kind::plan, "plan");
  Plan m;
  m.step = r.get<std::uint64_t>();
  m.plan.local_batch = r.get<std::uint64_t>();
  m.plan.micro_batches = r.get<std::uint32_t>();
  m.plan.micro_batch = r.get<std::uint64_t>();
  m.plan.late = late_from(r.get<std::uint8_t>());
  m.plan.staleness = r.get<std::uint32_t>();
  m.plan.restart = r.flag();
  m.plan.resplit = r.flag();
  m.stop = r.flag();
  m.generation = r.get<std::uint64_t>();
  if (r.flag()) m.batch = read_batch(r);
  r.done();
  if (m.plan.micro_batches == 0) raise<BootstrapError>("malformed coordinator plan: 0 micro-batches");
  return m;
}

BatchReply decode_batch(std::span<const std::byte> bytes) {
  throw_if_error(bytes);
  Reader r(bytes, Kind::batch, "batch");
  BatchReply m = read_batch(r);
  r.done();
  return m;
}

GenerationId decode_generation_id(std::span<const std::byte> bytes) {
  throw_if_error(bytes);
  Reader r(bytes, Kind::generation_id, "generation id");
  GenerationId m;
  m.ready = r.flag();
  m.abandoned = r.flag();
  m.generation = r.get<std::uint64_t>();
  r.bytes(m.id.bytes);
  const auto count = r.get<std::uint32_t>();
  if (std::uint64_t{count} * 4 != r.left())
    raise<BootstrapError>("malformed coordinator generation id: ", count, " members in ", r.left(), " bytes");
  m.members.resize(count);
  for (auto& rank : m.members) rank = r.get<std::uint32_t>();
  r.done();
  if (m.ready && m.members.empty()) raise<BootstrapError>("malformed coordinator generation id: ready without members");
  return m;
}

Ack decode_ack(std::span<const std::byte> bytes) {
  throw_if_error(bytes);
  Reader r(bytes, Kind::ack, "ack");
  Ack m{r.flag()};
  r.done();
  return m;
}

ErrorReply decode_error(std::span<const std::byte> bytes) {
  Reader r(bytes, Kind::error, "error");
  ErrorReply m;
  const auto status = r.get<std::int32_t>();
  if (status <= 0 || status > static_cast<std::int32_t>(Status::peer_lost))
    raise<BootstrapError>("malformed coordinator error: status ", status);
  m.status = static_cast<Status>(status);
  m.message = r.text();
  r.done();
  return m;
}

std::array<std::byte, kMacBytes> prove(std::span<const std::byte> secret, const Challenge& challenge,
                                       std::uint32_t rank, std::uint32_t world_size, std::uint32_t incarnation) {
  Bytes msg;
  msg.insert(msg.end(), reinterpret_cast<const std::byte*>(kMacDomain.data()),
             reinterpret_cast<const std::byte*>(kMacDomain.data()) + kMacDomain.size());
  msg.insert(msg.end(), challenge.nonce.begin(), challenge.nonce.end());
  for (std::uint32_t v : {rank, world_size, incarnation}) {
    std::byte raw[4];
    std::memcpy(raw, &v, 4);
    msg.insert(msg.end(), raw, raw + 4);
  }
  return wire::hmac_sha256(secret, msg);
}

bool verify(std::span<const std::byte> secret, const Challenge& challenge, const Hello& hello) {
  const auto expected = prove(secret, challenge, hello.rank, hello.world_size, hello.incarnation);
  return wire::same_mac(expected, hello.mac);
}

}  // namespace antdt::sched::coord
