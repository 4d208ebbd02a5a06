// StepStats (collectives/telemetry/step_stats.hpp).
#include "collectives/telemetry/step_stats.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <numeric>

namespace antdt::telemetry {

StepStats::StepStats(std::size_t capacity, double alpha) : alpha_(alpha) {
  ANTDT_CHECK_ARG(capacity >= 1, "StepStats: the window capacity must be at least 1, got ", capacity);
  ANTDT_CHECK_ARG(alpha > 0 && alpha <= 1, "StepStats: alpha must be in (0, 1], got ", alpha);
  window_.assign(capacity, 0.0);
}

void StepStats::add(double value) noexcept {
  window_[next_] = value;
  next_ = next_ + 1 == window_.size() ? 0 : next_ + 1;
  if (size_ < window_.size()) ++size_;
  ewma_ = count_ == 0 ? value : alpha_ * value + (1 - alpha_) * ewma_;
  last_ = value;
  ++count_;
}

double StepStats::mean() const noexcept {
  if (size_ == 0) return 0;
  // While the ring is filling, its samples are the first size_ slots.
  return std::accumulate(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(size_), 0.0) /
         static_cast<double>(size_);
}

void StepStats::copy_window(std::vector<double>& scratch) const {
  scratch.assign(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(size_));
}

double StepStats::median() const { return median(scratch_); }
double StepStats::quantile(double q) const { return quantile(q, scratch_); }

double StepStats::median(std::vector<double>& scratch) const {
  if (size_ == 0) return 0;
  copy_window(scratch);
  const auto mid = scratch.begin() + static_cast<std::ptrdiff_t>(size_ / 2);
  std::nth_element(scratch.begin(), mid, scratch.end());
  if (size_ % 2 == 1) return *mid;
  // Even count: the other middle value is the largest of the lower half,
  // which nth_element left (unordered) before `mid`.
  const double lower = *std::max_element(scratch.begin(), mid);
  return (lower + *mid) / 2;
}

double StepStats::quantile(double q, std::vector<double>& scratch) const {
  ANTDT_CHECK_ARG(q > 0 && q <= 1, "StepStats::quantile: q must be in (0, 1], got ", q);
  if (size_ == 0) return 0;
  copy_window(scratch);
  // ceil(q*n), tolerant of rounding in q*n (0.99 * 100 is not exactly 99).
  const double exact = q * static_cast<double>(size_);
  auto rank = static_cast<std::size_t>(exact);
  if (exact - static_cast<double>(rank) > 1e-9) ++rank;
  const auto nth = scratch.begin() + static_cast<std::ptrdiff_t>(std::clamp<std::size_t>(rank, 1, size_) - 1);
  std::nth_element(scratch.begin(), nth, scratch.end());
  return *nth;
}

void StepStats::clear() noexcept {
  next_ = 0;
  size_ = 0;
  count_ = 0;
  ewma_ = 0;
  last_ = 0;
}

}  // namespace antdt::telemetry
