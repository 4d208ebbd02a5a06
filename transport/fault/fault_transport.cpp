#include "transport/fault/fault_transport.hpp"

#include "core/error.hpp"
#include "transport/transport_checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace antdt::transport {

namespace {

// A send waiting for its release time.
struct HeldSend {
  int peer;
  std::uint64_t tag;
  std::span<const std::byte> payload;
  Completion* done;
  Clock::time_point release;
  bool device;  // post_send_device: a bare device-payload message
};

class FaultTransport final : public Transport {
 public:
  FaultTransport(std::unique_ptr<Transport> inner, const FaultPlan& plan)
      : inner_(std::move(inner)), plan_(plan), name_(cat(inner_->name(), "+fault")) {}

  // Sends still held never reached the inner transport: they end cancelled,
  // as a closing transport ends its queued operations.
  ~FaultTransport() override {
    std::lock_guard lock(mu_);
    for (std::size_t i = head_; i < held_.size(); ++i) {
      held_[i].done->state.store(State::cancelled, std::memory_order_release);
    }
    held_.clear();
    head_ = 0;
  }

  int rank() const noexcept override { return inner_->rank(); }
  int size() const noexcept override { return inner_->size(); }
  std::string_view name() const noexcept override { return name_; }

  void post_send(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done) override {
    hold(peer, tag, payload, done, false);
  }
  void post_recv(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) override {
    inner_->post_recv(peer, tag, payload, done);
  }
  // Device payloads are delayed like any other send: the link is the link.
  bool device_payloads() const noexcept override { return inner_->device_payloads(); }
  void post_send_device(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done) override {
    if (!inner_->device_payloads()) Transport::post_send_device(peer, tag, payload, done);
    hold(peer, tag, payload, done, true);
  }
  void post_recv_device(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) override {
    inner_->post_recv_device(peer, tag, payload, done);
  }

  WaitResult wait(std::span<Completion* const> ops, Deadline deadline) override {
    for (;;) {
      Clock::time_point next_release = Clock::time_point::max();
      {
        std::lock_guard lock(mu_);
        release_due(Clock::now());
        if (head_ < held_.size()) next_release = held_[head_].release;
      }
      // Sleep in the inner transport no longer than until the next send is due.
      const WaitResult result = inner_->wait(ops, std::min(deadline, next_release));
      if (result != WaitResult::timeout) return result;
      if (Clock::now() >= deadline) return WaitResult::timeout;
    }
  }

  void progress() override {
    {
      std::lock_guard lock(mu_);
      release_due(Clock::now());
    }
    inner_->progress();
  }

  void cancel(Completion& op) override {
    {
      std::lock_guard lock(mu_);
      const auto first = held_.begin() + static_cast<std::ptrdiff_t>(head_);
      const auto found = std::find_if(first, held_.end(), [&](const HeldSend& s) { return s.done == &op; });
      if (found != held_.end()) {
        // The inner transport never saw it: nothing else touches its buffer.
        held_.erase(found);
        compact();
        op.state.store(State::cancelled, std::memory_order_release);
        return;
      }
    }
    inner_->cancel(op);
  }

  void abort(int status, std::string_view reason) noexcept override { inner_->abort(status, reason); }
  std::optional<AbortInfo> abort_info() const override { return inner_->abort_info(); }
  std::optional<std::string> peer_failure(int peer) const override { return inner_->peer_failure(peer); }
  std::string describe_peer(int peer) const override { return inner_->describe_peer(peer); }
  bool tcp_links() const noexcept override { return inner_->tcp_links(); }

 private:
  void hold(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done, bool device) {
    // The inner transport would check these only at release; report them to the caller now.
    check_peer(peer, size(), "post_send");
    check_tag(tag, "post_send");
    const Clock::time_point now = Clock::now();
    std::lock_guard lock(mu_);
    if (!plan_.injects_anything() && head_ == held_.size()) {
      hand_on(HeldSend{peer, tag, payload, &done, now, device});
      return;
    }
    done.reset();
    held_.push_back(HeldSend{peer, tag, payload, &done, release_time(now, payload.size()), device});
    release_due(now);
  }

  void hand_on(const HeldSend& send) {
    if (send.device)
      inner_->post_send_device(send.peer, send.tag, send.payload, *send.done);
    else
      inner_->post_send(send.peer, send.tag, send.payload, *send.done);
  }

  // When a send posted at `now` may be handed on. Never earlier than the
  // previous send's release, which keeps the posting order.
  Clock::time_point release_time(Clock::time_point now, std::size_t payload_bytes) {
    Clock::time_point ready = now;
    if (plan_.send_bytes_per_second > 0) {
      // The send occupies this rank's link after the sends before it.
      const double seconds =
          static_cast<double>(payload_bytes + sizeof(MessageHeader)) / plan_.send_bytes_per_second;
      const auto serialisation = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
      link_free_ = std::max(link_free_, now) + serialisation;
      ready = link_free_;
    }
    last_release_ = std::max(last_release_, ready + plan_.send_delay);
    return last_release_;
  }

  // Hands every due send to the inner transport, oldest first (caller holds mu_).
  void release_due(Clock::time_point now) {
    while (head_ < held_.size() && held_[head_].release <= now) {
      const HeldSend send = held_[head_++];
      try {
        hand_on(send);
      } catch (const std::exception& e) {
        // The caller's post returned long ago: the failure goes where it waits.
        send.done->error = cat("send to rank ", send.peer, " with tag ", send.tag, " failed: ", e.what());
        send.done->state.store(State::failed, std::memory_order_release);
      }
    }
    compact();
  }

  // The queue's storage is reused: once empty, it starts over without freeing.
  void compact() noexcept {
    if (head_ == held_.size()) {
      held_.clear();
      head_ = 0;
    }
  }

  std::unique_ptr<Transport> inner_;
  FaultPlan plan_;
  std::string name_;
  std::mutex mu_;               // guards the queue; held while handing a send on, so order is kept
  std::vector<HeldSend> held_;  // [head_, end): waiting, release times non-decreasing
  std::size_t head_ = 0;
  Clock::time_point last_release_{};
  Clock::time_point link_free_{};
};

}  // namespace

FaultPlan fault_plan_from(const Injector& injector) {
  FaultPlan plan;
  plan.send_delay = injector.transport_delay();
  plan.send_bytes_per_second = injector.transport_bytes_per_second();
  return plan;
}

bool has_transport_faults(const Injector& injector) noexcept {
  return fault_plan_from(injector).injects_anything();
}

std::unique_ptr<Transport> make_fault_transport(std::unique_ptr<Transport> inner, const FaultPlan& plan) {
  ANTDT_CHECK_ARG(inner != nullptr, "make_fault_transport: the inner transport is null");
  ANTDT_CHECK_ARG(plan.send_delay.count() >= 0, "make_fault_transport: send_delay must be >= 0 us, got ",
                  plan.send_delay.count());
  ANTDT_CHECK_ARG(std::isfinite(plan.send_bytes_per_second) && plan.send_bytes_per_second >= 0,
                  "make_fault_transport: send_bytes_per_second must be a finite number >= 0 (0: no cap), got ",
                  plan.send_bytes_per_second);
  return std::make_unique<FaultTransport>(std::move(inner), plan);
}

std::unique_ptr<Transport> make_fault_transport(std::unique_ptr<Transport> inner, const Injector& injector) {
  return make_fault_transport(std::move(inner), fault_plan_from(injector));
}

}  // namespace antdt::transport
