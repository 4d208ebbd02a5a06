// The Agent (include/antdt/agent.hpp; docs/scheduler.md, "Agent and coordinator"):
// AgentImpl's methods (collectives/api/agent_impl.hpp) and the public Agent
// that forwards to them.
#include "collectives/api/agent_impl.hpp"

#include "collectives/api/communicator_factory.hpp"

#include "collectives/communicator.hpp"
#include "collectives/telemetry/step_timing.hpp"
#include "core/bootstrap.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <thread>

namespace antdt {
namespace detail {

using Clock = std::chrono::steady_clock;

namespace {

// What rank 0 broadcasts when it hosts the coordinator on a port of its choosing.
struct CoordinatorAddress {
  std::array<char, 64> host{};
  std::uint16_t port = 0;
  std::array<std::byte, 16> secret{};
};

}  // namespace

AgentImpl::AgentImpl(const AgentOptions& options, const Config& cfg) : options_(options), cfg_(cfg) {
  ANTDT_CHECK_ARG(options.struct_size >= sizeof(std::size_t), "AgentOptions.struct_size ", options.struct_size,
                  " is too small");
  incarnation_ = cfg_.incarnation;
  if (incarnation_ == 0)
    start_fresh();
  else
    rejoin();
}

AgentImpl::~AgentImpl() { close(); }

Communicator& AgentImpl::communicator() {
  if (rebuild_to_) {
    join_generation(*rebuild_to_);
    rebuild_to_.reset();
  }
  fresh_communicator_ = false;
  if (creation_failure_) raise<PeerLostError>(*creation_failure_, " (the next step moves to a new generation)");
  ANTDT_CHECK_ARG(comm_.has_value(), "agent of rank ", rank_, ": no communicator");
  return comm_->comm;
}

antdtComm_t AgentImpl::communicator_handle() {
  communicator();
  return &*comm_;
}

StepPlan AgentImpl::next_step() {
  check_open("next_step");
  if (exit_ordered_) raise<InvalidArgument>("agent of rank ", rank_, ": next_step after a restart order; exit with ", exit_code());
  if (lease_) give_back();
  give_back_prefetched();
  report_comm_failure();
  // Whether the program fetches is seen in its steps that had a batch.
  if (plan_ && plan_->local_batch > 0 && !plan_->stop) prefetch_ = fetched_this_step_ && cfg_.agent_prefetch;
  sched::coord::Plan p = client_->plan(step_ + 1, prefetch_ ? sched::coord::kMaxBatchSamples : 0);
  if (p.batch) prefetched_ = Prefetched{std::move(*p.batch), client_->reconnections()};
  step_ = p.step;
  fetched_this_step_ = false;
  StepPlan plan;
  plan.step = p.step;
  plan.local_batch = p.plan.local_batch;
  plan.micro_batches = p.plan.micro_batches;
  plan.micro_batch = p.plan.micro_batch;
  plan.late = p.plan.late;
  plan.staleness = p.plan.staleness;
  plan.stop = p.stop;
  plan.restart = p.plan.restart;
  plan.generation = p.generation;
  if (plan.restart) {
    exit_ordered_ = true;
    ANTDT_INFO("agent: rank ", rank_, " is ordered to restart at step ", plan.step);
  } else if (p.generation > generation_) {
    // A restart, a rejoin or a lost rank (at the stop step too: the last collectives run on it).
    rebuild_to_ = p.generation;
    plan.rebuild = true;
  } else if (fresh_communicator_) {
    // A restarted rank joined the new generation before its first plan: for
    // the trainer this step starts on a new communicator too (re-sync state).
    plan.rebuild = true;
  }
  plan_ = plan;
  return plan;
}

SampleBatch AgentImpl::next_samples(std::uint64_t cap) {
  check_open("next_samples");
  ANTDT_CHECK_ARG(plan_.has_value(), "agent of rank ", rank_, ": next_samples before next_step");
  ANTDT_CHECK_ARG(!fetched_this_step_, "agent of rank ", rank_, ": next_samples called twice in step ", step_);
  fetched_this_step_ = true;
  SampleBatch out;
  // A batch's ids must fit in one frame (kMaxBatchSamples).
  const std::uint64_t max_samples = std::min({plan_->local_batch, cap, sched::coord::kMaxBatchSamples});
  if (max_samples == 0) {
    give_back_prefetched();
    return out;
  }
  // The batch that came with the plan, unless the caller takes fewer samples.
  if (prefetched_ && prefetched_->reply.samples.size() > max_samples) give_back_prefetched();
  std::uint64_t session = 0;
  sched::coord::BatchReply reply;
  if (prefetched_) {
    reply = std::move(prefetched_->reply);
    session = prefetched_->session;
    prefetched_.reset();
  } else {
    reply = client_->fetch(max_samples);
    session = client_->reconnections();
  }
  out.epoch = reply.epoch;
  out.finished = reply.status == 2;
  if (reply.lease != 0) lease_ = Lease{reply.lease, session};
  out.samples = std::move(reply.samples);
  return out;
}

void AgentImpl::give_back_prefetched() {
  if (!prefetched_) return;
  const Lease lease{prefetched_->reply.lease, prefetched_->session};
  prefetched_.reset();
  if (lease.id != 0) settle_with_coordinator(lease, false);
}

void AgentImpl::report_step(const StepReport& r) {
  check_open("report_step");
  sched::coord::Report report;
  report.step = step_;
  report.compute_s = r.compute_s;
  if (report.compute_s < 0) {
    std::optional<double> measured;
    if (comm_)
      if (telemetry::StepTiming* timing = comm_->comm.impl().started_step_timing())
        measured = timing->last_compute_seconds();
    report.compute_s = measured.value_or(0);
  }
  report.wait_s = std::max(0.0, r.wait_s);
  report.transfer_s = std::max(0.0, r.transfer_s);
  report.samples = r.samples;
  report.fate = r.fate;
  client_->report(report);
}

bool AgentImpl::commit() { return settle_lease(true); }
bool AgentImpl::give_back() { return settle_lease(false); }
bool AgentImpl::settle(Fate fate) {
  return settle_lease(fate == Fate::included || fate == Fate::deferred);
}

void AgentImpl::request_restart() {
  check_open("request_restart");
  client_->request_restart();
}

void AgentImpl::close() noexcept {
  if (!client_ || client_->closed()) return;
  try {
    if (lease_) give_back();
    give_back_prefetched();
    client_->bye(exit_ordered_);
  } catch (const std::exception& e) {
    ANTDT_WARN("agent of rank ", rank_, ": closing the coordinator session failed: ", e.what());
  }
  if (service_) {
    // The other ranks still talk to this coordinator until they say bye.
    if (!service_->wait_all_exited(Clock::now() + cfg_.timeout))
      ANTDT_WARN("agent of rank 0: not every rank said bye to the embedded coordinator within ANTDT_TIMEOUT_MS; "
                 "stopping it");
    service_.reset();
  }
}

void AgentImpl::check_open(const char* what) const {
  if (!client_ || client_->closed()) raise<InvalidArgument>("agent of rank ", rank_, ": ", what, " after close()");
}

bool AgentImpl::settle_lease(bool used) {
  check_open(used ? "commit" : "give_back");
  if (!lease_) return false;
  const Lease lease = *lease_;
  lease_.reset();
  return settle_with_coordinator(lease, used);
}

bool AgentImpl::settle_with_coordinator(const Lease& lease, bool used) {
  // A reconnection voided it: the coordinator already took the samples back.
  if (lease.session != client_->reconnections()) return false;
  return used ? client_->commit(lease.id) : client_->give_back(lease.id);
}

sched::coord::CoordinatorOptions AgentImpl::coordinator_options() const {
  auto o = sched::coord::CoordinatorOptions::from(cfg_, size_, options_.dataset_size, options_.epochs,
                                           options_.global_batch);
  if (options_.shard_size > 0) o.dds.shard_size = options_.shard_size;
  o.embedded = true;
  return o;
}

void AgentImpl::connect(const net::Endpoint& address, std::span<const std::byte> secret) {
  client_ = std::make_unique<sched::coord::CoordinatorClient>(address, secret, rank_, size_,
                                                       static_cast<std::uint32_t>(incarnation_), generation_,
                                                       cfg_.timeout);
  client_->set_report_with_next(cfg_.agent_report_with_next);
}

void AgentImpl::start_fresh() {
  if (!cfg_.coordinator.empty() && !cfg_.coordinator_embedded && cfg_.rank && cfg_.world_size) {
    // An antdt-coordinator apart (antdt-run with ANTDT_COORDINATOR): the first
    // communicator is a generation like the later ones, made through it. Then
    // a rank 0 that dies while the others join it is seen at once (an
    // abandoned generation, or a root that refuses after its id said it
    // listens) instead of looking like a slow start until ANTDT_TIMEOUT_MS.
    // Rank 0 listens at ANTDT_ROOT when it is set (the port the launcher chose).
    rank_ = *cfg_.rank;
    size_ = *cfg_.world_size;
    log::set_process_rank(rank_);
    connect(net::parse_endpoint(cfg_.coordinator), sched::coord::job_secret(cfg_));
    std::optional<net::Endpoint> root;
    if (!cfg_.root.empty()) root = net::parse_endpoint(cfg_.root);
    join_generation(client_->welcome().generation, root);
    return;
  }
  comm_.emplace(antdtComm{Communicator::from_env()});
  rank_ = comm_->comm.rank();
  size_ = comm_->comm.size();
  if (!cfg_.coordinator.empty()) {
    const net::Endpoint address = net::parse_endpoint(cfg_.coordinator);
    const auto secret = sched::coord::job_secret(cfg_);
    if (cfg_.coordinator_embedded && rank_ == 0)
      service_ = std::make_unique<sched::coord::CoordinatorService>(coordinator_options(), address, secret, cfg_.timeout);
    connect(address, secret);
    return;
  }
  // No address given: rank 0 hosts it on any port and tells the others.
  CoordinatorAddress shared;
  if (rank_ == 0) {
    if (RAND_bytes(reinterpret_cast<unsigned char*>(shared.secret.data()), static_cast<int>(shared.secret.size())) != 1)
      raise<InternalError>("RAND_bytes failed to make the coordinator's secret");
    service_ = std::make_unique<sched::coord::CoordinatorService>(
        coordinator_options(), net::Endpoint{net::default_host_address(), 0}, shared.secret, cfg_.timeout);
    const std::string& host = service_->address().host;
    ANTDT_CHECK_ARG(host.size() < shared.host.size(), "coordinator host '", host, "' is too long");
    std::memcpy(shared.host.data(), host.data(), host.size());
    shared.port = service_->address().port;
  }
  comm_->comm.broadcast(&shared, &shared, sizeof shared, DataType::u8, 0);
  shared.host.back() = '\0';
  connect(net::Endpoint{std::string(shared.host.data()), shared.port}, shared.secret);
}

void AgentImpl::rejoin() {
  if (!cfg_.rank || !cfg_.world_size)
    raise<ConfigError>("a restarted rank (ANTDT_INCARNATION=", incarnation_,
                       ") needs ANTDT_RANK and ANTDT_WORLD_SIZE");
  if (cfg_.coordinator.empty())
    raise<ConfigError>("a restarted rank (ANTDT_INCARNATION=", incarnation_,
                       ") needs ANTDT_COORDINATOR: the coordinator that tells it where to rejoin");
  rank_ = *cfg_.rank;
  size_ = *cfg_.world_size;
  if (cfg_.coordinator_embedded && rank_ == 0)
    raise<ConfigError>("rank 0 cannot be restarted while it hosts the coordinator (ANTDT_COORDINATOR_EMBEDDED=1); "
                       "run antdt-coordinator instead");
  log::set_process_rank(rank_);
  connect(net::parse_endpoint(cfg_.coordinator), sched::coord::job_secret(cfg_));
  const sched::coord::Welcome& welcome = client_->welcome();
  step_ = welcome.resume_step > 0 ? welcome.resume_step - 1 : 0;
  ANTDT_INFO("agent: rank ", rank_, " incarnation ", incarnation_, " rejoins generation ", welcome.generation,
             " at step ", step_ + 1);
  join_generation(welcome.generation);
  // Its first plan is a rebuild (re-sync the model) like the other members'
  // — unless it joined generation 0: its previous incarnation died before it
  // reached the coordinator and before any step, so the others start from
  // nothing on that generation too, without a rebuild.
  fresh_communicator_ = welcome.generation > 0;
}

void AgentImpl::report_comm_failure() {
  if (!comm_ || !comm_->comm.impl().failed() || failure_reported_ == generation_) return;
  failure_reported_ = generation_;
  std::vector<std::uint32_t> lost;
  CommImpl& impl = comm_->comm.impl();
  for (int peer = 0; peer < impl.size(); ++peer) {
    if (peer == impl.rank() || !impl.transport().peer_failure(peer)) continue;
    lost.push_back(members_.empty() ? static_cast<std::uint32_t>(peer) : members_[static_cast<std::size_t>(peer)]);
  }
  ANTDT_WARN("agent: rank ", rank_, ": the communicator of generation ", generation_, " failed at step ", step_, " (",
             lost.size(), " peer(s) known gone); the coordinator moves the job to a new generation");
  client_->comm_failed(generation_, step_, std::move(lost));
}

void AgentImpl::give_up_generation(std::uint64_t generation, std::vector<std::uint32_t> members, std::string why) {
  ANTDT_WARN("agent: communicator generation ", generation, " cannot form: ", why);
  members_ = std::move(members);
  generation_ = generation;
  client_->set_generation(generation);
  failure_reported_ = generation;
  // No rank named: which member died is not known here (a root that refuses
  // may also have given up on a member it waited for); the coordinator saw
  // the dead one's connection close.
  client_->comm_failed(generation, step_, {});
  creation_failure_ = std::move(why);
}

void AgentImpl::join_generation(std::uint64_t generation, const std::optional<net::Endpoint>& root) {
  comm_.reset();
  creation_failure_.reset();
  UniqueId id;
  std::vector<std::uint32_t> members;
  int index = -1;
  const auto deadline = Clock::now() + cfg_.timeout;
  for (;;) {
    sched::coord::GenerationId got = client_->join(generation);
    if (!got.members.empty()) {
      const auto it = std::find(got.members.begin(), got.members.end(), static_cast<std::uint32_t>(rank_));
      if (it == got.members.end())
        raise<InvalidArgument>("agent of rank ", rank_, ": not a member of communicator generation ", generation,
                               " (the coordinator counts this rank as lost)");
      index = static_cast<int>(it - got.members.begin());
      members = std::move(got.members);
      if (got.abandoned) {
        give_up_generation(generation, std::move(members),
                           cat("rank ", rank_, ": a member of communicator generation ", generation,
                               " was lost before the generation formed"));
        return;
      }
      if (index == 0) {
        id = root ? make_listening_id(root->host, root->port) : UniqueId::create();
        client_->offer_id(generation, id);
        break;
      }
      if (got.ready) {
        id = got.id;
        break;
      }
    }
    if (Clock::now() >= deadline)
      raise<TimeoutError>("agent of rank ", rank_, ": no id for communicator generation ", generation,
                          " within ANTDT_TIMEOUT_MS=", cfg_.timeout.count(), " ms (",
                          members.empty() ? std::string("the generation was not planned")
                                          : cat("rank ", members.front(), " did not offer it"), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int size = static_cast<int>(members.size());
  // The root asks the coordinator while members are missing from its
  // bootstrap: one that died before it connected abandons the generation.
  auto still_wanted = [&] {
    if (client_->join(generation).abandoned)
      raise<PeerLostError>("rank ", rank_, ": a member of communicator generation ", generation,
                           " was lost while the others joined its bootstrap");
  };
  try {
    comm_.emplace(antdtComm{api::communicator_from_unique_id(id, index, size, CommOptions{cfg_.transport},
                                                             index == 0 ? std::function<void()>(still_wanted)
                                                                        : std::function<void()>())});
  } catch (const PeerLostError& e) {
    // A member died while the generation formed: its bootstrap root (this
    // rank's connection was refused), or one the root was waiting for.
    give_up_generation(generation, std::move(members), e.what());
    return;
  } catch (const BootstrapError& e) {
    // A bootstrap connection broke mid-exchange: a member died after it
    // joined. Given up only when the coordinator knows of a loss; otherwise
    // (a real bootstrap problem) it is this rank's error, as before.
    if (!client_->join(generation).abandoned) throw;
    give_up_generation(generation, std::move(members), e.what());
    return;
  }
  members_ = std::move(members);
  generation_ = generation;
  client_->set_generation(generation);
  ANTDT_INFO("agent: rank ", rank_, " joined communicator generation ", generation, " as rank ", index, " of ", size);
}

}  // namespace detail

Agent Agent::from_env(const AgentOptions& options) {
  return Agent(std::make_unique<detail::AgentImpl>(options, config()));
}

Agent::Agent(std::unique_ptr<detail::AgentImpl> impl) noexcept : impl_(std::move(impl)) {}
Agent::Agent(Agent&&) noexcept = default;
Agent& Agent::operator=(Agent&&) noexcept = default;
Agent::~Agent() = default;

int Agent::rank() const noexcept { return impl_->rank(); }
int Agent::size() const noexcept { return impl_->size(); }
int Agent::incarnation() const noexcept { return impl_->incarnation(); }
std::uint64_t Agent::generation() const noexcept { return impl_->generation(); }
Communicator& Agent::communicator() { return impl_->communicator(); }
bool Agent::rebuild_needed() const noexcept { return impl_->rebuild_needed(); }
StepPlan Agent::next_step() { return impl_->next_step(); }
SampleBatch Agent::next_samples() { return impl_->next_samples(); }
void Agent::report_step(const StepReport& report) { impl_->report_step(report); }
bool Agent::commit() { return impl_->commit(); }
bool Agent::give_back() { return impl_->give_back(); }
bool Agent::settle(Fate fate) { return impl_->settle(fate); }
void Agent::request_restart() { impl_->request_restart(); }
bool Agent::should_exit() const noexcept { return impl_->should_exit(); }
int Agent::exit_code() const noexcept { return impl_->exit_code(); }
void Agent::close() { impl_->close(); }

}  // namespace antdt
