// Stateful Dynamic Data Sharding (DESIGN §9, docs/dds.md).
//
// The coordinator hands out a dataset's samples to ranks in small batches
// ("leases") cut from shards of the epoch's shuffled sample order. A rank keeps
// one DOING shard and takes the next queued shard when it is used up, so fast
// ranks take more shards. Samples count as consumed only when their lease is
// committed (the step that used them was included in a result); a lease given
// back (dropped contribution, failed step) or revoked (rank failure, restore)
// returns its samples to queued. Invariant: every sample is committed exactly
// once per epoch. State is checkpointed atomically (write, fsync, rename, fsync
// of the directory) and restored after a coordinator restart.
//
// Thread-safe: every public member locks. Memory is O(live shards + open
// leases), independent of the dataset size (the shuffle is a keyed permutation
// computed on demand, not a table).
#pragma once

#include <antdt/comm.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace antdt {
struct Config;
}

namespace antdt::sched {
struct DdsCheckpoint;
}

namespace antdt::sched {

// One input file and the number of records in it (files mode).
struct DataFile {
  std::string name;
  std::uint64_t records = 0;
};

// Where a sample lives in files mode.
struct SampleLocation {
  std::size_t file = 0;       // index into Dataset::files()
  std::uint64_t record = 0;   // record number inside that file
};

// N samples with ids 0..N-1, or files whose records are numbered in file order:
// file 0's records are samples 0..r0-1, file 1's are r0..r0+r1-1, and so on.
class Dataset {
 public:
  static Dataset samples(std::uint64_t count);                 // InvalidArgument when count == 0
  static Dataset files(std::vector<DataFile> files);           // InvalidArgument when empty or no records
  std::uint64_t size() const noexcept { return size_; }
  bool has_files() const noexcept { return !files_.empty(); }
  std::span<const DataFile> files() const noexcept { return files_; }
  // Files mode: the file and record of `sample`. InvalidArgument when out of range or not in files mode.
  SampleLocation locate(std::uint64_t sample) const;

  bool operator==(const Dataset& other) const noexcept;

 private:
  std::uint64_t size_ = 0;
  std::vector<DataFile> files_;
  std::vector<std::uint64_t> starts_;  // first sample id of each file (prefix sums)
};

// How an epoch's sample order is drawn from the seed.
enum class ShuffleMode : std::uint8_t {
  none = 0,     // sample order 0..N-1 every epoch
  samples = 1,  // a full permutation of the samples, new per epoch
  blocks = 2,   // blocks of shard_size consecutive ids in a new order per epoch, ids in order inside a block
                // (sequential reads inside a shard for files mode)
};
std::string_view to_string(ShuffleMode mode) noexcept;
ShuffleMode parse_shuffle_mode(std::string_view text);  // InvalidArgument naming the accepted values

struct DdsOptions {
  int world_size = 1;                 // ranks 0..world_size-1 may fetch
  std::uint64_t shard_size = 1024;    // samples per fresh shard (the last one of an epoch may be shorter)
  std::uint64_t seed = 0;             // shuffle seed: the same seed gives the same order every run
  ShuffleMode shuffle = ShuffleMode::samples;
  std::uint32_t epochs = 0;           // epochs to serve; 0 = no end
  // Work stealing at the end of an epoch: a fetch that finds no queued shard takes
  // the back half of the largest DOING remainder, when that half has at least
  // steal_min samples. 0 = off (only resplit() moves a rank's samples).
  std::uint64_t steal_min = 0;

  bool operator==(const DdsOptions&) const = default;
};

// Options from ANTDT_DDS_SHARD_SIZE, ANTDT_DDS_SEED and ANTDT_DDS_SHUFFLE (docs/configuration.md).
DdsOptions dds_options_from(const Config& cfg, int world_size, std::uint32_t epochs = 0);

// queued, doing, done: DESIGN.md §9's three shard states (its "to do" is queued here).
enum class ShardState : std::uint8_t { queued = 0, doing = 1, done = 2 };
std::string_view to_string(ShardState state) noexcept;

// A contiguous range [begin, end) of positions in an epoch's sample order.
// Positions [begin, cursor) have been handed out (given-back ones then moved to
// a new shard); [cursor, end) not yet.
struct Shard {
  std::uint32_t epoch = 0;
  std::uint64_t id = 0;           // unique within the epoch
  std::uint64_t begin = 0, end = 0, cursor = 0;
  int owner = -1;                 // the rank working on it (DOING), -1 when queued
  ShardState state = ShardState::queued;
  std::uint32_t attempts = 0;     // times its samples were taken by a rank (re-takes after failures count)
  std::uint64_t pending = 0;      // samples of open leases cut from it (handed out, not committed or given back)
};

enum class FetchStatus : std::uint8_t {
  ok = 0,        // samples holds 1..max_samples ids (fewer near the end of an epoch)
  wait = 1,      // nothing to hand out now: the epoch's remaining samples are leased to ranks whose
                 // leases are still open (and no half reaches steal_min); call again after
                 // commits, give-backs or a resplit
  finished = 2,  // every epoch requested has been consumed
};

struct Batch {
  FetchStatus status = FetchStatus::wait;
  std::uint64_t lease = 0;               // pass to commit() or give_back(); 0 when no samples
  std::uint32_t epoch = 0;
  std::vector<std::uint64_t> samples;    // sample ids (Dataset::locate maps them to files)
};

struct DdsProgress {
  std::uint32_t epoch = 0;               // the epoch being served (== epochs when finished)
  bool finished = false;
  std::uint64_t epoch_samples = 0;       // N
  std::uint64_t committed = 0;           // samples of this epoch consumed for good
  std::uint64_t leased = 0;              // samples in open leases
  std::uint64_t unassigned = 0;          // samples of this epoch not handed out (epoch_samples - committed - leased)
  std::uint64_t queued_shards = 0, doing_shards = 0, done_shards = 0;  // done_shards: this epoch
  std::uint64_t open_leases = 0;
  std::uint64_t epochs_completed = 0;
  // Since the start of the job (kept across checkpoints):
  std::uint64_t total_committed = 0;
  std::uint64_t given_back_samples = 0;  // samples of leases returned (give_back, rank_failed, restore)
  std::uint64_t resplit_samples = 0;     // tails cut off by resplit
  std::uint64_t stolen_samples = 0;      // halves taken by work stealing (DdsOptions::steal_min)
  std::uint64_t rank_failures = 0;
};

// An open lease: the rank it was handed to and the ranges of shards it holds.
struct LeaseRecord {
  int rank = -1;
  struct Piece {
    std::uint64_t shard = 0, begin = 0, end = 0;
  };
  std::vector<Piece> pieces;
};

// Everything a Dds changes as it runs (the dataset and options stay fixed):
// what a checkpoint stores beside them (scheduler/dds_checkpoint.hpp).
struct DdsState {
  std::uint32_t epoch = 0;
  bool finished = false;
  std::uint64_t fresh = 0;            // positions [fresh, N) are in no shard yet (cut on demand)
  std::uint64_t next_shard_id = 0;
  std::uint64_t next_lease_id = 1;
  std::uint64_t committed = 0;
  std::uint64_t done_shards = 0;
  std::map<std::uint64_t, Shard> shards;          // live shards by id
  std::deque<std::uint64_t> queued;                 // queued shard ids, next first
  std::vector<std::int64_t> active;               // per rank: its DOING shard with samples left, or -1
  std::map<std::uint64_t, LeaseRecord> leases;    // open leases by id
  std::vector<std::uint64_t> shards_taken;        // per rank
  std::uint64_t epochs_completed = 0, total_committed = 0, given_back = 0, resplit = 0, rank_failures = 0;
  std::uint64_t stolen = 0;
};

// What changed in a Dds since the last take_changes(): what a store that keeps
// the state durably (scheduler/dds_store.hpp) writes in one transaction. The
// Dds knows nothing of the store: it only records which rows it touched.
struct DdsChanges {
  bool everything = false;  // write `state` whole (a new or restored Dds); the lists below are empty then
  DdsState state;           // everything: the whole state; otherwise only its scalar fields (maps and lists empty)
  std::vector<Shard> shards;                                  // live shards created or changed
  std::vector<std::uint64_t> shards_gone;                     // shards that are DONE (no longer live)
  std::vector<std::pair<std::uint64_t, LeaseRecord>> leases;  // leases opened
  std::vector<std::uint64_t> leases_gone;                     // leases settled or returned
  struct RankSlot {
    int rank = 0;
    std::int64_t active = -1;
    std::uint64_t shards_taken = 0;
  };
  std::vector<RankSlot> ranks;                                // ranks whose active shard or count changed
  bool queue_changed = false;
  std::vector<std::uint64_t> queue;                           // queue_changed: the whole queue, next first
  bool any = false;                                           // false: nothing changed, nothing to write
};

class Dds {
 public:
  // InvalidArgument naming the problem: world_size < 1, shard_size == 0.
  Dds(Dataset dataset, DdsOptions options);
  Dds(const Dds&) = delete;
  Dds& operator=(const Dds&) = delete;

  const Dataset& dataset() const noexcept { return dataset_; }
  const DdsOptions& options() const noexcept { return options_; }

  // Up to max_samples sample ids for `rank`, from its DOING shard and, when that
  // is used up, the next queued shards. Never spans two epochs.
  Batch fetch(int rank, std::uint64_t max_samples);
  // The lease's samples are consumed. False when the lease is no longer open
  // (already settled, or revoked by rank_failed() or a restore): nothing changes.
  // InvalidArgument for an id that was never issued.
  bool commit(std::uint64_t lease);
  // The lease's samples go back: by rewinding the shard's cursor when they are
  // its most recently handed-out samples (the same rank gets them next), else as
  // a new queued shard. Same return value and errors as commit().
  bool give_back(std::uint64_t lease);
  // The link to partial collectives (DESIGN §7): settles the lease of the step
  // whose contribution got `fate` (PartialResult::fate). included / deferred:
  // commit; dropped: give_back. Fate::none is an InvalidArgument: a weight-0 call
  // carried no samples, so it has no lease to settle.
  bool settle(std::uint64_t lease, Fate fate);
  // Cuts `rank`'s DOING shard at its cursor (plus `keep` samples the rank may
  // still fetch); the tail becomes a queued shard ahead of the others, for faster
  // ranks. Returns the samples moved (0 when the rank has no DOING samples left).
  std::uint64_t resplit(int rank, std::uint64_t keep = 0);
  // `rank` died: its open leases and the rest of its DOING shards go back to
  // queued. Returns the samples returned. The rank may fetch again after a restart.
  std::uint64_t rank_failed(int rank);

  std::uint32_t epoch() const;
  DdsProgress progress() const;
  // Shards taken (queued → DOING) per rank since the start of the job.
  std::vector<std::uint64_t> shards_taken() const;
  // The live (queued and DOING) shards of the current epoch, ordered by id.
  std::vector<Shard> shards() const;
  // The sample id at `position` of epoch `epoch`'s order (a bijection of 0..N-1 for each epoch).
  std::uint64_t sample_at(std::uint32_t epoch, std::uint64_t position) const;

  // The state as canonical JSON text (the checkpoint's content; equal states give equal text).
  std::string serialize() const;
  // Atomic checkpoint: writes path.tmp, fsyncs it, renames it over `path`, fsyncs
  // the directory. A crash leaves either the old or the new file, never a mix.
  // InvalidArgument naming the path and the errno text when a step fails.
  void checkpoint(const std::string& path) const;
  // Replaces this object's state by the checkpoint's. The dataset and options
  // must equal this object's (InvalidArgument naming the field that differs).
  // Leases open at checkpoint time go back to queued (docs/dds.md says why).
  // A malformed file (syntax, missing or mistyped field, checksum, version,
  // inconsistent ranges) raises InvalidArgument naming the path and the problem;
  // the object is unchanged then.
  void restore(const std::string& path);
  // Builds a Dds from the checkpoint alone (dataset and options included).
  static std::unique_ptr<Dds> load(const std::string& path);
  // Builds a Dds from a state read back from a store (scheduler/dds_store.hpp).
  // The leases open in it go back to queued, as after restore(); `returned`
  // (when given) receives the samples that went back.
  static std::unique_ptr<Dds> resume(DdsCheckpoint stored, std::uint64_t* returned = nullptr);

  // The changes since the previous call (the first call, and the first after a
  // restore, give everything). Whoever writes them durably calls this once per
  // transaction, in order.
  DdsChanges take_changes();

 private:
  void check_rank(int rank, std::string_view what) const;
  std::optional<std::uint64_t> next_todo_locked();
  bool steal_locked(int thief);
  std::uint64_t new_shard_locked(std::uint64_t begin, std::uint64_t end, std::uint32_t attempts);
  void maybe_done_locked(Shard& shard);
  void return_piece_locked(int rank, const LeaseRecord::Piece& piece, bool allow_rewind);
  void return_lease_locked(std::uint64_t id);
  void advance_epoch_locked();
  void restore_locked(DdsState state);
  // Change tracking for take_changes(): the rows an operation touched.
  void touch_shard(std::uint64_t id) { dirty_shards_.insert(id); }
  void touch_rank(std::size_t rank) { dirty_ranks_.insert(rank); }
  void touch_lease(std::uint64_t id) { dirty_leases_.insert(id); }
  void touch_queue() { dirty_queue_ = true; }

  Dataset dataset_;
  DdsOptions options_;
  mutable std::mutex mutex_;             // guards state_
  mutable std::mutex checkpoint_mutex_;  // serialises checkpoint() writers; taken before mutex_
  DdsState state_;
  // Rows changed since the last take_changes() (guarded by mutex_).
  std::set<std::uint64_t> dirty_shards_, dirty_leases_;
  std::set<std::size_t> dirty_ranks_;
  bool dirty_queue_ = false;
  bool dirty_all_ = true;
  bool dirty_scalars_ = false;  // a counter moved without touching a row (e.g. rank_failed of a finished job)
};

}  // namespace antdt::sched
