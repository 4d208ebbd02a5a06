// The state behind an antdt::Agent (include/antdt/agent.hpp) and an
// antdtAgent_t (include/antdt/agent.h): the rank's communicator, its session
// with the coordinator (embedded on rank 0 unless ANTDT_COORDINATOR names one),
// the current plan and the sample lease. Defined in collectives/api/agent.cpp;
// the C functions are in agent_c_api.cpp. Used from the trainer's thread only.
#pragma once

#include <antdt/agent.hpp>

#include "collectives/api/c_api.hpp"
#include "core/config.hpp"
#include "core/net.hpp"
#include "scheduler/coordinator/service.hpp"
#include "scheduler/coordinator/client.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace antdt::detail {

class AgentImpl {
 public:
  AgentImpl(const AgentOptions& options, const Config& cfg);
  ~AgentImpl();
  AgentImpl(const AgentImpl&) = delete;
  AgentImpl& operator=(const AgentImpl&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int incarnation() const noexcept { return incarnation_; }
  std::uint64_t generation() const noexcept { return generation_; }
  bool rebuild_needed() const noexcept { return rebuild_to_.has_value() || fresh_communicator_; }
  bool should_exit() const noexcept { return exit_ordered_; }
  int exit_code() const noexcept { return cfg_.restart_exit_code; }

  Communicator& communicator();
  // The C API's handle to the same communicator.
  antdtComm_t communicator_handle();

  StepPlan next_step();
  // `cap`: the C API's buffer capacity.
  SampleBatch next_samples(std::uint64_t cap = UINT64_MAX);
  void report_step(const StepReport& r);

  bool commit();
  bool give_back();
  bool settle(Fate fate);
  void request_restart();
  void close() noexcept;

 private:
  struct Lease {
    std::uint64_t id = 0;
    std::uint64_t session = 0;  // client reconnections when it was issued
  };

  void check_open(const char* what) const;
  bool settle_lease(bool used);
  sched::coord::CoordinatorOptions coordinator_options() const;
  void connect(const net::Endpoint& address, std::span<const std::byte> secret);
  // A rank's first start: the communicator from the environment, then the coordinator.
  void start_fresh();
  // A restarted rank: the coordinator says which generation to join and from which step.
  void rejoin();
  // Every member re-creates its communicator: the generation's first member
  // makes the new UniqueId and offers it through the coordinator; the others
  // fetch it. The communicator has one rank per member (fewer than the job
  // once a rank is lost for good), in the coordinator's order.
  // `root`: where the first member's bootstrap root listens (default: any
  // port of this host's address).
  void join_generation(std::uint64_t generation, const std::optional<net::Endpoint>& root = std::nullopt);
  // The generation can never form: a member was lost while it formed (the
  // bootstrap root, or one the root waited for). Tells the coordinator, which moves the job to the next generation
  // (without that rank, or with its next incarnation); until the next plan
  // says so there is no communicator, and communicator() raises PeerLostError
  // with `why`, as a failed collective would.
  void give_up_generation(std::uint64_t generation, std::vector<std::uint32_t> members, std::string why);
  // After a collective threw on this rank's communicator: tells the
  // coordinator (once per generation) which peers the transport knows are gone.
  void report_comm_failure();
  // Gives back a prefetched batch that next_samples() did not hand out.
  void give_back_prefetched();
  // Commits or gives back `lease`; false when a reconnection voided it or the coordinator refused.
  bool settle_with_coordinator(const Lease& lease, bool used);

  AgentOptions options_;
  Config cfg_;
  int rank_ = 0, size_ = 1, incarnation_ = 0;
  std::uint64_t generation_ = 0;
  std::uint64_t step_ = 0;               // the step of the last plan (0 before any)
  std::optional<StepPlan> plan_;
  bool fetched_this_step_ = false;
  std::optional<Lease> lease_;
  // Prefetch (ANTDT_AGENT_PREFETCH): once the program has fetched samples in a
  // step with a batch, each plan request asks for the step's samples too, and
  // next_samples() hands them out without a round trip. A batch nobody took
  // is given back at the next next_step() or at close(): it is never settled
  // for a program that did not see it.
  bool prefetch_ = false;
  struct Prefetched {
    sched::coord::BatchReply reply;
    std::uint64_t session = 0;  // client reconnections when it was leased
  };
  std::optional<Prefetched> prefetched_;
  std::optional<std::uint64_t> rebuild_to_;
  bool fresh_communicator_ = false;  // rejoined: the first plan says rebuild, like the other ranks'
  bool exit_ordered_ = false;
  std::vector<std::uint32_t> members_;   // job ranks of the communicator's ranks (empty: every rank, in order)
  std::optional<std::uint64_t> failure_reported_;  // the generation whose failed communicator was reported
  // Set when the current generation's communicator could not be made because
  // its first member (the bootstrap root) is gone; cleared by the next join.
  std::optional<std::string> creation_failure_;
  // Declaration order is destruction order reversed: the client says bye (in
  // close()) before the embedded service stops, and the communicator goes last.
  std::optional<antdtComm> comm_;  // an antdtComm, so that the C API can hand out a handle to it
  std::unique_ptr<sched::coord::CoordinatorService> service_;
  std::unique_ptr<sched::coord::CoordinatorClient> client_;
};

}  // namespace antdt::detail
