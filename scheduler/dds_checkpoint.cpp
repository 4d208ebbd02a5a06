// The DDS checkpoint format (scheduler/dds_checkpoint.hpp, docs/dds.md).
#include "scheduler/dds_checkpoint.hpp"

#include "core/error.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

namespace antdt::sched {
namespace {

// Sorted keys: dump() of equal states gives equal text (the checksum relies on it).
using Json = nlohmann::json;

constexpr std::string_view kFormat = "antdt-dds";
constexpr std::int64_t kVersion = 1;
// A checkpoint nests four levels (dataset.files[i]); the checksum's dump()
// recurses once per level, so a deeper file would overflow the stack.
constexpr int kMaxDepth = 64;

// The checksum: FNV-1a, 64 bits, over the canonical dump of the document
// without its checksum field (docs/dds.md). It detects a torn or edited
// checkpoint (not an attacker). Not hash::mix: the checksum is stored in
// checkpoints, so its values must never change.
std::uint64_t fnv1a(std::string_view text) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- checkpoint field access with messages naming the field ---------------

[[noreturn]] void malformed(const std::string& path, const std::string& why) {
  raise<InvalidArgument>("malformed DDS checkpoint ", path, ": ", why);
}

struct Reader {
  const std::string& path;

  const Json& field(const Json& obj, const std::string& where, const char* key) const {
    if (!obj.is_object()) malformed(path, cat(where, " is not an object"));
    const auto it = obj.find(key);
    if (it == obj.end()) malformed(path, cat("missing field ", where, ".", key));
    return *it;
  }
  std::uint64_t u64(const Json& obj, const std::string& where, const char* key) const {
    const Json& v = field(obj, where, key);
    if (!v.is_number_unsigned()) malformed(path, cat("field ", where, ".", key, " is not an unsigned integer"));
    return v.get<std::uint64_t>();
  }
  std::uint32_t u32(const Json& obj, const std::string& where, const char* key) const {
    const std::uint64_t v = u64(obj, where, key);
    if (v > 0xffffffffull) malformed(path, cat("field ", where, ".", key, " = ", v, " does not fit 32 bits"));
    return static_cast<std::uint32_t>(v);
  }
  std::int64_t i64(const Json& obj, const std::string& where, const char* key) const {
    const Json& v = field(obj, where, key);
    if (!v.is_number_integer()) malformed(path, cat("field ", where, ".", key, " is not an integer"));
    return v.get<std::int64_t>();
  }
  std::string str(const Json& obj, const std::string& where, const char* key) const {
    const Json& v = field(obj, where, key);
    if (!v.is_string()) malformed(path, cat("field ", where, ".", key, " is not a string"));
    return v.get<std::string>();
  }
  bool boolean(const Json& obj, const std::string& where, const char* key) const {
    const Json& v = field(obj, where, key);
    if (!v.is_boolean()) malformed(path, cat("field ", where, ".", key, " is not a boolean"));
    return v.get<bool>();
  }
  const Json& array(const Json& obj, const std::string& where, const char* key) const {
    const Json& v = field(obj, where, key);
    if (!v.is_array()) malformed(path, cat("field ", where, ".", key, " is not an array"));
    return v;
  }
};

void write_all(int fd, std::string_view text, const std::string& tmp) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) raise<InvalidArgument>("DDS checkpoint: cannot write ", tmp, ": ", std::strerror(errno));
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Closes a descriptor on every path out of checkpoint().
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string checkpoint_text(const Dataset& data, const DdsOptions& opts, const DdsState& st) {
  Json dataset;
  if (data.has_files()) {
    Json files = Json::array();
    for (const DataFile& f : data.files()) files.push_back({{"name", f.name}, {"records", f.records}});
    dataset["files"] = std::move(files);
  } else {
    dataset["samples"] = data.size();
  }
  const Json options{{"world_size", opts.world_size},
                     {"shard_size", opts.shard_size},
                     {"seed", opts.seed},
                     {"shuffle", std::string(to_string(opts.shuffle))},
                     {"epochs", opts.epochs},
                     {"steal_min", opts.steal_min}};
  Json shards = Json::array();
  for (const auto& [id, s] : st.shards)
    shards.push_back({{"id", s.id},
                      {"begin", s.begin},
                      {"end", s.end},
                      {"cursor", s.cursor},
                      {"owner", s.owner},
                      {"state", std::string(to_string(s.state))},
                      {"attempts", s.attempts},
                      {"pending", s.pending}});
  Json leases = Json::array();
  for (const auto& [id, record] : st.leases) {
    Json pieces = Json::array();
    for (const auto& piece : record.pieces)
      pieces.push_back({{"shard", piece.shard}, {"begin", piece.begin}, {"end", piece.end}});
    leases.push_back({{"id", id}, {"rank", record.rank}, {"pieces", std::move(pieces)}});
  }
  const Json state{{"epoch", st.epoch},
                   {"finished", st.finished},
                   {"fresh", st.fresh},
                   {"next_shard_id", st.next_shard_id},
                   {"next_lease_id", st.next_lease_id},
                   {"committed", st.committed},
                   {"done_shards", st.done_shards},
                   {"shards", std::move(shards)},
                   {"queued", st.queued},
                   {"active", st.active},
                   {"leases", std::move(leases)},
                   {"shards_taken", st.shards_taken},
                   {"epochs_completed", st.epochs_completed},
                   {"total_committed", st.total_committed},
                   {"given_back", st.given_back},
                   {"resplit", st.resplit},
                   {"rank_failures", st.rank_failures},
                   {"stolen", st.stolen}};
  Json doc{{"format", std::string(kFormat)}, {"version", kVersion}, {"dataset", dataset}, {"options", options}, {"state", state}};
  const std::string body = doc.dump();
  doc["checksum"] = hex64(fnv1a(body));
  return doc.dump();
}

void write_checkpoint(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  {
    Fd file{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (file.fd < 0) raise<InvalidArgument>("DDS checkpoint: cannot create ", tmp, ": ", std::strerror(errno));
    try {
      write_all(file.fd, text, tmp);
      if (::fsync(file.fd) != 0) raise<InvalidArgument>("DDS checkpoint: fsync ", tmp, ": ", std::strerror(errno));
    } catch (...) {
      ::unlink(tmp.c_str());  // no half-written file left behind; `path` is untouched
      throw;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    raise<InvalidArgument>("DDS checkpoint: rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
  // The rename is durable only once the directory entry is.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0 || ::fsync(d.fd) != 0)
    raise<InvalidArgument>("DDS checkpoint: fsync of directory ", dir, ": ", std::strerror(errno));
}

DdsCheckpoint read_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) raise<InvalidArgument>("DDS restore: cannot open ", path, ": ", std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return parse_checkpoint(buffer.str(), path);
}

DdsCheckpoint parse_checkpoint(std::string_view text, const std::string& path) {
  const auto bounded_depth = [&](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxDepth) malformed(path, cat("nests deeper than ", kMaxDepth, " levels"));
    return true;
  };
  Json doc = Json::parse(text, bounded_depth, /*allow_exceptions=*/false);
  if (doc.is_discarded()) malformed(path, "not valid JSON (truncated or corrupted file?)");
  const Reader rd{path};
  if (!doc.is_object()) malformed(path, "top level is not an object");
  if (rd.str(doc, "", "format") != kFormat) malformed(path, cat("format is not \"", kFormat, "\""));
  const std::int64_t version = rd.i64(doc, "", "version");
  if (version != kVersion) malformed(path, cat("version ", version, " is not supported (this build reads ", kVersion, ")"));
  const std::string checksum = rd.str(doc, "", "checksum");
  Json body = doc;
  body.erase("checksum");
  if (hex64(fnv1a(body.dump())) != checksum)
    malformed(path, cat("checksum mismatch (stored ", checksum, ", computed ", hex64(fnv1a(body.dump())), ")"));

  // Dataset and options: the constructors validate them again.
  const Json& jd = rd.field(doc, "", "dataset");
  std::optional<Dataset> dataset;
  try {
    if (jd.is_object() && jd.contains("files")) {
      std::vector<DataFile> files;
      const Json& list = rd.array(jd, "dataset", "files");
      for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string where = cat("dataset.files[", i, "]");
        files.push_back({rd.str(list[i], where, "name"), rd.u64(list[i], where, "records")});
      }
      dataset = Dataset::files(std::move(files));
    } else {
      dataset = Dataset::samples(rd.u64(jd, "dataset", "samples"));
    }
  } catch (const InvalidArgument& e) {
    if (std::string_view(e.what()).starts_with("malformed")) throw;
    malformed(path, e.what());
  }
  const Json& jo = rd.field(doc, "", "options");
  DdsOptions options;
  const std::int64_t world = rd.i64(jo, "options", "world_size");
  if (world < 1 || world > 1 << 30) malformed(path, cat("options.world_size = ", world, " out of range"));
  options.world_size = static_cast<int>(world);
  options.shard_size = rd.u64(jo, "options", "shard_size");
  if (options.shard_size == 0) malformed(path, "options.shard_size is 0");
  options.seed = rd.u64(jo, "options", "seed");
  try {
    options.shuffle = parse_shuffle_mode(rd.str(jo, "options", "shuffle"));
  } catch (const InvalidArgument& e) {
    malformed(path, e.what());
  }
  options.epochs = rd.u32(jo, "options", "epochs");
  options.steal_min = rd.u64(jo, "options", "steal_min");

  // State, with every range checked against the dataset so a bad file is
  // refused here instead of corrupting the sharding later.
  const std::uint64_t n = dataset->size();
  const auto ranks = static_cast<std::size_t>(options.world_size);
  const Json& js = rd.field(doc, "", "state");
  DdsState s;
  s.epoch = rd.u32(js, "state", "epoch");
  s.finished = rd.boolean(js, "state", "finished");
  s.fresh = rd.u64(js, "state", "fresh");
  s.next_shard_id = rd.u64(js, "state", "next_shard_id");
  s.next_lease_id = rd.u64(js, "state", "next_lease_id");
  s.committed = rd.u64(js, "state", "committed");
  s.done_shards = rd.u64(js, "state", "done_shards");
  s.epochs_completed = rd.u64(js, "state", "epochs_completed");
  s.total_committed = rd.u64(js, "state", "total_committed");
  s.given_back = rd.u64(js, "state", "given_back");
  s.resplit = rd.u64(js, "state", "resplit");
  s.rank_failures = rd.u64(js, "state", "rank_failures");
  s.stolen = rd.u64(js, "state", "stolen");
  if (s.fresh > n) malformed(path, cat("state.fresh = ", s.fresh, " beyond the ", n, " samples"));
  if (s.committed > n) malformed(path, cat("state.committed = ", s.committed, " beyond the ", n, " samples"));
  if (s.next_lease_id == 0) malformed(path, "state.next_lease_id is 0");

  const Json& shards = rd.array(js, "state", "shards");
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string where = cat("state.shards[", i, "]");
    Shard sh;
    sh.epoch = s.epoch;
    sh.id = rd.u64(shards[i], where, "id");
    sh.begin = rd.u64(shards[i], where, "begin");
    sh.end = rd.u64(shards[i], where, "end");
    sh.cursor = rd.u64(shards[i], where, "cursor");
    const std::int64_t owner = rd.i64(shards[i], where, "owner");
    const std::string state_name = rd.str(shards[i], where, "state");
    sh.attempts = rd.u32(shards[i], where, "attempts");
    sh.pending = rd.u64(shards[i], where, "pending");
    if (!(sh.begin <= sh.cursor && sh.cursor <= sh.end && sh.end <= s.fresh))
      malformed(path, cat(where, ": range begin ", sh.begin, " cursor ", sh.cursor, " end ", sh.end,
                          " is not ordered within the ", s.fresh, " positions cut so far"));
    if (sh.id >= s.next_shard_id) malformed(path, cat(where, ".id = ", sh.id, " not below next_shard_id"));
    if (state_name == "queued") sh.state = ShardState::queued;
    else if (state_name == "doing") sh.state = ShardState::doing;
    else malformed(path, cat(where, ".state = \"", state_name, "\" is not queued or doing"));
    if (sh.state == ShardState::doing ? (owner < 0 || owner >= world) : owner != -1)
      malformed(path, cat(where, ".owner = ", owner, " does not fit state ", state_name));
    sh.owner = static_cast<int>(owner);
    if (!s.shards.emplace(sh.id, sh).second) malformed(path, cat(where, ".id = ", sh.id, " appears twice"));
  }
  for (const Json& id : rd.array(js, "state", "queued")) {
    if (!id.is_number_unsigned()) malformed(path, "state.queued holds a non-integer");
    const auto it = s.shards.find(id.get<std::uint64_t>());
    if (it == s.shards.end() || it->second.state != ShardState::queued)
      malformed(path, cat("state.queued names shard ", id.dump(), ", which is not a queued shard"));
    s.queued.push_back(it->first);
  }
  const Json& active = rd.array(js, "state", "active");
  if (active.size() != ranks) malformed(path, cat("state.active has ", active.size(), " entries for ", ranks, " ranks"));
  for (std::size_t r = 0; r < ranks; ++r) {
    if (!active[r].is_number_integer()) malformed(path, cat("state.active[", r, "] is not an integer"));
    const auto id = active[r].get<std::int64_t>();
    if (id >= 0) {
      const auto it = s.shards.find(static_cast<std::uint64_t>(id));
      if (it == s.shards.end() || it->second.owner != static_cast<int>(r) || it->second.cursor == it->second.end)
        malformed(path, cat("state.active[", r, "] = ", id, " is not a DOING shard of rank ", r, " with samples left"));
    }
    s.active.push_back(id);
  }
  // Every shard with samples left must be reachable, or its samples would never be handed out.
  std::uint64_t queued_shards = 0;
  for (const auto& [id, sh] : s.shards) {
    if (sh.state == ShardState::queued) ++queued_shards;
    else if (sh.cursor < sh.end && s.active[static_cast<std::size_t>(sh.owner)] != static_cast<std::int64_t>(id))
      malformed(path, cat("DOING shard ", id, " has samples left but is not rank ", sh.owner, "'s active shard"));
  }
  if (std::set<std::uint64_t>(s.queued.begin(), s.queued.end()).size() != s.queued.size() || s.queued.size() != queued_shards)
    malformed(path, cat("state.queued lists ", s.queued.size(), " entries for ", queued_shards, " queued shards"));
  const Json& taken = rd.array(js, "state", "shards_taken");
  if (taken.size() != ranks) malformed(path, cat("state.shards_taken has ", taken.size(), " entries for ", ranks, " ranks"));
  for (const Json& t : taken) {
    if (!t.is_number_unsigned()) malformed(path, "state.shards_taken holds a non-integer");
    s.shards_taken.push_back(t.get<std::uint64_t>());
  }
  std::map<std::uint64_t, std::uint64_t> pending;  // per shard, from the leases
  std::uint64_t leased = 0;
  const Json& leases = rd.array(js, "state", "leases");
  for (std::size_t i = 0; i < leases.size(); ++i) {
    const std::string where = cat("state.leases[", i, "]");
    const std::uint64_t id = rd.u64(leases[i], where, "id");
    LeaseRecord record;
    const std::int64_t rank = rd.i64(leases[i], where, "rank");
    if (rank < 0 || rank >= world) malformed(path, cat(where, ".rank = ", rank, " out of range"));
    record.rank = static_cast<int>(rank);
    const Json& pieces = rd.array(leases[i], where, "pieces");
    if (pieces.empty()) malformed(path, cat(where, " has no pieces"));
    for (std::size_t j = 0; j < pieces.size(); ++j) {
      const std::string pw = cat(where, ".pieces[", j, "]");
      LeaseRecord::Piece piece{rd.u64(pieces[j], pw, "shard"), rd.u64(pieces[j], pw, "begin"),
                               rd.u64(pieces[j], pw, "end")};
      const auto it = s.shards.find(piece.shard);
      if (it == s.shards.end() || it->second.owner != record.rank || piece.begin >= piece.end ||
          piece.begin < it->second.begin || piece.end > it->second.cursor)
        malformed(path, cat(pw, " [", piece.begin, ", ", piece.end, ") of shard ", piece.shard,
                            " is not a handed-out range of a shard owned by rank ", rank));
      pending[piece.shard] += piece.end - piece.begin;
      leased += piece.end - piece.begin;
      record.pieces.push_back(piece);
    }
    if (id == 0 || id >= s.next_lease_id) malformed(path, cat(where, ".id = ", id, " not below next_lease_id"));
    if (!s.leases.emplace(id, std::move(record)).second) malformed(path, cat(where, ".id = ", id, " appears twice"));
  }
  // Every position of the epoch is in exactly one place: not yet cut, not yet
  // handed out from a live shard, in an open lease, or committed.
  std::uint64_t untaken = 0;
  for (const auto& [id, sh] : s.shards) {
    const auto it = pending.find(id);
    if (sh.pending != (it == pending.end() ? 0 : it->second))
      malformed(path, cat("state.shards id ", id, ": pending ", sh.pending, " disagrees with its open leases"));
    untaken += sh.end - sh.cursor;
  }
  if (!s.finished && (n - s.fresh) + untaken + leased + s.committed != n)
    malformed(path, cat("sample accounting does not add up: uncut ", n - s.fresh, " + unhanded ", untaken,
                        " + leased ", leased, " + committed ", s.committed, " != ", n));
  return DdsCheckpoint{std::move(*dataset), options, std::move(s)};
}

}  // namespace antdt::sched
