// Window statistics of one per-step quantity (compute time, wait time, ...):
// the last `capacity` samples in a ring, an exponentially weighted moving
// average over every sample, and median / p99 of the window on demand.
//
// Adding a sample is O(1) and never allocates. Quantiles copy the window into
// a scratch buffer and run nth_element (O(capacity)); the buffer is reused, so
// once it has grown to the capacity no query allocates either. The Monitor
// keeps thousands of these, so callers may pass one shared scratch buffer.
// Not thread-safe: one owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace antdt::telemetry {

class StepStats {
 public:
  // capacity >= 1 samples in the window; 0 < alpha <= 1 is the weight of the
  // newest sample in the EWMA (1 = no smoothing). Raises InvalidArgument.
  StepStats(std::size_t capacity, double alpha);

  void add(double value) noexcept;

  std::uint64_t count() const noexcept { return count_; }     // samples ever added
  std::size_t size() const noexcept { return size_; }         // samples in the window
  std::size_t capacity() const noexcept { return window_.size(); }
  bool empty() const noexcept { return count_ == 0; }
  double last() const noexcept { return last_; }              // 0 when empty
  // Seeded by the first sample (not by 0), so it is meaningful from the start.
  double ewma() const noexcept { return ewma_; }              // 0 when empty
  double mean() const noexcept;                               // of the window

  // Median of the window (the mean of the two middle values for an even
  // count); p99 and quantile() use the nearest-rank definition: the
  // ceil(q*n)-th smallest value. All return 0 for an empty window.
  double median() const;
  double p99() const { return quantile(0.99); }
  double quantile(double q) const;                            // 0 < q <= 1
  double median(std::vector<double>& scratch) const;
  double quantile(double q, std::vector<double>& scratch) const;

  void clear() noexcept;

 private:
  void copy_window(std::vector<double>& scratch) const;

  std::vector<double> window_;  // ring of the last capacity() samples
  std::size_t next_ = 0;        // where the next sample goes
  std::size_t size_ = 0;
  std::uint64_t count_ = 0;
  double alpha_;
  double ewma_ = 0;
  double last_ = 0;
  mutable std::vector<double> scratch_;  // for the overloads without a buffer
};

}  // namespace antdt::telemetry
