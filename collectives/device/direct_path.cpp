// The direct path's device memory and its AllReduce (direct_path.hpp).
#include "collectives/device/direct_path.hpp"

#include "collectives/algorithms.hpp"
#include "collectives/device/device_call.hpp"
#include "core/dtype.hpp"

#include <cstdint>

namespace antdt::coll::device {
namespace {

// The signature layout of the direct AllReduce's ring (device payloads, no
// headers: checked by the headed record exchange that precedes it, which
// every rank takes alike).
constexpr std::uint64_t kDirectRingLayout = 0x4452430000000001ULL;

}  // namespace

void DeviceCallMemory::reduce_into(DataType dtype, ReduceOp op, std::span<std::byte> dst,
                                   std::span<const std::byte> a, std::span<const std::byte> b) {
  if (!dst.empty()) work_.reduce_into(dtype, op, dst.data(), a.data(), b.data(), dst.size() / dtype_size(dtype));
}

void DeviceCallMemory::finish_avg(DataType dtype, std::span<std::byte> data, std::size_t nranks) {
  if (!data.empty()) work_.finish_avg(dtype, data.data(), data.size() / dtype_size(dtype), nranks);
}

void DeviceCallMemory::settle() { wait_device(work_, comm_, what_, "a copy or reduction before its send"); }

void direct_allreduce(detail::CommImpl& comm, CallMemory& memory, const void* send, void* recv, std::size_t count,
                      DataType dtype, ReduceOp op) {
  // Bare messages carry no signature; the layout only names the path in errors.
  Call call(comm, Signature{Kind::allreduce, count, dtype, op, -1, Algo::ring, kDirectRingLayout});
  call.carry_device_payloads(memory);
  allreduce_ring(call, as_bytes(send), as_bytes(recv), count, dtype, op);
}

}  // namespace antdt::coll::device
