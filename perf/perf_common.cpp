#include "perf_common.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <type_traits>
#include <unistd.h>

namespace antdt::perf {
namespace {

[[noreturn]] void invalid(const std::string& what) { throw InvalidArgument(what); }

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::vector<std::string> split_commas(std::string_view text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::size_t end = comma == std::string_view::npos ? text.size() : comma;
    parts.emplace_back(text.substr(start, end - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return parts;
}

struct DtypeName {
  DataType dtype;
  std::string_view name;
};
// The first name of each type is the nccl-tests one; the rest are aliases.
constexpr DtypeName kDtypeNames[] = {
    {DataType::i8, "int8"},       {DataType::u8, "uint8"},     {DataType::i32, "int32"},
    {DataType::u32, "uint32"},    {DataType::i64, "int64"},    {DataType::u64, "uint64"},
    {DataType::f16, "half"},      {DataType::f32, "float"},    {DataType::f64, "double"},
    {DataType::bf16, "bfloat16"}, {DataType::i8, "i8"},        {DataType::u8, "u8"},
    {DataType::i32, "i32"},       {DataType::i32, "int"},      {DataType::u32, "u32"},
    {DataType::i64, "i64"},       {DataType::u64, "u64"},      {DataType::f16, "f16"},
    {DataType::f16, "fp16"},      {DataType::f16, "float16"},  {DataType::f32, "f32"},
    {DataType::f32, "fp32"},      {DataType::f32, "float32"},  {DataType::f64, "f64"},
    {DataType::f64, "fp64"},      {DataType::f64, "float64"},  {DataType::bf16, "bf16"},
    {DataType::bf16, "bfloat"},
};
// nccl-tests' order for "-d all".
constexpr std::array<DataType, 10> kAllDtypes{DataType::i8,  DataType::u8,  DataType::i32, DataType::u32,
                                              DataType::i64, DataType::u64, DataType::f16, DataType::f32,
                                              DataType::f64, DataType::bf16};

struct OpName {
  ReduceOp op;
  std::string_view name;
};
constexpr std::array<OpName, 5> kOpNames{{{ReduceOp::sum, "sum"},
                                          {ReduceOp::prod, "prod"},
                                          {ReduceOp::max, "max"},
                                          {ReduceOp::min, "min"},
                                          {ReduceOp::avg, "avg"}}};

// ---- f16 / bf16 conversions (round to nearest even) -------------------------
std::uint16_t float_to_half_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)  // inf or nan
    return static_cast<std::uint16_t>(sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half (or zero), in units of 2^-24
    const float scaled = std::bit_cast<float>(magnitude) * 16777216.0f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(scaled)));
  }
  const std::uint32_t exponent = (magnitude >> 23) - 127 + 15;
  std::uint32_t half = (exponent << 10) | ((magnitude & 0x7fffffu) >> 13);
  const std::uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<std::uint16_t>(sign | half);
}

float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -value : value;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

std::uint16_t float_to_bf16_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet nan
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

float bf16_bits_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

// ---- per-dtype element codecs ------------------------------------------------
struct HalfTag {};
struct Bf16Tag {};

template <class T>
struct Codec {
  using Storage = T;
  static Storage from_integer(std::int64_t v) noexcept { return static_cast<T>(v); }
  static double to_double(Storage s) noexcept { return static_cast<double>(s); }
};
template <>
struct Codec<HalfTag> {
  using Storage = std::uint16_t;
  static Storage from_integer(std::int64_t v) noexcept { return float_to_half_bits(static_cast<float>(v)); }
  static double to_double(Storage s) noexcept { return half_bits_to_float(s); }
};
template <>
struct Codec<Bf16Tag> {
  using Storage = std::uint16_t;
  static Storage from_integer(std::int64_t v) noexcept { return float_to_bf16_bits(static_cast<float>(v)); }
  static double to_double(Storage s) noexcept { return bf16_bits_to_float(s); }
};

template <class F>
decltype(auto) visit_dtype(DataType t, F&& f) {
  switch (t) {
    case DataType::f32: return f(Codec<float>{});
    case DataType::f64: return f(Codec<double>{});
    case DataType::f16: return f(Codec<HalfTag>{});
    case DataType::bf16: return f(Codec<Bf16Tag>{});
    case DataType::i8: return f(Codec<std::int8_t>{});
    case DataType::u8: return f(Codec<std::uint8_t>{});
    case DataType::i32: return f(Codec<std::int32_t>{});
    case DataType::u32: return f(Codec<std::uint32_t>{});
    case DataType::i64: return f(Codec<std::int64_t>{});
    case DataType::u64: return f(Codec<std::uint64_t>{});
  }
  invalid("unknown datatype code " + std::to_string(static_cast<int>(t)));
}

// Writes element i of `out` as generator(i) for every element.
template <class Generator>
void fill_elements(DataType dtype, std::span<std::byte> out, Generator&& generator) {
  visit_dtype(dtype, [&](auto codec) {
    using C = decltype(codec);
    using S = typename C::Storage;
    const std::size_t count = out.size() / sizeof(S);
    for (std::size_t i = 0; i < count; ++i) {
      const S value = C::from_integer(generator(i));
      std::memcpy(out.data() + i * sizeof(S), &value, sizeof(S));
    }
  });
}

// The largest integer M such that every integer in [-M, M] (or [0, M] for
// unsigned types) is exact in the datatype and cannot overflow it.
std::int64_t max_exact(DataType t) noexcept {
  switch (t) {
    case DataType::f32: return std::int64_t{1} << 24;
    case DataType::f64: return std::int64_t{1} << 53;
    case DataType::f16: return 2048;
    case DataType::bf16: return 256;
    case DataType::i8: return 127;
    case DataType::u8: return 255;
    case DataType::i32: return std::numeric_limits<std::int32_t>::max();
    case DataType::u32: return std::numeric_limits<std::uint32_t>::max();
    case DataType::i64:
    case DataType::u64: return std::int64_t{1} << 62;
  }
  return 0;
}

bool is_signed_type(DataType t) noexcept {
  return t != DataType::u8 && t != DataType::u32 && t != DataType::u64;
}

enum WeightKind : int { rank_plus_one = 0, one = 1, first_ranks_one = 2, odd = 3, zero = 4 };

std::int64_t weight_total(int kind, std::int64_t n, std::int64_t cap) noexcept {
  switch (kind) {
    case rank_plus_one: return n * (n + 1) / 2;
    case one: return n;
    case first_ranks_one: return std::min(n, cap);
    case odd: return n * n;
    default: return 0;
  }
}

std::string printf_string(const char* fmt, auto... args) {
  std::array<char, 512> buffer{};
  const int written = std::snprintf(buffer.data(), buffer.size(), fmt, args...);
  if (written < 0) return {};
  return std::string(buffer.data(), std::min<std::size_t>(static_cast<std::size_t>(written), buffer.size() - 1));
}

}  // namespace

// ---------------------------------------------------------------------------
std::size_t parse_size(std::string_view text) {
  if (text.empty()) invalid("empty size: expected a byte count like 8, 1K, 64M or 2G");
  std::uint64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto [next, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc{} || next == begin)
    invalid("bad size '" + std::string(text) + "': expected a byte count like 8, 1K, 64M or 2G");
  unsigned shift = 0;
  if (next != end) {
    if (next + 1 != end)
      invalid("bad size '" + std::string(text) + "': expected a byte count like 8, 1K, 64M or 2G");
    switch (std::tolower(static_cast<unsigned char>(*next))) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      default: invalid("bad size suffix in '" + std::string(text) + "': expected K, M or G");
    }
  }
  if (shift > 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift))
    invalid("size '" + std::string(text) + "' is too large");
  return static_cast<std::size_t>(value << shift);
}

DataType parse_dtype(std::string_view name) {
  const std::string key = lower(name);
  for (const auto& entry : kDtypeNames)
    if (entry.name == key) return entry.dtype;
  invalid("unknown datatype '" + std::string(name) +
          "': expected int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16 "
          "(or f32, f64, f16, bf16, i8, u8, i32, u32, i64, u64)");
}

std::vector<DataType> parse_dtype_list(std::string_view text) {
  if (lower(text) == "all") return {kAllDtypes.begin(), kAllDtypes.end()};
  std::vector<DataType> out;
  for (const auto& part : split_commas(text)) out.push_back(parse_dtype(part));
  return out;
}

std::string_view dtype_label(DataType t) noexcept {
  for (const auto& entry : kDtypeNames)
    if (entry.dtype == t) return entry.name;
  return "?";
}

ReduceOp parse_op(std::string_view name) {
  const std::string key = lower(name);
  for (const auto& entry : kOpNames)
    if (entry.name == key) return entry.op;
  invalid("unknown reduction op '" + std::string(name) + "': expected sum, prod, min, max or avg");
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<ReduceOp> parse_op_list(std::string_view text) {
  if (lower(text) == "all") return {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min, ReduceOp::avg};
  std::vector<ReduceOp> out;
  for (const auto& part : split_commas(text)) out.push_back(parse_op(part));
  return out;
}

std::string_view op_label(ReduceOp op) noexcept {
  for (const auto& entry : kOpNames)
    if (entry.op == op) return entry.name;
  return "?";
}

std::vector<std::size_t> sweep_sizes(const SizeSweep& sweep) {
  if (sweep.min_bytes > sweep.max_bytes)
    invalid("minbytes " + std::to_string(sweep.min_bytes) + " is larger than maxbytes " +
            std::to_string(sweep.max_bytes));
  if (sweep.step_factor <= 1 && sweep.step_bytes == 0)
    invalid("the size sweep never advances: give -f stepfactor > 1 or -i stepbytes > 0");
  std::vector<std::size_t> sizes;
  std::size_t size = sweep.min_bytes;
  while (true) {
    sizes.push_back(size);
    std::size_t next = 0;
    if (sweep.step_factor > 1) {
      if (size > sweep.max_bytes / sweep.step_factor) break;
      next = std::max<std::size_t>(size * sweep.step_factor, 1);  // 0 * f would never advance
    } else {
      if (size > sweep.max_bytes - sweep.step_bytes) break;
      next = size + sweep.step_bytes;
    }
    if (next > sweep.max_bytes) break;
    size = next;
  }
  return sizes;
}

// ---------------------------------------------------------------------------
void add_common_options(CLI::App& app, PerfOptions& opts, bool with_op, bool with_root) {
  app.add_option("-b,--minbytes", opts.min_bytes, "smallest message size in bytes (K/M/G suffixes)")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", opts.max_bytes, "largest message size in bytes (K/M/G suffixes)")
      ->capture_default_str();
  app.add_option("-f,--stepfactor", opts.step_factor, "multiply the size by this factor between rows")
      ->capture_default_str();
  app.add_option("-i,--stepbytes", opts.step_bytes,
                 "add this many bytes between rows (used when -f is not given or is 1)");
  app.add_option("-n,--iters", opts.iters, "timed iterations per size")->capture_default_str();
  app.add_option("-w,--warmup_iters", opts.warmup_iters, "untimed iterations per size before timing")
      ->capture_default_str();
  app.add_option("-c,--check", opts.check, "check results (0/1)")->capture_default_str();
  app.add_option("-d,--datatype", opts.datatype,
                 "int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16, a comma list or all")
      ->capture_default_str();
  if (with_op)
    app.add_option("-o,--op", opts.op, "sum, prod, min, max, avg, a comma list or all")->capture_default_str();
  if (with_root) app.add_option("-r,--root", opts.root, "root rank")->capture_default_str();
  app.add_option("-t,--nthreads", opts.nthreads, "threads per process (only 1: one rank per process)");
  app.add_option("-g,--ngpus", opts.ngpus, "devices per thread (only 1)");
}

ResolvedOptions resolve(const CLI::App& app, const PerfOptions& opts) {
  ResolvedOptions out;
  out.sweep.min_bytes = parse_size(opts.min_bytes);
  out.sweep.max_bytes = parse_size(opts.max_bytes);
  const bool factor_given = app.count("--stepfactor") > 0;
  const bool step_given = !opts.step_bytes.empty();
  if (factor_given && opts.step_factor < 1) invalid("stepfactor must be at least 1, got " + std::to_string(opts.step_factor));
  if (step_given) out.sweep.step_bytes = parse_size(opts.step_bytes);
  // As in nccl-tests, a factor > 1 wins; -i alone (or with -f 1) steps by bytes.
  if (factor_given) {
    out.sweep.step_factor = opts.step_factor;
    if (opts.step_factor <= 1 && !step_given) out.sweep.step_bytes = std::size_t{1} << 20;
  } else {
    out.sweep.step_factor = step_given ? 1 : 2;
  }
  out.sizes = sweep_sizes(out.sweep);
  if (opts.iters < 1) invalid("iters (-n) must be at least 1, got " + std::to_string(opts.iters));
  if (opts.warmup_iters < 0) invalid("warmup iters (-w) must be >= 0, got " + std::to_string(opts.warmup_iters));
  if (opts.check != 0 && opts.check != 1) invalid("check (-c) must be 0 or 1, got " + std::to_string(opts.check));
  if (opts.nthreads != 1) invalid("-t: antdt perf tools run one rank per process; only -t 1 is supported");
  if (opts.ngpus != 1) invalid("-g: antdt perf tools drive one device per rank; only -g 1 is supported");
  if (opts.root < 0) invalid("root (-r) must be >= 0, got " + std::to_string(opts.root));
  out.iters = opts.iters;
  out.warmup_iters = opts.warmup_iters;
  out.check = opts.check == 1;
  out.dtypes = parse_dtype_list(opts.datatype);
  out.ops = parse_op_list(opts.op);
  out.root = opts.root;
  return out;
}

int launcher_rank_hint() {
  for (const char* name : {"ANTDT_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    int rank = 0;
    const auto [next, ec] = std::from_chars(value, value + std::strlen(value), rank);
    if (ec == std::errc{} && *next == '\0') return rank;
  }
  return 0;
}

// ---------------------------------------------------------------------------
ReducePattern::ReducePattern(DataType dtype, ReduceOp op, int nranks) : dtype_(dtype), op_(op), nranks_(nranks) {
  if (nranks < 1) invalid("ReducePattern: nranks must be >= 1, got " + std::to_string(nranks));
  (void)dtype_size(dtype);  // rejects codes outside the enum
  const std::int64_t limit = max_exact(dtype);
  const std::int64_t n = nranks;
  signed_values_ = (op == ReduceOp::min || op == ReduceOp::max) && is_signed_type(dtype);
  // Pick the richest weights w(rank) and period B whose largest result fits.
  auto choose = [&](std::initializer_list<int> kinds, int fallback) {
    for (const int kind : kinds) {
      const std::int64_t total = weight_total(kind, n, limit);
      for (std::int64_t period = 7; period >= 1; --period) {
        if (total <= limit / period) {
          weight_kind_ = kind;
          weight_total_ = total;
          period_ = period;
          return;
        }
      }
    }
    weight_kind_ = fallback;
    weight_total_ = weight_total(fallback, n, limit);
    period_ = 1;
  };
  if (op == ReduceOp::sum) choose({rank_plus_one, one}, first_ranks_one);
  if (op == ReduceOp::avg) choose({odd, one}, zero);
}

std::int64_t ReducePattern::weight(int rank) const noexcept {
  switch (weight_kind_) {
    case rank_plus_one: return rank + 1;
    case one: return 1;
    case first_ranks_one: return rank < max_exact(dtype_) ? 1 : 0;
    case odd: return 2 * std::int64_t{rank} + 1;
    default: return 0;
  }
}

std::int64_t ReducePattern::input_value(int rank, std::size_t i) const noexcept {
  switch (op_) {
    case ReduceOp::sum:
    case ReduceOp::avg: return weight(rank) * static_cast<std::int64_t>(i % static_cast<std::size_t>(period_) + 1);
    case ReduceOp::prod:
      return i % (static_cast<std::size_t>(nranks_) + 1) == static_cast<std::size_t>(rank) ? 2 : 1;
    case ReduceOp::min:
    case ReduceOp::max: {
      const auto v = static_cast<std::int64_t>((7 * (i % 101) + 13 * static_cast<std::size_t>(rank % 101)) % 101) + 1;
      return signed_values_ ? v - 51 : v;
    }
  }
  return 0;
}

std::int64_t ReducePattern::expected_value(std::size_t i) const noexcept {
  const auto b = static_cast<std::int64_t>(i % static_cast<std::size_t>(period_) + 1);
  switch (op_) {
    case ReduceOp::sum: return b * weight_total_;
    case ReduceOp::avg: return b * weight_total_ / nranks_;  // exact: weight_total_ is 0, n or n^2
    case ReduceOp::prod: return i % (static_cast<std::size_t>(nranks_) + 1) < static_cast<std::size_t>(nranks_) ? 2 : 1;
    case ReduceOp::min:
    case ReduceOp::max: {
      std::int64_t result = input_value(0, i);
      for (int r = 1; r < nranks_; ++r) {
        const std::int64_t v = input_value(r, i);
        result = op_ == ReduceOp::min ? std::min(result, v) : std::max(result, v);
      }
      return result;
    }
  }
  return 0;
}

void ReducePattern::fill_input(int rank, std::span<std::byte> out) const {
  fill_elements(dtype_, out, [&](std::size_t i) { return input_value(rank, i); });
}

void ReducePattern::fill_expected(std::span<std::byte> out) const {
  fill_elements(dtype_, out, [&](std::size_t i) { return expected_value(i); });
}

void ReducePattern::fill_repeatable(int rank, std::span<std::byte> out) const {
  switch (op_) {
    case ReduceOp::sum:
    case ReduceOp::avg: std::memset(out.data(), 0, out.size()); return;  // zero bits are 0 in every type
    case ReduceOp::prod: fill_elements(dtype_, out, [](std::size_t) { return std::int64_t{1}; }); return;
    case ReduceOp::min:
    case ReduceOp::max: fill_input(rank, out); return;
  }
}

void store_integer(DataType dtype, std::int64_t value, std::byte* out) noexcept {
  visit_dtype(dtype, [&](auto codec) {
    using C = decltype(codec);
    const typename C::Storage stored = C::from_integer(value);
    std::memcpy(out, &stored, sizeof(stored));
  });
}

double load_as_double(DataType dtype, const std::byte* in) noexcept {
  return visit_dtype(dtype, [&](auto codec) {
    using C = decltype(codec);
    typename C::Storage stored{};
    std::memcpy(&stored, in, sizeof(stored));
    return C::to_double(stored);
  });
}

CheckResult count_wrong(DataType dtype, std::span<const std::byte> got, std::span<const std::byte> expected) {
  CheckResult result;
  if (got.size() != expected.size())
    invalid("count_wrong: result has " + std::to_string(got.size()) + " bytes, expected " +
            std::to_string(expected.size()));
  if (got.empty() || std::memcmp(got.data(), expected.data(), got.size()) == 0) return result;
  const std::size_t width = dtype_size(dtype);
  for (std::size_t i = 0; i < got.size() / width; ++i) {
    if (std::memcmp(got.data() + i * width, expected.data() + i * width, width) == 0) continue;
    if (result.wrong == 0) {
      result.first_wrong = i;
      result.first_got = load_as_double(dtype, got.data() + i * width);
      result.first_expected = load_as_double(dtype, expected.data() + i * width);
    }
    ++result.wrong;
  }
  return result;
}

// ---------------------------------------------------------------------------
double max_over_ranks(Communicator& comm, double value) {
  double result = 0;
  comm.allreduce(&value, &result, 1, DataType::f64, ReduceOp::max);
  return result;
}

std::uint64_t sum_over_ranks(Communicator& comm, std::uint64_t value) {
  std::uint64_t result = 0;
  comm.allreduce(&value, &result, 1, DataType::u64, ReduceOp::sum);
  return result;
}

std::vector<RankInfo> gather_rank_info(Communicator& comm) {
  // An allgather through AllReduce(max): every rank fills only its own slot.
  constexpr std::size_t kSlot = 64;
  constexpr std::size_t kPidBytes = sizeof(std::uint64_t);
  const auto nranks = static_cast<std::size_t>(comm.size());
  std::vector<std::byte> slots(nranks * kSlot);
  std::byte* mine = slots.data() + static_cast<std::size_t>(comm.rank()) * kSlot;
  const auto pid = static_cast<std::uint64_t>(::getpid());
  std::memcpy(mine, &pid, kPidBytes);
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) std::strcpy(host.data(), "?");
  std::memcpy(mine + kPidBytes, host.data(), std::min(std::strlen(host.data()), kSlot - kPidBytes - 1));
  comm.allreduce(slots.data(), slots.data(), slots.size(), DataType::u8, ReduceOp::max);

  std::vector<RankInfo> ranks(nranks);
  for (std::size_t r = 0; r < nranks; ++r) {
    const std::byte* slot = slots.data() + r * kSlot;
    std::uint64_t slot_pid = 0;
    std::memcpy(&slot_pid, slot, kPidBytes);
    const char* name = reinterpret_cast<const char*>(slot + kPidBytes);
    ranks[r] = RankInfo{static_cast<int>(r), static_cast<long>(slot_pid),
                        std::string(name, strnlen(name, kSlot - kPidBytes))};
  }
  return ranks;
}

// ---------------------------------------------------------------------------
Measurement make_measurement(std::size_t bytes, double time_us, double busbw_factor,
                             std::optional<std::uint64_t> wrong) {
  Measurement m;
  m.time_us = time_us;
  m.algbw_gbs = time_us > 0 ? static_cast<double>(bytes) / 1.0e3 / time_us : 0.0;  // bytes/us/1e3 = GB/s
  m.busbw_gbs = m.algbw_gbs * busbw_factor;
  m.wrong = wrong;
  return m;
}

double gather_busbw_factor(int nranks) noexcept {
  return nranks <= 0 ? 0.0 : static_cast<double>(nranks - 1) / nranks;
}

double allreduce_busbw_factor(int nranks) noexcept {
  return nranks <= 0 ? 0.0 : 2.0 * (nranks - 1) / nranks;
}

std::string header_line(std::string_view collective, int nranks, const ResolvedOptions& opts,
                        std::string_view transport) {
  std::ostringstream out;
  out << "# Collective test starting: " << collective << "\n";
  out << "# nRanks " << nranks << " minBytes " << opts.sweep.min_bytes << " maxBytes " << opts.sweep.max_bytes
      << " step: ";
  if (opts.sweep.step_factor > 1)
    out << opts.sweep.step_factor << "(factor)";
  else
    out << opts.sweep.step_bytes << "(bytes)";
  out << " warmup iters: " << opts.warmup_iters << " iters: " << opts.iters << " validation: " << (opts.check ? 1 : 0)
      << " transport: " << transport << "\n";
  out << "#\n";
  return out.str();
}

std::string rank_lines(const std::vector<RankInfo>& ranks, std::string_view transport) {
  std::string out = "# Using ranks\n";
  const std::string transport_text(transport);
  for (const auto& r : ranks)
    out += printf_string("#  Rank %2d Pid %6ld on %10s transport %s\n", r.rank, r.pid, r.host.c_str(), transport_text.c_str());
  out += "#\n";
  return out;
}

std::string table_header() {
  std::string out;
  out += printf_string("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "",
                "", "", "", "");
  out += printf_string("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type",
                "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  out += printf_string("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  return out;
}

namespace {
std::string measurement_columns(const Measurement& m) {
  std::string time;
  if (m.time_us >= 10000.0)
    time = printf_string("%7.0f", m.time_us);
  else if (m.time_us >= 100.0)
    time = printf_string("%7.1f", m.time_us);
  else
    time = printf_string("%7.2f", m.time_us);
  std::string wrong = m.wrong ? std::to_string(*m.wrong) : std::string("N/A");
  return printf_string("  %7s  %6.2f  %6.2f  %5s", time.c_str(), m.algbw_gbs, m.busbw_gbs, wrong.c_str());
}
}  // namespace

std::string table_row(std::size_t bytes, std::size_t count, DataType dtype, std::string_view op, int root,
                      const Measurement& out_of_place, const Measurement& in_place) {
  const std::string type_text(dtype_label(dtype));
  const std::string op_text(op);
  return printf_string("%12zu  %12zu  %8s  %6s  %6d", bytes, count, type_text.c_str(), op_text.c_str(), root) +
         measurement_columns(out_of_place) + measurement_columns(in_place) + "\n";
}

std::string table_footer(std::uint64_t wrong_total, double avg_busbw) {
  return printf_string("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong_total),
                wrong_total == 0 ? "OK" : "FAILED") +
         printf_string("# Avg bus bandwidth    : %g \n", avg_busbw) + "#\n";
}


void report_wrong(const char* tool, const Communicator& comm, DataType dtype, std::optional<ReduceOp> op,
                  std::size_t bytes, const char* placement, const CheckResult& check) {
  if (check.wrong == 0) return;
  const std::string what = op ? std::string(dtype_label(dtype)) + " " + std::string(op_label(*op))
                              : std::string(dtype_label(dtype));
  std::fprintf(stderr, "%s: rank %d: %s %zu bytes %s: %llu wrong elements; first at index %zu: got %g, expected %g\n",
               tool, comm.rank(), what.c_str(), bytes, placement, static_cast<unsigned long long>(check.wrong),
               check.first_wrong, check.first_got, check.first_expected);
}

void finish_row(Communicator& comm, Totals& totals, std::size_t bytes, std::size_t count, DataType dtype,
                std::string_view op, int root, double busbw_factor, const LocalResult& out_of_place,
                const LocalResult& in_place) {
  auto combine = [&](const LocalResult& local) {
    return make_measurement(bytes, max_over_ranks(comm, local.time_us), busbw_factor,
                            local.wrong ? std::optional(sum_over_ranks(comm, *local.wrong)) : std::nullopt);
  };
  const auto oop = combine(out_of_place);
  const auto ip = combine(in_place);
  totals.wrong += oop.wrong.value_or(0) + ip.wrong.value_or(0);
  totals.bandwidth.add(oop);
  totals.bandwidth.add(ip);
  if (comm.rank() == 0) {
    std::fputs(table_row(bytes, count, dtype, op, root, oop, ip).c_str(), stdout);
    std::fflush(stdout);
  }
}

std::uint64_t minor_faults() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_minflt);
}

void poison(std::span<std::byte> out, std::span<const std::byte> expected) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = ~expected[i];
}

LocalResult measure(Communicator& comm, const ResolvedOptions& opts, const RowLabel& row, const Placement& placement) {
  if (opts.check && placement.result.size() != placement.expected.size())
    invalid(std::string(row.tool) + " " + placement.name + ": result has " + std::to_string(placement.result.size()) +
            " bytes to check, expected " + std::to_string(placement.expected.size()));
  if (placement.prepare_timing) placement.prepare_timing();
  for (int i = 0; i < opts.warmup_iters; ++i) placement.call();
  comm.barrier();
  LocalResult local;
  const auto faults_before = minor_faults();
  local.time_us = time_per_iteration_us(opts.iters, placement.call);
  local.faults_per_call = static_cast<double>(minor_faults() - faults_before) / std::max(1, opts.iters);
  if (opts.check) {
    poison(placement.result, placement.expected);
    if (placement.store_result) placement.store_result(placement.result);
    if (placement.restore_inputs) placement.restore_inputs();
    placement.call();
    if (placement.load_result) placement.load_result(placement.result);
    const auto check = count_wrong(row.dtype, placement.result, placement.expected);
    report_wrong(row.tool, comm, row.dtype, row.op, row.bytes, placement.name, check);
    local.wrong = check.wrong;
  }
  return local;
}

namespace {

int run_tool(Communicator& comm, const ToolSpec& spec, const ResolvedOptions& opts, const Sweep& sweep) {
  const bool printer = comm.rank() == 0;
  // Every rank sees the same root: all of them stop, one explains.
  if (spec.with_root && opts.root >= comm.size()) {
    if (printer)
      std::fprintf(stderr, "%s: root (-r) %d is not a rank of this %d-rank job\n", spec.name, opts.root, comm.size());
    return 2;
  }
  const auto ranks = gather_rank_info(comm);
  if (printer) {
    std::fputs(header_line(spec.name, comm.size(), opts, comm.transport_name()).c_str(), stdout);
    std::fputs(rank_lines(ranks, comm.transport_name()).c_str(), stdout);
    if (spec.device_memory)
      std::printf("# Buffers: %s memory\n", opts.device_memory ? "device (cudaMalloc; stream synchronised per call)"
                                                                 : "host");
    std::fputs(table_header().c_str(), stdout);
    std::fflush(stdout);
  }
  Totals totals;
  for (const DataType dtype : opts.dtypes) {
    if (!spec.with_op) {
      sweep(comm, opts, dtype, ReduceOp::sum, totals);
      continue;
    }
    for (const ReduceOp op : opts.ops) sweep(comm, opts, dtype, op, totals);
  }
  if (printer) {
    std::fputs(table_footer(totals.wrong, totals.bandwidth.average()).c_str(), stdout);
    if (totals.max_faults_per_call >= 0)
      std::printf("# Minor page faults per call after warm-up: %.3f (max over sizes and ranks)\n",
                  totals.max_faults_per_call);
    std::fflush(stdout);
  }
  return totals.wrong == 0 ? 0 : 1;
}

}  // namespace

bool device_memory_from_env() {
  const char* value = std::getenv("ANTDT_MEM");
  if (value == nullptr || std::string_view(value) == "host" || std::string_view(value).empty()) return false;
  if (std::string_view(value) == "device") return true;
  invalid(std::string("ANTDT_MEM=") + value + " is not host or device");
}

int tool_main(int argc, char** argv, const ToolSpec& spec, const Sweep& sweep) {
  CLI::App app{spec.description, spec.name};
  PerfOptions options;
  add_common_options(app, options, spec.with_op, spec.with_root);
  bool device_flag = false;
  if (spec.device_memory)
    app.add_flag("-G,--device-memory", device_flag, "Buffers in GPU memory (cudaMalloc; also ANTDT_MEM=device)");
  ResolvedOptions resolved;
  const bool printer_hint = launcher_rank_hint() == 0;
  try {
    app.parse(argc, argv);
    resolved = resolve(app, options);
    resolved.device_memory = device_flag || device_memory_from_env();
    if (resolved.device_memory && !spec.device_memory)
      invalid("ANTDT_MEM=device: this tool times host memory only (antdt_allreduce_device_perf times device "
              "memory)");
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments: let one of them explain.
    if (printer_hint) return app.exit(e);
    return e.get_exit_code();
  } catch (const Error& e) {
    if (printer_hint) std::fprintf(stderr, "%s: %s\n", spec.name, e.what());
    return 2;
  }
  std::optional<Communicator> comm;
  try {
    comm.emplace(Communicator::from_env());
    return run_tool(*comm, spec, resolved, sweep);
  } catch (const std::exception& e) {
    const int rank = comm ? comm->rank() : launcher_rank_hint();
    std::fprintf(stderr, "%s: rank %d: error: %s\n", spec.name, rank, e.what());
    // Peers blocked in a collective with us fail fast instead of timing out.
    if (comm) comm->abort(std::string(spec.name) + ": rank " + std::to_string(rank) + " failed: " + e.what());
    return 1;
  }
}

}  // namespace antdt::perf
