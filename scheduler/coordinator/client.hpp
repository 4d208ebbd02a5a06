// A rank's connection to the coordinator: authenticated request/response over
// one TCP connection (scheduler/coordinator/wire.hpp).
//
// When the connection breaks (the coordinator process was restarted, e.g. an
// external antdt-coordinator restored from its checkpoint) a request
// reconnects, says hello again with the same incarnation, and is sent again,
// until the timeout. Leases issued before a reconnection are void afterwards
// (the coordinator returned them): reconnections() lets the caller notice.
#pragma once

#include "core/control.hpp"
#include "core/net.hpp"
#include "scheduler/coordinator/wire.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace antdt::sched::coord {

class CoordinatorClient {
 public:
  // Connects (retrying refused connections until `timeout`) and says hello.
  // BootstrapError with the coordinator's reason when it refuses; TimeoutError
  // when it cannot be reached in time.
  CoordinatorClient(const net::Endpoint& address, std::span<const std::byte> secret, int rank, int world_size,
                    std::uint32_t incarnation, std::uint64_t generation, std::chrono::milliseconds timeout);
  ~CoordinatorClient();  // closes without bye (the coordinator then counts the rank as lost)
  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  const Welcome& welcome() const noexcept { return welcome_; }
  int rank() const noexcept { return rank_; }
  std::uint64_t reconnections() const noexcept { return reconnections_; }
  // The generation sent in the hello of a reconnection.
  void set_generation(std::uint64_t generation) noexcept { generation_ = generation; }

  // Whether report() leaves the report to travel with the next request (one
  // round trip fewer per step; ANTDT_AGENT_REPORT_WITH_NEXT) or sends it at once.
  void set_report_with_next(bool on) noexcept { report_with_next_ = on; }
  // Whether a report waits for the next request.
  bool report_pending() const noexcept { return pending_report_.has_value(); }

  // fetch_max > 0: the plan carries the step's batch too (PlanRequest::fetch_max).
  Plan plan(std::uint64_t step, std::uint64_t fetch_max = 0);
  // Sent at once, or kept for the next request (set_report_with_next), which
  // the coordinator then takes after it: an error the report causes comes back
  // as that request's. A report kept when another comes is sent alone first.
  void report(const Report& report);
  BatchReply fetch(std::uint64_t max_samples);
  bool commit(std::uint64_t lease);
  bool give_back(std::uint64_t lease);
  void request_restart();
  void offer_id(std::uint64_t generation, const UniqueId& id);
  GenerationId join(std::uint64_t generation);
  // This rank's communicator of `generation` failed at `step`; `lost`: the ranks its transport knows are gone.
  void comm_failed(std::uint64_t generation, std::uint64_t step, std::vector<std::uint32_t> lost);
  // Ends the session; the connection closes. No reconnection for it.
  void bye(bool restarting);
  bool closed() const noexcept { return !link_; }

 private:
  void connect(std::chrono::steady_clock::time_point deadline, bool reconnect);
  // The request's frame, with the kept report (if any) in front; the report is no longer kept.
  Bytes encode_with_kept_report(const Request& request);
  Bytes call(const Request& request);

  net::Endpoint address_;
  std::vector<std::byte> secret_;
  int rank_, world_size_;
  std::uint32_t incarnation_;
  std::uint64_t generation_;
  std::chrono::milliseconds timeout_;
  control::Link link_;
  Welcome welcome_;
  std::uint64_t reconnections_ = 0;
  bool report_with_next_ = false;
  std::optional<Report> pending_report_;  // goes with the next request
};

}  // namespace antdt::sched::coord
