// Where the coordinator keeps its data-sharding state durably (docs/dds.md,
// "Durable state"). The Dds itself knows no store: it records the rows each
// operation touched (Dds::take_changes) and the coordinator hands them to a
// DdsStore in one transaction per batch of requests, before it answers any of
// them. The SQLite implementation is scheduler/dds_store_sqlite.hpp.
#pragma once

#include "scheduler/dds.hpp"
#include "scheduler/dds_checkpoint.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace antdt::sched {

// The answer to a rank's latest commit or give-back, kept with the DDS state:
// a request the rank sends again after a coordinator crash (it never saw the
// answer) gets the answer of the first one instead of "not open".
struct SettleRecord {
  int rank = 0;
  std::uint64_t lease = 0;
  bool commit = false;  // commit (true) or give_back (false)
  bool ok = false;      // what the first request was answered

  bool operator==(const SettleRecord&) const = default;
};

// A rank lost for good (crashed with no restarts left): a restarted
// coordinator must not count it as a member of the next communicator
// generation, nor give it a share of the global batch. `gone` false: it came
// back after all (a launcher restarted it anyway); the row goes.
struct LostRank {
  int rank = 0;
  std::uint32_t incarnation = 0;   // the incarnation that was lost
  std::uint64_t generation = 0;    // the generation it was lost in
  bool gone = true;

  bool operator==(const LostRank&) const = default;
};

// A step whose plan the coordinator handed out ("froze"): every rank asking
// for it gets the same generation, stop flag and restart orders, also from a
// coordinator process started after a crash. Without it, a restarted
// coordinator plans from step 1 again and refuses the plan a slower rank
// still needs (ranks of partial steps are a step or more apart).
struct FrozenStep {
  std::uint64_t step = 0;
  std::uint64_t generation = 0;
  bool stop = false;
  std::vector<std::pair<int, std::uint32_t>> restarts;  // rank, incarnation told to exit

  bool operator==(const FrozenStep&) const = default;
};

// A communicator generation the coordinator planned: its first step and its
// members (job ranks in communicator-rank order).
struct GenerationRecord {
  std::uint64_t generation = 0;
  std::uint64_t start = 0;
  std::vector<std::uint32_t> members;

  bool operator==(const GenerationRecord&) const = default;
};

// The id the first member of a generation offered (its bootstrap root's
// address and secret): the other members fetch it from the coordinator, also
// from one started after a crash that came between the offer and their fetch.
struct OfferedId {
  std::uint64_t generation = 0;
  UniqueId id;

  bool operator==(const OfferedId& o) const { return generation == o.generation && id.bytes == o.id.bytes; }
};

// The coordinator's own rows, written in the same transaction as the DDS's.
struct CoordinatorRows {
  std::span<const SettleRecord> settled;
  std::span<const LostRank> lost;
  std::span<const FrozenStep> frozen;
  std::span<const GenerationRecord> generations;
  std::uint64_t frozen_kept_from = 0;  // frozen steps below it are no longer kept (0: no change)
  std::optional<OfferedId> offered;    // the newest generation's id; older ones go
  bool empty() const noexcept {
    return settled.empty() && lost.empty() && frozen.empty() && generations.empty() && frozen_kept_from == 0 &&
           !offered;
  }
};

struct StoredState {
  DdsCheckpoint dds;
  std::vector<SettleRecord> settled;  // one per rank at most
  std::vector<LostRank> lost;         // the ranks lost for good (gone = true), by rank
  std::vector<FrozenStep> frozen;     // the frozen steps still kept, by step
  std::vector<GenerationRecord> generations;  // by generation
  std::optional<OfferedId> offered;           // the id of the newest generation offered one
};

class DdsStore {
 public:
  virtual ~DdsStore() = default;
  // The state written last (validated like a checkpoint: InvalidArgument
  // naming the store and the problem), or nullopt when the store is empty.
  virtual std::optional<StoredState> load() = 0;
  // One durable transaction: once it returns, the changes survive a kill of
  // this process (and, with the default synchronous setting, of the machine);
  // when it throws, none of them was written.
  virtual void write(const Dataset& dataset, const DdsOptions& options, const DdsChanges& changes,
                     const CoordinatorRows& rows) = 0;
  // What it is, for messages ("SQLite database /path/to/file").
  virtual std::string describe() const = 0;
};

}  // namespace antdt::sched
