// Point-to-point send/recv: the Transfer request and the entry of every
// transfer. Uses collectives/request.hpp, call.hpp and the communicator.
//
// Transfers are a small entry of their own rather than a mode of
// coll::execute: in every mode they are posted when issued (they never wait
// behind queued collectives: they use their own slots and sequence numbers,
// and both transports accept posts from one thread while another waits;
// docs/collectives.md#requests), they choose no algorithm and take no device
// path, and a group waits for them after its collectives instead of running
// them at group_end(). Sharing the collective entry would add those branches
// to both.
#pragma once

#include "collectives/call.hpp"
#include "collectives/collective_args.hpp"
#include "collectives/communicator.hpp"
#include "collectives/request.hpp"

#include <memory>
#include <optional>
#include <span>

namespace antdt::coll {

// One send or receive with a peer, posted when issued.
class Transfer final : public RequestBase {
 public:
  Transfer(detail::CommImpl& comm, bool is_send, std::span<std::byte> payload, std::size_t count, DataType dtype,
           int peer, std::uint64_t seq);
  bool test() override;
  void wait() override;
  bool cancel() override;
  void detach() noexcept override;

 private:
  detail::OpSlot slot_;
  std::optional<Call> call_;  // engaged while the transfer may be in flight
};

// A send (buf is read) or a receive (buf is written) of `count` elements with
// `peer`, checked first. Mode::blocking: waits for it, or, inside a group,
// posts it and leaves it to group_end(); Mode::nonblocking: posts it and
// returns its request (null otherwise).
std::shared_ptr<detail::RequestState> transfer(detail::CommImpl& comm, bool is_send, const void* buf,
                                               std::size_t count, DataType dtype, int peer, Mode mode);

}  // namespace antdt::coll
