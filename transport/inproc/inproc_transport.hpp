// Ranks as threads of one process: a Transport whose messages are copied once,
// directly from the sender's buffer into the receiver's buffer.
//
// Matching is rendezvous: a send waits in the receiver's mailbox until a
// matching receive is posted (or the other way round), and whichever thread
// posts second copies the bytes. So a send completes only once its receive has
// been posted; code that waits for a send before the peer has posted the
// matching receive deadlocks here, as it would with a large message over UCX.
//
// Blocking waits sleep on one condition variable per rank, signalled when one
// of that rank's operations completes or the group aborts.
#pragma once

#include "core/config.hpp"
#include "transport/transport.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace antdt::transport {

class InprocTransport;

// The shared state of one group of ranks: a mailbox per rank and the group's
// abort state. Create one per group with std::make_shared<InprocFabric>(size)
// and hand it to every rank's thread; each thread makes its own transport.
class InprocFabric {
 public:
  // How payloads in device memory are copied (dst, src, bytes; either side may
  // be device memory): with one, the group's transports accept device
  // payloads (Transport::device_payloads), which is how ranks as threads run
  // the direct GPU path (a cudaMemcpy on a GPU, a plain copy with the tests'
  // fake device). Called by whichever rank's thread matches the message.
  using DeviceCopy = std::function<void(void* dst, const void* src, std::size_t bytes)>;

  explicit InprocFabric(int size, DeviceCopy device_copy = {});
  InprocFabric(const InprocFabric&) = delete;
  InprocFabric& operator=(const InprocFabric&) = delete;
  int size() const noexcept { return size_; }

 private:
  friend class InprocTransport;

  // A posted operation that has not found its partner yet.
  struct PostedSend {
    std::uint64_t tag;
    std::span<const std::byte> payload;
    Completion* done;
    bool device;  // a bare device-payload message (post_send_device)
  };
  struct PostedRecv {
    std::uint64_t tag;
    std::span<std::byte> payload;
    Completion* done;
    bool device;
  };

  // Everything addressed to one rank. Vectors are indexed by source rank and
  // keep post order, which is what makes same-tag messages match in order;
  // their capacity is reused, so steady-state posting does not allocate.
  struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;  // this rank's operations completed, or the group aborted
    std::vector<std::vector<PostedSend>> unmatched_sends;  // [source]: sends waiting for a receive here
    std::vector<std::vector<PostedRecv>> posted_recvs;     // [source]: receives waiting for a send
    // Operations owned by this rank that another thread has matched and is copying.
    std::atomic<int> copies_in_flight{0};
    std::atomic<bool> attached{false};  // a transport exists (or existed) for this rank
    std::atomic<bool> closed{false};    // that transport has been destroyed
  };

  int size_;
  DeviceCopy device_copy_;
  std::vector<Mailbox> mailboxes_;

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  std::optional<AbortInfo> abort_info_;  // the first abort; guarded by abort_mu_
};

std::unique_ptr<Transport> make_inproc_transport(std::shared_ptr<InprocFabric> fabric, int rank,
                                                 const Config& cfg);

}  // namespace antdt::transport
