// AntDT comm — the Agent: a training process's link to the job's scheduler
// (DESIGN §9; docs/scheduler.md, "Agent and coordinator").
//
// Every rank creates one Agent. It owns the rank's Communicator and talks to
// the coordinator, which hosts the data sharding (DDS), the Monitor and the
// Controller. Rank 0 hosts the coordinator itself unless ANTDT_COORDINATOR
// names an external one (tools/antdt-coordinator). A training loop:
//
//   antdt::Agent agent = antdt::Agent::from_env({.dataset_size = N, .epochs = 1});
//   for (;;) {
//     antdt::StepPlan plan = agent.next_step();
//     if (agent.should_exit()) return agent.exit_code();   // ordered to restart
//     if (plan.stop) break;                                 // the data is consumed, on every rank alike
//     if (agent.rebuild_needed()) { agent.communicator(); /* re-sync the model, e.g. broadcast */ }
//     antdt::SampleBatch batch = agent.next_samples();     // up to plan.local_batch sample ids
//     ... compute on batch.samples, agent.communicator().allreduce(...) ...
//     agent.report_step({.compute_s = t, .samples = batch.samples.size()});
//     agent.commit();                                       // or settle(fate) after a partial allreduce
//   }
//
// Every rank runs the same steps: a rank that got no samples (batch empty)
// still takes part in the step's collectives, with weight 0.
#pragma once

#include <antdt/comm.hpp>
#include <antdt/export.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace antdt {

struct AgentOptions {
  std::size_t struct_size = sizeof(AgentOptions);  // versioning: set by the default initializer
  // The job's data, for the coordinator (rank 0's values when it hosts it;
  // antdt-coordinator takes its own options). 0 samples: no data sharding.
  std::uint64_t dataset_size = 0;
  std::uint32_t epochs = 1;           // 0: no end
  std::uint64_t shard_size = 0;       // samples per shard; 0: ANTDT_DDS_SHARD_SIZE
  std::uint64_t global_batch = 0;     // samples per step over all ranks; 0: 32 per rank
};

// What this rank does in one step (from the Controller's plan for it).
struct StepPlan {
  std::uint64_t step = 0;             // 1, 2, ... (a restarted rank resumes at the step it rejoined)
  std::uint64_t local_batch = 0;      // samples this rank should process this step
  std::uint32_t micro_batches = 1;    // gradient-accumulation passes
  std::uint64_t micro_batch = 0;      // samples per pass (the last pass takes the rest)
  LatePolicy late = LatePolicy::wait; // pass to partial_allreduce (PartialOptions::policy)
  std::uint32_t staleness = 1;        // PartialOptions::staleness
  bool stop = false;                  // the data is consumed: leave the loop (every rank at this step)
  bool restart = false;               // exit with exit_code() now (should_exit() is true)
  bool rebuild = false;               // the communicator changes before this step (a rank rejoined)
  std::uint64_t generation = 0;       // the communicator generation of this step
};

// The sample ids this rank should process in the current step.
struct SampleBatch {
  std::vector<std::uint64_t> samples;  // empty: nothing to do now (take part with weight 0)
  std::uint32_t epoch = 0;
  bool finished = false;               // every epoch has been handed out and consumed
  auto begin() const noexcept { return samples.begin(); }
  auto end() const noexcept { return samples.end(); }
  std::size_t size() const noexcept { return samples.size(); }
  bool empty() const noexcept { return samples.empty(); }
};

// One step's measurements, for the Monitor and the policy.
struct StepReport {
  double compute_s = -1;              // < 0: the communicator's own step timing (begin_step / end_step)
  std::uint64_t samples = 0;
  Fate fate = Fate::included;         // the fate of this step's contribution
  double wait_s = 0;
  double transfer_s = 0;
};

namespace detail { class AgentImpl; }

class ANTDT_API Agent {
 public:
  // Joins the job described by the environment (as Communicator::from_env, plus
  // ANTDT_COORDINATOR, ANTDT_INCARNATION; see docs/configuration.md). A
  // restarted rank (ANTDT_INCARNATION > 0) asks the coordinator where to rejoin.
  static Agent from_env(const AgentOptions& options = {});

  Agent(Agent&&) noexcept;
  Agent& operator=(Agent&&) noexcept;
  // Says bye to the coordinator (giving back an unsettled batch).
  ~Agent();

  int rank() const noexcept;
  int size() const noexcept;
  int incarnation() const noexcept;
  std::uint64_t generation() const noexcept;

  // The communicator of the current generation; when the current step's plan
  // asks for a rebuild, the old one is destroyed and a new one is created with
  // every rank first (blocking until all ranks, the restarted one included, joined).
  Communicator& communicator();
  // True between a plan that asks for a rebuild and the communicator() call
  // that does it (on a restarted rank: from its first plan on, alike).
  bool rebuild_needed() const noexcept;

  // The plan of the next step. An unsettled batch of the previous step is given back first.
  StepPlan next_step();
  // Up to the plan's local batch of sample ids (fewer near an epoch's end, none
  // while the rest of the epoch is leased to other ranks). Once per step.
  SampleBatch next_samples();
  void report_step(const StepReport& report = {});
  // Settle this step's batch: commit (the step's result included it), give
  // back (it was not used), or by the fate of the partial allreduce that used it.
  // False when there is nothing to settle or the coordinator had already taken
  // the samples back (they will be served again).
  bool commit();
  bool give_back();
  bool settle(Fate fate);

  // The coordinator restarts this rank at the next step no rank has planned yet.
  void request_restart();
  // True once a plan ordered this rank to restart: exit the process with exit_code().
  bool should_exit() const noexcept;
  int exit_code() const noexcept;  // ANTDT_RESTART_EXIT_CODE (default 75)

  // Says bye now (the destructor does it otherwise). The communicator stays usable.
  void close();

  explicit Agent(std::unique_ptr<detail::AgentImpl> impl) noexcept;

 private:
  std::unique_ptr<detail::AgentImpl> impl_;
};

}  // namespace antdt
