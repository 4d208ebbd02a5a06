// The frame of every collective's IPC and direct paths: the ranks exchange
// peer records, agree on the path, and run it (or leave the call to the
// staged path, on every rank alike).
#pragma once

#include <antdt/comm.hpp>

#include "collectives/call.hpp"
#include "collectives/communicator.hpp"
#include "collectives/device/path_choice.hpp"
#include "collectives/device/peer_record.hpp"
#include "cuda/device_work.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace antdt::coll::device {

// The signature layouts of the frame's own messages: the record exchange,
// and the barrier that ends an IPC call. A rank that runs a host or staged
// collective while its peers run the agreement (say, ANTDT_GPU_PATH differs
// between ranks) fails with MismatchError.
struct AgreementLayouts {
  std::uint64_t exchange = 0;
  std::uint64_t done = 0;
};
inline constexpr AgreementLayouts kAllreduceAgreement{0x4950430000000001ULL, 0x4950430000000003ULL};
inline constexpr AgreementLayouts kBroadcastAgreement{0x4950430000000011ULL, 0x4950430000000013ULL};
inline constexpr AgreementLayouts kReduceScatterAgreement{0x4950430000000021ULL, 0x4950430000000023ULL};
inline constexpr AgreementLayouts kAllgatherAgreement{0x4950430000000031ULL, 0x4950430000000033ULL};
inline constexpr AgreementLayouts kReduceAgreement{0x4950430000000041ULL, 0x4950430000000043ULL};
inline constexpr AgreementLayouts kAlltoallAgreement{0x4950430000000051ULL, 0x4950430000000053ULL};

// Every rank's record, in rank order: an allgather on the transport, checked
// against `sig`. Fills in whether this rank's transport moves device memory.
std::vector<PeerRecord> exchange_peer_records(detail::CommImpl& comm, const PeerRecord& mine, const Signature& sig);

// When ANTDT_GPU_PATH allows the IPC or the direct path: waits until the
// caller's stream work is done (peers, or the transport, read this rank's
// buffers as soon as it has sent its record), exchanges the records
// (`record()` is this rank's) and agrees on the path; staged (on every rank
// alike) leaves the call to the caller. Then:
//  - ipc: `ipc` enqueues the copies or reductions from the peers' mapped
//    buffers, the host waits for them, and a barrier keeps every rank's
//    buffers unchanged until all peers have read them;
//  - direct: `direct` runs the collective's algorithm on the device buffers
//    (its Call carrying device payloads, its copies and reductions on the
//    device), and the host waits for the last kernels (the device scratch is
//    reused by the next call).
// `base` is the call's signature; the exchange and the barrier carry it with
// `layouts`, so a rank on another path fails with MismatchError. The direct
// path's bare messages carry no signature: the headed exchange before them is
// what checks that every rank is in this call. Returns the path taken.
Path run_on_agreed_path(detail::CommImpl& comm, cuda::DeviceWork& work, const char* what, const Signature& base,
                        AgreementLayouts layouts, const std::function<PeerRecord()>& record,
                        const std::function<void(const std::vector<PeerRecord>&)>& ipc,
                        const std::function<void(CallMemory&)>& direct);

}  // namespace antdt::coll::device
