// Parsing and validation of every ANTDT_* variable (see core/config.hpp and
// docs/configuration.md), plus the launchers' rank variables.
#include "core/config.hpp"

#include "core/error.hpp"
#include "core/inject.hpp"
#include "core/printable.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <utility>

namespace antdt {
namespace {

constexpr long long kMaxTimeoutMs = 86'400'000;  // one day
constexpr long long kMaxSpinUs = 1'000'000;
constexpr long long kMinChunkBytes = 4LL << 10;
constexpr std::size_t kMaxNodeIdBytes = 255;
constexpr long long kMaxChunkBytes = 1LL << 30;
constexpr long long kMaxShmBytes = 1LL << 20;  // the segment holds 2 x ranks slots of this size
constexpr long long kMinShmBulkBytes = 4LL << 10, kMaxShmBulkBytes = 64LL << 20;  // 3 x ranks slots of this size
constexpr long long kMaxUcxSplitBytes = 1LL << 30;
constexpr std::size_t kSecretHexDigits = 32;
constexpr long long kMinMonitorWindow = 4;
constexpr long long kMaxMonitorWindow = 65536;
constexpr long long kMaxShortSteps = 100'000;
constexpr long long kMaxTraceFlushSteps = 1'000'000;

std::string_view trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

[[noreturn]] void invalid(std::string_view name, std::string_view value, std::string_view expected) {
  raise<ConfigError>(name, "='", printable(value), "' is invalid: expected ", expected);
}

// A whole decimal integer (optional leading '-'), nothing else; nullopt when
// malformed or out of the range of long long.
std::optional<long long> parse_decimal(std::string_view text) {
  if (text.empty()) return std::nullopt;
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 10);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string format_bytes(std::size_t bytes);  // "4K", "1M", "1G", or the plain count

// Reads one variable through the lookup; empty (or blank) counts as unset.
class Reader {
 public:
  explicit Reader(const Config::Lookup& lookup) : lookup_(lookup) {}

  std::optional<std::string> get(std::string_view name) const {
    auto raw = lookup_(name);
    if (!raw) return std::nullopt;
    const std::string_view trimmed = trim(*raw);
    if (trimmed.empty()) return std::nullopt;
    return std::string(trimmed);
  }

  std::optional<long long> integer(std::string_view name, long long lo, long long hi, std::string_view unit) const {
    auto value = get(name);
    if (!value) return std::nullopt;
    const auto parsed = parse_decimal(*value);
    if (!parsed || *parsed < lo || *parsed > hi) {
      invalid(name, *value, cat("an integer in [", lo, ", ", hi, "]", unit.empty() ? "" : " (", unit, unit.empty() ? "" : ")"));
    }
    return parsed;
  }

  // A finite decimal number (digits with an optional fraction, no exponent)
  // in (lo, hi] when lo_open, else in [lo, hi].
  std::optional<double> real(std::string_view name, double lo, double hi, bool lo_open) const {
    auto value = get(name);
    if (!value) return std::nullopt;
    double parsed = 0;
    const char* first = value->data();
    const char* last = first + value->size();
    const auto [end, ec] = std::from_chars(first, last, parsed, std::chars_format::fixed);
    const bool in_range = std::isfinite(parsed) && (lo_open ? parsed > lo : parsed >= lo) && parsed <= hi;
    if (ec != std::errc() || end != last || !in_range) {
      invalid(name, *value, cat("a decimal number in ", lo_open ? "(" : "[", lo, ", ", hi, "]"));
    }
    return parsed;
  }

  // A byte count with an optional K, M or G suffix (powers of 1024, either case).
  std::optional<long long> bytes(std::string_view name, long long lo, long long hi) const {
    auto value = get(name);
    if (!value) return std::nullopt;
    const auto fail = [&]() {
      invalid(name, *value,
              cat("a byte count in [", lo, ", ", hi, "] (", format_bytes(static_cast<std::size_t>(lo)), "..",
                  format_bytes(static_cast<std::size_t>(hi)), "), optionally with a K, M or G suffix (powers of 1024)"));
    };
    std::string_view digits = *value;
    long long scale = 1;
    switch (std::tolower(static_cast<unsigned char>(digits.back()))) {
      case 'k': scale = 1LL << 10; break;
      case 'm': scale = 1LL << 20; break;
      case 'g': scale = 1LL << 30; break;
      default: break;
    }
    if (scale != 1) digits.remove_suffix(1);
    const auto parsed = parse_decimal(digits);
    if (!parsed || *parsed < 0 || *parsed > hi / scale) fail();
    const long long result = *parsed * scale;
    if (result < lo) fail();
    return result;
  }

  template <class E, std::size_t N>
  std::optional<E> choice(std::string_view name, const std::array<std::pair<std::string_view, E>, N>& table) const {
    auto value = get(name);
    if (!value) return std::nullopt;
    const std::string lowered = to_lower(*value);
    for (const auto& [text, e] : table) {
      if (lowered == text) return e;
    }
    std::string accepted;
    for (const auto& [text, e] : table) {
      if (!accepted.empty()) accepted += ", ";
      accepted += text;
    }
    invalid(name, *value, cat("one of ", accepted, " (case-insensitive)"));
  }

 private:
  const Config::Lookup& lookup_;
};

constexpr std::array<std::pair<std::string_view, LogLevel>, 4> kLogLevels{{
    {"error", LogLevel::error}, {"warn", LogLevel::warn}, {"info", LogLevel::info}, {"trace", LogLevel::trace}}};
constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kTransports{{
    {"ucx", "ucx"}, {"inproc", "inproc"}}};
constexpr std::array<std::pair<std::string_view, AllreduceAlgo>, 6> kAlgos{{
    {"auto", AllreduceAlgo::automatic}, {"ring", AllreduceAlgo::ring},
    {"recursive_doubling", AllreduceAlgo::recursive_doubling}, {"shm", AllreduceAlgo::shm},
    {"hierarchical", AllreduceAlgo::hierarchical}, {"rabenseifner", AllreduceAlgo::rabenseifner}}};
constexpr std::array<std::pair<std::string_view, GpuPath>, 4> kGpuPaths{{
    {"auto", GpuPath::automatic}, {"ipc", GpuPath::ipc}, {"staged", GpuPath::staged}, {"direct", GpuPath::direct}}};
constexpr std::array<std::pair<std::string_view, PartialArbiter>, 3> kPartialArbiters{{
    {"auto", PartialArbiter::automatic}, {"rank0", PartialArbiter::rank0}, {"coordinator", PartialArbiter::coordinator}}};
constexpr std::array<std::pair<std::string_view, ProgressMode>, 3> kProgressModes{{
    {"auto", ProgressMode::automatic}, {"spin", ProgressMode::spin}, {"wake", ProgressMode::wake}}};
constexpr std::array<std::pair<std::string_view, bool>, 2> kAsyncProgress{{{"thread", true}, {"caller", false}}};
constexpr std::array<std::pair<std::string_view, BindMode>, 4> kBindModes{{
    {"auto", BindMode::automatic}, {"none", BindMode::none}, {"cores", BindMode::cores}, {"numa", BindMode::numa}}};
constexpr std::array<std::pair<std::string_view, UcxShm>, 2> kUcxShmModes{{{"fast", UcxShm::fast}, {"safe", UcxShm::safe}}};
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kDdsShuffles{{
    {"samples", "samples"}, {"blocks", "blocks"}, {"none", "none"}}};

template <class E, std::size_t N>
std::string_view name_of(E e, const std::array<std::pair<std::string_view, E>, N>& table) {
  for (const auto& [text, value] : table) {
    if (value == e) return text;
  }
  return "?";
}

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// host:port, or [IPv6]:port; the port in 1..65535.
bool valid_root(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  const std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  if (port_text.empty() || !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const auto port = parse_decimal(port_text);
  if (!port || *port < 1 || *port > 65535) return false;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    const std::string_view addr = host.substr(1, host.size() - 2);
    // An IPv6 literal, optionally with a zone (%eth0) or an embedded IPv4 tail.
    const auto zone = addr.find('%');
    const std::string_view literal = addr.substr(0, zone);
    return literal.find(':') != std::string_view::npos &&
           std::all_of(literal.begin(), literal.end(), [](char c) { return is_hex(c) || c == ':' || c == '.'; }) &&
           (zone == std::string_view::npos || zone + 1 < addr.size());
  }
  if (host.empty()) return false;
  return std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' || c == '_';
  });
}

std::string format_bytes(std::size_t bytes) {
  if (bytes != 0 && bytes % (1u << 30) == 0) return cat(bytes >> 30, "G");
  if (bytes != 0 && bytes % (1u << 20) == 0) return cat(bytes >> 20, "M");
  if (bytes != 0 && bytes % (1u << 10) == 0) return cat(bytes >> 10, "K");
  return cat(bytes);
}

std::string optional_int(const std::optional<int>& v) { return v ? cat(*v) : std::string("(unset)"); }

// Keeps an object alive until the process ends, never destroyed: logging from
// other objects' destructors at exit may still read the configuration.
template <class T>
class Immortal {
 public:
  Immortal() { std::construct_at(ptr()); }
  T& get() noexcept { return *ptr(); }

 private:
  T* ptr() noexcept { return std::launder(reinterpret_cast<T*>(storage_)); }
  alignas(T) unsigned char storage_[sizeof(T)];
};

struct ConfigCache {
  std::mutex mu;
  std::atomic<const Config*> current{nullptr};
  // Every parsed generation stays alive so references handed out before a
  // reload_config() never dangle.
  std::vector<std::unique_ptr<const Config>> generations;
  std::optional<std::string> error;  // a parse failure is remembered, like a success
};

ConfigCache& cache() {
  static Immortal<ConfigCache> instance;
  return instance.get();
}

// Called with the cache's mutex held.
const Config& parse_into_cache(ConfigCache& c) {
  if (c.error) throw ConfigError(*c.error);
  try {
    c.generations.push_back(std::make_unique<const Config>(Config::from_process_env()));
  } catch (const ConfigError& e) {
    c.error = e.what();
    throw;
  }
  const Config* parsed = c.generations.back().get();
  c.current.store(parsed, std::memory_order_release);
  return *parsed;
}

int checked_launcher_int(const Config::Lookup& lookup, std::string_view name, long long lo, bool required,
                         std::string_view launcher) {
  Reader reader(lookup);
  auto value = reader.get(name);
  if (!value) {
    if (required) raise<ConfigError>(launcher, " environment is incomplete: ", name, " is not set");
    return -1;
  }
  const auto parsed = parse_decimal(*value);
  if (!parsed || *parsed < lo || *parsed > INT_MAX) {
    invalid(name, *value, cat("an integer in [", lo, ", ", INT_MAX, "] (set by ", launcher, ")"));
  }
  return static_cast<int>(*parsed);
}

void check_launcher_consistency(const LauncherRanks& r, std::string_view rank_var, std::string_view size_var,
                                std::string_view local_rank_var, std::string_view local_size_var) {
  if (r.rank >= 0 && r.size > 0 && r.rank >= r.size) {
    raise<ConfigError>(rank_var, "=", r.rank, " is invalid: it must be less than ", size_var, "=", r.size,
                       " (", r.source, ")");
  }
  if (r.local_rank >= 0 && r.local_size > 0 && r.local_rank >= r.local_size) {
    raise<ConfigError>(local_rank_var, "=", r.local_rank, " is invalid: it must be less than ", local_size_var, "=",
                       r.local_size, " (", r.source, ")");
  }
}

bool valid_policy_name(std::string_view name) {
  if (name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_' || ch == '.' || ch == '-';
  });
}

// Deeper than any configuration needs, far shallower than the stack allows.
constexpr std::size_t kMaxJsonDepth = 64;
// Larger than any configuration needs; what @path reads at most (@/dev/zero
// must be an error, not a process that reads until memory runs out).
constexpr std::size_t kMaxPolicyConfigBytes = std::size_t{1} << 20;

// How deep arrays and objects nest in `text` (brackets inside strings do not
// count). A loop, not a parser: the JSON parser and dump() recurse per level,
// and a document nested 100 000 deep overflowed the stack of every program.
std::size_t json_nesting_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      deepest = std::max(deepest, ++depth);
    } else if ((ch == '}' || ch == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// ANTDT_POLICY_CONFIG: JSON text, or @path of a file with it. Only the syntax
// is checked here (an object); each policy checks its keys when it is made.
std::string read_policy_config(const std::string& value) {
  std::string text = value;
  if (value.front() == '@') {
    const std::string path = value.substr(1);
    std::ifstream in(path, std::ios::binary);
    if (!in) raise<ConfigError>("ANTDT_POLICY_CONFIG='", printable(value), "' is invalid: cannot open '", path, "'");
    text.assign(kMaxPolicyConfigBytes + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (in.bad()) raise<ConfigError>("ANTDT_POLICY_CONFIG='", printable(value), "' is invalid: cannot read '", path, "'");
    text.resize(static_cast<std::size_t>(in.gcount()));
  }
  if (text.size() > kMaxPolicyConfigBytes) {
    const std::string shown = value.size() > 80 ? value.substr(0, 80) + "..." : value;
    raise<ConfigError>("ANTDT_POLICY_CONFIG='", printable(shown), "' is invalid: ",
                       value.front() == '@' ? "the file has more than " : "more than ", kMaxPolicyConfigBytes,
                       " bytes of JSON; at most ", kMaxPolicyConfigBytes, " are allowed");
  }
  if (const std::size_t depth = json_nesting_depth(text); depth > kMaxJsonDepth) {
    const std::string shown = value.size() > 80 ? value.substr(0, 80) + "..." : value;  // not 100 kB of brackets
    raise<ConfigError>("ANTDT_POLICY_CONFIG='", printable(shown), "' is invalid: its JSON nests ", depth,
                       " levels deep", value.front() == '@' ? " in the file" : "", "; at most ", kMaxJsonDepth,
                       " are allowed");
  }
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    raise<ConfigError>("ANTDT_POLICY_CONFIG='", printable(value), "' is invalid: expected a JSON object",
                       value.front() == '@' ? " in the file" : "", " ({\"key\": value, ...}; @path reads a file)");
  }
  return parsed.dump();
}

}  // namespace

Config Config::from_env(const Lookup& lookup) {
  const Reader env(lookup);
  Config c;
  if (auto v = env.choice("ANTDT_DEBUG", kLogLevels)) c.log_level = *v;
  if (auto v = env.integer("ANTDT_TIMEOUT_MS", 1, kMaxTimeoutMs, "milliseconds")) c.timeout = std::chrono::milliseconds(*v);
  if (auto v = env.choice("ANTDT_TRANSPORT", kTransports)) c.transport = std::string(*v);
  if (auto v = env.choice("ANTDT_ALGO", kAlgos)) c.allreduce_algo = *v;
  if (auto v = env.get("ANTDT_NODE_ID")) {
    if (v->empty() || v->size() > kMaxNodeIdBytes) invalid("ANTDT_NODE_ID", *v, "1 to 255 characters naming this rank's node");
    c.node_id = std::string(*v);
  }
  if (auto v = env.bytes("ANTDT_CHUNK_BYTES", kMinChunkBytes, kMaxChunkBytes)) c.chunk_bytes = static_cast<std::size_t>(*v);
  if (auto v = env.bytes("ANTDT_SHM_MAX_BYTES", 0, kMaxShmBytes)) c.shm_max_bytes = static_cast<std::size_t>(*v);
  if (auto v = env.bytes("ANTDT_SHM_BULK_BYTES", 0, kMaxShmBulkBytes)) {
    if (*v != 0 && *v < kMinShmBulkBytes)
      raise<ConfigError>("ANTDT_SHM_BULK_BYTES=", *v, " is too small: 0 (off) or at least 4K");
    c.shm_bulk_bytes = static_cast<std::size_t>(*v);
  }
  if (auto v = env.choice("ANTDT_PROGRESS", kProgressModes)) c.progress = *v;
  if (auto v = env.integer("ANTDT_SPIN_US", 0, kMaxSpinUs, "microseconds")) c.spin_before_sleep = std::chrono::microseconds(*v);
  if (auto v = env.choice("ANTDT_BIND", kBindModes)) c.bind = *v;
  if (auto v = env.choice("ANTDT_ASYNC_PROGRESS", kAsyncProgress)) c.progress_thread = *v;
  if (auto v = env.bytes("ANTDT_UCX_SPLIT_BYTES", 0, kMaxUcxSplitBytes)) c.ucx_split_bytes = static_cast<std::size_t>(*v);
  if (auto v = env.choice("ANTDT_UCX_SHM", kUcxShmModes)) c.ucx_shm = *v;

  if (auto v = env.integer("ANTDT_RANK", 0, INT_MAX - 1, "this process's rank")) c.rank = static_cast<int>(*v);
  if (auto v = env.integer("ANTDT_WORLD_SIZE", 1, INT_MAX, "number of ranks")) c.world_size = static_cast<int>(*v);
  if (auto v = env.integer("ANTDT_LOCAL_RANK", 0, INT_MAX - 1, "rank on this node")) c.local_rank = static_cast<int>(*v);
  if (auto v = env.integer("ANTDT_LOCAL_SIZE", 1, INT_MAX, "ranks on this node")) c.local_size = static_cast<int>(*v);
  if (c.rank && c.world_size && *c.rank >= *c.world_size) {
    raise<ConfigError>("ANTDT_RANK='", *c.rank, "' is invalid: expected an integer in [0, ", *c.world_size - 1,
                       "] because ANTDT_WORLD_SIZE=", *c.world_size);
  }
  if (c.local_rank && c.local_size && *c.local_rank >= *c.local_size) {
    raise<ConfigError>("ANTDT_LOCAL_RANK='", *c.local_rank, "' is invalid: expected an integer in [0, ",
                       *c.local_size - 1, "] because ANTDT_LOCAL_SIZE=", *c.local_size);
  }

  if (auto v = env.get("ANTDT_ROOT")) {
    if (!valid_root(*v)) invalid("ANTDT_ROOT", *v, "host:port with a port in [1, 65535] (an IPv6 address as [addr]:port)");
    c.root = *v;
  }
  if (auto v = env.get("ANTDT_SECRET")) {
    // The value is not echoed: a near-miss may be most of the real secret.
    if (v->size() != kSecretHexDigits || !std::all_of(v->begin(), v->end(), is_hex)) {
      raise<ConfigError>("ANTDT_SECRET (a value of ", v->size(),
                         " characters, not shown) is invalid: expected exactly 32 hex digits [0-9a-fA-F]");
    }
    c.secret = to_lower(*v);
  }
  if (auto v = env.get("ANTDT_BOOTSTRAP_DIR")) c.bootstrap_dir = *v;

  if (auto v = env.integer("ANTDT_MONITOR_WINDOW", kMinMonitorWindow, kMaxMonitorWindow, "steps")) {
    c.monitor_window = static_cast<std::size_t>(*v);
  }
  if (auto v = env.real("ANTDT_MONITOR_ALPHA", 0, 1, true)) c.monitor_alpha = *v;
  if (auto v = env.real("ANTDT_MONITOR_THETA", 1, 100, true)) c.monitor_theta = *v;
  if (auto v = env.integer("ANTDT_MONITOR_SHORT_STEPS", 1, kMaxShortSteps, "steps")) {
    c.monitor_short_steps = static_cast<int>(*v);
  }
  if (auto v = env.real("ANTDT_MONITOR_GRACE_MARGIN", 1, 100, false)) c.monitor_grace_margin = *v;
  if (auto v = env.get("ANTDT_TRACE_DIR")) c.trace_dir = *v;
  if (auto v = env.integer("ANTDT_TRACE_FLUSH_STEPS", 1, kMaxTraceFlushSteps, "steps")) {
    c.trace_flush_steps = static_cast<int>(*v);
  }
  if (auto v = env.get("ANTDT_INJECT")) {
    c.inject = std::make_shared<const InjectSpec>(parse_inject(*v));
  }
  if (auto v = env.integer("ANTDT_NVTX", 0, 1, "1 = NVTX ranges per collective and step")) c.nvtx = *v == 1;
  if (auto v = env.choice("ANTDT_GPU_PATH", kGpuPaths)) c.gpu_path = *v;
  if (auto v = env.real("ANTDT_PARTIAL_QUORUM", 0, 1, true)) c.partial_quorum = *v;
  if (auto v = env.real("ANTDT_PARTIAL_GRACE_MS", 0, 600000, false)) c.partial_grace_ms = *v;
  if (auto v = env.integer("ANTDT_RESULT_CACHE", 2, 1024, "results")) c.result_cache = static_cast<std::size_t>(*v);
  if (auto v = env.integer("ANTDT_PARTIAL_WARMUP", 0, 100000, "steps")) c.partial_warmup = static_cast<int>(*v);
  if (auto v = env.choice("ANTDT_PARTIAL_ARBITER", kPartialArbiters)) c.partial_arbiter = *v;
  if (auto v = env.bytes("ANTDT_PS_PARTITION_BYTES", kMinChunkBytes, kMaxChunkBytes)) {
    c.ps_partition_bytes = static_cast<std::size_t>(*v);
  }
  if (auto v = env.integer("ANTDT_DDS_SHARD_SIZE", 1, 1LL << 30, "samples per shard")) {
    c.dds_shard_size = static_cast<std::size_t>(*v);
  }
  if (auto v = env.integer("ANTDT_DDS_SEED", 0, LLONG_MAX, "shuffle seed")) c.dds_seed = *v;
  if (auto v = env.choice("ANTDT_DDS_SHUFFLE", kDdsShuffles)) c.dds_shuffle = *v;
  if (auto v = env.get("ANTDT_POLICY")) {
    // Registered names are known only when the Controller is made (a program
    // may register its policy after the configuration was read).
    if (!valid_policy_name(*v)) {
      invalid("ANTDT_POLICY", *v, "bsp, antdt-dd, antdt-nd or the name of a registered policy ([A-Za-z0-9_.-]+)");
    }
    c.policy = *v;
  }
  if (auto v = env.get("ANTDT_POLICY_CONFIG")) c.policy_config = read_policy_config(*v);
  if (auto v = env.get("ANTDT_COORDINATOR")) {
    if (!valid_root(*v)) invalid("ANTDT_COORDINATOR", *v, "host:port with a port in [1, 65535] (an IPv6 address as [addr]:port)");
    c.coordinator = *v;
  }
  if (auto v = env.integer("ANTDT_COORDINATOR_EMBEDDED", 0, 1, "1 = rank 0 hosts the coordinator at ANTDT_COORDINATOR")) {
    c.coordinator_embedded = *v == 1;
  }
  if (c.coordinator_embedded && c.coordinator.empty())
    raise<ConfigError>("ANTDT_COORDINATOR_EMBEDDED=1 needs ANTDT_COORDINATOR=host:port (where rank 0 listens)");
  if (c.partial_arbiter == PartialArbiter::coordinator &&
      (c.coordinator.empty() || c.coordinator_embedded || c.secret.empty()))
    raise<ConfigError>("ANTDT_PARTIAL_ARBITER=coordinator needs an antdt-coordinator apart: ANTDT_COORDINATOR=host:port "
                       "(without ANTDT_COORDINATOR_EMBEDDED=1) and ANTDT_SECRET, the secret the ranks prove to it");
  if (auto v = env.get("ANTDT_COORDINATOR_CHECKPOINT")) c.coordinator_checkpoint = *v;
  if (auto v = env.real("ANTDT_COORDINATOR_CHECKPOINT_S", 0, 86400, true)) {
    c.coordinator_checkpoint_interval = std::chrono::milliseconds(std::max<long long>(1, std::llround(*v * 1000)));
  }
  if (auto v = env.get("ANTDT_COORDINATOR_DB")) c.coordinator_db = *v;
  if (auto v = env.real("ANTDT_COORDINATOR_GRACE_S", 0, 86400, true)) {
    c.coordinator_grace = std::chrono::milliseconds(std::max<long long>(1, std::llround(*v * 1000)));
  }
  if (auto v = env.integer("ANTDT_INCARNATION", 0, INT_MAX, "restarts of this rank so far")) c.incarnation = static_cast<int>(*v);
  if (auto v = env.integer("ANTDT_RESTART_EXIT_CODE", 1, 255, "exit code")) c.restart_exit_code = static_cast<int>(*v);
  if (auto v = env.integer("ANTDT_MAX_RESTARTS", 0, 1000000, "restarts per rank")) c.max_restarts = static_cast<int>(*v);
  if (auto v = env.integer("ANTDT_AGENT_PREFETCH", 0, 1, "1 = the plan request leases the step's samples too"))
    c.agent_prefetch = *v == 1;
  if (auto v = env.integer("ANTDT_AGENT_REPORT_WITH_NEXT", 0, 1, "1 = a step's report goes with the next request"))
    c.agent_report_with_next = *v == 1;
  return c;
}

Config Config::from_process_env() {
  return from_env([](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

bool Config::external_arbiter() const noexcept {
  const bool apart = !coordinator.empty() && !coordinator_embedded && !secret.empty();
  return partial_arbiter == PartialArbiter::coordinator || (partial_arbiter == PartialArbiter::automatic && apart);
}

std::array<std::byte, 16> Config::secret_bytes(std::string_view who) const {
  if (secret.empty())
    raise<ConfigError>(who, " needs ANTDT_SECRET=<32 hex digits>: the secret every rank proves to it");
  // Validated when read: exactly 32 lower-case hex digits.
  std::array<std::byte, 16> out{};
  auto nibble = [](char c) { return static_cast<unsigned>(c <= '9' ? c - '0' : c - 'a' + 10); };
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::byte>(nibble(secret[2 * i]) << 4 | nibble(secret[2 * i + 1]));
  return out;
}

std::vector<std::string> Config::describe() const {
  std::vector<std::string> lines;
  std::string level(name_of(log_level, kLogLevels));
  for (char& ch : level) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  lines.push_back(cat("ANTDT_DEBUG=", level));
  lines.push_back(cat("ANTDT_TIMEOUT_MS=", timeout.count()));
  lines.push_back(cat("ANTDT_TRANSPORT=", transport));
  lines.push_back(cat("ANTDT_ALGO=", name_of(allreduce_algo, kAlgos)));
  lines.push_back(cat("ANTDT_NODE_ID=", node_id.empty() ? "(host name + boot id)" : node_id));
  lines.push_back(cat("ANTDT_CHUNK_BYTES=", format_bytes(chunk_bytes)));
  lines.push_back(cat("ANTDT_SHM_MAX_BYTES=", format_bytes(shm_max_bytes)));
  lines.push_back(cat("ANTDT_SHM_BULK_BYTES=", format_bytes(shm_bulk_bytes)));
  lines.push_back(cat("ANTDT_PROGRESS=", name_of(progress, kProgressModes)));
  lines.push_back(cat("ANTDT_SPIN_US=", spin_before_sleep.count()));
  lines.push_back(cat("ANTDT_BIND=", name_of(bind, kBindModes)));
  lines.push_back(cat("ANTDT_ASYNC_PROGRESS=", name_of(progress_thread, kAsyncProgress)));
  lines.push_back(cat("ANTDT_UCX_SPLIT_BYTES=", format_bytes(ucx_split_bytes)));
  lines.push_back(cat("ANTDT_UCX_SHM=", name_of(ucx_shm, kUcxShmModes)));
  lines.push_back(cat("ANTDT_RANK=", optional_int(rank)));
  lines.push_back(cat("ANTDT_WORLD_SIZE=", optional_int(world_size)));
  lines.push_back(cat("ANTDT_LOCAL_RANK=", optional_int(local_rank)));
  lines.push_back(cat("ANTDT_LOCAL_SIZE=", optional_int(local_size)));
  lines.push_back(cat("ANTDT_ROOT=", root.empty() ? "(unset)" : root));
  lines.push_back(cat("ANTDT_SECRET=", secret.empty() ? "(unset)" : "(set, not shown)"));
  lines.push_back(cat("ANTDT_BOOTSTRAP_DIR=", bootstrap_dir));
  lines.push_back(cat("ANTDT_MONITOR_WINDOW=", monitor_window));
  lines.push_back(cat("ANTDT_MONITOR_ALPHA=", monitor_alpha));
  lines.push_back(cat("ANTDT_MONITOR_THETA=", monitor_theta));
  lines.push_back(cat("ANTDT_MONITOR_SHORT_STEPS=", monitor_short_steps));
  lines.push_back(cat("ANTDT_MONITOR_GRACE_MARGIN=", monitor_grace_margin));
  lines.push_back(cat("ANTDT_TRACE_DIR=", trace_dir.empty() ? "(unset)" : trace_dir));
  lines.push_back(cat("ANTDT_TRACE_FLUSH_STEPS=", trace_flush_steps));
  lines.push_back(cat("ANTDT_INJECT=", inject ? inject->text : std::string("(unset)")));
  lines.push_back(cat("ANTDT_NVTX=", nvtx ? 1 : 0));
  lines.push_back(cat("ANTDT_GPU_PATH=", name_of(gpu_path, kGpuPaths)));
  lines.push_back(cat("ANTDT_PARTIAL_QUORUM=", partial_quorum));
  lines.push_back(cat("ANTDT_PARTIAL_GRACE_MS=", partial_grace_ms));
  lines.push_back(cat("ANTDT_RESULT_CACHE=", result_cache));
  lines.push_back(cat("ANTDT_PARTIAL_WARMUP=", partial_warmup));
  lines.push_back(cat("ANTDT_PARTIAL_ARBITER=", name_of(partial_arbiter, kPartialArbiters)));
  lines.push_back(cat("ANTDT_PS_PARTITION_BYTES=", format_bytes(ps_partition_bytes)));
  lines.push_back(cat("ANTDT_DDS_SHARD_SIZE=", dds_shard_size));
  lines.push_back(cat("ANTDT_DDS_SEED=", dds_seed));
  lines.push_back(cat("ANTDT_DDS_SHUFFLE=", dds_shuffle));
  lines.push_back(cat("ANTDT_POLICY=", policy));
  lines.push_back(cat("ANTDT_POLICY_CONFIG=", policy_config));
  lines.push_back(cat("ANTDT_COORDINATOR=", coordinator.empty() ? "(unset)" : coordinator));
  lines.push_back(cat("ANTDT_COORDINATOR_EMBEDDED=", coordinator_embedded ? 1 : 0));
  lines.push_back(cat("ANTDT_COORDINATOR_CHECKPOINT=", coordinator_checkpoint.empty() ? "(unset)" : coordinator_checkpoint));
  lines.push_back(cat("ANTDT_COORDINATOR_CHECKPOINT_S=", coordinator_checkpoint_interval.count() / 1000.0));
  lines.push_back(cat("ANTDT_COORDINATOR_DB=", coordinator_db.empty() ? "(unset)" : coordinator_db));
  lines.push_back(cat("ANTDT_COORDINATOR_GRACE_S=", coordinator_grace.count() / 1000.0));
  lines.push_back(cat("ANTDT_INCARNATION=", incarnation));
  lines.push_back(cat("ANTDT_RESTART_EXIT_CODE=", restart_exit_code));
  lines.push_back(cat("ANTDT_MAX_RESTARTS=", max_restarts));
  lines.push_back(cat("ANTDT_AGENT_PREFETCH=", agent_prefetch ? 1 : 0));
  lines.push_back(cat("ANTDT_AGENT_REPORT_WITH_NEXT=", agent_report_with_next ? 1 : 0));
  return lines;
}

const Config& config() {
  ConfigCache& c = cache();
  if (const Config* current = c.current.load(std::memory_order_acquire)) return *current;
  std::lock_guard lock(c.mu);
  if (const Config* current = c.current.load(std::memory_order_acquire)) return *current;
  return parse_into_cache(c);
}

void reload_config() {
  ConfigCache& c = cache();
  std::lock_guard lock(c.mu);
  c.current.store(nullptr, std::memory_order_release);
  c.error.reset();
  parse_into_cache(c);
}

std::optional<LauncherRanks> launcher_ranks(const Config::Lookup& lookup) {
  const Reader env(lookup);
  LauncherRanks r;

  if (env.get("OMPI_COMM_WORLD_RANK")) {
    r.source = "Open MPI";
    r.rank = checked_launcher_int(lookup, "OMPI_COMM_WORLD_RANK", 0, true, r.source);
    r.size = checked_launcher_int(lookup, "OMPI_COMM_WORLD_SIZE", 1, true, r.source);
    r.local_rank = checked_launcher_int(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", 0, false, r.source);
    r.local_size = checked_launcher_int(lookup, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, false, r.source);
    if (auto id = env.get("OMPI_MCA_ess_base_jobid")) {
      r.job_id = *id;
    } else if (auto ns = env.get("PMIX_NAMESPACE")) {
      r.job_id = *ns;
    }
    check_launcher_consistency(r, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                               "OMPI_COMM_WORLD_LOCAL_SIZE");
    return r;
  }
  if (env.get("PMIX_RANK") && env.get("PMIX_NAMESPACE")) {
    // PMIx puts only the rank and namespace in the environment; the job size
    // must come from the PMIx server, so it stays unknown (-1) here.
    r.source = "PMIx";
    r.rank = checked_launcher_int(lookup, "PMIX_RANK", 0, true, r.source);
    r.job_id = *env.get("PMIX_NAMESPACE");
    return r;
  }
  if (env.get("PMI_RANK")) {
    r.source = "PMI";
    r.rank = checked_launcher_int(lookup, "PMI_RANK", 0, true, r.source);
    r.size = checked_launcher_int(lookup, "PMI_SIZE", 1, true, r.source);
    check_launcher_consistency(r, "PMI_RANK", "PMI_SIZE", "", "");
    return r;
  }
  if (env.get("SLURM_PROCID")) {
    r.source = "Slurm";
    r.rank = checked_launcher_int(lookup, "SLURM_PROCID", 0, true, r.source);
    r.size = checked_launcher_int(lookup, "SLURM_NTASKS", 1, true, r.source);
    r.local_rank = checked_launcher_int(lookup, "SLURM_LOCALID", 0, false, r.source);
    if (auto job = env.get("SLURM_JOB_ID")) {
      r.job_id = *job;
      if (auto step = env.get("SLURM_STEP_ID")) r.job_id += cat(".", *step);
    }
    check_launcher_consistency(r, "SLURM_PROCID", "SLURM_NTASKS", "", "");
    return r;
  }
  return std::nullopt;
}

}  // namespace antdt
