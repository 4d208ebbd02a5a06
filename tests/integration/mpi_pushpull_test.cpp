// Push-pull with real processes under mpirun (public API only). Checks:
//   rounds      — every rank serving, then rank 0 as a dedicated server: keys
//                 crossing 4 KiB partitions (odd and zero counts), f32/f64/i32,
//                 weights, sum and avg against a reference computed here;
//   mismatch    — a rank with a different key table makes every rank fail
//                 with MismatchError (and the communicator stays usable);
//   partial     — partial push with the last rank slowed (drop): every rank
//                 applies the same results, each contribution appears exactly
//                 once or its call reported it dropped.
// Usage: antdt_mpi_pushpull_test [partial steps]   (exit 0 = all held)
#include <antdt/comm.hpp>
#include <antdt/pushpull.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

int failures = 0;
void expect(bool ok, const std::string& what, int rank) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
}

double input(int rank, std::uint64_t key, int round, std::size_t i) {
  return static_cast<double>(static_cast<long long>((i * 7 + key * 3 + rank * 5 + round * 11) % 9) - 4);
}

template <class T>
void check_key(antdt::PushPull& pp, const antdt::PushPullKey& k, int me, const std::vector<int>& workers, int round,
               const char* mode) {
  const bool integer = k.dtype == antdt::DataType::i32;
  auto weight = [&](int rank) { return integer ? rank % 3 + 1.0 : 0.5 * (rank % 4 + 1); };
  std::vector<T> data(k.count), sum(k.count), avg(k.count);
  for (std::size_t i = 0; i < k.count; ++i) data[i] = static_cast<T>(input(me, k.key, round, i));
  pp.push(k.key, data.data(), weight(me));
  pp.pull(k.key, sum.data(), antdt::ReduceOp::sum);
  if (!integer) pp.pull(k.key, avg.data(), antdt::ReduceOp::avg);
  if (!pp.is_worker()) return;
  double total = 0;
  for (int w : workers) total += weight(w);
  for (std::size_t i = 0; i < k.count; ++i) {
    double want = 0;
    for (int w : workers) want += weight(w) * input(w, k.key, round, i);
    if (static_cast<double>(sum[i]) != want) {
      expect(false, std::string(mode) + " key " + std::to_string(k.key) + " sum at " + std::to_string(i) + ": got " +
                        std::to_string(static_cast<double>(sum[i])) + ", expected " + std::to_string(want), me);
      return;
    }
    if (!integer && std::abs(static_cast<double>(avg[i]) - want / total) > 1e-6 * std::abs(want / total)) {
      expect(false, std::string(mode) + " key " + std::to_string(k.key) + " avg at " + std::to_string(i), me);
      return;
    }
  }
}

void rounds(antdt::Communicator& comm, const std::vector<int>& servers, const char* mode) {
  const std::vector<antdt::PushPullKey> keys = {{11, 3001, antdt::DataType::f32},
                                                {3, 1, antdt::DataType::f64},
                                                {7, 0, antdt::DataType::f32},
                                                {9, 5000, antdt::DataType::i32},
                                                {2, 2501, antdt::DataType::f64}};
  antdt::PushPull pp(comm, keys, antdt::PushPullOptions{servers, 4096});
  std::vector<int> workers;
  for (int r = 0; r < comm.size(); ++r)
    if (std::find(servers.begin(), servers.end(), r) == servers.end()) workers.push_back(r);
  for (int round = 0; round < 3; ++round) {
    for (const auto& k : keys) {
      if (k.dtype == antdt::DataType::f32) check_key<float>(pp, k, comm.rank(), workers, round, mode);
      if (k.dtype == antdt::DataType::f64) check_key<double>(pp, k, comm.rank(), workers, round, mode);
      if (k.dtype == antdt::DataType::i32) check_key<std::int32_t>(pp, k, comm.rank(), workers, round, mode);
    }
  }
}

void mismatch(antdt::Communicator& comm) {
  std::vector<antdt::PushPullKey> keys = {{1, 100, antdt::DataType::f32}};
  if (comm.rank() == comm.size() - 1) keys[0].count = 99;
  bool saw = false;
  try {
    antdt::PushPull pp(comm, keys);
  } catch (const antdt::MismatchError&) {
    saw = true;
  }
  expect(saw, "a different key table on the last rank did not raise MismatchError here", comm.rank());
  comm.barrier();  // still usable
}

void partial(antdt::Communicator& comm, int steps) {
  const int n = comm.size(), me = comm.rank();
  const int max_calls = steps + 4;
  const std::size_t count = static_cast<std::size_t>(n * max_calls);
  const antdt::PushPullKey key{5, count, antdt::DataType::f32};
  antdt::PushPull pp(comm, std::vector<antdt::PushPullKey>{key}, antdt::PushPullOptions{{}, 4096});
  std::vector<float> grad(count), result(count);
  std::vector<double> total(count, 0.0);
  std::vector<antdt::Fate> fates;
  std::uint64_t applied = 0;
  const auto step_time = std::chrono::milliseconds(me == n - 1 ? 24 : 8);
  auto apply = [&] {
    for (std::size_t i = 0; i < count; ++i) total[i] += result[i];
    ++applied;
  };
  const antdt::LatePolicy policy = antdt::LatePolicy::drop;
  for (;;) {
    std::this_thread::sleep_for(step_time);
    std::fill(grad.begin(), grad.end(), 0.0f);
    grad[static_cast<std::size_t>(me * max_calls) + fates.size()] = 1.0f;
    auto r = pp.partial_push(5, grad.data(), result.data(), antdt::ReduceOp::sum, {policy, 1.0, 1, 1});
    fates.push_back(r.fate);
    if (r.step == 0) break;
    apply();
    while (r.steps_behind > 0) {
      r = pp.partial_push(5, nullptr, result.data(), antdt::ReduceOp::sum, {policy, 0.0, 1, 0});
      apply();
    }
    if (static_cast<int>(applied) >= steps || static_cast<int>(fates.size()) >= max_calls) break;
  }
  auto f = comm.partial_finish();
  while (f.steps_behind > 0) {
    auto r = pp.partial_push(5, nullptr, result.data(), antdt::ReduceOp::sum, {policy, 0.0, 1, 0});
    apply();
    f.steps_behind = r.steps_behind;
  }
  // Consistency: the same number of results and the same sum of them on every rank.
  std::vector<double> mine = total, low(count), high(count);
  comm.allreduce(mine.data(), low.data(), count, antdt::DataType::f64, antdt::ReduceOp::min);
  comm.allreduce(mine.data(), high.data(), count, antdt::DataType::f64, antdt::ReduceOp::max);
  expect(low == high, "ranks applied different results", me);
  std::uint64_t applied_min = 0, applied_max = 0;
  comm.allreduce(&applied, &applied_min, 1, antdt::DataType::u64, antdt::ReduceOp::min);
  comm.allreduce(&applied, &applied_max, 1, antdt::DataType::u64, antdt::ReduceOp::max);
  expect(applied_min == applied_max, "ranks applied different numbers of results", me);
  // Accounting of this rank's own contributions.
  for (std::size_t c = 0; c < fates.size(); ++c) {
    const double seen = total[static_cast<std::size_t>(me * max_calls) + c];
    if (fates[c] == antdt::Fate::dropped)
      expect(seen == 0.0, "call " + std::to_string(c) + " reported dropped but was included", me);
    else
      expect(seen == 1.0, "call " + std::to_string(c) + " included " + std::to_string(seen) + " times", me);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  try {
    antdt::Communicator comm = antdt::Communicator::from_env();
    rounds(comm, {}, "every rank serving");
    if (comm.size() >= 2) rounds(comm, {0}, "rank 0 dedicated");
    if (comm.size() >= 2) mismatch(comm);
    if (comm.size() >= 2) partial(comm, steps);
    comm.barrier();
    if (comm.rank() == 0 && failures == 0) std::printf("push-pull: all checks held on %d ranks\n", comm.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
