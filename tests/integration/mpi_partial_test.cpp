// Partial AllReduce invariants with real processes under mpirun (public API
// only): the last rank is slowed; every contribution is a one-hot vector
// naming (rank, call), so the sum of the applied results shows where each
// contribution went. Checks, for drop and defer:
//   consistency — every rank applied the same results (sum and count compared across ranks);
//   accounting  — each contribution appears exactly once, or its call reported it dropped;
//   weighting   — a weighted avg step equals sum(w g) / sum(w).
// Usage: antdt_mpi_partial_test [steps]   (exit 0 = all held)
#include <antdt/comm.hpp>

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

void run_policy(antdt::Communicator& comm, antdt::LatePolicy policy, int steps) {
  const int n = comm.size(), me = comm.rank();
  const int max_calls = steps + 4;
  const std::size_t count = static_cast<std::size_t>(n * max_calls);
  std::vector<float> grad(count), result(count);
  std::vector<double> total(count, 0.0);  // sum of every result applied
  std::vector<antdt::Fate> fates;
  std::uint64_t applied = 0;
  const auto step_time = std::chrono::milliseconds(me == n - 1 ? 24 : 8);
  auto apply = [&] {
    for (std::size_t i = 0; i < count; ++i) total[i] += result[i];
    ++applied;
  };
  for (;;) {
    std::this_thread::sleep_for(step_time);
    std::fill(grad.begin(), grad.end(), 0.0f);
    grad[static_cast<std::size_t>(me * max_calls) + fates.size()] = 1.0f;
    auto r = comm.partial_allreduce(grad.data(), result.data(), count, antdt::DataType::f32, antdt::ReduceOp::sum,
                                    antdt::PartialOptions{policy, 1.0, 1, 1});
    fates.push_back(r.fate);
    if (r.step == 0) break;
    apply();
    while (r.steps_behind > 0) {
      r = comm.partial_allreduce(nullptr, result.data(), count, antdt::DataType::f32, antdt::ReduceOp::sum,
                                 antdt::PartialOptions{policy, 0.0, 1, 0});
      apply();
    }
    if (static_cast<int>(applied) >= steps || static_cast<int>(fates.size()) >= max_calls) break;
  }
  auto f = comm.partial_finish();
  while (f.steps_behind > 0) {
    auto r = comm.partial_allreduce(nullptr, result.data(), count, antdt::DataType::f32, antdt::ReduceOp::sum,
                                    antdt::PartialOptions{policy, 0.0, 1, 0});
    apply();
    f.steps_behind = r.steps_behind;
  }
  // Consistency: the same number of results and the same sums on every rank.
  std::vector<double> lo(total), hi(total);
  comm.allreduce(lo.data(), lo.data(), count, antdt::DataType::f64, antdt::ReduceOp::min);
  comm.allreduce(hi.data(), hi.data(), count, antdt::DataType::f64, antdt::ReduceOp::max);
  std::uint64_t applied_lo = applied, applied_hi = applied;
  comm.allreduce(&applied_lo, &applied_lo, 1, antdt::DataType::u64, antdt::ReduceOp::min);
  comm.allreduce(&applied_hi, &applied_hi, 1, antdt::DataType::u64, antdt::ReduceOp::max);
  expect(applied_lo == applied_hi, "ranks applied different numbers of results", me);
  for (std::size_t i = 0; i < count; ++i)
    if (lo[i] != hi[i]) {
      expect(false, "ranks applied different results at element " + std::to_string(i), me);
      break;
    }
  // Accounting for this rank's own contributions.
  int late = 0;
  for (std::size_t c = 0; c < fates.size(); ++c) {
    const double seen = total[static_cast<std::size_t>(me * max_calls) + c];
    if (fates[c] == antdt::Fate::dropped) {
      ++late;
      expect(seen == 0.0, "call " + std::to_string(c) + " reported dropped but was included", me);
    } else {
      if (fates[c] == antdt::Fate::deferred) ++late;
      expect(seen == 1.0, "call " + std::to_string(c) + " included " + std::to_string(seen) + " times", me);
    }
  }
  int late_all = late;
  comm.allreduce(&late_all, &late_all, 1, antdt::DataType::i32, antdt::ReduceOp::sum);
  if (me == 0)
    std::printf("policy %d: %llu results applied, %d late contributions\n", static_cast<int>(policy),
                static_cast<unsigned long long>(applied), late_all);
  if (n > 1) expect(late_all > 0, "the slowed rank was never late: skipping was not exercised", me);
}

void weighted_step(antdt::Communicator& comm) {
  const double w = comm.rank() + 1.0;
  std::vector<double> g(7, 10.0 * comm.rank()), out(7);
  auto r = comm.partial_allreduce(g.data(), out.data(), g.size(), antdt::DataType::f64, antdt::ReduceOp::avg,
                                  antdt::PartialOptions{antdt::LatePolicy::wait, w, 1, 0});
  double num = 0, den = 0;
  for (int k = 0; k < comm.size(); ++k) {
    num += (k + 1.0) * 10.0 * k;
    den += k + 1.0;
  }
  for (double v : out) expect(std::fabs(v - num / den) < 1e-9, "weighted avg " + std::to_string(v), comm.rank());
  expect(r.total_weight == den, "total weight", comm.rank());
  comm.partial_finish();
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  try {
    antdt::Communicator comm = antdt::Communicator::from_env();
    weighted_step(comm);
    run_policy(comm, antdt::LatePolicy::drop, steps);
    run_policy(comm, antdt::LatePolicy::defer, steps);
    int all = failures;
    comm.allreduce(&all, &all, 1, antdt::DataType::i32, antdt::ReduceOp::sum);
    if (comm.rank() == 0) std::printf("%s\n", all == 0 ? "partial invariants: OK" : "partial invariants: FAILED");
    return all == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
