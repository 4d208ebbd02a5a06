// Stateful Dynamic Data Sharding (scheduler/dds.hpp, docs/dds.md): the
// dataset and the sharding state machine; the epoch's sample order is
// scheduler/dds_sample_order.cpp, the checkpoint format
// scheduler/dds_checkpoint.cpp.
#include "scheduler/dds.hpp"

#include "core/config.hpp"
#include "core/error.hpp"
#include "scheduler/dds_checkpoint.hpp"
#include "scheduler/dds_sample_order.hpp"

#include <algorithm>
#include <utility>

namespace antdt::sched {
namespace {

// Well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF):
// JSON strings must be, and file names go into the checkpoint.
bool valid_utf8(std::string_view text) noexcept {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > text.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    constexpr std::uint32_t kMinOf[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinOf[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------
// Dataset
// ---------------------------------------------------------------------------
Dataset Dataset::samples(std::uint64_t count) {
  ANTDT_CHECK_ARG(count > 0, "DDS dataset: sample count must be at least 1 (got 0)");
  Dataset d;
  d.size_ = count;
  return d;
}

Dataset Dataset::files(std::vector<DataFile> files) {
  ANTDT_CHECK_ARG(!files.empty(), "DDS dataset: the file list is empty");
  Dataset d;
  d.starts_.reserve(files.size());
  std::uint64_t total = 0;
  for (const DataFile& f : files) {
    ANTDT_CHECK_ARG(!f.name.empty(), "DDS dataset: file ", d.starts_.size(), " has an empty name");
    ANTDT_CHECK_ARG(valid_utf8(f.name), "DDS dataset: the name of file ", d.starts_.size(),
                    " is not valid UTF-8 (names are stored in JSON checkpoints)");
    ANTDT_CHECK_ARG(f.records <= ~std::uint64_t{0} - total, "DDS dataset: record counts overflow 64 bits at file ",
                    f.name);
    d.starts_.push_back(total);
    total += f.records;
  }
  ANTDT_CHECK_ARG(total > 0, "DDS dataset: the ", files.size(), " files hold no records");
  d.size_ = total;
  d.files_ = std::move(files);
  return d;
}

SampleLocation Dataset::locate(std::uint64_t sample) const {
  ANTDT_CHECK_ARG(has_files(), "DDS dataset: locate(", sample, ") needs a dataset described by files");
  ANTDT_CHECK_ARG(sample < size_, "DDS dataset: sample ", sample, " out of range (", size_, " samples)");
  // The last file starting at or before `sample`; empty files share their start
  // with the next file, and upper_bound skips past them.
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), sample);
  const auto file = static_cast<std::size_t>(it - starts_.begin()) - 1;
  return {file, sample - starts_[file]};
}

bool Dataset::operator==(const Dataset& other) const noexcept {
  if (size_ != other.size_ || files_.size() != other.files_.size()) return false;
  for (std::size_t i = 0; i < files_.size(); ++i)
    if (files_[i].name != other.files_[i].name || files_[i].records != other.files_[i].records) return false;
  return true;
}

std::string_view to_string(ShuffleMode mode) noexcept {
  switch (mode) {
    case ShuffleMode::none: return "none";
    case ShuffleMode::samples: return "samples";
    case ShuffleMode::blocks: return "blocks";
  }
  return "?";
}

ShuffleMode parse_shuffle_mode(std::string_view text) {
  if (text == "none") return ShuffleMode::none;
  if (text == "samples") return ShuffleMode::samples;
  if (text == "blocks") return ShuffleMode::blocks;
  raise<InvalidArgument>("DDS shuffle mode '", text, "' is not one of none|samples|blocks");
}

DdsOptions dds_options_from(const Config& cfg, int world_size, std::uint32_t epochs) {
  DdsOptions o;
  o.world_size = world_size;
  o.shard_size = cfg.dds_shard_size;
  o.seed = static_cast<std::uint64_t>(cfg.dds_seed);
  o.shuffle = parse_shuffle_mode(cfg.dds_shuffle);
  o.epochs = epochs;
  return o;
}

std::string_view to_string(ShardState state) noexcept {
  switch (state) {
    case ShardState::queued: return "queued";
    case ShardState::doing: return "doing";
    case ShardState::done: return "done";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// Dds
// ---------------------------------------------------------------------------
Dds::Dds(Dataset dataset, DdsOptions options) : dataset_(std::move(dataset)), options_(options) {
  ANTDT_CHECK_ARG(dataset_.size() > 0, "DDS: the dataset has no samples");
  ANTDT_CHECK_ARG(options_.world_size >= 1, "DDS: world_size must be at least 1 (got ", options_.world_size, ")");
  ANTDT_CHECK_ARG(options_.shard_size >= 1, "DDS: shard_size must be at least 1 (got 0)");
  ANTDT_CHECK_ARG(options_.shuffle == ShuffleMode::none || options_.shuffle == ShuffleMode::samples ||
                      options_.shuffle == ShuffleMode::blocks,
                  "DDS: unknown shuffle mode ", static_cast<int>(options_.shuffle));
  const auto ranks = static_cast<std::size_t>(options_.world_size);
  state_.active.assign(ranks, -1);
  state_.shards_taken.assign(ranks, 0);
}

void Dds::check_rank(int rank, std::string_view what) const {
  ANTDT_CHECK_ARG(rank >= 0 && rank < options_.world_size, "DDS ", what, ": rank ", rank, " out of range [0, ",
                  options_.world_size, ")");
}

std::uint64_t Dds::sample_at(std::uint32_t epoch, std::uint64_t position) const {
  const std::uint64_t n = dataset_.size();
  ANTDT_CHECK_ARG(position < n, "DDS sample_at: position ", position, " out of range (", n, " samples)");
  return shuffled_sample(n, options_, epoch, position);
}

std::uint64_t Dds::new_shard_locked(std::uint64_t begin, std::uint64_t end, std::uint32_t attempts) {
  Shard s;
  s.epoch = state_.epoch;
  s.id = state_.next_shard_id++;
  s.begin = begin;
  s.end = end;
  s.cursor = begin;
  s.attempts = attempts;
  state_.shards.emplace(s.id, s);
  touch_shard(s.id);
  return s.id;
}

std::optional<std::uint64_t> Dds::next_todo_locked() {
  if (!state_.queued.empty()) {
    const std::uint64_t id = state_.queued.front();
    state_.queued.pop_front();
    touch_queue();
    return id;
  }
  const std::uint64_t n = dataset_.size();
  if (state_.fresh >= n) return std::nullopt;
  const std::uint64_t begin = state_.fresh;
  const std::uint64_t end = begin + std::min(options_.shard_size, n - begin);
  state_.fresh = end;
  return new_shard_locked(begin, end, 0);
}

bool Dds::steal_locked(int thief) {
  if (options_.steal_min == 0) return false;
  // The rank with the most samples not yet handed out; O(ranks), only when the
  // queued queue and the fresh positions are empty, i.e. at the end of an epoch.
  std::int64_t victim = -1;
  std::uint64_t most = 0;
  for (std::size_t r = 0; r < state_.active.size(); ++r) {
    if (static_cast<int>(r) == thief || state_.active[r] < 0) continue;
    const Shard& shard = state_.shards.at(static_cast<std::uint64_t>(state_.active[r]));
    if (shard.end - shard.cursor > most) {
      most = shard.end - shard.cursor;
      victim = state_.active[r];
    }
  }
  const std::uint64_t half = most / 2;  // the owner keeps the front (the larger half when odd)
  if (victim < 0 || half < options_.steal_min) return false;
  Shard& shard = state_.shards.at(static_cast<std::uint64_t>(victim));
  const std::uint64_t cut = shard.end - half;
  const std::uint64_t id = new_shard_locked(cut, shard.end, shard.attempts);
  shard.end = cut;  // cut > cursor: the owner keeps samples and stays on this shard
  touch_shard(shard.id);
  state_.queued.push_front(id);
  touch_queue();
  state_.stolen += half;
  return true;
}

void Dds::maybe_done_locked(Shard& shard) {
  if (shard.cursor != shard.end || shard.pending != 0) return;
  if (shard.owner >= 0 && state_.active[static_cast<std::size_t>(shard.owner)] == static_cast<std::int64_t>(shard.id)) {
    state_.active[static_cast<std::size_t>(shard.owner)] = -1;
    touch_rank(static_cast<std::size_t>(shard.owner));
  }
  if (shard.state == ShardState::queued) {
    std::erase(state_.queued, shard.id);
    touch_queue();
  }
  touch_shard(shard.id);
  ++state_.done_shards;
  state_.shards.erase(shard.id);  // `shard` dangles from here on
}

Batch Dds::fetch(int rank, std::uint64_t max_samples) {
  check_rank(rank, "fetch");
  ANTDT_CHECK_ARG(max_samples > 0, "DDS fetch: max_samples must be at least 1 (rank ", rank, ")");
  std::lock_guard lock(mutex_);
  Batch batch;
  batch.epoch = state_.epoch;
  if (state_.finished) {
    batch.status = FetchStatus::finished;
    return batch;
  }
  const auto r = static_cast<std::size_t>(rank);
  LeaseRecord lease;
  lease.rank = rank;
  std::uint64_t need = max_samples;
  while (need > 0) {
    if (state_.active[r] < 0) {
      auto next = next_todo_locked();
      if (!next && steal_locked(rank)) next = next_todo_locked();
      if (!next) break;
      Shard& taken = state_.shards.at(*next);
      taken.state = ShardState::doing;
      taken.owner = rank;
      ++taken.attempts;
      ++state_.shards_taken[r];
      state_.active[r] = static_cast<std::int64_t>(taken.id);
      touch_shard(taken.id);
      touch_rank(r);
    }
    Shard& shard = state_.shards.at(static_cast<std::uint64_t>(state_.active[r]));
    const std::uint64_t take = std::min(need, shard.end - shard.cursor);
    if (take > 0) {
      lease.pieces.push_back({shard.id, shard.cursor, shard.cursor + take});
      shard.cursor += take;
      shard.pending += take;
      need -= take;
      touch_shard(shard.id);
    }
    if (shard.cursor == shard.end) {
      state_.active[r] = -1;  // used up; DONE once its leases are committed
      touch_rank(r);
    }
  }
  if (lease.pieces.empty()) {
    batch.status = FetchStatus::wait;
    return batch;
  }
  batch.status = FetchStatus::ok;
  batch.samples.reserve(max_samples - need);
  for (const auto& piece : lease.pieces)
    for (std::uint64_t p = piece.begin; p < piece.end; ++p) batch.samples.push_back(sample_at(state_.epoch, p));
  batch.lease = state_.next_lease_id++;
  state_.leases.emplace(batch.lease, std::move(lease));
  touch_lease(batch.lease);
  return batch;
}

bool Dds::commit(std::uint64_t lease) {
  std::lock_guard lock(mutex_);
  const auto it = state_.leases.find(lease);
  if (it == state_.leases.end()) {
    ANTDT_CHECK_ARG(lease > 0 && lease < state_.next_lease_id, "DDS commit: lease ", lease, " was never issued");
    return false;
  }
  for (const auto& piece : it->second.pieces) {
    Shard& shard = state_.shards.at(piece.shard);
    const std::uint64_t count = piece.end - piece.begin;
    ANTDT_ASSERT(shard.pending >= count);
    shard.pending -= count;
    state_.committed += count;
    state_.total_committed += count;
    touch_shard(shard.id);
    maybe_done_locked(shard);
  }
  touch_lease(lease);
  state_.leases.erase(it);
  if (state_.committed == dataset_.size()) advance_epoch_locked();
  return true;
}

void Dds::return_piece_locked(int rank, const LeaseRecord::Piece& piece, bool allow_rewind) {
  Shard& shard = state_.shards.at(piece.shard);
  const std::uint64_t count = piece.end - piece.begin;
  ANTDT_ASSERT(shard.pending >= count);
  shard.pending -= count;
  state_.given_back += count;
  touch_shard(shard.id);
  const auto r = static_cast<std::size_t>(rank);
  // Rewind when these are the shard's latest handed-out samples and the rank is
  // still on this shard (or on none): the same rank takes them again next, and
  // no new shard is made.
  const bool rank_free = state_.active[r] < 0 || state_.active[r] == static_cast<std::int64_t>(shard.id);
  if (allow_rewind && shard.owner == rank && shard.state == ShardState::doing && piece.end == shard.cursor &&
      rank_free) {
    shard.cursor = piece.begin;
    state_.active[r] = static_cast<std::int64_t>(shard.id);
    touch_rank(r);
    return;
  }
  const std::uint64_t id = new_shard_locked(piece.begin, piece.end, shard.attempts);
  state_.queued.push_front(id);  // returned work first: the epoch must not end waiting on it
  touch_queue();
  maybe_done_locked(state_.shards.at(piece.shard));
}

void Dds::return_lease_locked(std::uint64_t id) {
  const auto it = state_.leases.find(id);
  ANTDT_ASSERT(it != state_.leases.end());
  const LeaseRecord record = std::move(it->second);
  state_.leases.erase(it);
  touch_lease(id);
  // Latest pieces first, so consecutive pieces rewind one cursor step by step.
  for (auto piece = record.pieces.rbegin(); piece != record.pieces.rend(); ++piece)
    return_piece_locked(record.rank, *piece, true);
}

bool Dds::give_back(std::uint64_t lease) {
  std::lock_guard lock(mutex_);
  if (state_.leases.find(lease) == state_.leases.end()) {
    ANTDT_CHECK_ARG(lease > 0 && lease < state_.next_lease_id, "DDS give_back: lease ", lease, " was never issued");
    return false;
  }
  return_lease_locked(lease);
  return true;
}

bool Dds::settle(std::uint64_t lease, Fate fate) {
  switch (fate) {
    case Fate::included:
    case Fate::deferred: return commit(lease);
    case Fate::dropped: return give_back(lease);
    case Fate::none: break;
  }
  raise<InvalidArgument>("DDS settle: lease ", lease, " with fate ", static_cast<int>(fate),
                         " (none or unknown): only included, deferred or dropped contributions carry samples");
}

std::uint64_t Dds::resplit(int rank, std::uint64_t keep) {
  check_rank(rank, "resplit");
  std::lock_guard lock(mutex_);
  const auto r = static_cast<std::size_t>(rank);
  if (state_.finished || state_.active[r] < 0) return 0;
  Shard& shard = state_.shards.at(static_cast<std::uint64_t>(state_.active[r]));
  const std::uint64_t cut = shard.cursor + std::min(keep, shard.end - shard.cursor);
  if (cut == shard.end) return 0;
  const std::uint64_t moved = shard.end - cut;
  // std::map insertion keeps references valid: `shard` stays usable.
  const std::uint64_t tail = new_shard_locked(cut, shard.end, shard.attempts);
  shard.end = cut;
  touch_shard(shard.id);
  state_.queued.push_front(tail);
  touch_queue();
  state_.resplit += moved;
  if (shard.cursor == shard.end) {
    state_.active[r] = -1;
    touch_rank(r);
    maybe_done_locked(shard);
  }
  return moved;
}

std::uint64_t Dds::rank_failed(int rank) {
  check_rank(rank, "rank_failed");
  std::lock_guard lock(mutex_);
  ++state_.rank_failures;
  dirty_scalars_ = true;
  if (state_.finished) return 0;
  // Counted before the leases go back, which may rewind these shards' cursors.
  std::uint64_t untouched = 0;
  std::vector<std::uint64_t> owned;
  for (const auto& [id, shard] : state_.shards)
    if (shard.owner == rank && shard.state == ShardState::doing) {
      owned.push_back(id);
      untouched += shard.end - shard.cursor;
    }
  const std::uint64_t before = state_.given_back;
  std::vector<std::uint64_t> mine;
  for (const auto& [id, record] : state_.leases)
    if (record.rank == rank) mine.push_back(id);
  for (auto id = mine.rbegin(); id != mine.rend(); ++id) return_lease_locked(*id);
  const std::uint64_t returned = state_.given_back - before + untouched;
  // Every lease cut from a shard belongs to its owner, so the rank's shards
  // have no pending samples left: each one with samples left becomes queued as it is.
  state_.active[static_cast<std::size_t>(rank)] = -1;
  touch_rank(static_cast<std::size_t>(rank));
  for (const std::uint64_t id : owned) {
    const auto it = state_.shards.find(id);
    if (it == state_.shards.end()) continue;  // DONE when its last lease went back
    Shard& shard = it->second;
    ANTDT_ASSERT(shard.pending == 0);
    if (shard.cursor == shard.end) {
      maybe_done_locked(shard);
      continue;
    }
    shard.state = ShardState::queued;
    shard.owner = -1;
    state_.queued.push_front(id);
    touch_shard(id);
    touch_queue();
  }
  return returned;
}

void Dds::advance_epoch_locked() {
  ANTDT_ASSERT(state_.leases.empty() && state_.shards.empty());
  ++state_.epochs_completed;
  ++state_.epoch;
  state_.fresh = 0;
  state_.next_shard_id = 0;
  state_.committed = 0;
  state_.done_shards = 0;
  state_.queued.clear();
  touch_queue();
  for (std::size_t r = 0; r < state_.active.size(); ++r)
    if (state_.active[r] != -1) touch_rank(r);
  std::fill(state_.active.begin(), state_.active.end(), -1);
  if (options_.epochs != 0 && state_.epoch >= options_.epochs) state_.finished = true;
}

std::uint32_t Dds::epoch() const {
  std::lock_guard lock(mutex_);
  return state_.epoch;
}

DdsProgress Dds::progress() const {
  std::lock_guard lock(mutex_);
  DdsProgress p;
  p.epoch = state_.epoch;
  p.finished = state_.finished;
  p.epoch_samples = dataset_.size();
  p.committed = state_.committed;
  for (const auto& [id, shard] : state_.shards) {
    p.leased += shard.pending;
    if (shard.state == ShardState::queued) ++p.queued_shards;
    else ++p.doing_shards;
  }
  p.unassigned = state_.finished ? 0 : p.epoch_samples - p.committed - p.leased;
  p.done_shards = state_.done_shards;
  p.open_leases = state_.leases.size();
  p.epochs_completed = state_.epochs_completed;
  p.total_committed = state_.total_committed;
  p.given_back_samples = state_.given_back;
  p.resplit_samples = state_.resplit;
  p.rank_failures = state_.rank_failures;
  p.stolen_samples = state_.stolen;
  return p;
}

std::vector<std::uint64_t> Dds::shards_taken() const {
  std::lock_guard lock(mutex_);
  return state_.shards_taken;
}

std::vector<Shard> Dds::shards() const {
  std::lock_guard lock(mutex_);
  std::vector<Shard> out;
  out.reserve(state_.shards.size());
  for (const auto& [id, shard] : state_.shards) out.push_back(shard);
  return out;
}

// ---------------------------------------------------------------------------
// Checkpoint
// ---------------------------------------------------------------------------
std::string Dds::serialize() const {
  std::lock_guard lock(mutex_);
  return checkpoint_text(dataset_, options_, state_);
}

void Dds::checkpoint(const std::string& path) const {
  ANTDT_CHECK_ARG(!path.empty(), "DDS checkpoint: empty path");
  // One writer at a time: two checkpoints to one path would share the temp file.
  std::lock_guard writer(checkpoint_mutex_);
  write_checkpoint(path, serialize());
}

void Dds::restore_locked(DdsState state) {
  state_ = std::move(state);
  dirty_all_ = true;
  // The leases' fates are unknown after a coordinator restart, and the training
  // state is rolled back to the checkpoint taken with this one: no step after it
  // counts, so samples not committed at checkpoint time must be consumed again.
  std::vector<std::uint64_t> open;
  for (const auto& [id, record] : state_.leases) open.push_back(id);
  for (auto id = open.rbegin(); id != open.rend(); ++id) return_lease_locked(*id);
}

void Dds::restore(const std::string& path) {
  DdsCheckpoint parsed = read_checkpoint(path);
  if (!(parsed.dataset == dataset_))
    raise<InvalidArgument>("DDS restore: checkpoint ", path, " describes a different dataset (",
                           parsed.dataset.size(), " samples in ", parsed.dataset.files().size(), " files; this one has ",
                           dataset_.size(), " in ", dataset_.files().size(), ")");
  const auto differs = [&](const char* field) {
    raise<InvalidArgument>("DDS restore: checkpoint ", path, " has a different options.", field);
  };
  if (parsed.options.world_size != options_.world_size) differs("world_size");
  if (parsed.options.shard_size != options_.shard_size) differs("shard_size");
  if (parsed.options.seed != options_.seed) differs("seed");
  if (parsed.options.shuffle != options_.shuffle) differs("shuffle");
  if (parsed.options.epochs != options_.epochs) differs("epochs");
  if (parsed.options.steal_min != options_.steal_min) differs("steal_min");
  std::lock_guard lock(mutex_);
  restore_locked(std::move(parsed.state));
}

std::unique_ptr<Dds> Dds::load(const std::string& path) { return resume(read_checkpoint(path)); }

std::unique_ptr<Dds> Dds::resume(DdsCheckpoint stored, std::uint64_t* returned) {
  auto dds = std::make_unique<Dds>(std::move(stored.dataset), stored.options);
  std::lock_guard lock(dds->mutex_);
  const std::uint64_t before = stored.state.given_back;
  dds->restore_locked(std::move(stored.state));
  if (returned != nullptr) *returned = dds->state_.given_back - before;
  return dds;
}

DdsChanges Dds::take_changes() {
  std::lock_guard lock(mutex_);
  DdsChanges out;
  out.everything = dirty_all_;
  out.any = dirty_all_ || dirty_scalars_ || dirty_queue_ || !dirty_shards_.empty() || !dirty_leases_.empty() ||
            !dirty_ranks_.empty();
  if (!out.any) return out;
  if (dirty_all_) {
    out.state = state_;
  } else {
    // The scalar fields only: the rows go in the lists.
    DdsState& s = out.state;
    s.epoch = state_.epoch;
    s.finished = state_.finished;
    s.fresh = state_.fresh;
    s.next_shard_id = state_.next_shard_id;
    s.next_lease_id = state_.next_lease_id;
    s.committed = state_.committed;
    s.done_shards = state_.done_shards;
    s.epochs_completed = state_.epochs_completed;
    s.total_committed = state_.total_committed;
    s.given_back = state_.given_back;
    s.resplit = state_.resplit;
    s.rank_failures = state_.rank_failures;
    s.stolen = state_.stolen;
    // A row touched and then removed in the same batch is simply gone.
    for (const std::uint64_t id : dirty_shards_) {
      if (auto it = state_.shards.find(id); it != state_.shards.end()) out.shards.push_back(it->second);
      else out.shards_gone.push_back(id);
    }
    for (const std::uint64_t id : dirty_leases_) {
      if (auto it = state_.leases.find(id); it != state_.leases.end()) out.leases.emplace_back(id, it->second);
      else out.leases_gone.push_back(id);
    }
    for (const std::size_t r : dirty_ranks_)
      out.ranks.push_back({static_cast<int>(r), state_.active[r], state_.shards_taken[r]});
    out.queue_changed = dirty_queue_;
    if (dirty_queue_) out.queue.assign(state_.queued.begin(), state_.queued.end());
  }
  dirty_all_ = dirty_scalars_ = dirty_queue_ = false;
  dirty_shards_.clear();
  dirty_leases_.clear();
  dirty_ranks_.clear();
  return out;
}

}  // namespace antdt::sched
