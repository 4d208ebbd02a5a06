// The communicator's internal state: the transport to every peer, the
// collective sequence number, reusable per-call resources, and the failure
// state. Collectives (collectives/) run against this through coll::Call.
#pragma once

#include <antdt/comm.hpp>

#include "core/config.hpp"
#include "core/control.hpp"
#include "transport/transport.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace antdt::telemetry {
class StepTiming;  // collectives/telemetry/step_timing.hpp
}

namespace antdt {
class ShmChannel;  // core/shm_channel.hpp
}

namespace antdt::detail {

enum class ShmArea { mailbox, bulk, pushpull };  // which of a communicator's shared-memory channels

// One posted operation of a collective, with what its receiver expects.
struct OpSlot {
  transport::Completion completion;
  int peer = -1;
  bool is_recv = false;
  bool bare = false;  // a device-payload message without header (Call::carry_device_payloads)
  std::size_t expected_bytes = 0;
  std::uint64_t seq = 0;  // the collective that last posted into this slot
};

// What collectives/ keeps per communicator between calls (queued non-blocking
// collectives, open group calls, point-to-point sequence numbers). Its
// contents are private to collectives/; the communicator only owns it.
class CollectiveState {
 public:
  virtual ~CollectiveState() = default;
};

class CommImpl {
 public:
  CommImpl(std::unique_ptr<transport::Transport> transport, std::uint32_t comm_id, const Config& cfg,
           control::Endpoints control = {});
  ~CommImpl();
  CommImpl(const CommImpl&) = delete;
  CommImpl& operator=(const CommImpl&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::uint32_t id() const noexcept { return id_; }
  const Config& config() const noexcept { return cfg_; }
  transport::Transport& transport() noexcept { return *transport_; }

  std::uint64_t next_seq() noexcept { return ++seq_; }

  // Grow-only pools reused by every call: once warm, a collective of a size
  // seen before allocates nothing.
  OpSlot& slot(std::size_t index);
  std::span<std::byte> scratch(std::size_t bytes);

  // After a failed collective the communicator is unusable (peers may be in
  // any state); every later call rethrows that failure.
  void check_usable() const;
  void mark_failed(Status status, const std::string& reason);
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

  // Safe from any thread; never blocks.
  void abort(std::string_view reason) noexcept;

  // Created on first use by collectives/.
  std::unique_ptr<CollectiveState>& collective_state() noexcept { return collective_state_; }
  // Partial collectives' result cache, control link and (rank 0) arbiter; created on first use.
  std::unique_ptr<CollectiveState>& partial_state() noexcept { return partial_state_; }
  // Step timing and traces (collectives/telemetry/step_timing.hpp), for the
  // trainer's marks on the caller's thread: created by the first mark, so a
  // communicator that never marks a step writes no trace.
  telemetry::StepTiming& step_timing();
  // For collectives, on any thread: the step timing once a mark created it,
  // else null. Published (release) after it is built and kept until
  // destruction, so the progress thread reads it without a lock.
  telemetry::StepTiming* started_step_timing() const noexcept {
    return step_timing_started_.load(std::memory_order_acquire) ? step_timing_.get() : nullptr;
  }
  // The control plane to the arbiter (empty when the communicator was made without one).
  control::Endpoints& control() noexcept { return control_; }

  // The node-local shared-memory channels: the mailbox of small AllReduces
  // and the bulk area of large ones (collectives/allreduce_shm*.cpp), and
  // push-pull's (collectives/pushpull/pushpull_shm.cpp). Each is set up by the first call that may use
  // it; null when that has not happened yet (shm_tried() false) or the ranks
  // could not share one (shm_tried() true).
  ShmChannel* shm(ShmArea area = ShmArea::mailbox) const noexcept { return shm_[index(area)].get(); }
  bool shm_tried(ShmArea area = ShmArea::mailbox) const noexcept { return shm_tried_[index(area)]; }
  void set_shm(ShmArea area, std::unique_ptr<ShmChannel> channel) noexcept;

  // Which node each rank is on (ANTDT_NODE_ID, else host name and boot id),
  // as dense numbers 0.. in the order the nodes first appear among the ranks;
  // the same on every rank. Set once, before any collective; a communicator
  // made without the exchange (in-process threads) counts as one node.
  void set_rank_nodes(std::span<const std::uint64_t> identities);
  int node_of(int rank) const noexcept { return node_of_rank_.empty() ? 0 : node_of_rank_[static_cast<std::size_t>(rank)]; }
  int node_count() const noexcept { return node_count_; }
  // Every node holds the same number of ranks.
  bool nodes_uniform() const noexcept { return nodes_uniform_; }
  // Some rank reaches a peer over TCP (every rank's Transport::tcp_links,
  // combined at set-up, so the same on every rank). Set once, before any collective.
  void set_tcp_links(bool any) noexcept { tcp_links_ = any; }
  bool tcp_links() const noexcept { return tcp_links_; }

 private:
  bool tcp_links_ = false;
  std::vector<int> node_of_rank_;
  int node_count_ = 1;
  bool nodes_uniform_ = true;
  std::unique_ptr<transport::Transport> transport_;
  std::uint32_t id_;
  Config cfg_;
  int rank_, size_;
  std::uint64_t seq_ = 0;
  std::deque<OpSlot> slots_;  // deque: slots never move once created
  std::vector<std::byte> scratch_;
  mutable std::mutex failure_mu_;
  std::optional<std::pair<Status, std::string>> failure_;
  std::atomic<bool> failed_{false};  // failure_ is set (read without the lock)
  control::Endpoints control_;
  static constexpr std::size_t index(ShmArea area) noexcept { return static_cast<std::size_t>(area); }
  std::array<std::unique_ptr<ShmChannel>, 3> shm_;
  std::array<bool, 3> shm_tried_{};
  std::unique_ptr<CollectiveState> partial_state_;  // may hold the arbiter thread, which uses control_
  std::unique_ptr<telemetry::StepTiming> step_timing_;
  std::atomic<bool> step_timing_started_{false};  // step_timing_ is set (read without a lock)
  // Last, so destroyed first: it cancels in-flight transfers while the transport still works.
  std::unique_ptr<CollectiveState> collective_state_;
};

}  // namespace antdt::detail
