// The node-local shared-memory AllReduces — the mailbox of small messages
// (collectives/allreduce_shm.cpp) and the bulk area of large ones
// (allreduce_shm_bulk.cpp), core/shm_channel.hpp — with ranks as threads over
// both transports: every dtype x op x 1..5 ranks x odd counts x in place
// against the reference and bit-identical on every rank; many rounds through
// the slots of each rank; the sleeping (futex) wait; mismatched calls on the
// same path and on different paths; the set-up leaves nothing in /dev/shm; a
// segment with another layout is refused. Multi-process coverage: the mpirun
// collective tests, whose AllReduces take these paths.
#include "comm_fixture.hpp"
#include "reference.hpp"

#include "collectives/collectives.hpp"
#include "core/dtype.hpp"
#include "core/shm_channel.hpp"
#include "core/topology.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <dirent.h>
#include <functional>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace antdt::test {
namespace {

Config shm_config(AllreduceAlgo algo = AllreduceAlgo::shm) {
  Config cfg = test_config();
  cfg.allreduce_algo = algo;
  cfg.shm_max_bytes = 16 << 10;
  return cfg;
}

// Small limits, so that tests' vectors take the bulk area in several blocks
// (4 KiB: 512 u64) with slices of every shape, including empty ones.
Config bulk_config(AllreduceAlgo algo = AllreduceAlgo::shm) {
  Config cfg = shm_config(algo);
  cfg.shm_max_bytes = 256;
  cfg.shm_bulk_bytes = 4096;
  return cfg;
}

// The names of this process's mailboxes left in /dev/shm.
std::vector<std::string> leftover_segments() {
  std::vector<std::string> names;
  const std::string prefix = cat("antdt-", ::getpid(), "-");
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir))
      if (std::string_view(e->d_name).starts_with(prefix)) names.emplace_back(e->d_name);
    ::closedir(dir);
  }
  return names;
}

class ShmAllreduce : public ::testing::TestWithParam<std::tuple<TransportKind, int>> {};

// Every dtype x op x the counts `counts_for(element size)` x in place and out
// of place against the reference, and the same bits on every rank; then
// `check_paths` on each rank (which channels were set up).
void expect_every_dtype_and_op(TransportKind kind, int n, const Config& cfg,
                               const std::function<std::vector<std::size_t>(std::size_t)>& counts_for,
                               const std::function<void(Communicator&)>& check_paths) {
  std::vector<std::vector<std::byte>> results(static_cast<std::size_t>(n));
  expect_all_ok(run_ranks(
      n, kind,
      [&](Communicator& comm) {
        const int r = comm.rank();
        std::vector<std::byte> all_results;
        for (DataType t : kAllTypes) {
          const std::size_t esize = dtype_size(t);
          for (ReduceOp op : kAllOps) {
            for (std::size_t count : counts_for(esize)) {
              for (bool in_place : {false, true}) {
                std::vector<std::byte> send(count * esize), recv(count * esize);
                for (std::size_t i = 0; i < count; ++i) store(t, send.data(), i, input(t, op, r, i));
                void* out = in_place ? send.data() : recv.data();
                comm.allreduce(send.data(), out, count, t, op);
                const auto* got = static_cast<const std::byte*>(out);
                for (std::size_t i = 0; i < count; ++i) {
                  const double want = expected(t, op, n, i), value = load(t, got, i);
                  if (!close_enough(t, op, value, want))
                    throw std::runtime_error(cat(dtype_name(t), " ", op_name(op), " count ", count,
                                                 in_place ? " in place" : "", ": element ", i, " is ", value,
                                                 ", expected ", want));
                }
                all_results.insert(all_results.end(), got, got + count * esize);
              }
            }
          }
        }
        results[static_cast<std::size_t>(r)] = std::move(all_results);
        check_paths(comm);
      },
      cfg));
  for (int r = 1; r < n; ++r) EXPECT_EQ(results[static_cast<std::size_t>(r)], results[0]) << "rank " << r;
  EXPECT_TRUE(leftover_segments().empty());
}

TEST_P(ShmAllreduce, EveryDtypeAndOpMatchesTheReferenceOnEveryRank) {
  const auto [kind, n] = GetParam();
  expect_every_dtype_and_op(
      kind, n, shm_config(),
      [](std::size_t esize) {
        std::vector<std::size_t> counts;
        for (std::size_t count : {0, 1, 7, 1003})
          if (count * esize <= 16 << 10) counts.push_back(count);
        return counts;
      },
      [n = n](Communicator& comm) {
        if (n > 1 && comm.impl().shm() == nullptr) throw std::runtime_error("the mailbox was not set up");
      });
}

TEST_P(ShmAllreduce, BulkAreaEveryDtypeAndOpMatchesTheReferenceOnEveryRank) {
  const auto [kind, n] = GetParam();
  expect_every_dtype_and_op(
      kind, n, bulk_config(),
      [](std::size_t esize) {  // just past the mailbox, one block, a block and a bit, several uneven blocks
        return std::vector<std::size_t>{257 / esize + 1, 4096 / esize, 4096 / esize + 3, 5003};
      },
      [n = n](Communicator& comm) {
        if (n > 1 && comm.impl().shm(detail::ShmArea::bulk) == nullptr)
          throw std::runtime_error("the bulk area was not set up");
        if (comm.impl().shm_tried(detail::ShmArea::mailbox)) throw std::runtime_error("the mailbox was set up");
      });
}

TEST_P(ShmAllreduce, ResultIsTheRankOrderReduction) {
  // Every rank must compute ((x0 + x1) + x2) + ...: f32 values whose sums
  // round differently in another order.
  // Not a structured binding: clang 14 cannot capture one in the lambda below.
  const auto kind = std::get<0>(GetParam());
  const auto n = std::get<1>(GetParam());
  for (const std::size_t count : {std::size_t{64}, std::size_t{3000}})  // the mailbox, the bulk area
  expect_all_ok(run_ranks(
      n, kind,
      [&](Communicator& comm) {
        std::vector<float> send(count), got(count);
        for (std::size_t i = 0; i < send.size(); ++i)
          send[i] = comm.rank() % 2 == 0 ? 1e8f : 1.0f + static_cast<float>(i % 3) * 0.37f;
        comm.allreduce(send.data(), got.data(), send.size(), DataType::f32, ReduceOp::sum);
        for (std::size_t i = 0; i < send.size(); ++i) {
          float want = 0;
          for (int p = 0; p < n; ++p) {
            const float x = p % 2 == 0 ? 1e8f : 1.0f + static_cast<float>(i % 3) * 0.37f;
            want = p == 0 ? x : want + x;
          }
          if (std::memcmp(&want, &got[i], sizeof want) != 0)
            throw std::runtime_error(cat("element ", i, " is ", got[i], ", the rank-order sum is ", want));
        }
      },
      bulk_config()));
}

// `rounds` in-place u64 sums of `count_of(round)` elements, each checked:
// data of one call must never leak into another through a reused slot.
void expect_rounds_of_changing_sizes(TransportKind kind, int n, const Config& cfg, std::uint64_t rounds,
                                     const std::function<std::size_t(std::uint64_t)>& count_of) {
  expect_all_ok(run_ranks(
      n, kind,
      [&](Communicator& comm) {
        for (std::uint64_t round = 0; round < rounds; ++round) {
          const std::size_t count = count_of(round);
          std::vector<std::uint64_t> v(count);
          for (std::size_t i = 0; i < count; ++i) v[i] = round * 1000 + static_cast<std::uint64_t>(comm.rank()) + i;
          comm.allreduce(v.data(), v.data(), count, DataType::u64, ReduceOp::sum);
          const auto nn = static_cast<std::uint64_t>(n);
          for (std::size_t i = 0; i < count; ++i) {
            const std::uint64_t want = nn * (round * 1000 + i) + nn * (nn - 1) / 2;
            if (v[i] != want) throw std::runtime_error(cat("round ", round, " element ", i, ": ", v[i], " != ", want));
          }
        }
      },
      cfg));
}

TEST_P(ShmAllreduce, BulkAreaManyCallsOfChangingSizesReuseTheThreeSlots) {
  const auto [kind, n] = GetParam();
  // 1 to 6 blocks of 512 elements.
  expect_rounds_of_changing_sizes(kind, n, bulk_config(), 300, [](std::uint64_t r) { return 33 + (r * 397) % 2600; });
}

TEST_P(ShmAllreduce, ManyRoundsReuseBothSlotsWithoutMixingData) {
  const auto [kind, n] = GetParam();
  expect_rounds_of_changing_sizes(kind, n, shm_config(), 2000, [](std::uint64_t r) { return 1 + r % 17; });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmAllreduce,
                         ::testing::Combine(::testing::Values(TransportKind::inproc, TransportKind::ucx),
                                            ::testing::Values(1, 2, 3, 4, 5)),
                         [](const auto& param_info) {
                           return cat(to_string(std::get<0>(param_info.param)), "_", std::get<1>(param_info.param), "ranks");
                         });

// A vector larger than the largest cache takes the streaming copy-out
// (allreduce_shm_bulk.cpp): the default 512 KiB blocks, out of place and in
// place, exact u32 sums on every rank.
TEST(ShmAllreduceBulk, AVectorLargerThanTheCachesIsReducedExactly) {
  const std::size_t cache = largest_cache_bytes();
  if (cache == 0 || cache > (std::size_t{128} << 20))
    GTEST_SKIP() << "hwloc reports a largest cache of " << cache << " bytes; this test needs one of 1 B..128 MiB";
  const std::size_t count = (cache + (std::size_t{1} << 20)) / sizeof(std::uint32_t) + 7;
  Config cfg = test_config();
  cfg.allreduce_algo = AllreduceAlgo::shm;
  expect_all_ok(run_ranks(
      2, TransportKind::inproc,
      [&](Communicator& comm) {
        const auto r = static_cast<std::uint32_t>(comm.rank());
        std::vector<std::uint32_t> send(count), recv(count, 0xdeadbeef);
        for (std::size_t i = 0; i < count; ++i) send[i] = static_cast<std::uint32_t>(i) * 3 + r;
        comm.allreduce(send.data(), recv.data(), count, DataType::u32, ReduceOp::sum);
        comm.allreduce(send.data(), send.data(), count, DataType::u32, ReduceOp::sum);
        for (std::size_t i = 0; i < count; ++i) {
          const std::uint32_t want = static_cast<std::uint32_t>(i) * 6 + 1;
          if (recv[i] != want || send[i] != want)
            throw std::runtime_error(cat("element ", i, ": ", recv[i], " out of place, ", send[i], " in place, not ", want));
        }
      },
      cfg));
}

TEST(ShmAllreduceWait, SleepingReadersAreWokenByTheWriter) {
  // ANTDT_PROGRESS=wake: readers go to sleep on the futex at once; the last
  // rank arrives late every round.
  Config cfg = shm_config();
  cfg.progress = ProgressMode::wake;
  const int n = 3;
  expect_all_ok(run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        for (int round = 0; round < 20; ++round) {
          if (comm.rank() == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
          std::int32_t v = comm.rank() + round;
          comm.allreduce(&v, &v, 1, DataType::i32, ReduceOp::max);
          if (v != n - 1 + round) throw std::runtime_error(cat("round ", round, ": max is ", v));
        }
      },
      cfg));
}

TEST(ShmAllreduceWait, BulkAreaSleepingReadersAreWokenByTheWriter) {
  Config cfg = bulk_config();
  cfg.progress = ProgressMode::wake;
  const int n = 3;
  expect_all_ok(run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        std::vector<std::int32_t> v(3000);
        for (int round = 0; round < 10; ++round) {
          if (comm.rank() == round % n) std::this_thread::sleep_for(std::chrono::milliseconds(3));
          for (std::size_t i = 0; i < v.size(); ++i) v[i] = comm.rank() + round + static_cast<int>(i);
          comm.allreduce(v.data(), v.data(), v.size(), DataType::i32, ReduceOp::max);
          for (std::size_t i = 0; i < v.size(); ++i)
            if (v[i] != n - 1 + round + static_cast<int>(i))
              throw std::runtime_error(cat("round ", round, " element ", i, ": max is ", v[i]));
        }
      },
      cfg));
}

TEST(ShmAllreduceMismatch, DifferentCountsInTheBulkAreaFailWithMismatch) {
  const int n = 3;
  const Outcomes out = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        std::vector<float> v(4000, 1.0f);
        comm.allreduce(v.data(), v.data(), 3000, DataType::f32, ReduceOp::sum);  // sets the bulk area up
        comm.allreduce(v.data(), v.data(), comm.rank() == 1 ? 3001 : 3000, DataType::f32, ReduceOp::sum);
      },
      bulk_config());
  for (int r = 0; r < n; ++r) EXPECT_TRUE(failed_with<MismatchError>(out, r)) << r << ": " << failure_of(out, r);
}

TEST(ShmAllreduceMismatch, DifferentCountsOnTheSharedMemoryPathFailWithMismatch) {
  const int n = 3;
  const Outcomes out = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        std::vector<float> v(16, 1.0f);
        comm.allreduce(v.data(), v.data(), 4, DataType::f32, ReduceOp::sum);  // sets the mailbox up
        comm.allreduce(v.data(), v.data(), comm.rank() == 1 ? 5 : 4, DataType::f32, ReduceOp::sum);
      },
      shm_config());
  for (int r = 0; r < n; ++r) EXPECT_TRUE(failed_with<MismatchError>(out, r)) << r << ": " << failure_of(out, r);
}

TEST(ShmAllreduceMismatch, ARankOnAnotherPathFailsWithMismatchNotTimeout) {
  // Rank 1's count is past ANTDT_SHM_MAX_BYTES (ring); the others wait in
  // shared memory and must see rank 1's announced signature differ.
  Config cfg = shm_config(AllreduceAlgo::automatic);
  cfg.shm_max_bytes = 4096;
  cfg.timeout = std::chrono::seconds(20);
  const int n = 3;
  const auto start = std::chrono::steady_clock::now();
  const Outcomes out = run_ranks(
      n, TransportKind::inproc,
      [&](Communicator& comm) {
        std::vector<float> v(4096, 1.0f);
        comm.allreduce(v.data(), v.data(), 4, DataType::f32, ReduceOp::sum);
        comm.allreduce(v.data(), v.data(), comm.rank() == 1 ? 4096 : 4, DataType::f32, ReduceOp::sum);
      },
      cfg);
  for (int r = 0; r < n; ++r) EXPECT_TRUE(failed_with<MismatchError>(out, r)) << r << ": " << failure_of(out, r);
  EXPECT_LT(std::chrono::steady_clock::now() - start, cfg.timeout) << "found by a timeout, not by the signature";
}

TEST(ShmAllreduceSelection, ForcedTransportAlgorithmsAndZeroLimitNeverUseSharedMemory) {
  for (Config cfg : {shm_config(AllreduceAlgo::ring), shm_config(AllreduceAlgo::recursive_doubling),
                     [] {
                       Config c = shm_config(AllreduceAlgo::automatic);
                       c.shm_max_bytes = 0;
                       c.shm_bulk_bytes = 0;
                       return c;
                     }()}) {
    expect_all_ok(run_ranks(
        2, TransportKind::inproc,
        [&](Communicator& comm) {
          float v = 1;
          comm.allreduce(&v, &v, 1, DataType::f32, ReduceOp::sum);
          if (v != 2) throw std::runtime_error(cat("sum is ", v));
          std::vector<float> big(20000, 1.0f);  // past every mailbox limit here
          comm.allreduce(big.data(), big.data(), big.size(), DataType::f32, ReduceOp::sum);
          if (big.front() != 2 || big.back() != 2) throw std::runtime_error(cat("sum is ", big.front()));
          if (comm.impl().shm_tried()) throw std::runtime_error("the mailbox was set up");
          if (comm.impl().shm_tried(detail::ShmArea::bulk)) throw std::runtime_error("the bulk area was set up");
        },
        cfg));
  }
}

TEST(ShmChannel, OpenRefusesASegmentOfAnotherLayoutAndCreateRefusesAnExistingName) {
  const std::string name = ShmChannel::make_name(7);
  const ShmChannel::SegmentShape shape{2, 2, 1024};
  auto created = ShmChannel::create(name, shape, 0);
  EXPECT_THROW(ShmChannel::create(name, shape, 0), TransportError);
  EXPECT_THROW(ShmChannel::open(name, {3, 2, 1024}, 1), TransportError);  // size differs
  // Same number of bytes, another shape (one slot of 2144 bytes = two of 1024 with headers): the header says no.
  ASSERT_EQ(ShmChannel::segment_bytes({2, 1, 2144}), ShmChannel::segment_bytes(shape));
  EXPECT_THROW(ShmChannel::open(name, {2, 1, 2144}, 1), TransportError);
  auto opened = ShmChannel::open(name, shape, 1);
  // Data published by one side is seen by the other, in the right slot, from its stamp on.
  std::memset(created->own_slot(1).data(), 0x5a, 10);
  EXPECT_FALSE(opened->peek(0, 1, 3).ready);
  created->publish(1, 3, 99, 10);
  const auto p = opened->peek(0, 1, 3);
  ASSERT_TRUE(p.ready);
  EXPECT_EQ(p.hash, 99u);
  ASSERT_EQ(p.data.size(), 10u);
  EXPECT_EQ(p.data[9], std::byte{0x5a});
  EXPECT_TRUE(opened->peek(0, 1, 2).ready);   // an earlier stamp is passed too
  EXPECT_FALSE(opened->peek(0, 1, 4).ready);  // a later one is not
  EXPECT_FALSE(opened->peek(0, 0, 1).ready);  // the other slot was never published
  created.reset();  // rank 0 removes the name
  EXPECT_THROW(ShmChannel::open(name, shape, 1), TransportError);
}

// A peer's process that maps the segment and then dies (here: exits while
// its parent has not reaped it yet, a zombie, then reaped): a waiter must be
// able to tell, since a dead peer never publishes again.
TEST(ShmChannel, APeerWhoseProcessIsGoneIsSeenGoneAndALiveOneIsNot) {
  const std::string name = ShmChannel::make_name(8);
  const ShmChannel::SegmentShape shape{2, 2, 1024};
  auto created = ShmChannel::create(name, shape, 0);
  EXPECT_FALSE(created->peer_gone(0));  // this very process
  EXPECT_EQ(created->peer_pid(0), static_cast<int>(::getpid()));
  EXPECT_FALSE(created->peer_gone(1));  // never mapped: nothing to tell
  int go[2], mapped[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(mapped), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto opened = ShmChannel::open(name, shape, 1);
    char c = 1;
    if (::write(mapped[1], &c, 1) != 1) ::_exit(1);
    if (::read(go[0], &c, 1) != 1) ::_exit(1);
    ::_exit(0);  // without unmapping: as a killed process would
  }
  char c = 0;
  ASSERT_EQ(::read(mapped[0], &c, 1), 1);
  EXPECT_EQ(created->peer_pid(1), static_cast<int>(child));
  EXPECT_FALSE(created->peer_gone(1));  // alive, waiting for `go`
  ASSERT_EQ(::write(go[1], &c, 1), 1);
  // Exited but not reaped: a zombie is gone too.
  bool gone = false;
  for (int i = 0; i < 5000 && !gone; ++i) {
    gone = created->peer_gone(1);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(gone);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(created->peer_gone(1));  // reaped: no such process
  for (int fd : {go[0], go[1], mapped[0], mapped[1]}) ::close(fd);
}

}  // namespace
}  // namespace antdt::test
