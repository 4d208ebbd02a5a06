// The plain-C++ logic of collectives on device buffers (docs/gpu.md): how a
// staged call is cut into segments and pipelined through pinned slots, how an
// IPC AllReduce splits the work among ranks, what ranks exchange before an IPC
// call and how they agree on the path. No CUDA here: everything is driven
// through cuda::CopyEngine and tested with fakes.
#pragma once

#include <antdt/comm.hpp>

#include "core/config.hpp"
#include "cuda/ipc.hpp"
#include "cuda/staging.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace antdt::coll::device {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Staged path: segments through pinned slots
// ---------------------------------------------------------------------------
// Bytes per staged segment: the largest whole number of `esize`-byte
// elements that fits one slot (a segment is one host collective).
std::size_t segment_bytes(std::size_t slot_bytes, std::size_t esize);

// The host side of a segmented staged call.
class SegmentWork {
 public:
  virtual ~SegmentWork() = default;
  // Runs the host collective on one segment: `host` holds bytes [offset,
  // offset + host.size()) of the device range (downloaded, when the pipeline
  // downloads); what it leaves there is uploaded (when it uploads).
  virtual void run(std::size_t index, std::size_t offset, std::span<std::byte> host) = 0;
};

// Runs `work` on every segment of the device range the engine is bound to
// (total_bytes, cut into segments of seg_bytes): download segment k into slot
// k % slots (when `download`), run the host collective on it, upload it back
// (when `upload`). Downloads of the next segments overlap the host work on
// segment k, and the upload of k overlaps the host work on k + 1. A slot is
// reused only once everything started on it has finished (this also guards
// against a previous call's uploads still in flight on the same engine).
// Returns without waiting for the last uploads (the caller orders them with
// its stream). Throws TimeoutError naming `what` when a copy does not finish
// by `deadline`.
void run_segments(cuda::CopyEngine& engine, std::size_t total_bytes, std::size_t seg_bytes, bool download,
                  bool upload, SegmentWork& work, Clock::time_point deadline, const char* what);

// Whole-buffer staging (collectives whose blocks are not elementwise
// segments): device range -> host bytes, and host bytes -> device range,
// through the engine's slots with cuda::StagedDownload / StagedUpload.
void download_all(cuda::CopyEngine& engine, std::span<std::byte> host, Clock::time_point deadline, const char* what);
void upload_all(cuda::CopyEngine& engine, std::span<const std::byte> host, Clock::time_point deadline,
                const char* what);

// ---------------------------------------------------------------------------
// IPC path
// ---------------------------------------------------------------------------
// Rank r's share of an IPC AllReduce: elements [first, first + count). The
// first count % nranks ranks get one element more; the slices tile [0, count).
struct Slice {
  std::size_t first = 0;
  std::size_t count = 0;
};
Slice ipc_slice(std::size_t count, int nranks, int rank);

// This machine (host name and boot id): ranks with equal values share a node.
std::uint64_t node_identity();

// What a rank tells its peers before an IPC AllReduce.
struct PeerRecord {
  static constexpr std::uint32_t kMagic = 0x52504441;  // "ADPR"
  static constexpr std::size_t kReasonBytes = 96;
  static constexpr std::size_t kWireBytes = 4 + 4 + 8 + 2 * cuda::IpcHandle::kWireBytes + kReasonBytes;
  using Wire = std::array<std::byte, kWireBytes>;

  bool exportable = false;  // both buffers exported (else `reason` says why not)
  // The direct path: both buffers are device memory, and this rank's
  // transport moves device memory.
  bool device_buffers = false;
  bool transport_moves_device_memory = false;
  std::uint64_t node = 0;
  cuda::IpcHandle send;  // meaningful when exportable
  cuda::IpcHandle recv;
  std::string reason;  // truncated to kReasonBytes on the wire

  Wire serialize() const noexcept;
  // Throws InvalidArgument on a wrong size or magic.
  static PeerRecord deserialize(std::span<const std::byte> wire);
};

enum class Path { staged, ipc, direct };

// Whether a call exchanges PeerRecords first (it might take the IPC or the
// direct path): never when ANTDT_GPU_PATH=staged or for a single rank.
bool exchanges_records(GpuPath setting, int nranks);

// The path every rank takes after the exchange (every rank sees the same
// records, so every rank decides the same):
//  - auto: IPC when every rank could export and all share a node; else direct
//    when every rank has device buffers and a transport that moves device
//    memory; else staged.
//  - ipc: IPC, or UnsupportedError naming the first rank in the way.
//  - direct: direct, or UnsupportedError naming the first rank in the way.
Path resolve_path(GpuPath setting, std::span<const PeerRecord> records);

}  // namespace antdt::coll::device
