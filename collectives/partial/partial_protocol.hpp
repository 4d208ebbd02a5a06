// Messages between ranks and the arbiter of partial collectives (control
// plane, see core/control.hpp). Every decoder checks lengths, counts and
// enum values and throws BootstrapError on garbage.
#pragma once

#include <antdt/comm.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace antdt::coll::partial {

using Bytes = std::vector<std::byte>;

// rank -> arbiter: "my contribution, computed on results 1..step-1, is ready".
struct Arrival {
  std::int32_t rank = -1;
  std::uint64_t step = 0;       // applied results + 1
  double weight = 0;            // 0: no contribution (only fetches the result)
  double compute_s = 0;         // time since this rank's previous call returned (the Monitor's input)
  double transfer_s = 0;        // time this rank's previous call spent moving data (ring, catch-up)
  std::uint64_t samples = 0;
  std::uint64_t signature = 0;  // count, dtype, op, policy, staleness: must match across ranks
  LatePolicy policy = LatePolicy::wait;
  std::uint32_t staleness = 1;
  bool stale_synchronous = false;  // PartialOptions::stale_synchronous
  // Dead ranks (docs/partial.md#dead-ranks):
  std::uint64_t holds = 0;  // the newest result this rank holds (it completed every step up to it)
  bool retry = false;       // this rank gave up the data movement of `step`'s decision (a rank of it was lost)
};

// rank -> arbiter: "I make no more steps" (partial_finish).
struct Finish {
  std::int32_t rank = -1;
  std::uint64_t applied = 0;
  std::uint64_t holds = 0;  // the newest result this rank holds
};

struct Contributor {
  std::int32_t rank = -1;
  double weight = 0;
  std::uint64_t based_on = 0;  // < step: a deferred contribution
};
struct CatchUp {
  std::int32_t rank = -1;
  std::uint64_t from_step = 0;  // needs results from_step..step pushed by the server
  // Not 0: this rank's contribution is in that step's result after all (it
  // gave up the step when a rank was lost, but others completed it).
  std::uint64_t contribution_step = 0;
  // Not 0: the pushes stop at this step instead of the decision's (the later
  // ones reach the rank as pushes ahead: Fetch).
  std::uint64_t until_step = 0;
};

// Stale-synchronous defer (docs/partial.md#stale-synchronous-defer): a late
// rank's contribution, handed to an on-pace rank (the depositary) that adds it
// to its own in the next step it contributes to.
struct Deposit {
  std::int32_t to = -1;    // the depositary
  std::int32_t from = -1;  // the late rank
  std::uint64_t step = 0;  // the late rank's step (the deposit's message is numbered by it)
  double weight = 0;
  bool drop = false;       // received and discarded: its other holder added it, or the run ended before it could land
};

// Stale-synchronous defer: a result the step's server pushed ahead, unasked, to
// a rank that was absent when the step closed; that rank receives it from
// `server` when the arbiter next answers it.
struct Fetch {
  std::int32_t rank = -1;
  std::uint64_t step = 0;
  std::int32_t server = -1;
};

// arbiter -> every rank that takes part in `step`.
struct Decision {
  std::uint64_t step = 0;         // the step decided; in a final decision, the last step of the run
  bool final = false;             // the run is over (every rank finished): only catch-up, no new result
  std::int32_t server = -1;       // pushes cached results to the catch-up ranks
  std::vector<Contributor> contributors;  // sorted by rank: the ring order
  std::vector<CatchUp> catchups;
  std::vector<StragglerClass> classes;    // the Monitor's view of every rank after this step (lost: gone)
  // Data-plane messages of this decision carry it in their tag; it grows each
  // time a step is given up (a rank lost), so nothing of an attempt given up
  // can match a later one.
  std::uint32_t generation = 0;
  // Stale-synchronous defer:
  std::vector<Deposit> deposits;   // each depositary adds these to its contribution (drop: discards them)
  std::vector<std::int32_t> ahead; // absent ranks the server pushes this step's result to, at once
  std::vector<Fetch> fetches;      // results pushed ahead earlier that ranks of this decision receive first
};

// arbiter -> a rank that arrived late under stale-synchronous defer: it does
// not wait for a step to close. It receives the results pushed ahead to it
// (`fetches`), hands its contribution to `depositary` (none: weight 0, or no
// rank left to take it) and to `backup` (none: the depositary is at the open
// step already), and returns the result of `step` at once. Exactly one of the
// two adds it; the other receives and discards it (Deposit::drop).
struct Late {
  std::uint64_t step = 0;
  std::int32_t depositary = -1;
  std::int32_t backup = -1;
  std::vector<Fetch> fetches;
  std::vector<StragglerClass> classes;
};

// arbiter -> rank, unasked, while that rank may be moving the data of `step`:
// a rank of the step was lost; give its data movement up and arrive again
// (Arrival::retry). Stale ones (an older step or generation) are ignored.
struct Abandon {
  std::uint64_t step = 0;
  std::uint32_t generation = 0;
  std::int32_t lost = -1;  // the rank that was lost
};

// arbiter -> a depositary, unasked, as soon as it is known (stale-synchronous
// defer): deposits it will be told to receive at its next step. It posts the
// receives at once, so the transfers overlap its wait for the step to close.
struct Incoming {
  std::vector<Deposit> deposits;
};

// arbiter -> rank: the call fails with this status on that rank.
struct Failure {
  Status status = Status::internal;
  std::string reason;
};

Bytes encode(const Arrival& m);
Bytes encode(const Finish& m);
Bytes encode(const Decision& m);
Bytes encode(const Failure& m);
Bytes encode(const Abandon& m);
Bytes encode(const Late& m);
Bytes encode(const Incoming& m);

using ToArbiter = std::variant<Arrival, Finish>;
using FromArbiter = std::variant<Decision, Failure, Abandon, Late, Incoming>;
// `ranks` bounds rank fields and list lengths.
ToArbiter decode_to_arbiter(std::span<const std::byte> bytes, int ranks);
FromArbiter decode_from_arbiter(std::span<const std::byte> bytes, int ranks);

// One line naming a message's kind and its fields that decide the protocol's
// course, for the arbiter's trace (ANTDT_DEBUG=trace).
std::string summary(const ToArbiter& m);
std::string summary(const FromArbiter& m);

}  // namespace antdt::coll::partial
