// Pieces shared by the antdt_*_perf tools: the nccl-tests command line, the
// size sweep, the datatype/op tables, input patterns whose reduction is exact
// in every datatype, the checks, the measuring of one placement (warm-up,
// timing, check) and the nccl-tests table format.
#pragma once

#include <antdt/comm.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace antdt::perf {

// ---------------------------------------------------------------------------
// Sizes, datatypes, operations
// ---------------------------------------------------------------------------

// "8", "1K", "64M", "2G" (binary multiples, either case) -> bytes. Throws
// InvalidArgument on anything else, naming the text.
std::size_t parse_size(std::string_view text);

// nccl-tests names ("float", "half", "bfloat16", "int8", ...) and the short
// antdt names ("f32", "f16", "bf16", "i8", ...). Throws InvalidArgument.
DataType parse_dtype(std::string_view name);
// "all" or a comma-separated list of names.
std::vector<DataType> parse_dtype_list(std::string_view text);
// The nccl-tests name, printed in the table.
std::string_view dtype_label(DataType t) noexcept;

// sum, prod, min, max, avg.
ReduceOp parse_op(std::string_view name);
std::vector<ReduceOp> parse_op_list(std::string_view text);
std::string_view op_label(ReduceOp op) noexcept;

// The median of `values` (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> values);

struct SizeSweep {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{64} << 20;
  std::size_t step_factor = 2;  // multiply when > 1
  std::size_t step_bytes = 0;   // otherwise add
};
// The message sizes in bytes, min to max inclusive, in nccl-tests order.
// Throws InvalidArgument when the sweep is empty or would never end.
std::vector<std::size_t> sweep_sizes(const SizeSweep& sweep);

// ---------------------------------------------------------------------------
// Command line (the nccl-tests subset)
// ---------------------------------------------------------------------------
struct PerfOptions {
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  std::size_t step_factor = 2;
  std::string step_bytes;  // empty: not given
  int iters = 20;
  int warmup_iters = 5;
  int check = 1;
  std::string datatype = "float";
  std::string op = "sum";
  int root = 0;
  int nthreads = 1;
  int ngpus = 1;
  bool step_factor_given = false;  // set by resolve()
};

struct ResolvedOptions {
  SizeSweep sweep;
  std::vector<std::size_t> sizes;
  int iters = 20;
  int warmup_iters = 5;
  bool check = true;
  std::vector<DataType> dtypes;
  std::vector<ReduceOp> ops;
  int root = 0;
  bool device_memory = false;  // -G or ANTDT_MEM=device (tools with ToolSpec::device_memory only)
};

// ANTDT_MEM, read by the perf tools (not by the library): "host" (or unset)
// or "device". Throws InvalidArgument naming the value otherwise.
bool device_memory_from_env();

// Registers -b -e -f -i -n -w -c -d (and -o when `with_op`, -r when `with_root`,
// plus -t/-g accepted for script compatibility with value 1 only).
void add_common_options(CLI::App& app, PerfOptions& opts, bool with_op, bool with_root);
// Validates and converts the parsed text; throws InvalidArgument.
ResolvedOptions resolve(const CLI::App& app, const PerfOptions& opts);

// The rank this process will have as far as the launcher says (ANTDT_RANK or
// mpirun's variables), read before a communicator exists so that only one rank
// prints usage errors. 0 when unknown.
int launcher_rank_hint();

// ---------------------------------------------------------------------------
// Data: inputs whose reduction is exactly representable
// ---------------------------------------------------------------------------
// Every element value is a small integer chosen so that every partial result
// of the reduction is exact in the datatype (no rounding in f16/bf16/f32, no
// integer overflow), whatever the reduction order:
//  sum:     (w(rank)) * (i % B + 1), with w(rank) = rank + 1 when it fits
//  avg:     (2 rank + 1) * (i % B + 1), so the sum n^2 * b divides exactly by n
//  prod:    ones, and a 2 from rank i % (n + 1) (none when that is n)
//  min/max: ((7 i + 13 rank) % 101) + 1, shifted to [-50, 50] for signed types
class ReducePattern {
 public:
  ReducePattern(DataType dtype, ReduceOp op, int nranks);

  // This rank's contribution for elements [0, out.size() / dtype size).
  void fill_input(int rank, std::span<std::byte> out) const;
  // The reduction over all ranks of fill_input.
  void fill_expected(std::span<std::byte> out) const;
  // Data whose repeated in-place reduction stays bounded, for timing loops:
  // zeros for sum/avg, ones for prod, the rank's input for min/max.
  void fill_repeatable(int rank, std::span<std::byte> out) const;

  DataType dtype() const noexcept { return dtype_; }
  ReduceOp op() const noexcept { return op_; }

  std::int64_t input_value(int rank, std::size_t i) const noexcept;
  std::int64_t expected_value(std::size_t i) const noexcept;

 private:
  DataType dtype_;
  ReduceOp op_;
  int nranks_;
  std::int64_t period_ = 7;       // B
  int weight_kind_ = 0;           // sum/avg: which w(rank) fits (see .cpp)
  std::int64_t weight_total_ = 0; // sum over ranks of w(rank)
  bool signed_values_ = false;
  std::int64_t weight(int rank) const noexcept;
};

// Stores small integer `value` as one element of `dtype` at `out`.
void store_integer(DataType dtype, std::int64_t value, std::byte* out) noexcept;
// Reads one element as a double (for messages).
double load_as_double(DataType dtype, const std::byte* in) noexcept;

struct CheckResult {
  std::uint64_t wrong = 0;
  std::size_t first_wrong = 0;  // index of the first wrong element when wrong > 0
  double first_got = 0;
  double first_expected = 0;
};
// Counts elements whose bytes differ from the expected ones.
CheckResult count_wrong(DataType dtype, std::span<const std::byte> got, std::span<const std::byte> expected);

// ---------------------------------------------------------------------------
// Measurement and cross-rank aggregation
// ---------------------------------------------------------------------------
// Average microseconds per call of `run` over `iters` calls on this rank.
template <class Run>
double time_per_iteration_us(int iters, Run&& run) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) run();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::micro>(elapsed).count() / iters;
}

double max_over_ranks(Communicator& comm, double value);
std::uint64_t sum_over_ranks(Communicator& comm, std::uint64_t value);

struct RankInfo {
  int rank = 0;
  long pid = 0;
  std::string host;
};
// Every rank's pid and host name, on every rank (built from an allreduce).
std::vector<RankInfo> gather_rank_info(Communicator& comm);

// ---------------------------------------------------------------------------
// nccl-tests output
// ---------------------------------------------------------------------------
struct Measurement {
  double time_us = 0;
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  std::optional<std::uint64_t> wrong;  // empty when not checked (printed N/A)
};
// algbw = bytes / time; busbw = algbw * busbw_factor.
Measurement make_measurement(std::size_t bytes, double time_us, double busbw_factor,
                             std::optional<std::uint64_t> wrong);
// 2(n-1)/n, the AllReduce bus bandwidth factor.
double allreduce_busbw_factor(int nranks) noexcept;
// (n-1)/n: AllGather, ReduceScatter and AlltoAll move (n-1)/n of the data per rank (nccl-tests).
double gather_busbw_factor(int nranks) noexcept;

std::string header_line(std::string_view collective, int nranks, const ResolvedOptions& opts,
                        std::string_view transport);
std::string rank_lines(const std::vector<RankInfo>& ranks, std::string_view transport);
// The three column-title lines.
std::string table_header();
std::string table_row(std::size_t bytes, std::size_t count, DataType dtype, std::string_view op, int root,
                      const Measurement& out_of_place, const Measurement& in_place);
std::string table_footer(std::uint64_t wrong_total, double avg_busbw);

// Averages busbw over every row and placement, like nccl-tests.
class BandwidthSummary {
 public:
  void add(const Measurement& m) noexcept {
    total_ += m.busbw_gbs;
    ++rows_;
  }
  double average() const noexcept { return rows_ == 0 ? 0.0 : total_ / static_cast<double>(rows_); }

 private:
  double total_ = 0;
  std::size_t rows_ = 0;
};


// ---------------------------------------------------------------------------
// The program around a tool's sweep (one place for what every tool shares)
// ---------------------------------------------------------------------------
// What a tool's sweeps accumulate over all their rows.
struct Totals {
  std::uint64_t wrong = 0;
  BandwidthSummary bandwidth;
  double max_faults_per_call = -1;  // minor page faults per timed call, max over sizes and ranks (-1: not measured)
};

// One placement's outcome on this rank: time per call and wrong elements (empty when not checked).
struct LocalResult {
  double time_us = 0;
  std::optional<std::uint64_t> wrong;
  double faults_per_call = 0;  // minor page faults per timed call (filled by measure())
};

// Ends one table row: the slowest rank's time is the collective's time, wrong
// counts add up over ranks; adds both placements to `totals`; rank 0 prints the row.
void finish_row(Communicator& comm, Totals& totals, std::size_t bytes, std::size_t count, DataType dtype,
                std::string_view op, int root, double busbw_factor, const LocalResult& out_of_place,
                const LocalResult& in_place);

// Minor page faults of this process so far (getrusage). A collective that
// allocates or touches fresh pages on every call shows up as faults per call.
std::uint64_t minor_faults();

// Prints one row's wrong elements to stderr (nothing when there are none).
// `op` is empty for collectives without a reduction.
void report_wrong(const char* tool, const Communicator& comm, DataType dtype, std::optional<ReduceOp> op,
                  std::size_t bytes, const char* placement, const CheckResult& check);

// Fills `out` so that every byte differs from `expected`: an element the
// collective failed to write cannot pass the check by accident.
void poison(std::span<std::byte> out, std::span<const std::byte> expected);

// What a wrong-result report names: the tool, the datatype, the operation
// (empty for collectives without a reduction) and the row's size in bytes.
struct RowLabel {
  const char* tool;
  DataType dtype;
  std::optional<ReduceOp> op;
  std::size_t bytes;
};

// One placement of a collective (out of place or in place) as measure() runs it.
struct Placement {
  const char* name;            // "out-of-place" or "in-place", in wrong-result reports
  std::function<void()> call;  // one call of the collective
  // Before warm-up: puts the buffers into the state the timed calls start
  // from (data that reduces to itself, say). Empty: nothing to do.
  std::function<void()> prepare_timing;
  // The check: `result` (this rank's part of the output; empty where this
  // rank has nothing to check) is poisoned against `expected`, restore_inputs
  // (empty: nothing to do) puts back the inputs that share the output buffer,
  // `call` runs once, and the elements of `result` that differ from `expected`
  // are counted.
  std::span<std::byte> result;
  std::span<const std::byte> expected;
  std::function<void()> restore_inputs;
  // Results in device memory: `result` is then a host copy; store_result puts
  // the poisoned copy into the device buffer before the check's call, and
  // load_result reads the device buffer back into it before counting.
  std::function<void(std::span<const std::byte>)> store_result;
  std::function<void(std::span<std::byte>)> load_result;
};

// Measures one placement for one table row, the same way in every tool:
// opts.warmup_iters untimed calls, a barrier so that the ranks start the
// timed calls together, opts.iters timed calls, then (when opts.check) the
// check above, whose wrong elements are reported on stderr. Returns this
// rank's time per call, wrong count and page faults per call: what
// finish_row takes. Throws InvalidArgument when result and expected differ
// in size while checking.
LocalResult measure(Communicator& comm, const ResolvedOptions& opts, const RowLabel& row, const Placement& placement);

struct ToolSpec {
  const char* name;         // e.g. "antdt_allreduce_perf"
  const char* description;  // the --help line
  bool with_op = false;     // -o
  bool with_root = false;   // -r
  // Accepts -G / ANTDT_MEM=device (buffers in GPU memory). Tools without it
  // refuse ANTDT_MEM=device instead of silently timing host memory.
  bool device_memory = false;
};

// One sweep over the sizes for a dtype and op (op is sum for tools without -o).
using Sweep = std::function<void(Communicator&, const ResolvedOptions&, DataType, ReduceOp, Totals&)>;

// Parses the nccl-tests options, joins the job (mpirun or ANTDT_*), checks the
// root, prints the header, runs `sweep` for every dtype (x op), prints the
// footer. Exit code: 0, 1 for wrong results or errors (peers are aborted so
// they fail fast), 2 for bad options.
int tool_main(int argc, char** argv, const ToolSpec& spec, const Sweep& sweep);

}  // namespace antdt::perf
