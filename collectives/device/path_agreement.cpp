// The record exchange and the frame around the IPC and direct paths
// (path_agreement.hpp).
#include "collectives/device/path_agreement.hpp"

#include "collectives/algorithms.hpp"
#include "collectives/device/device_call.hpp"
#include "collectives/device/direct_path.hpp"
#include "cuda/nvtx.hpp"

#include <span>

namespace antdt::coll::device {

std::vector<PeerRecord> exchange_peer_records(detail::CommImpl& comm, const PeerRecord& mine, const Signature& sig) {
  cuda::NvtxRange range("antdt ipc exchange");
  const auto n = static_cast<std::size_t>(comm.size());
  constexpr std::size_t kRecord = PeerRecord::kWireBytes;
  std::vector<std::byte> all(kRecord * n);
  std::vector<std::size_t> counts(n, kRecord), displs(n);
  for (std::size_t r = 0; r < n; ++r) displs[r] = r * kRecord;
  PeerRecord sent = mine;
  sent.transport_moves_device_memory = comm.transport().device_payloads();
  const PeerRecord::Wire wire = sent.serialize();
  Call call(comm, sig);
  allgather_ring(call, wire.data(), all.data(), counts, displs, 1);
  std::vector<PeerRecord> records(n);
  for (std::size_t r = 0; r < n; ++r)
    records[r] = PeerRecord::deserialize(std::span<const std::byte>(all).subspan(r * kRecord, kRecord));
  return records;
}

Path run_on_agreed_path(detail::CommImpl& comm, cuda::DeviceWork& work, const char* what, const Signature& base,
                        AgreementLayouts layouts, const std::function<PeerRecord()>& record,
                        const std::function<void(const std::vector<PeerRecord>&)>& ipc,
                        const std::function<void(CallMemory&)>& direct) {
  const Config& cfg = comm.config();
  if (!exchanges_records(cfg.gpu_path, comm.size())) return Path::staged;
  wait_device(work, comm, what, "the caller's stream work before the path exchange");
  Signature exchange = base, done = base;
  exchange.algo = Algo::none;
  exchange.salt = layouts.exchange;
  done.algo = Algo::dissemination;
  done.salt = layouts.done;
  const std::vector<PeerRecord> records = exchange_peer_records(comm, record(), exchange);
  // Every rank decides the same here, so a refusal (UnsupportedError with
  // ANTDT_GPU_PATH=ipc or direct) leaves the communicator usable.
  const Path path = resolve_path(cfg.gpu_path, records);
  if (path == Path::staged) return path;
  failing_together(comm, what, [&] {
    if (path == Path::direct) {
      cuda::NvtxRange range("antdt direct");
      DeviceCallMemory memory(work, comm, what);
      direct(memory);
      wait_device(work, comm, what, "the last copies and reductions of the direct path");
      return;
    }
    ipc(records);
    wait_device(work, comm, what, "the copies and reductions from the peers' buffers");
    Call call(comm, done);
    barrier_dissemination(call);
  });
  return path;
}

}  // namespace antdt::coll::device
