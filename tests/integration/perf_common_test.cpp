// Tests of the perf tools' shared pieces (perf/perf_common.hpp): option and
// size parsing, the size sweep, the nccl-tests table format, and that the input
// patterns reduce exactly in every datatype for many rank counts.
#include "perf_common.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace antdt::perf {
namespace {

TEST(PerfSize, ParsesPlainAndSuffixedSizes) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("8"), 8u);
  EXPECT_EQ(parse_size("1K"), 1024u);
  EXPECT_EQ(parse_size("3k"), 3072u);
  EXPECT_EQ(parse_size("64M"), 64u << 20);
  EXPECT_EQ(parse_size("2G"), std::size_t{2} << 30);
}

TEST(PerfSize, RejectsGarbage) {
  for (const char* bad : {"", "-1", "K", "1KB", "1T", "12x", " 8", "1.5M", "99999999999999999999"})
    EXPECT_THROW(parse_size(bad), InvalidArgument) << bad;
}

TEST(PerfSweep, FactorStepping) {
  EXPECT_EQ(sweep_sizes({8, 128, 2, 0}), (std::vector<std::size_t>{8, 16, 32, 64, 128}));
  EXPECT_EQ(sweep_sizes({8, 100, 4, 0}), (std::vector<std::size_t>{8, 32}));
  EXPECT_EQ(sweep_sizes({5, 5, 2, 0}), (std::vector<std::size_t>{5}));
  // Zero advances to 1 instead of repeating forever.
  EXPECT_EQ(sweep_sizes({0, 4, 2, 0}), (std::vector<std::size_t>{0, 1, 2, 4}));
}

TEST(PerfSweep, ByteStepping) {
  EXPECT_EQ(sweep_sizes({0, 10, 1, 4}), (std::vector<std::size_t>{0, 4, 8}));
  EXPECT_EQ(sweep_sizes({1, 3, 1, 1}), (std::vector<std::size_t>{1, 2, 3}));
}

TEST(PerfSweep, RejectsEndlessOrEmptySweeps) {
  EXPECT_THROW(sweep_sizes({8, 4, 2, 0}), InvalidArgument);
  EXPECT_THROW(sweep_sizes({8, 64, 1, 0}), InvalidArgument);
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(sweep_sizes({huge / 2 + 1, huge, 2, 0}).size(), 1u);  // no overflow past the top
}

ResolvedOptions parse_command_line(std::vector<std::string> args) {
  CLI::App app{"test"};
  PerfOptions options;
  add_common_options(app, options, true, false);
  std::reverse(args.begin(), args.end());  // CLI11 consumes a reversed vector
  app.parse(args);
  return resolve(app, options);
}

TEST(PerfOptions, DefaultsFollowTheBrief) {
  const auto o = parse_command_line({});
  EXPECT_EQ(o.sweep.min_bytes, 8u);
  EXPECT_EQ(o.sweep.max_bytes, 64u << 20);
  EXPECT_EQ(o.sweep.step_factor, 2u);
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmup_iters, 5);
  EXPECT_TRUE(o.check);
  EXPECT_EQ(o.dtypes, std::vector<DataType>{DataType::f32});
  EXPECT_EQ(o.ops, std::vector<ReduceOp>{ReduceOp::sum});
}

TEST(PerfOptions, NcclTestsFlags) {
  const auto o = parse_command_line({"-b", "1K", "-e", "4K", "-f", "4", "-n", "3", "-w", "0", "-c", "0", "-d",
                                     "bfloat16,int8", "-o", "max"});
  EXPECT_EQ(o.sizes, (std::vector<std::size_t>{1024, 4096}));
  EXPECT_EQ(o.iters, 3);
  EXPECT_EQ(o.warmup_iters, 0);
  EXPECT_FALSE(o.check);
  EXPECT_EQ(o.dtypes, (std::vector<DataType>{DataType::bf16, DataType::i8}));
  EXPECT_EQ(o.ops, std::vector<ReduceOp>{ReduceOp::max});
}

TEST(PerfOptions, StepBytesAloneStepsAdditively) {
  const auto o = parse_command_line({"-b", "0", "-e", "3K", "-i", "1K"});
  EXPECT_EQ(o.sizes, (std::vector<std::size_t>{0, 1024, 2048, 3072}));
  // A factor > 1 wins over -i, as in nccl-tests.
  const auto f = parse_command_line({"-b", "1K", "-e", "4K", "-i", "1K", "-f", "2"});
  EXPECT_EQ(f.sizes, (std::vector<std::size_t>{1024, 2048, 4096}));
}

TEST(PerfOptions, RejectsBadValues) {
  EXPECT_THROW(parse_command_line({"-n", "0"}), InvalidArgument);
  EXPECT_THROW(parse_command_line({"-c", "2"}), InvalidArgument);
  EXPECT_THROW(parse_command_line({"-d", "float8"}), InvalidArgument);
  EXPECT_THROW(parse_command_line({"-o", "xor"}), InvalidArgument);
  EXPECT_THROW(parse_command_line({"-b", "2M", "-e", "1M"}), InvalidArgument);
  EXPECT_THROW(parse_command_line({"-t", "2"}), InvalidArgument);
}

TEST(PerfNames, DatatypesAndOps) {
  EXPECT_EQ(parse_dtype("float"), DataType::f32);
  EXPECT_EQ(parse_dtype("f32"), DataType::f32);
  EXPECT_EQ(parse_dtype("half"), DataType::f16);
  EXPECT_EQ(parse_dtype("BF16"), DataType::bf16);
  EXPECT_EQ(parse_dtype("uint64"), DataType::u64);
  EXPECT_EQ(parse_dtype_list("all").size(), 10u);
  EXPECT_EQ(dtype_label(DataType::f16), "half");
  EXPECT_EQ(dtype_label(DataType::bf16), "bfloat16");
  EXPECT_EQ(dtype_label(DataType::i32), "int32");
  EXPECT_EQ(parse_op("avg"), ReduceOp::avg);
  EXPECT_EQ(parse_op_list("all").size(), 5u);
  EXPECT_EQ(op_label(ReduceOp::prod), "prod");
}

TEST(PerfTable, HeaderMatchesNcclTests) {
  const std::string header = table_header();
  EXPECT_NE(header.find("#       size         count      type   redop    root     time   algbw   busbw #wrong     "
                        "time   algbw   busbw #wrong\n"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            "
                        "(us)  (GB/s)  (GB/s)"),
            std::string::npos)
      << header;
}

TEST(PerfTable, RowColumnsAndBandwidth) {
  // 1 MB in 100 us = 10.49 GB/s algbw; busbw at 4 ranks = 1.5x.
  const auto oop = make_measurement(1048576, 100.0, allreduce_busbw_factor(4), std::uint64_t{0});
  EXPECT_NEAR(oop.algbw_gbs, 10.48576, 1e-9);
  EXPECT_NEAR(oop.busbw_gbs, 15.72864, 1e-9);
  const auto ip = make_measurement(1048576, 12345.0, allreduce_busbw_factor(4), std::nullopt);
  const std::string row = table_row(1048576, 262144, DataType::f32, "sum", -1, oop, ip);
  EXPECT_EQ(row,
            "     1048576        262144     float     sum      -1    100.0   10.49   15.73      0    12345    0.08"
            "    0.13    N/A\n");
  EXPECT_EQ(allreduce_busbw_factor(1), 0.0);
  EXPECT_EQ(allreduce_busbw_factor(2), 1.0);
}

TEST(PerfTable, Footer) {
  EXPECT_EQ(table_footer(0, 1.5), "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.5 \n#\n");
  EXPECT_NE(table_footer(3, 0).find("3 FAILED"), std::string::npos);
}

// The reduction of fill_input over ranks, done in int64 in several orders,
// equals fill_expected; and every value and partial result stays exact in the
// datatype (the stored bytes read back as the same integer).
TEST(PerfPattern, ReductionsAreExactInEveryDatatype) {
  const std::size_t count = 211;  // covers the periods 7, 101 and n + 1
  for (const DataType dtype : parse_dtype_list("all")) {
    const std::size_t width = dtype_size(dtype);
    for (const ReduceOp op : parse_op_list("all")) {
      for (const int nranks : {1, 2, 3, 4, 5, 7, 8, 13, 16, 33, 128, 300}) {
        SCOPED_TRACE(std::string(dtype_label(dtype)) + " " + std::string(op_label(op)) + " n=" +
                     std::to_string(nranks));
        const ReducePattern pattern(dtype, op, nranks);
        std::vector<std::byte> expected(count * width);
        pattern.fill_expected(expected);
        std::vector<std::vector<std::byte>> inputs(static_cast<std::size_t>(nranks),
                                                   std::vector<std::byte>(count * width));
        for (int r = 0; r < nranks; ++r) pattern.fill_input(r, inputs[static_cast<std::size_t>(r)]);
        std::vector<std::byte> stored(width);
        auto exact = [&](std::int64_t v) {
          store_integer(dtype, v, stored.data());
          return load_as_double(dtype, stored.data()) == static_cast<double>(v);
        };
        for (std::size_t i = 0; i < count; ++i) {
          std::int64_t forward = 0, backward = 0;
          for (int step = 0; step < nranks; ++step) {
            const int fr = step, br = nranks - 1 - step;
            const std::int64_t fv = static_cast<std::int64_t>(
                load_as_double(dtype, inputs[static_cast<std::size_t>(fr)].data() + i * width));
            const std::int64_t bv = static_cast<std::int64_t>(
                load_as_double(dtype, inputs[static_cast<std::size_t>(br)].data() + i * width));
            ASSERT_EQ(fv, pattern.input_value(fr, i));
            ASSERT_TRUE(exact(fv));
            auto combine = [&](std::int64_t acc, std::int64_t v) {
              switch (op) {
                case ReduceOp::sum:
                case ReduceOp::avg: return acc + v;
                case ReduceOp::prod: return acc * v;
                case ReduceOp::min: return std::min(acc, v);
                case ReduceOp::max: return std::max(acc, v);
              }
              return acc;
            };
            forward = step == 0 ? fv : combine(forward, fv);
            backward = step == 0 ? bv : combine(backward, bv);
            ASSERT_TRUE(exact(forward)) << "partial " << forward << " at element " << i;
            ASSERT_TRUE(exact(backward)) << "partial " << backward << " at element " << i;
          }
          ASSERT_EQ(forward, backward);
          std::int64_t want = forward;
          if (op == ReduceOp::avg) {
            ASSERT_EQ(forward % nranks, 0) << "avg must divide exactly";
            want = forward / nranks;
          }
          const double got = load_as_double(dtype, expected.data() + i * width);
          ASSERT_EQ(got, static_cast<double>(want)) << "element " << i;
        }
      }
    }
  }
}

TEST(PerfPattern, InputsDependOnTheRank) {
  for (const ReduceOp op : parse_op_list("all")) {
    const ReducePattern pattern(DataType::f32, op, 4);
    bool differs = false;
    for (std::size_t i = 0; i < 20; ++i) differs = differs || pattern.input_value(0, i) != pattern.input_value(3, i);
    EXPECT_TRUE(differs) << op_label(op);
  }
}

TEST(PerfPattern, RepeatableDataIsAFixedPoint) {
  // After one reduction among n ranks, repeating the reduction of the result
  // must not change it (bounded timing loops).
  const int nranks = 4;
  for (const ReduceOp op : parse_op_list("all")) {
    const ReducePattern pattern(DataType::i32, op, nranks);
    std::vector<std::vector<std::byte>> data(nranks, std::vector<std::byte>(64 * 4));
    for (int r = 0; r < nranks; ++r) pattern.fill_repeatable(r, data[static_cast<std::size_t>(r)]);
    for (std::size_t i = 0; i < 64; ++i) {
      std::int64_t acc = 0;
      for (int r = 0; r < nranks; ++r) {
        const auto v = static_cast<std::int64_t>(load_as_double(DataType::i32, data[static_cast<std::size_t>(r)].data() + i * 4));
        if (r == 0) acc = v;
        else if (op == ReduceOp::sum || op == ReduceOp::avg) acc += v;
        else if (op == ReduceOp::prod) acc *= v;
        else if (op == ReduceOp::min) acc = std::min(acc, v);
        else acc = std::max(acc, v);
      }
      if (op == ReduceOp::avg) acc /= nranks;
      if (op == ReduceOp::sum || op == ReduceOp::avg) {
        EXPECT_EQ(acc, 0);
      }
      if (op == ReduceOp::prod) {
        EXPECT_EQ(acc, 1);
      }
    }
  }
}

TEST(PerfCheck, CountsWrongElements) {
  std::vector<std::byte> want(8 * 4), got(8 * 4);
  for (std::size_t i = 0; i < 8; ++i) store_integer(DataType::f32, static_cast<std::int64_t>(i), want.data() + i * 4);
  got = want;
  EXPECT_EQ(count_wrong(DataType::f32, got, want).wrong, 0u);
  store_integer(DataType::f32, 100, got.data() + 3 * 4);
  store_integer(DataType::f32, 200, got.data() + 6 * 4);
  const auto c = count_wrong(DataType::f32, got, want);
  EXPECT_EQ(c.wrong, 2u);
  EXPECT_EQ(c.first_wrong, 3u);
  EXPECT_EQ(c.first_got, 100.0);
  EXPECT_EQ(c.first_expected, 3.0);
}

TEST(PerfCheck, HalfAndBfloatEncodings) {
  std::byte out[2];
  store_integer(DataType::f16, 1, out);
  std::uint16_t bits;
  std::memcpy(&bits, out, 2);
  EXPECT_EQ(bits, 0x3c00);
  store_integer(DataType::f16, -2048, out);
  std::memcpy(&bits, out, 2);
  EXPECT_EQ(bits, 0xe800);
  store_integer(DataType::bf16, 1, out);
  std::memcpy(&bits, out, 2);
  EXPECT_EQ(bits, 0x3f80);
  store_integer(DataType::bf16, 257, out);  // rounds to even: 256
  EXPECT_EQ(load_as_double(DataType::bf16, out), 256.0);
  store_integer(DataType::f16, 2049, out);  // rounds to even: 2048
  EXPECT_EQ(load_as_double(DataType::f16, out), 2048.0);
}

}  // namespace
}  // namespace antdt::perf
