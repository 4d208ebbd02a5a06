// Out-of-band exchange used once, while a communicator is created: every rank
// learns every other rank's transport address. Two implementations:
//  - TcpBootstrap: ranks connect to the root's listener named in the UniqueId,
//    prove the job secret (HMAC-SHA256 challenge/response), and the root relays
//    an allgather. Bytes from the network are parsed by BootstrapWire with length
//    and version checks (and a fuzz target).
//  - InprocBootstrap: ranks are threads sharing one InprocRendezvous.
#pragma once

#include <antdt/comm.hpp>

#include "core/net.hpp"

#include <chrono>
#include <functional>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace antdt {

using Bytes = std::vector<std::byte>;

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // Every rank contributes `mine`; returns all contributions indexed by rank.
  virtual std::vector<Bytes> allgather(std::span<const std::byte> mine) = 0;
  void barrier() { allgather({}); }
  // Hands over the bootstrap's authenticated connections for the control
  // plane: on rank 0 one per rank (index 0 empty), elsewhere the one to rank 0.
  // Empty for bootstraps without connections (in-process). The bootstrap can
  // no longer be used afterwards.
  virtual std::vector<net::Fd> take_links() { return {}; }
};

// Shared state for ranks-as-threads. Create one per group, hand it to every thread.
class InprocRendezvous {
 public:
  explicit InprocRendezvous(int size, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  int size() const noexcept { return size_; }
  std::vector<Bytes> allgather(int rank, std::span<const std::byte> mine);

 private:
  int size_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<Bytes> slots_;
  std::vector<Bytes> last_result_;
};

class InprocBootstrap final : public Bootstrap {
 public:
  InprocBootstrap(std::shared_ptr<InprocRendezvous> rendezvous, int rank);
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return rendezvous_->size(); }
  std::vector<Bytes> allgather(std::span<const std::byte> mine) override;

 private:
  std::shared_ptr<InprocRendezvous> rendezvous_;
  int rank_;
};

// Decoded contents of a UniqueId.
struct RootAddress {
  std::string host;            // numeric IPv4/IPv6 address
  std::uint16_t port = 0;
  std::array<std::byte, 16> secret{};
  // The root's listener was opened when the id was made (UniqueId::create, in
  // rank 0's process) and stays open until every rank joined: a refused
  // connection then means that process is gone, not that it is still starting.
  bool listening = false;
};
RootAddress decode_unique_id(const UniqueId& id);  // throws BootstrapError on garbage
// An id with a fresh secret whose root listens at host:port (port 0: any) from
// now on, in this process: what UniqueId::create does on this host's address.
// The process that makes it must be the communicator's rank 0.
UniqueId make_listening_id(const std::string& host, std::uint16_t port);
UniqueId encode_unique_id(const RootAddress& addr);

// `still_wanted` (rank 0 only): see admit_ranks.
std::unique_ptr<Bootstrap> make_tcp_bootstrap(const UniqueId& id, int rank, int size,
                                              std::chrono::milliseconds timeout,
                                              std::function<void()> still_wanted = {});

}  // namespace antdt
