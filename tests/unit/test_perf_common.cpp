// perf::measure, the one place where the antdt_*_perf tools warm up, time and
// check a placement of a collective: a wrong result must come back as a
// non-zero wrong count (the tools exit 1 on it), and an element the collective
// never wrote must not pass because the buffer already held the right value.
#include "perf/perf_common.hpp"

#include "comm_fixture.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace antdt::perf {
namespace {

using test::expect_all_ok;
using test::run_ranks;
using test::TransportKind;

constexpr std::size_t kCount = 64;
constexpr int kWarmup = 2;
constexpr int kIters = 3;

ResolvedOptions options(bool check) {
  ResolvedOptions opts;
  opts.iters = kIters;
  opts.warmup_iters = kWarmup;
  opts.check = check;
  return opts;
}

std::span<std::byte> bytes_of(std::vector<std::int32_t>& v) { return std::as_writable_bytes(std::span(v)); }
std::span<const std::byte> bytes_of(const std::vector<std::int32_t>& v) { return std::as_bytes(std::span(v)); }

// Rank r's input: r + 1 + i. Their sum over `nranks` ranks, computed here
// rather than by the perf patterns under test.
std::vector<std::int32_t> input_of(int rank) {
  std::vector<std::int32_t> v(kCount);
  for (std::size_t i = 0; i < kCount; ++i) v[i] = rank + 1 + static_cast<std::int32_t>(i);
  return v;
}
std::vector<std::int32_t> sum_of_inputs(int nranks) {
  std::vector<std::int32_t> v(kCount, 0);
  for (int r = 0; r < nranks; ++r)
    for (std::size_t i = 0; i < kCount; ++i) v[i] += r + 1 + static_cast<std::int32_t>(i);
  return v;
}

// The whitespace-separated fields of the first table row in `text` (a line
// that does not start with '#').
std::vector<std::string> first_row_fields(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::vector<std::string> out;
    for (std::string f; fields >> f;) out.push_back(f);
    return out;
  }
  return {};
}

TEST(PerfMedian, OddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(median({}), 0.0);
}

TEST(PerfMeasure, CorrectAllReduceHasNoWrongElementsAndRunsWarmupTimedAndCheckCalls) {
  const int nranks = 2;
  const auto want = sum_of_inputs(nranks);
  std::vector<LocalResult> results(nranks);
  std::vector<int> calls(nranks, 0);
  expect_all_ok(run_ranks(nranks, TransportKind::inproc, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    const auto in = input_of(comm.rank());
    std::vector<std::int32_t> out(kCount, 0);
    results[r] = measure(comm, options(true), {"test", DataType::i32, ReduceOp::sum, kCount * 4},
                         {.name = "out-of-place",
                          .call =
                              [&] {
                                ++calls[r];
                                comm.allreduce(in.data(), out.data(), kCount, DataType::i32, ReduceOp::sum);
                              },
                          .result = bytes_of(out),
                          .expected = bytes_of(want)});
  }));
  for (int r = 0; r < nranks; ++r) {
    ASSERT_TRUE(results[r].wrong.has_value()) << "rank " << r;
    EXPECT_EQ(*results[r].wrong, 0u) << "rank " << r;
    EXPECT_EQ(calls[r], kWarmup + kIters + 1) << "rank " << r;
  }
}

TEST(PerfMeasure, DeliberatelyWrongResultIsCountedAndMakesTheRowAndTotalsWrong) {
  const int nranks = 2;
  const auto want = sum_of_inputs(nranks);
  std::vector<LocalResult> in_place(nranks);
  std::vector<Totals> totals(nranks);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const auto outcomes = run_ranks(nranks, TransportKind::inproc, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    const auto in = input_of(comm.rank());
    std::vector<std::int32_t> out(kCount, 0);
    const RowLabel row{"antdt_test_perf", DataType::i32, ReduceOp::sum, kCount * 4};
    const auto oop = measure(comm, options(true), row,
                             {.name = "out-of-place",
                              .call = [&] { comm.allreduce(in.data(), out.data(), kCount, DataType::i32, ReduceOp::sum); },
                              .result = bytes_of(out),
                              .expected = bytes_of(want)});
    // In place, and rank 1 spoils three elements after every reduction.
    in_place[r] = measure(comm, options(true), row,
                          {.name = "in-place",
                           .call =
                               [&] {
                                 comm.allreduce(out.data(), out.data(), kCount, DataType::i32, ReduceOp::sum);
                                 if (comm.rank() == 1) {
                                   out[0] += 1;
                                   out[7] += 1;
                                   out[63] += 1;
                                 }
                               },
                           .result = bytes_of(out),
                           .expected = bytes_of(want),
                           .restore_inputs = [&] { out = in; }});
    finish_row(comm, totals[r], kCount * 4, kCount, DataType::i32, "sum", -1, 1.0, oop, in_place[r]);
  });
  const std::string printed = testing::internal::GetCapturedStdout();
  const std::string reported = testing::internal::GetCapturedStderr();
  expect_all_ok(outcomes);

  ASSERT_TRUE(in_place[0].wrong && in_place[1].wrong);
  EXPECT_EQ(*in_place[0].wrong, 0u);
  EXPECT_EQ(*in_place[1].wrong, 3u);
  // Wrong counts add up over ranks, so every rank's tool would exit 1.
  EXPECT_EQ(totals[0].wrong, 3u);
  EXPECT_EQ(totals[1].wrong, 3u);
  // Rank 0 printed the row: #wrong is 0 out of place, 3 in place.
  const auto fields = first_row_fields(printed);
  ASSERT_EQ(fields.size(), 13u) << printed;
  EXPECT_EQ(fields[8], "0") << printed;
  EXPECT_EQ(fields[12], "3") << printed;
  // The wrong rank named the first wrong element on stderr.
  EXPECT_NE(reported.find("antdt_test_perf: rank 1: int32 sum 256 bytes in-place: 3 wrong elements; first at index 0"),
            std::string::npos)
      << reported;
}

TEST(PerfMeasure, ElementsTheCollectiveNeverWritesAreWrongEvenWhenTheBufferHeldTheAnswer) {
  const auto want = sum_of_inputs(1);
  LocalResult result;
  testing::internal::CaptureStderr();
  const auto outcomes = run_ranks(1, TransportKind::inproc, [&](Communicator& comm) {
    std::vector<std::int32_t> out = want;  // already right: only poisoning can catch the no-op
    result = measure(comm, options(true), {"test", DataType::i32, std::nullopt, kCount * 4},
                     {.name = "out-of-place", .call = [] {}, .result = bytes_of(out), .expected = bytes_of(want)});
  });
  const std::string reported = testing::internal::GetCapturedStderr();
  expect_all_ok(outcomes);
  EXPECT_NE(reported.find("test: rank 0: int32 256 bytes out-of-place: 64 wrong elements"), std::string::npos)
      << reported;
  ASSERT_TRUE(result.wrong.has_value());
  EXPECT_EQ(*result.wrong, kCount);
}

TEST(PerfMeasure, PreparesOnceBeforeWarmupAndRestoresInputsAfterPoisoningBeforeTheCheckedCall) {
  std::vector<std::string> events;
  std::vector<std::int32_t> out(kCount, 0);
  const auto want = input_of(0);
  LocalResult result;
  expect_all_ok(run_ranks(1, TransportKind::inproc, [&](Communicator& comm) {
    result = measure(comm, options(true), {"test", DataType::i32, ReduceOp::sum, kCount * 4},
                     {.name = "in-place",
                      .call =
                          [&] {
                            events.push_back("call");
                            comm.allreduce(out.data(), out.data(), kCount, DataType::i32, ReduceOp::sum);
                          },
                      .prepare_timing = [&] { events.push_back("prepare"); },
                      .result = bytes_of(out),
                      .expected = bytes_of(want),
                      .restore_inputs =
                          [&] {
                            // The result buffer was poisoned just before: no element may still hold the answer.
                            for (std::size_t i = 0; i < kCount; ++i)
                              if (out[i] == want[i]) events.push_back("not poisoned");
                            events.push_back("restore");
                            out = want;
                          }});
  }));
  std::vector<std::string> expected_events{"prepare"};
  for (int i = 0; i < kWarmup + kIters; ++i) expected_events.push_back("call");
  expected_events.push_back("restore");
  expected_events.push_back("call");
  EXPECT_EQ(events, expected_events);
  ASSERT_TRUE(result.wrong.has_value());
  EXPECT_EQ(*result.wrong, 0u);
}

// Results in device memory: the check's poisoned host copy goes into the
// "device" buffer before the call and comes back before counting. Here the
// device buffer is a separate vector: a result counted from the host copy
// without load_result, or a call that left the device buffer alone (poison
// stored, never overwritten), would show as wrong elements.
TEST(PerfMeasure, DeviceResultsAreStoredPoisonedAndLoadedBackBeforeCounting) {
  const int nranks = 2;
  const auto want = sum_of_inputs(nranks);
  for (bool call_writes : {true, false}) {
    std::vector<LocalResult> results(nranks);
    testing::internal::CaptureStderr();
    expect_all_ok(run_ranks(nranks, TransportKind::inproc, [&](Communicator& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      const auto in = input_of(comm.rank());
      std::vector<std::int32_t> device(kCount, 0), host_copy(kCount, 0);
      std::vector<std::int32_t> computed(kCount);
      results[r] = measure(comm, options(true), {"test", DataType::i32, ReduceOp::sum, kCount * 4},
                           {.name = "out-of-place",
                            .call =
                                [&] {
                                  comm.allreduce(in.data(), computed.data(), kCount, DataType::i32, ReduceOp::sum);
                                  if (call_writes) device = computed;
                                },
                            .result = bytes_of(host_copy),
                            .expected = bytes_of(want),
                            .store_result =
                                [&](std::span<const std::byte> host) {
                                  std::memcpy(device.data(), host.data(), host.size());
                                },
                            .load_result =
                                [&](std::span<std::byte> host) {
                                  std::memcpy(host.data(), device.data(), host.size());
                                }});
    }));
    testing::internal::GetCapturedStderr();
    for (int r = 0; r < nranks; ++r) {
      ASSERT_TRUE(results[r].wrong.has_value()) << "rank " << r;
      if (call_writes)
        EXPECT_EQ(*results[r].wrong, 0u) << "rank " << r;
      else
        EXPECT_EQ(*results[r].wrong, kCount) << "rank " << r << ": the poison stored in the device buffer stayed";
    }
  }
}

TEST(PerfMeasure, WithoutCheckingNothingIsPoisonedOrCountedAndNoCheckedCallRuns) {
  int calls = 0;
  bool restored = false;
  std::vector<std::int32_t> out(kCount, 5);
  LocalResult result;
  expect_all_ok(run_ranks(1, TransportKind::inproc, [&](Communicator& comm) {
    // A wrong result and no expected data at all: without -c nothing looks at either.
    result = measure(comm, options(false), {"test", DataType::i32, std::nullopt, kCount * 4},
                     {.name = "out-of-place",
                      .call = [&] { ++calls; },
                      .result = bytes_of(out),
                      .expected = {},
                      .restore_inputs = [&] { restored = true; }});
  }));
  EXPECT_FALSE(result.wrong.has_value());
  EXPECT_EQ(calls, kWarmup + kIters);
  EXPECT_FALSE(restored);
  EXPECT_EQ(out, std::vector<std::int32_t>(kCount, 5));
}

TEST(PerfMeasure, ARankWithNothingToCheckCountsNoWrongElements) {
  LocalResult result;
  expect_all_ok(run_ranks(1, TransportKind::inproc, [&](Communicator& comm) {
    result = measure(comm, options(true), {"test", DataType::i32, ReduceOp::sum, kCount * 4},
                     {.name = "out-of-place", .call = [] {}, .result = {}, .expected = {}});
  }));
  ASSERT_TRUE(result.wrong.has_value());
  EXPECT_EQ(*result.wrong, 0u);
}

TEST(PerfMeasure, ResultAndExpectedOfDifferentSizesAreRefusedBeforeAnyCall) {
  int calls = 0;
  std::vector<std::int32_t> out(kCount);
  const std::vector<std::int32_t> want(kCount - 1);
  const auto outcomes = run_ranks(1, TransportKind::inproc, [&](Communicator& comm) {
    (void)measure(comm, options(true), {"test", DataType::i32, ReduceOp::sum, kCount * 4},
                  {.name = "in-place", .call = [&] { ++calls; }, .result = bytes_of(out), .expected = bytes_of(want)});
  });
  EXPECT_TRUE(test::failed_with<InvalidArgument>(outcomes, 0)) << test::failure_of(outcomes, 0);
  EXPECT_NE(test::failure_of(outcomes, 0).find("256 bytes to check, expected 252"), std::string::npos)
      << test::failure_of(outcomes, 0);
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace antdt::perf
