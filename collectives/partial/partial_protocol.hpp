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
};

// rank -> arbiter: "I make no more steps" (partial_finish).
struct Finish {
  std::int32_t rank = -1;
  std::uint64_t applied = 0;
};

struct Contributor {
  std::int32_t rank = -1;
  double weight = 0;
  std::uint64_t based_on = 0;  // < step: a deferred contribution
};
struct CatchUp {
  std::int32_t rank = -1;
  std::uint64_t from_step = 0;  // needs results from_step..step pushed by the server
};

// arbiter -> every rank that takes part in `step`.
struct Decision {
  std::uint64_t step = 0;         // the step decided; in a final decision, the last step of the run
  bool final = false;             // the run is over (every rank finished): only catch-up, no new result
  std::int32_t server = -1;       // pushes cached results to the catch-up ranks
  std::vector<Contributor> contributors;  // sorted by rank: the ring order
  std::vector<CatchUp> catchups;
  std::vector<StragglerClass> classes;    // the Monitor's view of every rank after this step
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

using ToArbiter = std::variant<Arrival, Finish>;
using FromArbiter = std::variant<Decision, Failure>;
// `ranks` bounds rank fields and list lengths.
ToArbiter decode_to_arbiter(std::span<const std::byte> bytes, int ranks);
FromArbiter decode_from_arbiter(std::span<const std::byte> bytes, int ranks);

}  // namespace antdt::coll::partial
