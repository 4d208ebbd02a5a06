// Partial AllReduce: each step's result is reduced among the ranks the arbiter
// lets in (docs/partial.md). This file is a rank's side:
//
//   1. tell the arbiter "my contribution for step s is ready" (control plane);
//   2. receive its decision for the step that is open: who contributes (the
//      ring, in rank order), who is late and must be sent the results it
//      missed, and which on-time rank (the server) sends them;
//   3. move the data (data plane, one coll::Call whose sequence number is the
//      step): late ranks post their receives first, contributors run the ring,
//      then the server pushes cached results to the late ranks;
//   4. return the next result in this rank's order, R_{applied+1}.
//
// Every rank keeps the last K results it applied (ANTDT_RESULT_CACHE), which
// is what lets a late rank catch up without computing the steps it missed, and
// lets weight-0 calls fetch those results without any message.
#include "collectives/algorithms.hpp"
#include "collectives/hierarchy.hpp"
#include "collectives/shm_common.hpp"
#include "collectives/partial/partial_allreduce.hpp"
#include "collectives/device/device_collectives.hpp"
#include "collectives/partial/partial_step.hpp"
#include "collectives/issued_calls.hpp"
#include "collectives/selection.hpp"
#include "collectives/telemetry/step_timing.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "collectives/partial/arbiter.hpp"
#include "collectives/partial/arbiter_link.hpp"
#include "collectives/partial/async_sends.hpp"
#include "collectives/partial/partial_protocol.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <type_traits>

#include <poll.h>

namespace antdt::coll {
namespace {

using partial::Clock;

// The last K results, by step.
class ResultCache {
 public:
  void reset(std::size_t slots, std::size_t bytes) {
    if (slots == data_.size() && bytes == bytes_) return;
    bytes_ = bytes;
    data_.assign(slots, std::vector<std::byte>(bytes));
    step_.assign(slots, 0);
  }
  std::size_t bytes() const noexcept { return bytes_; }
  bool has(std::uint64_t step) const noexcept { return step > 0 && !data_.empty() && step_[index(step)] == step; }
  std::span<std::byte> get(std::uint64_t step) {
    ANTDT_ASSERT(has(step));
    return data_[index(step)];
  }
  // The slot that will hold `step` (evicting step - K).
  std::span<std::byte> claim(std::uint64_t step) {
    step_[index(step)] = step;
    return data_[index(step)];
  }
  // Which step each slot holds, saved before a step's data movement and put
  // back when it is given up (docs/partial.md#dead-ranks): slots it claimed
  // were only partly written. `saved` is the caller's, reused.
  void save(std::vector<std::uint64_t>& saved) const { saved.assign(step_.begin(), step_.end()); }
  void restore(const std::vector<std::uint64_t>& saved) { std::copy(saved.begin(), saved.end(), step_.begin()); }

 private:
  std::size_t index(std::uint64_t step) const noexcept { return static_cast<std::size_t>(step % data_.size()); }
  std::size_t bytes_ = 0;
  std::vector<std::vector<std::byte>> data_;
  std::vector<std::uint64_t> step_;
};

// What a result's caller is told besides the data. It travels with every
// catch-up push, so a late rank reports the right figures for the steps it
// fetched (it saw none of their decisions).
struct StepInfo {
  std::int32_t participants = 0;
  std::int32_t lost_ranks = 0;  // ranks known gone when the step was decided
  double total_weight = 0;
};
static_assert(std::is_trivially_copyable_v<StepInfo>);

class PartialState;
[[noreturn]] void arbiter_lost(detail::CommImpl& comm, const PartialState& st, const Error& e);

class PartialState final : public detail::CollectiveState {
 public:
  PartialState(detail::CommImpl& comm) {
    auto& ctl = comm.control();
    if (!ctl)
      raise<UnsupportedError>("partial collectives need the control plane to the arbiter, which this communicator "
                              "was created without");
    const Config& config = comm.config();
    if (config.external_arbiter() && !ctl.unique_id.empty()) {
      // The arbiter runs in antdt-coordinator, so that no rank's death takes it
      // along (docs/partial.md#where-the-arbiter-runs). Rank 0 hosts none, and
      // the bootstrap's connections to it are left as they are.
      external_arbiter = config.coordinator;
      auto hello = partial::make_arbiter_hello(partial::group_key_of(ctl.unique_id), comm.rank(), comm.size(),
                                               partial::ArbiterConfig::from(config, comm.size()));
      try {
        link = control::Link(partial::connect_to_arbiter(net::parse_endpoint(config.coordinator),
                                                         config.secret_bytes("ANTDT_PARTIAL_ARBITER=coordinator"),
                                                         std::move(hello), Clock::now() + config.timeout));
      } catch (const TransportError& e) {
        // The coordinator died during the handshake: the arbiter of this
        // communicator is gone, as for the ranks already linked to it.
        arbiter_lost(comm, *this, e);
      }
      classes.assign(static_cast<std::size_t>(comm.size()), StragglerClass::healthy);
      return;
    }
    link = control::Link(std::move(ctl.client));
    if (comm.rank() == 0) {
      auto cfg = partial::ArbiterConfig::from(comm.config(), comm.size());
      // The transport knows each peer's host and pid (it outlives the arbiter thread).
      cfg.describe_rank = [&transport = comm.transport()](int r) { return transport.describe_peer(r); };
      arbiter = std::make_unique<partial::ArbiterService>(std::move(ctl.server), cfg, comm.config().timeout);
    }
    classes.assign(static_cast<std::size_t>(comm.size()), StragglerClass::healthy);
  }
  ~PartialState() override {
    // The summary table at destruction, from where the Monitor ran.
    if (!arbiter) return;
    if (arbiter->any_straggler())
      ANTDT_WARN(arbiter->summary());
    else
      ANTDT_INFO(arbiter->summary());
  }

  control::Link link;
  std::unique_ptr<partial::ArbiterService> arbiter;  // rank 0 only, when the arbiter runs there
  std::string external_arbiter;  // the antdt-coordinator's address when the arbiter runs there
  ResultCache cache;
  std::vector<StepInfo> info;  // per cache slot
  std::uint64_t applied = 0;   // results returned to the caller
  std::uint64_t latest = 0;    // newest result known to exist
  std::optional<Clock::time_point> last_return;
  double last_transfer_s = 0;  // data movement of the last call that moved data (the arbiter's grace for defer)
  Signature last_signature;    // of the last step (the finish exchange moves data with it)
  bool run_over = false;       // every other rank finished: only cached results remain
  std::vector<StragglerClass> classes;
  std::vector<std::byte> weighted;  // scratch: this rank's contribution times its weight
  std::vector<int> members;         // scratch: the ring order of the current step
  // Dead ranks: what a step given up puts back, and (in-place calls) this
  // rank's contribution, which a ring that broke off may have overwritten.
  std::vector<std::uint64_t> saved_steps;
  std::vector<StepInfo> saved_info;
  std::vector<std::byte> contribution;
  // Stale-synchronous defer: the receives of deposits this rank holds, posted
  // when the arbiter announced them (Incoming) or at the latest with the
  // decision that lists them, in the arbiter's order; and scratch.
  struct DepositIn {
    std::int32_t from = -1;
    std::uint64_t step = 0;
    std::vector<std::byte> data;
    detail::OpSlot slot;  // never moved (a deque's elements stay put)
    std::optional<Call> call;
  };
  std::deque<DepositIn> deposits_in;
  std::vector<std::vector<std::byte>> spare_deposit_buffers;  // of released deposits, reused
  std::vector<std::byte> combined;
  // Deposits and pushes ahead in flight. Last: it goes first, while the
  // transport and everything else here are still alive.
  std::unique_ptr<partial::AsyncSends> sends;

  partial::AsyncSends& async_sends(detail::CommImpl& comm) {
    if (!sends) sends = std::make_unique<partial::AsyncSends>(comm);
    return *sends;
  }
};

PartialState& state_of(detail::CommImpl& comm) {
  auto& holder = comm.partial_state();
  if (!holder) holder = std::make_unique<PartialState>(comm);
  return static_cast<PartialState&>(*holder);
}

// Partial steps use their own sequence space, apart from ordinary collectives.
constexpr std::uint64_t kStepSeqBit = std::uint64_t{1} << 62;
constexpr std::uint64_t kFinishSeqBit = std::uint64_t{1} << 61;
constexpr std::uint64_t kCatchupSeqBit = std::uint64_t{1} << 60;
// Stale-synchronous defer: deposits are numbered by the late rank's step,
// pushes ahead by the result's step (each kind has its own tag as well).
constexpr std::uint64_t kDepositSeqBit = std::uint64_t{1} << 59;
constexpr std::uint64_t kAheadSeqBit = std::uint64_t{1} << 58;

// The arbiter runs on rank 0 (its thread): a control link that closed, or
// cannot be written, is rank 0 lost. The communicator fails for good
// (PeerLostError naming rank 0's host and pid). An arbiter in antdt-coordinator
// that is lost is the coordinator gone: PeerLostError too, naming its address,
// so that a trainer recovers as from any lost participant (the Agent moves the
// job to a new communicator generation, whose arbiter a restarted coordinator hosts).
[[noreturn]] void arbiter_lost(detail::CommImpl& comm, const PartialState& st, const Error& e) {
  if (!st.external_arbiter.empty()) {
    const std::string reason = cat("partial collectives: rank ", comm.rank(), " lost its arbiter at antdt-coordinator ",
                                   st.external_arbiter, " (ANTDT_COORDINATOR): ", e.what());
    comm.mark_failed(Status::peer_lost, reason);
    throw_status(Status::peer_lost, reason);
  }
  const std::string reason = cat("partial collectives: rank ", comm.rank(), " lost the arbiter: peer ",
                                 comm.transport().describe_peer(0), " is lost (its control connection closed: ",
                                 e.what(), ")");
  comm.mark_failed(Status::peer_lost, reason);
  throw_status(Status::peer_lost, reason);
}

// One message from the arbiter, or nullopt at the deadline.
std::optional<partial::FromArbiter> receive_from_arbiter(detail::CommImpl& comm, PartialState& st,
                                                         Clock::time_point deadline) {
  std::optional<control::Bytes> reply;
  try {
    reply = st.link.receive(deadline);
  } catch (const TransportError& e) {
    arbiter_lost(comm, st, e);
  }
  if (!reply) return std::nullopt;
  return partial::decode_from_arbiter(*reply, comm.size());
}

// A failure the arbiter reports, raised here (a resync leaves the
// communicator usable; anything else fails it).
void raise_if_failure(detail::CommImpl& comm, const partial::FromArbiter& message) {
  if (auto* failure = std::get_if<partial::Failure>(&message)) {
    if (failure->status != Status::resync) comm.mark_failed(failure->status, failure->reason);
    throw_status(failure->status, failure->reason);
  }
}

// `sig` with another kind: the deposits and pushes ahead of a partial step
// carry its count, dtype and op under tags of their own.
Signature as_kind(Signature sig, Kind kind) {
  sig.kind = kind;
  return sig;
}

// Stale-synchronous defer: posts the receive of a deposit this rank holds
// (a deposit's messages are numbered by the late rank's step).
void post_deposit_receive(detail::CommImpl& comm, PartialState& st, const partial::Deposit& dep,
                          const Signature& sig) {
  auto& in = st.deposits_in.emplace_back();
  in.from = dep.from;
  in.step = dep.step;
  if (!st.spare_deposit_buffers.empty()) {  // no allocation per deposit once warm
    in.data = std::move(st.spare_deposit_buffers.back());
    st.spare_deposit_buffers.pop_back();
  }
  in.data.resize(sig.count * dtype_size(sig.dtype));
  in.slot.completion.state.store(transport::State::done);  // idle until posted
  in.call.emplace(comm, as_kind(sig, Kind::partial_deposit), kDepositSeqBit | dep.step, std::span(&in.slot, 1));
  in.call->recv(0, dep.from, in.data);
}

// Sends `request` to the arbiter and returns its answer: a decision, or
// (stale-synchronous defer, a late arrival) a Late (the straggler classes
// recorded). Abandons that come meanwhile are stale: this rank is not moving
// data now. `waiting_for` ends the timeout's message.
using Answer = std::variant<partial::Decision, partial::Late>;
Answer ask_arbiter_any(detail::CommImpl& comm, PartialState& st, std::span<const std::byte> request,
                       const std::string& waiting_for) {
  const auto deadline = Clock::now() + comm.config().timeout;
  try {
    st.link.send(request, deadline);
  } catch (const TimeoutError&) {
    throw;
  } catch (const Error& e) {
    arbiter_lost(comm, st, e);
  }
  for (;;) {
    auto message = receive_from_arbiter(comm, st, deadline);
    if (!message)
      raise<TimeoutError>("partial collectives: rank ", comm.rank(), " waited ", comm.config().timeout.count(),
                          " ms (ANTDT_TIMEOUT_MS) ", waiting_for);
    if (std::holds_alternative<partial::Abandon>(*message)) continue;
    raise_if_failure(comm, *message);
    if (auto* incoming = std::get_if<partial::Incoming>(&*message)) {
      for (const auto& dep : incoming->deposits) post_deposit_receive(comm, st, dep, st.last_signature);
      continue;
    }
    if (auto* late = std::get_if<partial::Late>(&*message)) {
      st.classes = late->classes;
      return std::move(*late);
    }
    partial::Decision d = std::get<partial::Decision>(std::move(*message));
    st.classes = d.classes;
    return d;
  }
}

partial::Decision ask_arbiter(detail::CommImpl& comm, PartialState& st, std::span<const std::byte> request,
                              const std::string& waiting_for) {
  Answer answer = ask_arbiter_any(comm, st, request, waiting_for);
  if (auto* d = std::get_if<partial::Decision>(&answer)) return std::move(*d);
  raise<InternalError>("partial collectives: rank ", comm.rank(), " was answered late ", waiting_for,
                       " outside a stale-synchronous run");
}

// Watches one step's data movement under drop/defer (a contained call,
// collectives/call.hpp): gives the step up when the transport reports one of
// its ranks lost, or when the arbiter says so (Abandon) — which is how a
// survivor blocked on another survivor that already gave up hears of it.
class StepWatch final : public LossWatch {
 public:
  StepWatch(detail::CommImpl& comm, PartialState& st, const partial::Decision& d) : comm_(comm), st_(st), d_(d) {}

  void check(Call& call) override {
    for (const auto& c : d_.contributors) check_peer(call, c.rank);
    for (const auto& c : d_.catchups) check_peer(call, c.rank);
    check_peer(call, d_.server);
    pollfd p{st_.link.fd(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return;
    auto message = receive_from_arbiter(comm_, st_, Clock::now() + comm_.config().timeout);
    if (!message) return;
    raise_if_failure(comm_, *message);
    const auto* abandon = std::get_if<partial::Abandon>(&*message);
    if (abandon == nullptr)
      raise<InternalError>("partial collectives: rank ", comm_.rank(), " got a decision from the arbiter while moving "
                           "the data of step ", d_.step);
    if (abandon->step != d_.step || abandon->generation != d_.generation) return;  // stale
    raise<PeerLostError>("rank ", comm_.rank(), " gives up ", call.signature().describe(), " of step ", d_.step,
                         ": the arbiter reports peer ", comm_.transport().describe_peer(abandon->lost), " lost");
  }

 private:
  void check_peer(Call& call, int peer) {
    if (peer < 0 || peer == comm_.rank()) return;
    if (auto why = comm_.transport().peer_failure(peer))
      raise<PeerLostError>("rank ", comm_.rank(), " gives up ", call.signature().describe(), " of step ", d_.step,
                           ": peer ", comm_.transport().describe_peer(peer), " is lost (", *why, ")");
  }

  detail::CommImpl& comm_;
  PartialState& st_;
  const partial::Decision& d_;
};

// The step whose result holds `rank`'s contribution although `rank` gave that
// step up (a rank of it was lost; the others completed it), from its catch-up
// entry; 0 when none.
std::uint64_t included_in(const partial::Decision& d, int rank) {
  auto mine = std::find_if(d.catchups.begin(), d.catchups.end(), [&](const auto& c) { return c.rank == rank; });
  return mine != d.catchups.end() ? mine->contribution_step : 0;
}

// A call's fate: its contribution is in the result of step `landed_at` (0:
// in none), which is the call's own step (included) or a later one (deferred).
void set_fate(PartialResult& result, const PartialOptions& opts, std::uint64_t next, std::uint64_t landed_at) {
  if (opts.weight == 0) {
    result.fate = Fate::none;
  } else if (landed_at != 0) {
    result.fate = next == landed_at ? Fate::included : Fate::deferred;
    result.contribution_step = landed_at;
  } else {
    result.fate = Fate::dropped;
  }
}

int lost_in(const partial::Decision& d) {
  return static_cast<int>(std::count(d.classes.begin(), d.classes.end(), StragglerClass::lost));
}

std::uint64_t signature_of(const Signature& sig, const PartialOptions& opts) {
  return hash::mix(hash::mix(hash::mix(sig.hash(), static_cast<std::uint64_t>(opts.policy)), opts.staleness),
                   opts.stale_synchronous ? 1 : 0);
}

// Stale-synchronous defer: receives the results pushed ahead to this rank
// (each from the server of its step, in step order per server) into the
// result cache, and notes the newest one.
void receive_fetches(detail::CommImpl& comm, PartialState& st, std::span<const partial::Fetch> fetches,
                     const Signature& sig) {
  const int me = comm.rank();
  const auto mine = [&](const partial::Fetch& f) { return f.rank == me; };
  const auto n = static_cast<std::size_t>(std::count_if(fetches.begin(), fetches.end(), mine));
  if (n == 0) return;
  const Signature ahead_sig = as_kind(sig, Kind::partial_ahead);
  auto slots = std::make_unique<detail::OpSlot[]>(2 * n);
  for (std::size_t i = 0; i < 2 * n; ++i) slots[i].completion.state.store(transport::State::done);  // idle until posted
  std::deque<Call> calls;
  std::size_t i = 0;
  for (const auto& f : fetches) {
    if (!mine(f)) continue;
    auto& call = calls.emplace_back(comm, ahead_sig, kAheadSeqBit | f.step, std::span(&slots[2 * i], 2));
    call.recv(0, f.server, st.cache.claim(f.step));
    call.recv(1, f.server, std::as_writable_bytes(std::span(&st.info[f.step % st.info.size()], 1)));
    st.latest = std::max(st.latest, f.step);
    ++i;
  }
  for (auto& call : calls) call.wait_all();
}

// Stale-synchronous defer: this rank holds deposits in `d`. Waits for each
// (posting the receives not posted yet), in the arbiter's order, which is each
// late rank's step order; st.deposits_in's first entries are then `d`'s, in
// its order. Dropped ones are only taken off the wire. Returns how many there are.
std::size_t receive_deposits(detail::CommImpl& comm, PartialState& st, const partial::Decision& d, const Signature& sig) {
  const int me = comm.rank();
  std::size_t i = 0;
  for (const auto& dep : d.deposits) {
    if (dep.to != me) continue;
    if (i == st.deposits_in.size()) post_deposit_receive(comm, st, dep, sig);
    auto& in = st.deposits_in[i++];
    if (in.from != dep.from || in.step != dep.step)
      raise<InternalError>("partial collectives: rank ", me, " posted the deposit of rank ", in.from, " for step ",
                           in.step, " but step ", d.step, " lists rank ", dep.from, "'s for step ", dep.step);
  }
  for (std::size_t k = 0; k < i; ++k) {
    auto& in = st.deposits_in[k];
    in.call->restart_deadline();  // posted early: bounded from now
    in.call->wait_all();
  }
  return i;
}

// The deposits of the last step are added (or discarded): their receives go,
// their buffers are kept for the next ones.
void release_deposits(PartialState& st, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    st.deposits_in.front().call.reset();
    st.spare_deposit_buffers.push_back(std::move(st.deposits_in.front().data));
    st.deposits_in.pop_front();
  }
}

// The contributors of a step reduce `send` into `result` with the algorithm
// the selection table picks for them (`input`): with every rank the one a plain
// allreduce would choose, shared memory only then (its rounds must be the same
// on all ranks).
void reduce_among(Call& ring, SelectionInput input, const std::byte* send, std::byte* result, std::size_t count,
                  DataType dtype, ReduceOp op, const std::vector<int>& members) {
  Algo algo = select_algorithm(input).algo;
  if ((algo == Algo::shm && !shm_ready(ring, detail::ShmArea::mailbox)) ||
      (algo == Algo::shm_bulk && !shm_ready(ring, detail::ShmArea::bulk))) {
    // The ranks cannot share memory (every rank learnt it just now): the
    // rows without shared memory choose.
    input.mailbox_usable = input.bulk_usable = false;
    algo = select_algorithm(input).algo;
  }
  if (algo == Algo::shm)
    allreduce_shm(ring, send, result, count, dtype, op);
  else if (algo == Algo::shm_bulk)
    allreduce_shm_bulk(ring, send, result, count, dtype, op);
  else if (algo == Algo::recursive_doubling)
    allreduce_recursive_doubling(ring, send, result, count, dtype, op);
  else if (algo == Algo::rabenseifner)
    allreduce_rabenseifner(ring, send, result, count, dtype, op);
  else if (algo == Algo::hierarchical)
    allreduce_hierarchical(ring, send, result, count, dtype, op, members);
  else
    allreduce_ring(ring, send, result, count, dtype, op, members);
}

// Stale-synchronous defer: a step into which deposits land. Each depositary
// adds the deposits it received (st.deposits_in, in decision order) to its own
// contribution; the contributors then reduce as usual. avg: with equal weights
// a sum divided by the number of contributions (the contributors and the
// deposits that land), else sum(w_i * g_i) / sum(w_i).
void land_deposits(Call& ring, PartialState& st, const partial::Decision& d, const std::byte* send,
                   std::byte* own_result, std::size_t count, const Signature& sig, const SelectionInput& input,
                   const std::vector<int>& members, double my_weight, double total, bool equal_weights,
                   std::size_t contributions) {
  const int me = ring.rank();
  const std::size_t bytes = count * dtype_size(sig.dtype);
  const bool weighted = sig.op == ReduceOp::avg && !equal_weights;
  auto& combined = st.combined;
  combined.resize(bytes);
  if (weighted)
    scale_into(sig.dtype, combined, std::span(send, bytes), my_weight);
  else if (bytes > 0)
    std::memcpy(combined.data(), send, bytes);
  std::size_t i = 0;
  for (const auto& dep : d.deposits) {
    if (dep.to != me) continue;
    auto& in = st.deposits_in[i++].data;
    if (dep.drop) continue;
    if (weighted) scale_into(sig.dtype, in, in, dep.weight);
    reduce_into(sig.dtype, sig.op == ReduceOp::avg ? ReduceOp::sum : sig.op, combined, combined, in);
  }
  const ReduceOp op = sig.op == ReduceOp::avg ? ReduceOp::sum : sig.op;
  if (weighted) {
    // The shared-memory rows' rounds cannot carry weights: the ring, or the hierarchy.
    if (select_algorithm(input).algo == Algo::hierarchical)
      allreduce_hierarchical(ring, combined.data(), own_result, count, sig.dtype, op, members);
    else
      allreduce_ring(ring, combined.data(), own_result, count, sig.dtype, op, members);
  } else {
    reduce_among(ring, input, combined.data(), own_result, count, sig.dtype, op, members);
  }
  if (sig.op != ReduceOp::avg) return;
  ring.wait_all();  // the result is complete before it is divided
  if (weighted)
    scale_into(sig.dtype, std::span(own_result, bytes), std::span(own_result, bytes), 1.0 / total);
  else
    finish_avg(sig.dtype, std::span(own_result, bytes), contributions);
}

// Stale-synchronous defer, at the step's server: this step's result (and its
// StepInfo) to every rank that was absent when it closed, posted and left in
// flight (AsyncSends); each receives it when the arbiter next answers it.
void push_ahead(detail::CommImpl& comm, PartialState& st, const partial::Decision& d, const Signature& sig,
                std::size_t bytes) {
  if (!st.cache.has(d.step))
    raise<InternalError>("partial collectives: rank ", comm.rank(), " serves step ", d.step, " but does not hold it");
  std::vector<std::byte> data = st.async_sends(comm).take(bytes + sizeof(StepInfo));
  if (bytes > 0) std::memcpy(data.data(), st.cache.get(d.step).data(), bytes);
  std::memcpy(data.data() + bytes, &st.info[d.step % st.info.size()], sizeof(StepInfo));
  std::vector<partial::AsyncSends::Message> messages;
  for (int r : d.ahead) {
    messages.push_back({r, 0, bytes});
    messages.push_back({r, bytes, sizeof(StepInfo)});
  }
  st.async_sends(comm).post(as_kind(sig, Kind::partial_ahead), kAheadSeqBit | d.step, std::move(data), messages);
}

// Runs the data movement of one decision at this rank. `own_result` is where
// the ring writes this step's result when this rank contributes to it.
void move_data(detail::CommImpl& comm, PartialState& st, const partial::Decision& d, const Signature& sig,
               std::uint64_t seq, const std::byte* send, std::byte* own_result, std::size_t count, bool finishing,
               const PartialReduce* reduce = nullptr, LossWatch* watch = nullptr) {
  const int me = comm.rank();
  const std::size_t bytes = count * dtype_size(sig.dtype);
  // Two calls, two tags: the ring's messages and the catch-up pushes travel
  // between the same ranks, and each side posts them in a different order, so
  // they must not share one in-order matching stream.
  Call ring(comm, sig, seq);
  Signature push_sig = sig;
  push_sig.kind = Kind::partial_catchup;
  Call push(comm, push_sig, kCatchupSeqBit | seq);
  if (watch != nullptr) {
    const auto generation = static_cast<std::uint8_t>(d.generation);
    ring.contain_peer_loss(*watch, generation);
    push.contain_peer_loss(*watch, generation);
  }
  auto contributor = std::find_if(d.contributors.begin(), d.contributors.end(), [&](auto& c) { return c.rank == me; });
  const bool contributes = contributor != d.contributors.end();
  auto contributes_rank = [&](int r) {
    return std::any_of(d.contributors.begin(), d.contributors.end(), [&](auto& c) { return c.rank == r; });
  };
  // This step's result is pushed only to late ranks that did not compute it in the ring.
  auto last_pushed = [&](const partial::CatchUp& c) { return finishing || contributes_rank(c.rank) ? d.step - 1 : d.step; };
  auto pushed_until = [&](const partial::CatchUp& c) {
    const std::uint64_t last = finishing ? d.step : last_pushed(c);
    return c.until_step != 0 ? std::min(last, c.until_step) : last;
  };
  auto info_of = [&](std::uint64_t step) -> StepInfo& { return st.info[step % st.info.size()]; };
  if (!finishing && d.contributors.empty()) {
    // An empty step (every rank called with weight 0): its result is zeros.
    auto slot = st.cache.claim(d.step);
    std::fill(slot.begin(), slot.end(), std::byte{0});
  }
  // Stale-synchronous defer: deposits that land in this step count as its
  // contributions (each a late rank's, added by its depositary).
  std::size_t landing_all = 0;
  double landing_weight = 0;
  for (const auto& dep : d.deposits)
    if (!dep.drop) {
      ++landing_all;
      landing_weight += dep.weight;
    }
  if (!finishing) {
    StepInfo& info = info_of(d.step);
    info.participants = static_cast<std::int32_t>(d.contributors.size() + landing_all);
    info.lost_ranks = lost_in(d);
    info.total_weight = landing_weight;
    for (const auto& c : d.contributors) info.total_weight += c.weight;
  }
  // Results pushed ahead to this rank come first (they are older than this
  // step), then the deposits handed to it.
  receive_fetches(comm, st, d.fetches, sig);
  const bool holds_deposits =
      std::any_of(d.deposits.begin(), d.deposits.end(), [&](const auto& dep) { return dep.to == me; });
  const std::size_t held_here = holds_deposits ? receive_deposits(comm, st, d, sig) : 0;
  // 1. Late ranks post their receives first: the server's sends then always find them.
  std::size_t index = 0;
  for (const auto& c : d.catchups) {
    if (c.rank != me) continue;
    const std::uint64_t last = pushed_until(c);
    for (std::uint64_t s = c.from_step; s <= last; ++s) {
      push.recv(index++, d.server, st.cache.claim(s));
      push.recv(index++, d.server, std::as_writable_bytes(std::span(&info_of(s), 1)));
    }
  }
  // 2. The ring among contributors, in rank order.
  if (contributes && !finishing) {
    auto& members = st.members;  // reused: no allocation per step once warm
    members.clear();
    double total = 0;
    bool equal_weights = true;
    for (const auto& c : d.contributors) {
      members.push_back(c.rank);
      total += c.weight;
      equal_weights &= c.weight == d.contributors.front().weight;
    }
    // Slot indexes are per communicator: start after the receives posted above.
    ring.set_index_base(push.next_free_index());
    // With every rank, the rows a plain allreduce reads; with some, the
    // contributors' own rows, over their nodes (the hierarchical AllReduce
    // among them when they sit on several nodes, as many on each).
    SelectionInput input = selection_input(comm, Kind::partial, count, sig.dtype);
    input.everyone = static_cast<int>(members.size()) == comm.size();
    if (!input.everyone) {
      const Hierarchy h = hierarchy_of(comm, members);
      input.nranks = static_cast<int>(members.size());
      input.nodes = static_cast<int>(h.nodes.size());
      input.nodes_uniform = h.uniform;
    }
    for (const auto& dep : d.deposits)
      if (!dep.drop) {
        total += dep.weight;
        equal_weights &= dep.weight == d.contributors.front().weight;
      }
    if (reduce != nullptr) {
      (*reduce)(ring, d.contributors, send, own_result);
    } else if (landing_all > 0) {
      land_deposits(ring, st, d, send, own_result, count, sig, input, members, contributor->weight, total,
                    equal_weights, d.contributors.size() + landing_all);
    } else if (sig.op != ReduceOp::avg || equal_weights) {
      // With every rank and equal weights, the algorithm a plain allreduce
      // would choose: the result is then bit-identical to it (invariant 5).
      reduce_among(ring, input, send, own_result, count, sig.dtype, sig.op, members);
    } else {
      // avg over unequal weights: sum(w_i * g_i) / sum(w_i), the sum
      // hierarchical where the table says so (the shared-memory rows' rounds
      // cannot carry the weights: the ring otherwise).
      st.weighted.resize(bytes);
      scale_into(sig.dtype, st.weighted, std::span(send, bytes), contributor->weight);
      if (select_algorithm(input).algo == Algo::hierarchical)
        allreduce_hierarchical(ring, st.weighted.data(), own_result, count, sig.dtype, ReduceOp::sum, members);
      else
        allreduce_ring(ring, st.weighted.data(), own_result, count, sig.dtype, ReduceOp::sum, members);
      scale_into(sig.dtype, std::span(own_result, bytes), std::span(own_result, bytes), 1.0 / total);
    }
    ring.wait_all();
  }
  release_deposits(st, held_here);
  // 3. The server sends late ranks what they missed (and this step's result to those not in the ring).
  if (d.server == me) {
    if (contributes && !finishing && own_result != nullptr) {
      auto slot = st.cache.claim(d.step);
      if (slot.data() != own_result) std::memcpy(slot.data(), own_result, bytes);
    }
    if (!finishing && !d.ahead.empty()) push_ahead(comm, st, d, sig, bytes);
    push.set_index_base(std::max(push.next_free_index(), ring.next_free_index()));
    std::size_t index_out = 0;
    for (const auto& c : d.catchups) {
      const std::uint64_t last = pushed_until(c);
      for (std::uint64_t s = c.from_step; s <= last; ++s) {
        if (!st.cache.has(s))
          raise<InternalError>("partial collectives: rank ", me, " serves step ", s, " but no longer holds it");
        push.send(index_out++, c.rank, st.cache.get(s));
        push.send(index_out++, c.rank, std::as_bytes(std::span(&info_of(s), 1)));
      }
    }
  }
  push.wait_all();
}

}  // namespace

// The host partial AllReduce: the device path (coll::execute, Mode::partial,
// on device buffers) stages the buffers and runs this on host views.
PartialResult partial_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count,
                                DataType dtype, ReduceOp op, const PartialOptions& opts) {
  return partial_step(comm, send, recv, count, dtype, op, opts, PartialStepKind{});
}

PartialResult partial_step(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                           ReduceOp op, const PartialOptions& opts, const PartialStepKind& kind) {
  drain_queue(comm);  // queued non-blocking collectives run first, and not alongside it
  check_dtype(dtype);
  check_op(op);
  ANTDT_CHECK_ARG(std::isfinite(opts.weight) && opts.weight >= 0, "partial_allreduce: weight must be finite and >= 0, got ",
                  opts.weight);
  ANTDT_CHECK_ARG(static_cast<unsigned>(opts.policy) <= static_cast<unsigned>(LatePolicy::defer),
                  "partial_allreduce: unknown late policy ", static_cast<unsigned>(opts.policy));
  ANTDT_CHECK_ARG(count == 0 || recv != nullptr, "partial_allreduce: recv buffer is null with count ", count);
  ANTDT_CHECK_ARG(count == 0 || opts.weight == 0 || send != nullptr, "partial_allreduce: send buffer is null with count ",
                  count);
  const std::size_t bytes = count * dtype_size(dtype);
  ANTDT_CHECK_ARG(count == 0 || bytes / count == dtype_size(dtype), "partial_allreduce: count ", count,
                  " overflows size_t");
  if (opts.stale_synchronous && kind.reduce != nullptr)
    raise<UnsupportedError>("partial_push: stale_synchronous is for partial_allreduce only");
  comm.check_usable();
  PartialState& st = state_of(comm);
  Signature sig{Kind::partial, count, dtype, op, -1, Algo::ring};
  sig.salt = kind.salt;
  if (st.cache.bytes() != bytes) {
    ANTDT_CHECK_ARG(st.applied == st.latest, "partial_allreduce: the count or dtype changed while ", st.latest - st.applied,
                    " results are still to be fetched");
    st.cache.reset(comm.config().result_cache, bytes);
    st.info.assign(comm.config().result_cache, {});
  }
  st.last_signature = sig;
  auto* out = static_cast<std::byte*>(recv);
  const std::uint64_t next = st.applied + 1;
  PartialResult result;
  auto finish_call = [&](std::uint64_t step) {
    // Every result a rank returns was computed here or pushed to it (the
    // arbiter pushes exactly the ones it lacks): never return stale bytes.
    if (out != nullptr && bytes > 0 && !st.cache.has(step))
      raise<InternalError>("partial collectives: rank ", comm.rank(), " lacks the result of step ", step);
    if (out != nullptr && bytes > 0 && st.cache.get(step).data() != out)
      std::memcpy(out, st.cache.get(step).data(), bytes);
    const auto& info = st.info[step % st.info.size()];
    result.step = step;
    result.participants = info.participants;
    result.total_weight = info.total_weight;
    result.lost_ranks = info.lost_ranks;
    st.applied = step;
    result.steps_behind = st.latest - st.applied;
    st.last_return = Clock::now();
    return result;
  };

  // Catching up: a result this rank missed is already here.
  if ((opts.weight == 0 || st.run_over) && next <= st.latest && st.cache.has(next)) {
    result.fate = opts.weight == 0 ? Fate::none : Fate::dropped;
    return finish_call(next);
  }
  if (st.run_over)
    raise<InvalidArgument>("partial_allreduce: the run is over (every other rank called partial_finish) and rank ",
                           comm.rank(), " has applied every result; call partial_finish");

  partial::Arrival arrival;
  arrival.rank = comm.rank();
  arrival.step = next;
  arrival.weight = opts.weight;
  // The trainer's own marks when it gives them; else the time since the last call returned.
  const auto arrived_at = Clock::now();
  if (telemetry::StepTiming* marked = comm.started_step_timing())
    arrival.compute_s = marked->last_compute_seconds();
  else
    arrival.compute_s = st.last_return ? std::chrono::duration<double>(arrived_at - *st.last_return).count() : 0;
  arrival.transfer_s = st.last_transfer_s;
  arrival.samples = opts.samples;
  arrival.signature = signature_of(sig, opts);
  arrival.policy = opts.policy;
  arrival.staleness = opts.staleness;
  arrival.stale_synchronous = opts.stale_synchronous;
  arrival.holds = st.latest;
  const std::string waiting_for =
      cat("for the decision on step ", next, "; are enough ranks calling partial_allreduce?");
  const auto ask = [&] { return ask_arbiter(comm, st, partial::encode(arrival), waiting_for); };
  Answer answer = ask_arbiter_any(comm, st, partial::encode(arrival), waiting_for);
  if (auto* late = std::get_if<partial::Late>(&answer)) {
    // Stale-synchronous defer, late: the results pushed ahead to this rank,
    // then its contribution handed to the depositary (a copy, in flight
    // while the caller computes), and the result of `next` at once.
    receive_fetches(comm, st, late->fetches, sig);
    if (late->depositary >= 0) {
      std::vector<std::byte> data = st.async_sends(comm).take(bytes);
      if (bytes > 0) std::memcpy(data.data(), send, bytes);
      std::vector<partial::AsyncSends::Message> to{{late->depositary, 0, bytes}};
      if (late->backup >= 0) to.push_back({late->backup, 0, bytes});
      st.async_sends(comm).post(as_kind(sig, Kind::partial_deposit), kDepositSeqBit | next, std::move(data), to);
    }
    const auto answered_at = Clock::now();
    st.last_transfer_s = 0;
    if (telemetry::StepTiming* timing = comm.started_step_timing())
      timing->record_collective(std::chrono::duration<double>(answered_at - arrived_at).count(), 0.0);
    // Deferred into a later result, within `staleness` steps; which one is not
    // known yet (contribution_step 0: docs/partial.md#stale-synchronous-defer).
    result.fate = late->depositary >= 0 ? Fate::deferred : Fate::none;
    return finish_call(next);
  }
  partial::Decision d = std::get<partial::Decision>(std::move(answer));
  // Under drop/defer a lost rank is a straggler that never returns: a step
  // whose data movement it breaks is given up on this rank alone (contained
  // calls) and asked for again; the arbiter then completes it among the
  // survivors (docs/partial.md#dead-ranks). Under wait, and stale-synchronous
  // defer, it fails every rank.
  const bool contain = opts.policy != LatePolicy::wait && !opts.stale_synchronous;
  const auto* contribution = static_cast<const std::byte*>(send);
  if (contain && contribution != nullptr && bytes > 0 && contribution == out) {
    // In place: a ring that broke off may have overwritten the contribution a re-run needs.
    st.contribution.resize(bytes);
    std::memcpy(st.contribution.data(), contribution, bytes);
    contribution = st.contribution.data();
  }
  for (;;) {
    const auto decided_at = Clock::now();
    if (d.final) {
      // The others finished while this rank was late: its contribution joins no
      // step; it receives the results it missed and the run ends here.
      st.run_over = true;
      if (!d.catchups.empty() || !d.fetches.empty() || !d.deposits.empty())
        move_data(comm, st, d, sig, kFinishSeqBit | d.step, nullptr, nullptr, count, true);
      st.latest = std::max(st.latest, d.step);
      // Dropped, unless this rank gave up a step that the others completed
      // with its contribution in it (docs/partial.md#dead-ranks).
      set_fate(result, opts, next, included_in(d, comm.rank()));
      if (next <= st.latest) return finish_call(next);
      result.steps_behind = 0;
      return result;  // step 0: no result left for this call
    }
    ANTDT_ASSERT(d.step >= next);

    auto me = std::find_if(d.contributors.begin(), d.contributors.end(), [&](auto& c) { return c.rank == comm.rank(); });
    const bool contributes = me != d.contributors.end();
    // A step this rank gave up, completed by others with its contribution in it.
    const std::uint64_t included_at = included_in(d, comm.rank());
    // On time: the ring writes straight into the caller's buffer; late: into the cache.
    std::byte* own_result = nullptr;
    if (contributes) own_result = next == d.step && out != nullptr ? out : st.cache.claim(d.step).data();
    if (contain) {
      st.cache.save(st.saved_steps);
      st.saved_info.assign(st.info.begin(), st.info.end());
    }
    try {
      StepWatch watch(comm, st, d);
      move_data(comm, st, d, sig, kStepSeqBit | d.step, contribution, own_result, count, false, kind.reduce,
                contain ? &watch : nullptr);
    } catch (const PeerLostError& e) {
      if (!contain || comm.failed()) throw;
      ANTDT_INFO("partial collectives: rank ", comm.rank(), " gave up step ", d.step, " (generation ", d.generation,
                 "): ", e.what());
      // Given up here alone: put back what the broken movement claimed and ask again.
      st.cache.restore(st.saved_steps);
      std::copy(st.saved_info.begin(), st.saved_info.end(), st.info.begin());
      arrival.retry = true;
      arrival.holds = st.latest;
      arrival.compute_s = 0;
      d = ask();
      continue;
    }
    st.last_transfer_s = std::chrono::duration<double>(Clock::now() - decided_at).count();
    if (telemetry::StepTiming* timing = comm.started_step_timing())
      timing->record_collective(std::chrono::duration<double>(decided_at - arrived_at).count(), st.last_transfer_s);
    if (contributes && own_result == out && out != nullptr && !st.cache.has(d.step)) {  // the server cached it already
      auto slot = st.cache.claim(d.step);
      if (bytes > 0 && slot.data() != out) std::memcpy(slot.data(), out, bytes);
    }
    st.latest = std::max(st.latest, d.step);

    set_fate(result, opts, next, contributes ? d.step : included_at);
    return finish_call(next);
  }
}

PartialResult partial_finish(detail::CommImpl& comm) {
  drain_queue(comm);
  comm.check_usable();
  PartialState& st = state_of(comm);
  if (st.run_over) {
    // This rank's last arrival already took part in the finish exchange.
    if (st.sends) st.sends->drain();
    st.run_over = false;
    st.last_return.reset();
    PartialResult result;
    result.step = st.applied;
    result.steps_behind = st.latest - st.applied;
    return result;
  }
  const partial::Decision d =
      ask_arbiter(comm, st, partial::encode(partial::Finish{comm.rank(), st.applied, st.latest}),
                  "in partial_finish for every rank to finish");
  if (!d.catchups.empty() || !d.fetches.empty() || !d.deposits.empty())
    move_data(comm, st, d, st.last_signature, kFinishSeqBit | d.step, nullptr, nullptr, st.last_signature.count, true);
  // Stale-synchronous defer: every deposit and push ahead of this rank was
  // taken off the wire in the exchange above (at its receiver).
  if (st.sends) st.sends->drain();
  st.latest = std::max(st.latest, d.step);
  PartialResult result;
  result.step = st.applied;
  result.steps_behind = st.latest - st.applied;
  st.last_return.reset();
  return result;
}

StragglerClass straggler_class(detail::CommImpl& comm, int rank) {
  ANTDT_CHECK_ARG(rank >= 0 && rank < comm.size(), "straggler_class: rank ", rank, " out of range");
  auto& holder = comm.partial_state();
  if (!holder) return StragglerClass::healthy;
  return static_cast<PartialState&>(*holder).classes[static_cast<std::size_t>(rank)];
}

}  // namespace antdt::coll
