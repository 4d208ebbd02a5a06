// The bookkeeping behind EventTimer (collectives/telemetry/event_timer.hpp), kept free of CUDA
// so it is tested on every machine with a fake marker pair.
//
// Intervals are begin/end marker pairs recorded on a stream (CUDA events in
// EventTimer). The ring keeps the pairs in flight in call order and hands back
// their durations in that same order, never blocking: try_read() answers only
// from pairs whose markers have completed.
//
// No interval is ever dropped while the reader keeps up, because a reader such
// as telemetry::StepTimer matches the n-th duration to the n-th interval:
//  - when every pair is in flight, the ring grows (a new pair is created);
//  - when the ring is full but its oldest pairs have completed unread, their
//    durations move to a plain queue of doubles and the pairs are reused.
// Only that queue is bounded (`max_unread` durations, 1 Mi by default, 8 MiB);
// past it the oldest unread duration is discarded and counted in dropped().
#pragma once

#include "core/error.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

namespace antdt::cuda {

// Pair must provide:
//   explicit Pair(const Context&);                  // creates its two markers
//   void record_begin(Stream);  void record_end(Stream);
//   bool try_elapsed(double& seconds);              // false until both markers completed
template <class Pair, class Context, class Stream>
class IntervalRing {
 public:
  explicit IntervalRing(Context context, std::size_t initial_pairs = 4, std::size_t max_unread = std::size_t{1} << 20)
      : context_(std::move(context)), max_unread_(std::max<std::size_t>(max_unread, 1)) {
    pairs_.reserve(std::max<std::size_t>(initial_pairs, 1));
    for (std::size_t i = 0; i < std::max<std::size_t>(initial_pairs, 1); ++i) {
      pairs_.push_back(std::make_unique<Pair>(context_));
    }
  }

  void begin(Stream stream) {
    ANTDT_CHECK_ARG(!open_, "compute interval begun twice: the previous begin has no end yet");
    if (count_ == pairs_.size()) make_room();
    pairs_[index(count_)]->record_begin(stream);
    ++count_;
    open_ = true;
  }

  void end(Stream stream) {
    ANTDT_CHECK_ARG(open_, "compute interval ended without a begin");
    pairs_[index(count_ - 1)]->record_end(stream);
    open_ = false;
  }

  // The oldest unread duration, in begin order; false when it is not finished
  // (or there is none). Durations below zero (begin and end recorded on
  // different streams that ran out of order) read as zero.
  bool try_read(double& seconds) {
    if (!unread_.empty()) {
      seconds = unread_.front();
      unread_.pop_front();
      return true;
    }
    return take_oldest(seconds);
  }

  // Pairs recorded and not yet read or moved to the unread queue (the open one included).
  std::size_t in_flight() const noexcept { return count_; }
  std::size_t unread_finished() const noexcept { return unread_.size(); }
  std::size_t capacity() const noexcept { return pairs_.size(); }
  std::uint64_t dropped() const noexcept { return dropped_; }
  bool open() const noexcept { return open_; }

 private:
  std::size_t index(std::size_t i) const noexcept { return (head_ + i) % pairs_.size(); }

  // The oldest closed pair's duration, if it has completed; frees the pair.
  bool take_oldest(double& seconds) {
    const std::size_t closed = open_ ? count_ - 1 : count_;
    if (closed == 0) return false;
    double elapsed = 0;
    if (!pairs_[head_]->try_elapsed(elapsed)) return false;
    seconds = std::max(elapsed, 0.0);
    head_ = (head_ + 1) % pairs_.size();
    --count_;
    return true;
  }

  void make_room() {
    double seconds = 0;
    while (count_ == pairs_.size() && take_oldest(seconds)) {
      if (unread_.size() == max_unread_) {
        unread_.pop_front();
        ++dropped_;
      }
      unread_.push_back(seconds);
    }
    if (count_ < pairs_.size()) return;
    // Every pair is still running on the device: add one after the newest.
    std::rotate(pairs_.begin(), pairs_.begin() + static_cast<std::ptrdiff_t>(head_), pairs_.end());
    head_ = 0;
    pairs_.push_back(std::make_unique<Pair>(context_));
  }

  Context context_;
  std::size_t max_unread_;
  std::vector<std::unique_ptr<Pair>> pairs_;  // in flight: [head_, head_ + count_) modulo size
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  bool open_ = false;
  std::deque<double> unread_;  // finished before the pairs were needed again, oldest first
  std::uint64_t dropped_ = 0;
};

}  // namespace antdt::cuda
