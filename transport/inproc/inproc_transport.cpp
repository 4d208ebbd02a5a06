#include "transport/inproc/inproc_transport.hpp"

#include "core/log.hpp"
#include "transport/transport_checks.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

namespace antdt::transport {

namespace {

// Posting reserves this many slots per (rank, source) queue up front, so a
// typical collective never grows a queue.
constexpr std::size_t kInitialQueueCapacity = 4;
// How long cancel() and close wait for a copy another thread is doing.
constexpr auto kCopyDrainBound = std::chrono::seconds(5);

bool all_finished(std::span<Completion* const> ops) noexcept {
  return std::all_of(ops.begin(), ops.end(), [](const Completion* op) { return !op->pending(); });
}

}  // namespace

InprocFabric::InprocFabric(int size, DeviceCopy device_copy)
    : size_(size), device_copy_(std::move(device_copy)), mailboxes_(static_cast<std::size_t>(std::max(size, 0))) {
  ANTDT_CHECK_ARG(size >= 1, "InprocFabric: group size ", size, " must be at least 1");
  for (Mailbox& box : mailboxes_) {
    box.unmatched_sends.resize(static_cast<std::size_t>(size));
    box.posted_recvs.resize(static_cast<std::size_t>(size));
    for (auto& queue : box.unmatched_sends) queue.reserve(kInitialQueueCapacity);
    for (auto& queue : box.posted_recvs) queue.reserve(kInitialQueueCapacity);
  }
}

class InprocTransport final : public Transport {
 public:
  InprocTransport(std::shared_ptr<InprocFabric> fabric, int rank, const Config& cfg)
      : fabric_(std::move(fabric)), rank_(rank), progress_(cfg.progress), spin_(cfg.spin_before_sleep) {
    ANTDT_CHECK_ARG(fabric_ != nullptr, "make_inproc_transport: fabric is null");
    check_peer(rank_, fabric_->size(), "make_inproc_transport");
    InprocFabric::Mailbox& mine = box(rank_);
    ANTDT_CHECK_ARG(!mine.attached.exchange(true), "make_inproc_transport: rank ", rank_,
                    " already has a transport on this fabric");
  }

  ~InprocTransport() override { close(); }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return fabric_->size(); }
  std::string_view name() const noexcept override { return "inproc"; }

  void post_send(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done) override {
    send(peer, tag, payload, done, false);
  }
  void post_recv(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) override {
    recv(peer, tag, payload, done, false);
  }
  bool device_payloads() const noexcept override { return static_cast<bool>(fabric_->device_copy_); }
  void post_send_device(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done) override {
    if (!device_payloads()) Transport::post_send_device(peer, tag, payload, done);
    send(peer, tag, payload, done, true);
  }
  void post_recv_device(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) override {
    if (!device_payloads()) Transport::post_recv_device(peer, tag, payload, done);
    recv(peer, tag, payload, done, true);
  }

  WaitResult wait(std::span<Completion* const> ops, Deadline deadline) override {
    for (const Completion* op : ops) ANTDT_CHECK_ARG(op != nullptr, "wait: null operation in the list");
    // An abort wins over completion: once the group aborted, every wait says so.
    if (aborted()) return WaitResult::aborted;
    if (all_finished(ops)) return WaitResult::done;

    // Busy phase: the other ranks' threads do the copying, so polling is all there is to do.
    if (progress_ != ProgressMode::wake) {
      const Deadline spin_end =
          progress_ == ProgressMode::spin ? deadline : std::min(deadline, Clock::now() + spin_);
      while (Clock::now() < spin_end) {
        if (aborted()) return WaitResult::aborted;
        if (all_finished(ops)) return WaitResult::done;
        std::this_thread::yield();
      }
    }

    InprocFabric::Mailbox& mine = box(rank_);
    std::unique_lock lock(mine.mu);
    for (;;) {
      if (aborted()) return WaitResult::aborted;
      if (all_finished(ops)) return WaitResult::done;
      if (Clock::now() >= deadline) return WaitResult::timeout;
      mine.cv.wait_until(lock, deadline);
    }
  }

  // Matching happens when operations are posted; there is nothing to drive.
  void progress() override {}

  void cancel(Completion& op) override {
    if (!op.pending()) return;
    auto* queued_at = static_cast<InprocFabric::Mailbox*>(op.handle);
    if (queued_at != nullptr) {
      std::unique_lock lock(queued_at->mu);
      if (remove_posted(*queued_at, op)) {
        lock.unlock();
        finish(rank_, op, State::cancelled, {});
        return;
      }
    }
    // Not queued any more: another thread matched it and is copying. Wait for that copy to end.
    InprocFabric::Mailbox& mine = box(rank_);
    std::unique_lock lock(mine.mu);
    if (!mine.cv.wait_for(lock, kCopyDrainBound, [&] { return !op.pending(); })) {
      raise<TransportError>("cancel on rank ", rank_, ": the matched operation did not finish within ",
                            std::chrono::duration_cast<std::chrono::seconds>(kCopyDrainBound).count(), " s");
    }
  }

  void abort(int status, std::string_view reason) noexcept override {
    try {
      bool first = false;
      {
        std::lock_guard guard(fabric_->abort_mu_);
        if (!fabric_->abort_info_) {
          fabric_->abort_info_ = AbortInfo{rank_, status, cut_reason(reason)};
          first = true;
        }
        fabric_->aborted_.store(true, std::memory_order_release);
      }
      if (first) ANTDT_INFO("inproc transport: rank ", rank_, " aborts the group (status ", status, "): ", reason);
    } catch (...) {
      // Out of memory for the reason text: the abort itself must still happen.
      fabric_->aborted_.store(true, std::memory_order_release);
    }
    // Lock-then-notify so a waiter between its check and its sleep cannot miss the wake-up.
    for (InprocFabric::Mailbox& other : fabric_->mailboxes_) {
      { std::lock_guard guard(other.mu); }
      other.cv.notify_all();
    }
  }

  std::optional<AbortInfo> abort_info() const override {
    // abort_info_ is only ever set together with aborted_: no lock in the common case.
    if (!fabric_->aborted_.load(std::memory_order_acquire)) return std::nullopt;
    std::lock_guard guard(fabric_->abort_mu_);
    if (fabric_->abort_info_) return fabric_->abort_info_;
    if (fabric_->aborted_.load(std::memory_order_acquire)) return AbortInfo{-1, static_cast<int>(Status::aborted), {}};
    return std::nullopt;
  }

 private:
  // A message matches a receive with the same tag and the same kind (headed or bare).
  static constexpr auto same(std::uint64_t tag, bool device) {
    return [tag, device](const auto& op) { return op.tag == tag && op.device == device; };
  }

  void send(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done, bool device) {
    check_peer(peer, size(), "post_send");
    check_tag(tag, "post_send");
    done.reset();
    InprocFabric::Mailbox& dst = box(peer);
    std::unique_lock lock(dst.mu);
    if (dst.closed.load(std::memory_order_acquire)) {
      lock.unlock();
      finish(rank_, done, State::failed, cat("send to rank ", peer, " with tag ", tag, " failed: peer rank ", peer,
                                              " closed its transport"));
      return;
    }
    auto& recvs = dst.posted_recvs[static_cast<std::size_t>(rank_)];
    auto match = std::find_if(recvs.begin(), recvs.end(), same(tag, device));
    if (match == recvs.end()) {
      dst.unmatched_sends[static_cast<std::size_t>(rank_)].push_back({tag, payload, &done, device});
      done.handle = &dst;
      return;
    }
    InprocFabric::PostedRecv recv = *match;
    recvs.erase(match);
    // The receive belongs to `peer`; its owner must not finish closing before we are done with it.
    dst.copies_in_flight.fetch_add(1, std::memory_order_relaxed);
    lock.unlock();
    deliver(rank_, InprocFabric::PostedSend{tag, payload, &done, device}, peer, recv, /*recv_in_flight=*/true,
            /*send_in_flight=*/false);
  }

  void recv(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done, bool device) {
    check_peer(peer, size(), "post_recv");
    check_tag(tag, "post_recv");
    done.reset();
    InprocFabric::Mailbox& mine = box(rank_);
    std::unique_lock lock(mine.mu);
    if (box(peer).closed.load(std::memory_order_acquire)) {
      lock.unlock();
      finish(rank_, done, State::failed, cat("receive from rank ", peer, " with tag ", tag, " failed: peer rank ",
                                              peer, " closed its transport"));
      return;
    }
    auto& sends = mine.unmatched_sends[static_cast<std::size_t>(peer)];
    auto match = std::find_if(sends.begin(), sends.end(), same(tag, device));
    if (match == sends.end()) {
      mine.posted_recvs[static_cast<std::size_t>(peer)].push_back({tag, payload, &done, device});
      done.handle = &mine;
      return;
    }
    InprocFabric::PostedSend send = *match;
    sends.erase(match);
    box(peer).copies_in_flight.fetch_add(1, std::memory_order_relaxed);
    lock.unlock();
    deliver(peer, send, rank_, InprocFabric::PostedRecv{tag, payload, &done, device}, /*recv_in_flight=*/false,
            /*send_in_flight=*/true);
  }

  InprocFabric::Mailbox& box(int rank) noexcept { return fabric_->mailboxes_[static_cast<std::size_t>(rank)]; }
  bool aborted() const noexcept { return fabric_->aborted_.load(std::memory_order_acquire); }

  // Ends an operation owned by `owner`: the state change happens under the
  // owner's mailbox lock so its waiter cannot miss the notification.
  void finish(int owner, Completion& op, State state, std::string error, bool was_in_flight = false) {
    InprocFabric::Mailbox& owner_box = box(owner);
    {
      std::lock_guard guard(owner_box.mu);
      // op.handle stays as it is: the owner may be reading it in cancel(), which
      // looks at it only while the operation is pending.
      if (state == State::failed) op.error = std::move(error);
      op.state.store(state, std::memory_order_release);
      if (was_in_flight) owner_box.copies_in_flight.fetch_sub(1, std::memory_order_relaxed);
    }
    owner_box.cv.notify_all();
  }

  // Copies a matched pair. Neither descriptor is in any queue any more, so
  // only this thread touches the two operations until they are finished.
  void deliver(int src, const InprocFabric::PostedSend& send, int dst, const InprocFabric::PostedRecv& recv,
               bool recv_in_flight, bool send_in_flight) {
    const std::size_t bytes = send.payload.size();
    if (bytes > recv.payload.size()) {
      recv.done->truncated = true;
      finish(dst, *recv.done, State::failed,
             truncation_error(src, recv.tag, recv.payload.size(), cat(bytes, " payload bytes")), recv_in_flight);
    } else {
      if (!send.device) recv.done->header = send.done->header;  // bare messages carry none
      if (bytes > 0 && send.device)
        fabric_->device_copy_(recv.payload.data(), send.payload.data(), bytes);
      else if (bytes > 0)
        std::memcpy(recv.payload.data(), send.payload.data(), bytes);
      recv.done->received_bytes = bytes;
      finish(dst, *recv.done, State::done, {}, recv_in_flight);
    }
    // The receiver reports a truncation; for the sender the message was consumed.
    finish(src, *send.done, State::done, {}, send_in_flight);
  }

  // Removes `op` from the queues of `queued_at` (caller holds its lock).
  bool remove_posted(InprocFabric::Mailbox& queued_at, const Completion& op) {
    auto& my_sends = queued_at.unmatched_sends[static_cast<std::size_t>(rank_)];
    auto send = std::find_if(my_sends.begin(), my_sends.end(), [&](const auto& s) { return s.done == &op; });
    if (send != my_sends.end()) {
      my_sends.erase(send);
      return true;
    }
    for (auto& recvs : queued_at.posted_recvs) {
      auto recv = std::find_if(recvs.begin(), recvs.end(), [&](const auto& r) { return r.done == &op; });
      if (recv != recvs.end()) {
        recvs.erase(recv);
        return true;
      }
    }
    return false;
  }

  // Leaves the group: this rank's queued operations end cancelled, and the
  // peers' operations that can never match now (sends to this rank, receives
  // from it) fail naming this rank.
  void close() noexcept {
    try {
      struct Orphan {
        int owner;
        Completion* op;
        State state;
      };
      std::vector<Orphan> orphans;
      InprocFabric::Mailbox& mine = box(rank_);
      mine.closed.store(true, std::memory_order_release);
      {
        std::lock_guard guard(mine.mu);
        for (int src = 0; src < size(); ++src) {
          auto& recvs = mine.posted_recvs[static_cast<std::size_t>(src)];
          for (const auto& r : recvs) orphans.push_back({rank_, r.done, State::cancelled});
          recvs.clear();
          auto& sends = mine.unmatched_sends[static_cast<std::size_t>(src)];
          for (const auto& s : sends) orphans.push_back({src, s.done, State::failed});
          sends.clear();
        }
      }
      for (int peer = 0; peer < size(); ++peer) {
        if (peer == rank_) continue;
        InprocFabric::Mailbox& other = box(peer);
        std::lock_guard guard(other.mu);
        auto& sends = other.unmatched_sends[static_cast<std::size_t>(rank_)];
        for (const auto& s : sends) orphans.push_back({rank_, s.done, State::cancelled});
        sends.clear();
        auto& recvs = other.posted_recvs[static_cast<std::size_t>(rank_)];
        for (const auto& r : recvs) orphans.push_back({peer, r.done, State::failed});
        recvs.clear();
      }
      for (const Orphan& orphan : orphans) {
        std::string error;
        if (orphan.state == State::failed) error = cat("peer rank ", rank_, " failed: it closed its transport");
        finish(orphan.owner, *orphan.op, orphan.state, std::move(error));
      }
      // Copies of this rank's operations that other threads already started must end before our buffers go.
      std::unique_lock lock(mine.mu);
      mine.cv.wait_for(lock, kCopyDrainBound,
                       [&] { return mine.copies_in_flight.load(std::memory_order_relaxed) == 0; });
    } catch (const std::exception& e) {
      log::write(LogLevel::error, cat("inproc transport: closing rank ", rank_, " failed: ", e.what()));
    }
  }

  std::shared_ptr<InprocFabric> fabric_;
  int rank_;
  ProgressMode progress_;
  std::chrono::microseconds spin_;
};

std::unique_ptr<Transport> make_inproc_transport(std::shared_ptr<InprocFabric> fabric, int rank,
                                                 const Config& cfg) {
  return std::make_unique<InprocTransport>(std::move(fabric), rank, cfg);
}

}  // namespace antdt::transport
