// Chunk scheduling of the staging pipeline (cuda/staging.hpp). Compiled in
// every build: it only talks to a CopyEngine.
#include "cuda/staging.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <thread>

namespace antdt::cuda {
namespace {

// Polls `step()` until it reports done or the deadline passes; yields between
// polls and, after a while, sleeps briefly so a long wait leaves the core to
// the transport's progress thread.
template <class Step>
bool poll_until(Step&& step, std::chrono::steady_clock::time_point deadline) {
  for (unsigned attempt = 0;; ++attempt) {
    if (step()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (attempt < 1024) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace

ChunkPlan::ChunkPlan(CopyEngine& engine, std::size_t total_bytes, std::size_t chunk_bytes)
    : engine_(engine), total_(total_bytes), chunk_bytes_(chunk_bytes == 0 ? engine.slot_bytes() : chunk_bytes) {
  ANTDT_CHECK_ARG(engine.slot_count() >= 1, "staging needs at least one pinned slot");
  ANTDT_CHECK_ARG(chunk_bytes_ > 0 && chunk_bytes_ <= engine.slot_bytes(), "staging chunk of ", chunk_bytes_,
                  " bytes does not fit the engine's pinned slots of ", engine.slot_bytes(), " bytes");
  chunks_ = total_ / chunk_bytes_ + (total_ % chunk_bytes_ != 0 ? 1 : 0);
}

StagedChunk ChunkPlan::chunk(std::size_t k) const {
  StagedChunk c;
  c.index = k;
  c.offset = k * chunk_bytes_;
  c.bytes = std::min(chunk_bytes_, total_ - c.offset);
  c.slot = k % engine_.slot_count();
  c.host = engine_.slot(c.slot).first(c.bytes);
  return c;
}

// ---------------------------------------------------------------------------
// Download: start copies into free slots, hand finished copies to the sink in
// order, take releases in order. Chunk k may start once chunk k - slots (the
// slot's previous user) has been released.
// ---------------------------------------------------------------------------
StagedDownload::StagedDownload(CopyEngine& engine, DownloadSink& sink, std::size_t total_bytes,
                               std::size_t chunk_bytes)
    : plan_(engine, total_bytes, chunk_bytes), sink_(sink) {}

bool StagedDownload::progress() {
  CopyEngine& engine = plan_.engine();
  const std::size_t slots = engine.slot_count();
  const auto start_copies = [&] {
    while (started_ < plan_.chunks() && started_ < released_ + slots) {
      const StagedChunk c = plan_.chunk(started_);
      engine.start_download(c.slot, c.offset, c.bytes);
      ++started_;
    }
  };
  start_copies();
  while (handed_ < started_ && engine.slot_done(handed_ % slots)) {
    sink_.chunk_ready(plan_.chunk(handed_));
    ++handed_;
  }
  while (released_ < handed_ && sink_.chunk_released(plan_.chunk(released_))) ++released_;
  start_copies();
  return done();
}

bool StagedDownload::run_until(std::chrono::steady_clock::time_point deadline) {
  return poll_until([this] { return progress(); }, deadline);
}

// ---------------------------------------------------------------------------
// Upload: offer free slots to the source in order, start the upload of each
// filled chunk in order, free the slot when its upload (and reduction) has
// finished. Chunk k may be offered once chunk k - slots has finished.
// ---------------------------------------------------------------------------
StagedUpload::StagedUpload(CopyEngine& engine, UploadSource& source, std::size_t total_bytes,
                           std::size_t chunk_bytes)
    : plan_(engine, total_bytes, chunk_bytes), source_(source) {}

bool StagedUpload::progress() {
  CopyEngine& engine = plan_.engine();
  const std::size_t slots = engine.slot_count();
  const auto offer_slots = [&] {
    while (offered_ < plan_.chunks() && offered_ < finished_ + slots) {
      source_.fill_chunk(plan_.chunk(offered_));
      ++offered_;
    }
  };
  offer_slots();
  while (uploaded_ < offered_ && source_.chunk_filled(plan_.chunk(uploaded_))) {
    const StagedChunk c = plan_.chunk(uploaded_);
    engine.start_upload(c.slot, c.offset, c.bytes);
    ++uploaded_;
  }
  while (finished_ < uploaded_ && engine.slot_done(finished_ % slots)) ++finished_;
  offer_slots();
  return done();
}

bool StagedUpload::run_until(std::chrono::steady_clock::time_point deadline) {
  return poll_until([this] { return progress(); }, deadline);
}

}  // namespace antdt::cuda
