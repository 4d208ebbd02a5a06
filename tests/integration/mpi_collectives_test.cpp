// Multi-process correctness test of the public C++ API, one process per rank,
// for every collective (allreduce, broadcast, barrier, reduce-scatter, reduce,
// allgather(v), alltoall, send/recv, group calls, non-blocking requests),
// launched by mpirun (or by hand with ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT).
// It links only libantdt_comm, never MPI: the library must find its peers from
// the launcher's environment alone.
//
// Expected values are computed here, independently of the library: every
// contribution is a small multiple of 1/4 (an integer for integer types), so
// sums, products, minima and maxima are exact in every datatype and in double.
// Exits 1 after printing every wrong value (up to a limit), 0 when all pass.
#include <antdt/comm.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

using antdt::Communicator;
using antdt::DataType;
using antdt::ReduceOp;

constexpr int kMaxRanks = 16;  // keeps every sum exact in bf16 and i8 (see contribution())
constexpr int kMaxReportedFailures = 40;

// ---------------------------------------------------------------------------
// Failure accounting
// ---------------------------------------------------------------------------
class Report {
 public:
  explicit Report(int rank) : rank_(rank) {}
  void check(bool ok, const std::string& what) {
    ++checks_;
    if (ok) return;
    ++failures_;
    if (failures_ <= kMaxReportedFailures) std::fprintf(stderr, "mpi_collectives_test: rank %d: FAIL %s\n", rank_, what.c_str());
  }
  int failures() const noexcept { return failures_; }
  int checks() const noexcept { return checks_; }
  int rank() const noexcept { return rank_; }

 private:
  int rank_;
  int checks_ = 0;
  int failures_ = 0;
};

// ---------------------------------------------------------------------------
// Element encoding, written for exactly representable values only
// ---------------------------------------------------------------------------
struct TypeInfo {
  DataType dtype;
  const char* name;
  std::size_t width;
  bool is_float;
  bool is_signed;
  int mantissa_bits;  // significand precision for floating types
};

constexpr std::array<TypeInfo, 10> kTypes{{
    {DataType::f32, "f32", 4, true, true, 24},
    {DataType::f64, "f64", 8, true, true, 53},
    {DataType::f16, "f16", 2, true, true, 11},
    {DataType::bf16, "bf16", 2, true, true, 8},
    {DataType::i8, "i8", 1, false, true, 0},
    {DataType::u8, "u8", 1, false, false, 0},
    {DataType::i32, "i32", 4, false, true, 0},
    {DataType::u32, "u32", 4, false, false, 0},
    {DataType::i64, "i64", 8, false, true, 0},
    {DataType::u64, "u64", 8, false, false, 0},
}};

// A binary16/bfloat16 pattern for a value that is exact in it (small quarter multiples).
std::uint16_t encode_small_float(double value, int exponent_bits, int fraction_bits) {
  if (value == 0) return 0;
  const std::uint16_t sign = value < 0 ? 0x8000 : 0;
  int exponent = 0;
  const double fraction = std::frexp(std::fabs(value), &exponent);  // value = fraction * 2^exponent, fraction in [0.5, 1)
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int biased = exponent - 1 + bias;
  if (biased <= 0 || biased >= (1 << exponent_bits) - 1) {
    std::fprintf(stderr, "mpi_collectives_test: test bug: %g is not a normal number in this type\n", value);
    std::exit(3);
  }
  const double scaled = (fraction * 2 - 1) * std::ldexp(1.0, fraction_bits);
  if (scaled != std::floor(scaled)) {
    std::fprintf(stderr, "mpi_collectives_test: test bug: %g is not exact in this type\n", value);
    std::exit(3);
  }
  return static_cast<std::uint16_t>(sign | (biased << fraction_bits) | static_cast<int>(scaled));
}

double decode_small_float(std::uint16_t bits, int exponent_bits, int fraction_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int biased = (bits >> fraction_bits) & ((1 << exponent_bits) - 1);
  const int fraction = bits & ((1 << fraction_bits) - 1);
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  if (biased == (1 << exponent_bits) - 1) return fraction == 0 ? sign * INFINITY : NAN;
  if (biased == 0) return sign * std::ldexp(fraction, 1 - bias - fraction_bits);
  return sign * std::ldexp(1.0 + std::ldexp(fraction, -fraction_bits), biased - bias);
}

template <class T>
void put(std::byte* out, T value) {
  std::memcpy(out, &value, sizeof value);
}
template <class T>
T get(const std::byte* in) {
  T value;
  std::memcpy(&value, in, sizeof value);
  return value;
}

void encode(const TypeInfo& t, double value, std::byte* out) {
  switch (t.dtype) {
    case DataType::f32: put(out, static_cast<float>(value)); return;
    case DataType::f64: put(out, value); return;
    case DataType::f16: put(out, encode_small_float(value, 5, 10)); return;
    case DataType::bf16: put(out, encode_small_float(value, 8, 7)); return;
    case DataType::i8: put(out, static_cast<std::int8_t>(value)); return;
    case DataType::u8: put(out, static_cast<std::uint8_t>(value)); return;
    case DataType::i32: put(out, static_cast<std::int32_t>(value)); return;
    case DataType::u32: put(out, static_cast<std::uint32_t>(value)); return;
    case DataType::i64: put(out, static_cast<std::int64_t>(value)); return;
    case DataType::u64: put(out, static_cast<std::uint64_t>(value)); return;
  }
}

double decode(const TypeInfo& t, const std::byte* in) {
  switch (t.dtype) {
    case DataType::f32: return get<float>(in);
    case DataType::f64: return get<double>(in);
    case DataType::f16: return decode_small_float(get<std::uint16_t>(in), 5, 10);
    case DataType::bf16: return decode_small_float(get<std::uint16_t>(in), 8, 7);
    case DataType::i8: return get<std::int8_t>(in);
    case DataType::u8: return get<std::uint8_t>(in);
    case DataType::i32: return get<std::int32_t>(in);
    case DataType::u32: return get<std::uint32_t>(in);
    case DataType::i64: return static_cast<double>(get<std::int64_t>(in));
    case DataType::u64: return static_cast<double>(get<std::uint64_t>(in));
  }
  return NAN;
}

// ---------------------------------------------------------------------------
// Contributions and references
// ---------------------------------------------------------------------------
const char* op_text(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::avg: return "avg";
  }
  return "?";
}

// Rank `rank`'s element i. With at most kMaxRanks ranks every partial result
// stays exact: |sum| <= 16 * 4 (quarters: <= 16 * 1), |prod| <= 2^6.
double contribution(const TypeInfo& t, ReduceOp op, int rank, std::size_t i) {
  const auto r = static_cast<std::size_t>(rank);
  if (op == ReduceOp::prod) {
    switch ((i * 3 + r * 7) % 5) {
      case 0: return rank < 6 ? 2.0 : 1.0;
      case 1: return t.is_signed ? -1.0 : 1.0;
      case 2: return t.is_float ? 0.5 : 1.0;
      default: return 1.0;
    }
  }
  // Pseudo-random in (rank, i), so that for every rank count some sums are not
  // multiples of it (integer avg must truncate toward zero, also below 0).
  std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (r + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  const auto step = static_cast<double>(h % 9);  // 0..8
  const double centered = t.is_signed ? step - 4.0 : step;          // -4..4 or 0..8
  return t.is_float ? centered * 0.25 : centered;
}

double reference(const TypeInfo& t, ReduceOp op, int nranks, std::size_t i) {
  double acc = contribution(t, op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    const double v = contribution(t, op, r, i);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: acc += v; break;
      case ReduceOp::prod: acc *= v; break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::avg) {
    // Integer avg truncates toward zero, like C++ division.
    if (!t.is_float) return static_cast<double>(static_cast<std::int64_t>(acc) / nranks);
    return acc / nranks;
  }
  return acc;
}

// avg of floating types is one division, correctly rounded or within an ulp of it.
bool matches(const TypeInfo& t, ReduceOp op, double got, double want) {
  if (got == want) return true;
  if (!(t.is_float && op == ReduceOp::avg)) return false;
  const double tolerance = std::ldexp(std::max(std::fabs(want), 1e-3), 1 - t.mantissa_bits);
  return std::fabs(got - want) <= tolerance;
}

std::string describe(const char* collective, const TypeInfo& t, const char* op, std::size_t count, const char* mode) {
  return std::string(collective) + " " + t.name + " " + op + " count " + std::to_string(count) + " " + mode;
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------
void test_membership(Communicator& comm, Report& report) {
  const int rank = comm.rank();
  const int size = comm.size();
  report.check(size >= 1 && rank >= 0 && rank < size,
               "rank " + std::to_string(rank) + " outside [0, " + std::to_string(size) + ")");
  report.check(!comm.transport_name().empty(), "transport_name() is empty");
  // Under mpirun the communicator must mirror the launcher's numbering.
  if (const char* launcher_size = std::getenv("OMPI_COMM_WORLD_SIZE"))
    report.check(std::atoi(launcher_size) == size,
                 "size " + std::to_string(size) + " but OMPI_COMM_WORLD_SIZE=" + launcher_size);
  if (const char* launcher_rank = std::getenv("OMPI_COMM_WORLD_RANK"))
    report.check(std::atoi(launcher_rank) == rank,
                 "rank " + std::to_string(rank) + " but OMPI_COMM_WORLD_RANK=" + launcher_rank);
  // Each rank id is held by exactly one process.
  std::vector<std::int32_t> seen(static_cast<std::size_t>(size), 0);
  seen[static_cast<std::size_t>(rank)] = 1;
  comm.allreduce(seen.data(), seen.data(), seen.size(), DataType::i32, ReduceOp::sum);
  for (int r = 0; r < size; ++r)
    report.check(seen[static_cast<std::size_t>(r)] == 1,
                 "rank id " + std::to_string(r) + " held by " + std::to_string(seen[static_cast<std::size_t>(r)]) +
                     " processes");
}

void check_allreduce_result(Report& report, const TypeInfo& t, ReduceOp op, int nranks, std::size_t count,
                            const std::vector<std::byte>& result, const char* mode) {
  int reported = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double got = decode(t, result.data() + i * t.width);
    const double want = reference(t, op, nranks, i);
    if (matches(t, op, got, want)) {
      report.check(true, "");
      continue;
    }
    if (reported++ < 3)
      report.check(false, describe("allreduce", t, op_text(op), count, mode) + ": element " + std::to_string(i) +
                              " = " + std::to_string(got) + ", expected " + std::to_string(want));
    else
      report.check(false, "");
  }
}

void test_allreduce(Communicator& comm, Report& report) {
  const std::vector<std::size_t> counts{0, 1, 2, 3, 7, 31, 1000, 4097, 65537};
  const std::vector<std::size_t> large_counts{(std::size_t{1} << 20) + 3};  // several pipeline chunks
  const std::array<ReduceOp, 5> ops{ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};
  const int nranks = comm.size();
  for (const TypeInfo& t : kTypes) {
    for (const ReduceOp op : ops) {
      std::vector<std::size_t> these = counts;
      if (t.dtype == DataType::f32 || t.dtype == DataType::u8)
        these.insert(these.end(), large_counts.begin(), large_counts.end());
      for (const std::size_t count : these) {
        const std::size_t bytes = std::max<std::size_t>(count, 1) * t.width;  // never a null pointer
        std::vector<std::byte> input(bytes);
        for (std::size_t i = 0; i < count; ++i)
          encode(t, contribution(t, op, comm.rank(), i), input.data() + i * t.width);

        // Out of place: the result lands in recv, and send is left alone.
        std::vector<std::byte> recv(bytes, std::byte{0x5a});
        const std::vector<std::byte> input_copy = input;
        comm.allreduce(input.data(), recv.data(), count, t.dtype, op);
        check_allreduce_result(report, t, op, nranks, count, recv, "out-of-place");
        report.check(input == input_copy, describe("allreduce", t, op_text(op), count, "out-of-place") +
                                              ": the send buffer was modified");

        // In place.
        comm.allreduce(input.data(), input.data(), count, t.dtype, op);
        check_allreduce_result(report, t, op, nranks, count, input, "in-place");
      }
    }
  }
}

std::byte broadcast_byte(int root, std::size_t j) {
  return static_cast<std::byte>((j * 31 + static_cast<std::size_t>(root) * 17 + 1) & 0xff);
}

void check_broadcast(Report& report, const std::vector<std::byte>& got, int root, std::size_t bytes,
                     const std::string& what) {
  for (std::size_t j = 0; j < bytes; ++j) {
    if (got[j] != broadcast_byte(root, j)) {
      report.check(false, what + ": byte " + std::to_string(j) + " = " + std::to_string(static_cast<int>(got[j])) +
                              ", expected " + std::to_string(static_cast<int>(broadcast_byte(root, j))));
      return;
    }
  }
  report.check(true, "");
}

void test_broadcast(Communicator& comm, Report& report) {
  const std::vector<std::size_t> counts{0, 1, 5, 1023, 100003};
  const std::array<DataType, 6> dtypes{DataType::u8, DataType::i32, DataType::f32,
                                       DataType::f64, DataType::bf16, DataType::i64};
  for (int root = 0; root < comm.size(); ++root) {
    for (const DataType dtype : dtypes) {
      const TypeInfo& t = *std::find_if(kTypes.begin(), kTypes.end(), [&](const TypeInfo& x) { return x.dtype == dtype; });
      for (const std::size_t count : counts) {
        const std::size_t bytes = count * t.width;
        const std::size_t capacity = std::max<std::size_t>(bytes, t.width);
        const bool is_root = comm.rank() == root;
        const std::string what = "broadcast " + std::string(t.name) + " root " + std::to_string(root) + " count " +
                                 std::to_string(count);

        // Out of place; a non-root's send buffer holds junk that must not leak out.
        std::vector<std::byte> send(capacity, std::byte{0xee});
        if (is_root)
          for (std::size_t j = 0; j < bytes; ++j) send[j] = broadcast_byte(root, j);
        const std::vector<std::byte> send_copy = send;
        std::vector<std::byte> recv(capacity, std::byte{0xc3});
        comm.broadcast(send.data(), recv.data(), count, dtype, root);
        check_broadcast(report, recv, root, bytes, what + " out-of-place");
        if (is_root) report.check(send == send_copy, what + ": the root's send buffer was modified");

        // In place.
        std::vector<std::byte> buffer(capacity, std::byte{0x3c});
        if (is_root)
          for (std::size_t j = 0; j < bytes; ++j) buffer[j] = broadcast_byte(root, j);
        comm.broadcast(buffer.data(), buffer.data(), count, dtype, root);
        check_broadcast(report, buffer, root, bytes, what + " in-place");
      }
    }
  }
}

// Each rank leaves a marker file before the barrier, the slow rank late; after
// the barrier every marker must exist. (All ranks of this test share a host.)
void test_barrier(Communicator& comm, Report& report) {
  std::uint64_t token = 0;
  if (comm.rank() == 0) token = std::random_device{}() ^ (static_cast<std::uint64_t>(::getpid()) << 32);
  comm.broadcast(&token, &token, 1, DataType::u64, 0);
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/antdt_barrier_test_" + std::to_string(token);
  ::mkdir(dir.c_str(), 0700);  // every rank tries; one succeeds, the rest see EEXIST
  const int rounds = std::min(comm.size(), 3);
  for (int round = 0; round < rounds; ++round) {
    const int slow_rank = (comm.size() - 1 - round + comm.size()) % comm.size();
    if (comm.rank() == slow_rank) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const std::string mine = dir + "/r" + std::to_string(round) + "_" + std::to_string(comm.rank());
    if (std::FILE* f = std::fopen(mine.c_str(), "w")) std::fclose(f);
    comm.barrier();
    for (int r = 0; r < comm.size(); ++r) {
      const std::string marker = dir + "/r" + std::to_string(round) + "_" + std::to_string(r);
      struct stat info {};
      report.check(::stat(marker.c_str(), &info) == 0, "barrier round " + std::to_string(round) +
                                                          " returned before rank " + std::to_string(r) + " arrived");
    }
  }
  comm.barrier();  // everyone has looked: clean up
  for (int round = 0; round < rounds; ++round)
    std::remove((dir + "/r" + std::to_string(round) + "_" + std::to_string(comm.rank())).c_str());
  comm.barrier();
  if (comm.rank() == 0) ::rmdir(dir.c_str());
}

// A bad argument is refused on the calling rank, and the communicator stays usable.
void test_invalid_arguments(Communicator& comm, Report& report) {
  float value = 1;
  auto expect_invalid = [&](const char* what, auto&& call) {
    try {
      call();
      report.check(false, std::string(what) + ": no error");
    } catch (const antdt::InvalidArgument&) {
      report.check(true, "");
    } catch (const antdt::Error& e) {
      report.check(false, std::string(what) + ": expected InvalidArgument, got " +
                              antdt::status_name(e.status()) + ": " + e.what());
    }
  };
  expect_invalid("allreduce with null buffers", [&] {
    comm.allreduce(nullptr, nullptr, 4, DataType::f32, ReduceOp::sum);
  });
  expect_invalid("allreduce with an unknown datatype", [&] {
    comm.allreduce(&value, &value, 1, static_cast<DataType>(77), ReduceOp::sum);
  });
  expect_invalid("allreduce with an unknown op", [&] {
    comm.allreduce(&value, &value, 1, DataType::f32, static_cast<ReduceOp>(77));
  });
  expect_invalid("broadcast from a root outside the communicator", [&] {
    comm.broadcast(&value, &value, 1, DataType::f32, comm.size());
  });
  std::int64_t one = 1;
  comm.allreduce(&one, &one, 1, DataType::i64, ReduceOp::sum);
  report.check(one == comm.size(), "allreduce after refused calls gave " + std::to_string(one) + ", expected " +
                                       std::to_string(comm.size()));
}

// ---------------------------------------------------------------------------
// The rest of the collective suite
// ---------------------------------------------------------------------------
constexpr std::array<ReduceOp, 5> kOps{ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};

// Exact in every datatype: a small integer naming (a, b, i).
double label(const TypeInfo& t, std::size_t a, std::size_t b, std::size_t i) {
  const double v = static_cast<double>((a * 31 + b * 7 + i * 3) % 100);
  return t.is_signed ? v - 50 : v;
}

void check_element(Report& report, const std::string& what, std::size_t i, double got, double want,
                   const TypeInfo& t, ReduceOp op, int& reported) {
  if (matches(t, op, got, want)) {
    report.check(true, "");
    return;
  }
  report.check(false, reported++ < 3 ? what + ": element " + std::to_string(i) + " = " + std::to_string(got) +
                                           ", expected " + std::to_string(want)
                                     : "");
}

void test_reduce_scatter(Communicator& comm, Report& report) {
  const auto n = static_cast<std::size_t>(comm.size());
  const auto r = static_cast<std::size_t>(comm.rank());
  for (const TypeInfo& t : kTypes) {
    for (const ReduceOp op : kOps) {
      for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{70001}}) {
        if (count > 1000 && t.dtype != DataType::f32 && t.dtype != DataType::u8) continue;
        for (const bool in_place : {false, true}) {
          std::vector<std::byte> send(std::max<std::size_t>(n * count, 1) * t.width);
          for (std::size_t i = 0; i < n * count; ++i) encode(t, contribution(t, op, comm.rank(), i), send.data() + i * t.width);
          std::vector<std::byte> recv(std::max<std::size_t>(count, 1) * t.width, std::byte{0x5a});
          std::byte* out = in_place ? send.data() + r * count * t.width : recv.data();
          comm.reduce_scatter(send.data(), out, count, t.dtype, op);
          const std::string what = describe("reduce_scatter", t, op_text(op), count, in_place ? "in-place" : "out-of-place");
          int reported = 0;
          for (std::size_t j = 0; j < count; ++j)
            check_element(report, what, j, decode(t, out + j * t.width), reference(t, op, comm.size(), r * count + j), t,
                          op, reported);
        }
      }
    }
  }
}

void test_reduce(Communicator& comm, Report& report) {
  int round = 0;
  for (const TypeInfo& t : kTypes) {
    for (const ReduceOp op : kOps) {
      // 70001 elements is above the binomial tree's 64 KiB: the pipelined chain.
      for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{70001}}) {
        if (count > 1000 && op != ReduceOp::sum && op != ReduceOp::max) continue;
        for (const bool in_place : {false, true}) {
          const int root = round++ % comm.size();
          const bool is_root = comm.rank() == root;
          std::vector<std::byte> send(std::max<std::size_t>(count, 1) * t.width);
          for (std::size_t i = 0; i < count; ++i) encode(t, contribution(t, op, comm.rank(), i), send.data() + i * t.width);
          std::vector<std::byte> recv(send.size(), std::byte{0x5a});
          std::byte* out = in_place && is_root ? send.data() : recv.data();
          comm.reduce(send.data(), out, count, t.dtype, op, root);
          const std::string what = describe("reduce", t, op_text(op), count, in_place ? "in-place" : "out-of-place") +
                                   " root " + std::to_string(root);
          int reported = 0;
          if (is_root)
            for (std::size_t i = 0; i < count; ++i)
              check_element(report, what, i, decode(t, out + i * t.width), reference(t, op, comm.size(), i), t, op,
                            reported);
          else
            report.check(std::all_of(recv.begin(), recv.end(), [](std::byte b) { return b == std::byte{0x5a}; }),
                         what + ": a non-root's recv buffer was written");
        }
      }
    }
  }
}

void test_allgather(Communicator& comm, Report& report) {
  const auto n = static_cast<std::size_t>(comm.size());
  const auto r = static_cast<std::size_t>(comm.rank());
  for (const TypeInfo& t : kTypes) {
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{40001}}) {
      for (const bool in_place : {false, true}) {
        std::vector<std::byte> mine(std::max<std::size_t>(count, 1) * t.width);
        for (std::size_t i = 0; i < count; ++i) encode(t, label(t, r, 0, i), mine.data() + i * t.width);
        std::vector<std::byte> recv(std::max<std::size_t>(n * count, 1) * t.width, std::byte{0x5a});
        const std::byte* from = mine.data();
        if (in_place) {
          std::memcpy(recv.data() + r * count * t.width, mine.data(), count * t.width);
          from = recv.data() + r * count * t.width;
        }
        comm.allgather(from, recv.data(), count, t.dtype);
        const std::string what = describe("allgather", t, "-", count, in_place ? "in-place" : "out-of-place");
        int reported = 0;
        for (std::size_t b = 0; b < n; ++b)
          for (std::size_t i = 0; i < count; ++i)
            check_element(report, what + " block " + std::to_string(b), i, decode(t, recv.data() + (b * count + i) * t.width),
                          label(t, b, 0, i), t, ReduceOp::sum, reported);
      }
    }
    // AllGatherV: every other rank gives nothing; blocks in reverse rank order with gaps.
    std::vector<std::size_t> counts(n), displs(n);
    std::size_t extent = 0;
    for (std::size_t b = 0; b < n; ++b) counts[b] = b % 2 == 1 ? 0 : 3 + 500 * b;
    for (std::size_t b = n; b-- > 0;) {
      displs[b] = extent + 1;
      extent = displs[b] + counts[b];
    }
    std::vector<std::byte> mine(std::max<std::size_t>(counts[r], 1) * t.width);
    for (std::size_t i = 0; i < counts[r]; ++i) encode(t, label(t, r, 1, i), mine.data() + i * t.width);
    std::vector<std::byte> recv(extent * t.width, std::byte{0x5a});
    comm.allgatherv(mine.data(), recv.data(), counts, displs, t.dtype);
    int reported = 0;
    for (std::size_t b = 0; b < n; ++b) {
      for (std::size_t i = 0; i < counts[b]; ++i)
        check_element(report, std::string("allgatherv ") + t.name + " block " + std::to_string(b), i,
                      decode(t, recv.data() + (displs[b] + i) * t.width), label(t, b, 1, i), t, ReduceOp::sum, reported);
      report.check(recv[(displs[b] - 1) * t.width] == std::byte{0x5a},
                   std::string("allgatherv ") + t.name + ": wrote into the gap before block " + std::to_string(b));
    }
  }
}

void test_alltoall(Communicator& comm, Report& report) {
  const auto n = static_cast<std::size_t>(comm.size());
  const auto r = static_cast<std::size_t>(comm.rank());
  for (const TypeInfo& t : kTypes) {
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{30001}}) {
      for (const bool in_place : {false, true}) {
        std::vector<std::byte> send(std::max<std::size_t>(n * count, 1) * t.width);
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t i = 0; i < count; ++i) encode(t, label(t, r, j, i), send.data() + (j * count + i) * t.width);
        std::vector<std::byte> recv = in_place ? send : std::vector<std::byte>(send.size(), std::byte{0x5a});
        comm.alltoall(in_place ? recv.data() : send.data(), recv.data(), count, t.dtype);
        const std::string what = describe("alltoall", t, "-", count, in_place ? "in-place" : "out-of-place");
        int reported = 0;
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t i = 0; i < count; ++i)
            check_element(report, what + " block " + std::to_string(j), i, decode(t, recv.data() + (j * count + i) * t.width),
                          label(t, j, r, i), t, ReduceOp::sum, reported);
      }
    }
  }
}

// A ring exchange three ways (group, isend/irecv with collectives between, and
// blocking by parity); messages of one size told apart by order only.
void test_send_recv(Communicator& comm, Report& report) {
  const int n = comm.size();
  if (n < 2) return;
  const int right = (comm.rank() + 1) % n, left = (comm.rank() + n - 1) % n;
  constexpr int kMessages = 5;
  constexpr std::size_t kLength = 40001;  // several transport fragments
  std::vector<std::vector<std::int32_t>> out(kMessages, std::vector<std::int32_t>(kLength)), in = out;
  for (int m = 0; m < kMessages; ++m)
    for (std::size_t i = 0; i < kLength; ++i)
      out[static_cast<std::size_t>(m)][i] = comm.rank() * 1000000 + m * 100000 + static_cast<std::int32_t>(i % 100000);
  auto check = [&](const char* how) {
    for (int m = 0; m < kMessages; ++m) {
      bool ok = true;
      for (std::size_t i = 0; i < kLength && ok; ++i)
        ok = in[static_cast<std::size_t>(m)][i] == left * 1000000 + m * 100000 + static_cast<std::int32_t>(i % 100000);
      report.check(ok, std::string("send/recv ") + how + ": message " + std::to_string(m) + " is wrong or out of order");
    }
    for (auto& v : in) std::fill(v.begin(), v.end(), -1);
  };
  comm.group_start();
  for (auto& v : out) comm.send(v.data(), kLength, DataType::i32, right);
  for (auto& v : in) comm.recv(v.data(), kLength, DataType::i32, left);
  comm.group_end();
  check("in a group");

  std::vector<antdt::Request> requests;
  for (auto& v : in) requests.push_back(comm.irecv(v.data(), kLength, DataType::i32, left));
  for (auto& v : out) requests.push_back(comm.isend(v.data(), kLength, DataType::i32, right));
  std::int64_t one = 1;
  comm.allreduce(&one, &one, 1, DataType::i64, ReduceOp::sum);
  report.check(one == n, "allreduce between posted transfers gave " + std::to_string(one));
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) it->wait();
  check("isend/irecv");

  for (int m = 0; m < kMessages; ++m) {
    auto& o = out[static_cast<std::size_t>(m)];
    auto& i = in[static_cast<std::size_t>(m)];
    if (comm.rank() % 2 == 0) {
      comm.send(o.data(), kLength, DataType::i32, right);
      comm.recv(i.data(), kLength, DataType::i32, left);
    } else {
      antdt::Request q = comm.irecv(i.data(), kLength, DataType::i32, left);
      comm.send(o.data(), kLength, DataType::i32, right);
      q.wait();
    }
  }
  check("blocking");
}

// Allreduces in a group (fused per dtype and op) equal the same calls made one by one.
void test_group_and_requests(Communicator& comm, Report& report) {
  const TypeInfo& f32 = kTypes[0];
  const TypeInfo& i64 = kTypes[8];
  std::vector<std::byte> a(1001 * 4), b(17 * 8), c(5 * 4);
  auto fill = [&](std::vector<std::byte>& v, const TypeInfo& t, ReduceOp op, std::size_t shift) {
    for (std::size_t i = 0; i < v.size() / t.width; ++i) encode(t, contribution(t, op, comm.rank(), i + shift), v.data() + i * t.width);
  };
  fill(a, f32, ReduceOp::sum, 0);
  fill(b, i64, ReduceOp::max, 3);
  fill(c, f32, ReduceOp::sum, 9);
  std::vector<std::byte> ga(a.size()), gb(b.size()), gc(c.size());
  comm.group_start();
  comm.allreduce(a.data(), ga.data(), 1001, DataType::f32, ReduceOp::sum);
  comm.allreduce(b.data(), gb.data(), 17, DataType::i64, ReduceOp::max);
  comm.allreduce(c.data(), gc.data(), 5, DataType::f32, ReduceOp::sum);
  comm.group_end();
  int reported = 0;
  for (std::size_t i = 0; i < 1001; ++i)
    check_element(report, "grouped allreduce a", i, decode(f32, ga.data() + i * 4), reference(f32, ReduceOp::sum, comm.size(), i),
                  f32, ReduceOp::sum, reported);
  for (std::size_t i = 0; i < 17; ++i)
    check_element(report, "grouped allreduce b", i, decode(i64, gb.data() + i * 8),
                  reference(i64, ReduceOp::max, comm.size(), i + 3), i64, ReduceOp::max, reported);
  for (std::size_t i = 0; i < 5; ++i)
    check_element(report, "grouped allreduce c", i, decode(f32, gc.data() + i * 4),
                  reference(f32, ReduceOp::sum, comm.size(), i + 9), f32, ReduceOp::sum, reported);

  // Non-blocking collectives, waited for out of order.
  std::vector<std::byte> ra(a.size()), rb(b.size());
  antdt::Request first = comm.iallreduce(a.data(), ra.data(), 1001, DataType::f32, ReduceOp::sum);
  antdt::Request second = comm.iallreduce(b.data(), rb.data(), 17, DataType::i64, ReduceOp::max);
  antdt::Request barrier = comm.ibarrier();
  second.wait();
  report.check(first.test(), "a request issued before a completed one is not complete");
  barrier.wait();
  first.wait();
  report.check(ra == ga && rb == gb, "non-blocking allreduces differ from the grouped ones");
}

}  // namespace

int main() {
  std::optional<Communicator> comm;
  try {
    comm.emplace(Communicator::from_env());
    if (comm->size() > kMaxRanks) {
      std::fprintf(stderr, "mpi_collectives_test: supports up to %d ranks (exact bf16/i8 references), got %d\n",
                   kMaxRanks, comm->size());
      return 2;
    }
    Report report(comm->rank());
    test_membership(*comm, report);
    test_allreduce(*comm, report);
    test_broadcast(*comm, report);
    test_barrier(*comm, report);
    test_invalid_arguments(*comm, report);
    test_reduce_scatter(*comm, report);
    test_reduce(*comm, report);
    test_allgather(*comm, report);
    test_alltoall(*comm, report);
    test_send_recv(*comm, report);
    test_group_and_requests(*comm, report);
    comm->barrier();
    std::printf("mpi_collectives_test: rank %d of %d (%s): %d checks, %d failures\n", comm->rank(), comm->size(),
                std::string(comm->transport_name()).c_str(), report.checks(), report.failures());
    return report.failures() == 0 ? 0 : 1;
  } catch (const antdt::Error& e) {
    std::fprintf(stderr, "mpi_collectives_test: rank %d: %s error: %s\n", comm ? comm->rank() : -1,
                 antdt::status_name(e.status()), e.what());
    if (comm) comm->abort(std::string("mpi_collectives_test failed: ") + e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_collectives_test: rank %d: error: %s\n", comm ? comm->rank() : -1, e.what());
    if (comm) comm->abort(std::string("mpi_collectives_test failed: ") + e.what());
    return 1;
  }
}
