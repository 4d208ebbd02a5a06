// Pipelined staging of a device buffer through pinned host slots, for
// transports that cannot touch device memory.
//
// Download (device -> host, e.g. to send): while the caller uses chunk k's
// host bytes (a send in flight), the copy of chunk k+1 into the other slot is
// already running. Upload (host -> device, e.g. after a receive): while chunk
// k is copied to the device and reduced into the target, the caller fills the
// other slot with chunk k+1 (a receive in flight). With more than two slots
// the pipeline runs that many chunks deep.
//
// The scheduling here is plain C++ (no CUDA), driven by non-blocking polls, so
// it is tested on any machine with a fake CopyEngine; CudaCopyEngine
// (cuda/staging_engine.hpp) is the real one. Callbacks are virtual interfaces:
// no std::function, nothing allocated per chunk.
//
// Chunk k covers bytes [k * chunk_bytes, min((k + 1) * chunk_bytes, total))
// of the device range and always uses slot k % slot_count. Chunks are handed
// to the caller, and must be released by it, in order.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>

namespace antdt::cuda {

struct StagedChunk {
  std::size_t index = 0;   // 0, 1, ... in buffer order
  std::size_t offset = 0;  // byte offset in the device range
  std::size_t bytes = 0;
  std::size_t slot = 0;         // the pinned slot holding it
  std::span<std::byte> host;    // that slot's first `bytes` bytes
};

// Moves bytes between a device range and pinned host slots, asynchronously.
class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  virtual std::size_t slot_count() const = 0;
  virtual std::size_t slot_bytes() const = 0;
  virtual std::span<std::byte> slot(std::size_t s) = 0;
  // Enqueues device[offset, offset + bytes) -> slot s.
  virtual void start_download(std::size_t s, std::size_t offset, std::size_t bytes) = 0;
  // Enqueues slot s -> device[offset, offset + bytes): reduced into the device
  // bytes when the engine is set up with an op, copied otherwise.
  virtual void start_upload(std::size_t s, std::size_t offset, std::size_t bytes) = 0;
  // Whether everything started on slot s has finished (never blocks). Throws
  // if it failed.
  virtual bool slot_done(std::size_t s) = 0;
};

// The caller's side of a download.
class DownloadSink {
 public:
  virtual ~DownloadSink() = default;
  // The chunk's host bytes now hold the device data: start using them (e.g.
  // post a send from them). Called once per chunk, in order.
  virtual void chunk_ready(const StagedChunk& chunk) = 0;
  // Polled: true once the caller is done with the chunk's host bytes (e.g.
  // its send completed); the slot is then reused.
  virtual bool chunk_released(const StagedChunk& chunk) = 0;
};

// The caller's side of an upload.
class UploadSource {
 public:
  virtual ~UploadSource() = default;
  // The chunk's host bytes are free: start filling them with the chunk's data
  // (e.g. post a receive into them). Called once per chunk, in order.
  virtual void fill_chunk(const StagedChunk& chunk) = 0;
  // Polled: true once the chunk's host bytes are filled.
  virtual bool chunk_filled(const StagedChunk& chunk) = 0;
};

// Geometry shared by both directions.
class ChunkPlan {
 public:
  // Throws InvalidArgument when chunk_bytes is 0 or exceeds the engine's slot size.
  ChunkPlan(CopyEngine& engine, std::size_t total_bytes, std::size_t chunk_bytes);
  std::size_t chunks() const noexcept { return chunks_; }
  StagedChunk chunk(std::size_t k) const;
  CopyEngine& engine() const noexcept { return engine_; }

 private:
  CopyEngine& engine_;
  std::size_t total_;
  std::size_t chunk_bytes_;
  std::size_t chunks_;
};

class StagedDownload {
 public:
  // `engine` and `sink` must outlive the download. chunk_bytes 0: the slot size.
  StagedDownload(CopyEngine& engine, DownloadSink& sink, std::size_t total_bytes, std::size_t chunk_bytes = 0);

  // Advances as far as possible without blocking; true once every chunk has
  // been handed to the sink and released by it.
  bool progress();
  bool done() const noexcept { return released_ == plan_.chunks(); }
  // Calls progress() until done (true) or until `deadline` (false).
  bool run_until(std::chrono::steady_clock::time_point deadline);

  std::size_t chunks() const noexcept { return plan_.chunks(); }

 private:
  ChunkPlan plan_;
  DownloadSink& sink_;
  std::size_t started_ = 0;   // copies started: chunks [0, started_)
  std::size_t handed_ = 0;    // given to the sink: [0, handed_)
  std::size_t released_ = 0;  // released by the sink: [0, released_)
};

class StagedUpload {
 public:
  // `engine` and `source` must outlive the upload. chunk_bytes 0: the slot size.
  StagedUpload(CopyEngine& engine, UploadSource& source, std::size_t total_bytes, std::size_t chunk_bytes = 0);

  // Advances as far as possible without blocking; true once every chunk has
  // been filled, uploaded and (for a reducing engine) reduced on the device.
  bool progress();
  bool done() const noexcept { return finished_ == plan_.chunks(); }
  bool run_until(std::chrono::steady_clock::time_point deadline);

  std::size_t chunks() const noexcept { return plan_.chunks(); }

 private:
  ChunkPlan plan_;
  UploadSource& source_;
  std::size_t offered_ = 0;   // slots handed to the source to fill: [0, offered_)
  std::size_t uploaded_ = 0;  // uploads started: [0, uploaded_)
  std::size_t finished_ = 0;  // uploads finished, slots free again: [0, finished_)
};

}  // namespace antdt::cuda
