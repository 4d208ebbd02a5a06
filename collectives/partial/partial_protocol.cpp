#include "collectives/partial/partial_protocol.hpp"

#include "core/error.hpp"
#include "core/wire_codec.hpp"

#include <cstring>

namespace antdt::coll::partial {
namespace {

constexpr std::uint32_t kMagic = 0x50544441;  // "ADTP"
constexpr std::uint16_t kVersion = 3;  // 2: dead ranks (holds, retry, generation, abandon); 3: deposits, pushes ahead, late, incoming
enum class Kind : std::uint16_t { arrival = 1, finish = 2, decision = 3, failure = 4, abandon = 5, late = 6, incoming = 7 };
constexpr std::size_t kMaxReason = 4096;

// The codec is core/wire_codec.hpp; these add the protocol's prefix and names.
class Writer : public wire::ByteWriter {
 public:
  explicit Writer(Kind kind) {
    put(kMagic);
    put(kVersion);
    put(static_cast<std::uint16_t>(kind));
  }
  void put_string(const std::string& s) { text(s, kMaxReason); }
};

class Reader : public wire::ByteReader {
 public:
  explicit Reader(std::span<const std::byte> in) : ByteReader(in, "partial-collective message") {}
  std::string get_string() { return text(kMaxReason); }
  Kind header() {
    if (get<std::uint32_t>() != kMagic) fail("bad magic");
    auto version = get<std::uint16_t>();
    if (version != kVersion)
      raise<BootstrapError>("partial-collective message version ", version, ", expected ", kVersion);
    return static_cast<Kind>(get<std::uint16_t>());
  }
  void end() { done(); }
};

std::int32_t checked_rank(std::int32_t r, int ranks, bool allow_none = false) {
  if ((allow_none && r == -1) || (r >= 0 && r < ranks)) return r;
  raise<BootstrapError>("malformed partial-collective message: rank ", r, " out of range [0, ", ranks, ")");
}

std::uint32_t checked_count(std::uint32_t n, int ranks) {
  if (n <= static_cast<std::uint32_t>(ranks)) return n;
  raise<BootstrapError>("malformed partial-collective message: ", n, " entries for ", ranks, " ranks");
}

// Deposits and fetches: a few per rank (at most the staleness bound each).
// A count is checked against the bytes left before anything is allocated.
constexpr std::uint64_t kMaxEntriesPerRank = 1024;
std::uint32_t checked_entries(const wire::ByteReader& r, std::uint32_t n, int ranks, std::size_t entry_bytes) {
  if (n <= kMaxEntriesPerRank * static_cast<std::uint64_t>(ranks) && n * std::uint64_t{entry_bytes} <= r.left()) return n;
  raise<BootstrapError>("malformed partial-collective message: ", n, " entries for ", ranks, " ranks in ", r.left(),
                        " bytes");
}
constexpr std::size_t kFetchBytes = 4 + 8 + 4;
constexpr std::size_t kDepositBytes = 4 + 4 + 8 + 8 + 1;

void put_fetches(wire::ByteWriter& w, const std::vector<Fetch>& fetches) {
  w.put(static_cast<std::uint32_t>(fetches.size()));
  for (const auto& f : fetches) {
    w.put(f.rank);
    w.put(f.step);
    w.put(f.server);
  }
}

void put_classes(wire::ByteWriter& w, const std::vector<StragglerClass>& classes) {
  w.put(static_cast<std::uint32_t>(classes.size()));
  for (auto c : classes) w.put(static_cast<std::uint8_t>(c));
}

std::vector<Fetch> get_fetches(wire::ByteReader& r, int ranks) {
  const auto n = r.get<std::uint32_t>();
  std::vector<Fetch> fetches(checked_entries(r, n, ranks, kFetchBytes));
  for (auto& f : fetches) {
    f.rank = checked_rank(r.get<std::int32_t>(), ranks);
    f.step = r.get<std::uint64_t>();
    f.server = checked_rank(r.get<std::int32_t>(), ranks);
    if (f.step == 0) raise<BootstrapError>("malformed partial-collective fetch: step 0");
  }
  return fetches;
}

void put_deposits(wire::ByteWriter& w, const std::vector<Deposit>& deposits) {
  w.put(static_cast<std::uint32_t>(deposits.size()));
  for (const auto& d : deposits) {
    w.put(d.to);
    w.put(d.from);
    w.put(d.step);
    w.put(d.weight);
    w.put(static_cast<std::uint8_t>(d.drop ? 1 : 0));
  }
}

std::vector<Deposit> get_deposits(wire::ByteReader& r, int ranks) {
  const auto n = r.get<std::uint32_t>();
  std::vector<Deposit> deposits(checked_entries(r, n, ranks, kDepositBytes));
  for (auto& d : deposits) {
    d.to = checked_rank(r.get<std::int32_t>(), ranks);
    d.from = checked_rank(r.get<std::int32_t>(), ranks);
    d.step = r.get<std::uint64_t>();
    d.weight = r.get<double>();
    const auto drop = r.get<std::uint8_t>();
    if (drop > 1) raise<BootstrapError>("malformed partial-collective deposit: drop flag ", int{drop});
    d.drop = drop == 1;
    if (d.step == 0 || d.to == d.from || !(d.weight >= 0))
      raise<BootstrapError>("malformed partial-collective deposit: step ", d.step, ", rank ", d.from, " to ", d.to,
                            ", weight ", d.weight);
  }
  return deposits;
}

std::vector<StragglerClass> get_classes(wire::ByteReader& r, int ranks) {
  std::vector<StragglerClass> classes(checked_count(r.get<std::uint32_t>(), ranks));
  for (auto& c : classes) {
    auto v = r.get<std::uint8_t>();
    if (v > static_cast<std::uint8_t>(StragglerClass::lost))
      raise<BootstrapError>("malformed partial-collective message: straggler class ", int{v});
    c = static_cast<StragglerClass>(v);
  }
  return classes;
}

}  // namespace

Bytes encode(const Arrival& m) {
  Writer w(Kind::arrival);
  w.put(m.rank);
  w.put(m.step);
  w.put(m.weight);
  w.put(m.compute_s);
  w.put(m.transfer_s);
  w.put(m.samples);
  w.put(m.signature);
  w.put(static_cast<std::uint8_t>(m.policy));
  w.put(m.staleness);
  w.put(static_cast<std::uint8_t>(m.stale_synchronous ? 1 : 0));
  w.put(m.holds);
  w.put(static_cast<std::uint8_t>(m.retry ? 1 : 0));
  return w.take();
}

Bytes encode(const Finish& m) {
  Writer w(Kind::finish);
  w.put(m.rank);
  w.put(m.applied);
  w.put(m.holds);
  return w.take();
}

Bytes encode(const Decision& m) {
  Writer w(Kind::decision);
  w.put(m.step);
  w.put(static_cast<std::uint8_t>(m.final ? 1 : 0));
  w.put(m.server);
  w.put(static_cast<std::uint32_t>(m.contributors.size()));
  for (const auto& c : m.contributors) {
    w.put(c.rank);
    w.put(c.weight);
    w.put(c.based_on);
  }
  w.put(static_cast<std::uint32_t>(m.catchups.size()));
  for (const auto& c : m.catchups) {
    w.put(c.rank);
    w.put(c.from_step);
    w.put(c.contribution_step);
    w.put(c.until_step);
  }
  put_classes(w, m.classes);
  w.put(m.generation);
  put_deposits(w, m.deposits);
  w.put(static_cast<std::uint32_t>(m.ahead.size()));
  for (auto r : m.ahead) w.put(r);
  put_fetches(w, m.fetches);
  return w.take();
}

Bytes encode(const Incoming& m) {
  Writer w(Kind::incoming);
  put_deposits(w, m.deposits);
  return w.take();
}

Bytes encode(const Late& m) {
  Writer w(Kind::late);
  w.put(m.step);
  w.put(m.depositary);
  w.put(m.backup);
  put_fetches(w, m.fetches);
  put_classes(w, m.classes);
  return w.take();
}

Bytes encode(const Abandon& m) {
  Writer w(Kind::abandon);
  w.put(m.step);
  w.put(m.generation);
  w.put(m.lost);
  return w.take();
}

Bytes encode(const Failure& m) {
  Writer w(Kind::failure);
  w.put(static_cast<std::int32_t>(m.status));
  w.put_string(m.reason.substr(0, kMaxReason));
  return w.take();
}

ToArbiter decode_to_arbiter(std::span<const std::byte> bytes, int ranks) {
  Reader r(bytes);
  switch (r.header()) {
    case Kind::arrival: {
      Arrival m;
      m.rank = checked_rank(r.get<std::int32_t>(), ranks);
      m.step = r.get<std::uint64_t>();
      m.weight = r.get<double>();
      m.compute_s = r.get<double>();
      m.transfer_s = r.get<double>();
      m.samples = r.get<std::uint64_t>();
      m.signature = r.get<std::uint64_t>();
      auto policy = r.get<std::uint8_t>();
      if (policy > static_cast<std::uint8_t>(LatePolicy::defer))
        raise<BootstrapError>("malformed partial-collective arrival: policy ", int{policy});
      m.policy = static_cast<LatePolicy>(policy);
      m.staleness = r.get<std::uint32_t>();
      const auto stale_synchronous = r.get<std::uint8_t>();
      if (stale_synchronous > 1)
        raise<BootstrapError>("malformed partial-collective arrival: stale-synchronous flag ", int{stale_synchronous});
      m.stale_synchronous = stale_synchronous == 1;
      m.holds = r.get<std::uint64_t>();
      const auto retry = r.get<std::uint8_t>();
      if (retry > 1) raise<BootstrapError>("malformed partial-collective arrival: retry flag ", int{retry});
      m.retry = retry == 1;
      if (m.step == 0 || !(m.weight >= 0) || !(m.compute_s >= 0) || !(m.transfer_s >= 0))
        raise<BootstrapError>("malformed partial-collective arrival: step ", m.step, ", weight ", m.weight);
      r.end();
      return m;
    }
    case Kind::finish: {
      Finish m;
      m.rank = checked_rank(r.get<std::int32_t>(), ranks);
      m.applied = r.get<std::uint64_t>();
      m.holds = r.get<std::uint64_t>();
      r.end();
      return m;
    }
    default: raise<BootstrapError>("malformed partial-collective message: unexpected kind for the arbiter");
  }
}

FromArbiter decode_from_arbiter(std::span<const std::byte> bytes, int ranks) {
  Reader r(bytes);
  switch (r.header()) {
    case Kind::decision: {
      Decision m;
      m.step = r.get<std::uint64_t>();
      auto final_flag = r.get<std::uint8_t>();
      if (final_flag > 1) raise<BootstrapError>("malformed partial-collective decision: final flag ", int{final_flag});
      m.final = final_flag == 1;
      m.server = checked_rank(r.get<std::int32_t>(), ranks, true);
      m.contributors.resize(checked_count(r.get<std::uint32_t>(), ranks));
      for (auto& c : m.contributors) {
        c.rank = checked_rank(r.get<std::int32_t>(), ranks);
        c.weight = r.get<double>();
        c.based_on = r.get<std::uint64_t>();
      }
      m.catchups.resize(checked_count(r.get<std::uint32_t>(), ranks));
      for (auto& c : m.catchups) {
        c.rank = checked_rank(r.get<std::int32_t>(), ranks);
        c.from_step = r.get<std::uint64_t>();
        c.contribution_step = r.get<std::uint64_t>();
        c.until_step = r.get<std::uint64_t>();
      }
      m.classes = get_classes(r, ranks);
      m.generation = r.get<std::uint32_t>();
      m.deposits = get_deposits(r, ranks);
      m.ahead.resize(checked_count(r.get<std::uint32_t>(), ranks));
      for (auto& a : m.ahead) a = checked_rank(r.get<std::int32_t>(), ranks);
      m.fetches = get_fetches(r, ranks);
      r.end();
      return m;
    }
    case Kind::incoming: {
      Incoming m;
      m.deposits = get_deposits(r, ranks);
      r.end();
      return m;
    }
    case Kind::late: {
      Late m;
      m.step = r.get<std::uint64_t>();
      m.depositary = checked_rank(r.get<std::int32_t>(), ranks, true);
      m.backup = checked_rank(r.get<std::int32_t>(), ranks, true);
      m.fetches = get_fetches(r, ranks);
      if (m.backup >= 0 && (m.depositary < 0 || m.backup == m.depositary))
        raise<BootstrapError>("malformed partial-collective late answer: backup ", m.backup, " for depositary ",
                              m.depositary);
      m.classes = get_classes(r, ranks);
      if (m.step == 0) raise<BootstrapError>("malformed partial-collective late answer: step 0");
      r.end();
      return m;
    }
    case Kind::failure: {
      Failure m;
      auto status = r.get<std::int32_t>();
      if (status <= 0 || status > static_cast<std::int32_t>(Status::peer_lost))
        raise<BootstrapError>("malformed partial-collective failure: status ", status);
      m.status = static_cast<Status>(status);
      m.reason = r.get_string();
      r.end();
      return m;
    }
    case Kind::abandon: {
      Abandon m;
      m.step = r.get<std::uint64_t>();
      m.generation = r.get<std::uint32_t>();
      m.lost = checked_rank(r.get<std::int32_t>(), ranks);
      if (m.step == 0) raise<BootstrapError>("malformed partial-collective abandon: step 0");
      r.end();
      return m;
    }
    default: raise<BootstrapError>("malformed partial-collective message: unexpected kind for a rank");
  }
}

namespace {
std::string ranks_of(const std::vector<Contributor>& cs) {
  std::string s;
  for (const auto& c : cs) s += cat(s.empty() ? "" : ",", c.rank, c.based_on != 0 ? cat("@", c.based_on) : "");
  return s;
}
std::string catchups_of(const std::vector<CatchUp>& cs) {
  std::string s;
  for (const auto& c : cs) {
    s += cat(s.empty() ? "" : ",", c.rank, ":", c.from_step, c.until_step != 0 ? cat("..", c.until_step) : "",
             c.contribution_step != 0 ? cat("+", c.contribution_step) : "");
  }
  return s;
}
std::string deposits_of(const std::vector<Deposit>& ds) {
  std::string s;
  for (const auto& d : ds) s += cat(s.empty() ? "" : ",", d.from, "@", d.step, "->", d.to, d.drop ? " drop" : "");
  return s;
}
std::string fetches_of(const std::vector<Fetch>& fs) {
  std::string s;
  for (const auto& f : fs) s += cat(s.empty() ? "" : ",", f.rank, "@", f.step, "<-", f.server);
  return s;
}
}  // namespace

std::string summary(const ToArbiter& m) {
  if (const auto* a = std::get_if<Arrival>(&m)) {
    return cat("arrival rank ", a->rank, " step ", a->step, " weight ", a->weight, " holds ", a->holds,
               a->retry ? " retry" : "");
  }
  const auto& f = std::get<Finish>(m);
  return cat("finish rank ", f.rank, " applied ", f.applied, " holds ", f.holds);
}

std::string summary(const FromArbiter& m) {
  if (const auto* d = std::get_if<Decision>(&m)) {
    return cat(d->final ? "final decision" : "decision", " step ", d->step, " gen ", d->generation, " server ",
               d->server, " contributors [", ranks_of(d->contributors), "] catch-ups [", catchups_of(d->catchups),
               "] deposits [", deposits_of(d->deposits), "] fetches [", fetches_of(d->fetches), "] ahead ",
               d->ahead.size());
  }
  if (const auto* f = std::get_if<Failure>(&m)) return cat("failure: ", f->reason);
  if (const auto* a = std::get_if<Abandon>(&m)) {
    return cat("abandon step ", a->step, " gen ", a->generation, " lost ", a->lost);
  }
  if (const auto* l = std::get_if<Late>(&m)) {
    return cat("late step ", l->step, " depositary ", l->depositary, " backup ", l->backup, " fetches [",
               fetches_of(l->fetches), "]");
  }
  return cat("incoming [", deposits_of(std::get<Incoming>(m).deposits), "]");
}

}  // namespace antdt::coll::partial
