#include "core/bootstrap.hpp"

#include "core/bootstrap_admission.hpp"
#include "core/bootstrap_wire.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/net.hpp"

#include <arpa/inet.h>
#include <cstring>
#include <map>
#include <openssl/rand.h>
#include <thread>

namespace antdt {

// ---------------------------------------------------------------------------
// Ranks as threads
// ---------------------------------------------------------------------------
InprocRendezvous::InprocRendezvous(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), slots_(static_cast<std::size_t>(size)) {
  ANTDT_CHECK_ARG(size >= 1, "group size must be >= 1, got ", size);
}

std::vector<Bytes> InprocRendezvous::allgather(int rank, std::span<const std::byte> mine) {
  ANTDT_CHECK_ARG(rank >= 0 && rank < size_, "rank ", rank, " out of range [0, ", size_, ")");
  std::unique_lock lock(mu_);
  const std::uint64_t generation = generation_;
  slots_[static_cast<std::size_t>(rank)].assign(mine.begin(), mine.end());
  if (++arrived_ == size_) {
    last_result_ = std::move(slots_);
    slots_.assign(static_cast<std::size_t>(size_), {});
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return last_result_;
  }
  // A rank cannot reach the next generation's completion before every waiter
  // here copied this result: that completion needs all of them to arrive again.
  if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != generation; }))
    raise<TimeoutError>("in-process rendezvous: rank ", rank, " waited ", timeout_.count(), " ms; only ", arrived_,
                        " of ", size_, " ranks arrived");
  return last_result_;
}

InprocBootstrap::InprocBootstrap(std::shared_ptr<InprocRendezvous> rendezvous, int rank)
    : rendezvous_(std::move(rendezvous)), rank_(rank) {
  ANTDT_CHECK_ARG(rendezvous_ != nullptr, "null rendezvous");
  ANTDT_CHECK_ARG(rank >= 0 && rank < rendezvous_->size(), "rank ", rank, " out of range");
}

std::vector<Bytes> InprocBootstrap::allgather(std::span<const std::byte> mine) {
  return rendezvous_->allgather(rank_, mine);
}

// ---------------------------------------------------------------------------
// Unique id
// ---------------------------------------------------------------------------
namespace {

constexpr std::uint32_t kIdMagic = 0x49544441;  // "ADTI"
constexpr std::uint16_t kIdVersion = 1;
constexpr std::size_t kIdPortOffset = 6, kIdSecretOffset = 8, kIdHostOffset = 24, kIdHostBytes = 64;
// One byte after the host: 1 when the root listened from the id's making on
// (RootAddress::listening). Ids of version 1 made before it hold 0 there.
constexpr std::size_t kIdFlagsOffset = kIdHostOffset + kIdHostBytes;
constexpr std::uint8_t kIdListening = 1;

// Listeners opened by UniqueId::create in this process, by port, so that rank 0
// in the same process accepts on the socket the id names instead of binding again.
std::mutex listener_mu;
std::map<std::uint16_t, net::Fd>& listeners() {
  static std::map<std::uint16_t, net::Fd> map;
  return map;
}

net::Fd take_or_bind_listener(const RootAddress& root) {
  {
    std::lock_guard lock(listener_mu);
    auto it = listeners().find(root.port);
    if (it != listeners().end()) {
      net::Fd fd = std::move(it->second);
      listeners().erase(it);
      return fd;
    }
  }
  return net::listen_on(root.host, root.port, nullptr);
}

std::string hex_of(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (auto b : bytes) {
    s.push_back(digits[std::to_integer<unsigned>(b) >> 4]);
    s.push_back(digits[std::to_integer<unsigned>(b) & 15]);
  }
  return s;
}

}  // namespace

RootAddress decode_unique_id(const UniqueId& id) {
  const auto& b = id.bytes;
  std::uint32_t magic;
  std::uint16_t version, port;
  std::memcpy(&magic, b.data(), 4);
  std::memcpy(&version, b.data() + 4, 2);
  std::memcpy(&port, b.data() + kIdPortOffset, 2);
  if (magic != kIdMagic) raise<BootstrapError>("not an antdt unique id (bad magic)");
  if (version != kIdVersion) raise<BootstrapError>("unique id version ", version, " is not supported (expected ", kIdVersion, ")");
  const char* host = reinterpret_cast<const char*>(b.data() + kIdHostOffset);
  std::size_t host_len = strnlen(host, kIdHostBytes);
  if (host_len == 0 || host_len == kIdHostBytes) raise<BootstrapError>("unique id holds no valid root address");
  RootAddress root;
  root.host.assign(host, host_len);
  unsigned char probe[sizeof(in6_addr)];
  if (inet_pton(AF_INET, root.host.c_str(), probe) != 1 && inet_pton(AF_INET6, root.host.c_str(), probe) != 1)
    raise<BootstrapError>("unique id holds a malformed root address '", root.host, "'");
  if (port == 0) raise<BootstrapError>("unique id holds port 0");
  root.port = port;
  std::memcpy(root.secret.data(), b.data() + kIdSecretOffset, root.secret.size());
  root.listening = (std::to_integer<std::uint8_t>(b[kIdFlagsOffset]) & kIdListening) != 0;
  return root;
}

UniqueId encode_unique_id(const RootAddress& addr) {
  ANTDT_CHECK_ARG(!addr.host.empty() && addr.host.size() < kIdHostBytes, "root host '", addr.host, "' too long");
  UniqueId id;
  auto& b = id.bytes;
  std::memcpy(b.data(), &kIdMagic, 4);
  std::memcpy(b.data() + 4, &kIdVersion, 2);
  std::memcpy(b.data() + kIdPortOffset, &addr.port, 2);
  std::memcpy(b.data() + kIdSecretOffset, addr.secret.data(), addr.secret.size());
  std::memcpy(b.data() + kIdHostOffset, addr.host.data(), addr.host.size());
  b[kIdFlagsOffset] = std::byte{addr.listening ? kIdListening : std::uint8_t{0}};
  return id;
}

UniqueId UniqueId::create() { return make_listening_id(net::default_host_address(), 0); }

UniqueId make_listening_id(const std::string& host, std::uint16_t port) {
  RootAddress root;
  root.host = host;
  net::Endpoint bound;
  net::Fd fd = net::listen_on(root.host, port, &bound);
  root.port = bound.port;
  root.listening = true;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(root.secret.data()), static_cast<int>(root.secret.size())) != 1)
    raise<InternalError>("RAND_bytes failed to make a job secret");
  {
    std::lock_guard lock(listener_mu);
    listeners()[root.port] = std::move(fd);
  }
  return encode_unique_id(root);
}

std::string UniqueId::to_string() const { return hex_of(bytes); }

UniqueId UniqueId::from_string(std::string_view hex) {
  if (hex.size() != 2 * ANTDT_UNIQUE_ID_BYTES)
    raise<InvalidArgument>("unique id string must be ", 2 * ANTDT_UNIQUE_ID_BYTES, " hex digits, got ", hex.size());
  UniqueId id;
  auto nibble = [&](char c) -> unsigned {
    if (c >= '0' && c <= '9') return static_cast<unsigned>(c - '0');
    if (c >= 'a' && c <= 'f') return static_cast<unsigned>(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return static_cast<unsigned>(c - 'A' + 10);
    raise<InvalidArgument>("unique id string has a non-hex character '", c, "'");
  };
  for (std::size_t i = 0; i < id.bytes.size(); ++i)
    id.bytes[i] = static_cast<std::byte>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return id;
}

// ---------------------------------------------------------------------------
// TCP bootstrap
// ---------------------------------------------------------------------------
namespace {

using net::Clock;

class TcpBootstrap final : public Bootstrap {
 public:
  TcpBootstrap(const RootAddress& root, int rank, int size, std::chrono::milliseconds timeout,
               std::function<void()> still_wanted)
      : root_(root), rank_(rank), size_(size), timeout_(timeout), still_wanted_(std::move(still_wanted)) {
    if (size_ == 1) return;
    if (rank_ == 0)
      accept_ranks();
    else
      join();
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }

  std::vector<net::Fd> take_links() override {
    std::vector<net::Fd> links;
    if (rank_ == 0)
      links = std::move(peers_);
    else
      links.push_back(std::move(root_fd_));
    if (links.empty()) links.resize(1);  // size 1: rank 0 has no peers
    return links;
  }

  std::vector<Bytes> allgather(std::span<const std::byte> mine) override {
    if (size_ == 1) return {Bytes(mine.begin(), mine.end())};
    const auto deadline = Clock::now() + timeout_;
    if (rank_ == 0) {
      std::vector<Bytes> parts(static_cast<std::size_t>(size_));
      parts[0].assign(mine.begin(), mine.end());
      for (int r = 1; r < size_; ++r) parts[static_cast<std::size_t>(r)] = read_frame(peers_[static_cast<std::size_t>(r)].get(), wire::Kind::contribution, deadline, r);
      auto gathered = wire::encode_gathered(parts);
      auto head = wire::encode_frame_head(wire::Kind::gathered, gathered.size());
      for (int r = 1; r < size_; ++r) {
        int fd = peers_[static_cast<std::size_t>(r)].get();
        net::send_all(fd, head, deadline);
        net::send_all(fd, gathered, deadline);
      }
      return parts;
    }
    auto head = wire::encode_frame_head(wire::Kind::contribution, mine.size());
    net::send_all(root_fd_.get(), head, deadline);
    net::send_all(root_fd_.get(), mine, deadline);
    auto gathered = read_frame(root_fd_.get(), wire::Kind::gathered, deadline, 0);
    return wire::decode_gathered(gathered, static_cast<std::size_t>(size_));
  }

 private:
  static Bytes read_frame(int fd, wire::Kind kind, Clock::time_point deadline, int from) {
    std::array<std::byte, wire::kFrameHeadBytes> head{};
    try {
      net::recv_all(fd, head, deadline);
      Bytes payload(wire::decode_frame_head(kind, head));
      net::recv_all(fd, payload, deadline);
      return payload;
    } catch (const TimeoutError& e) {
      raise<TimeoutError>("bootstrap exchange with rank ", from, " timed out: ", e.what());
    } catch (const BootstrapError& e) {
      raise<BootstrapError>("bootstrap exchange with rank ", from, " failed: ", e.what());
    }
  }

  // Every handshake runs at once (core/bootstrap_admission.hpp): connections
  // that need no secret to open must not hold up the ranks that have it.
  void accept_ranks() {
    net::Fd listener = take_or_bind_listener(root_);
    peers_ = admit_ranks(listener.get(), root_.secret, size_, Clock::now() + timeout_, timeout_,
                         AdmissionLimits::for_size(size_), still_wanted_);
  }

  // A connection the root closes before its verdict (it dropped the oldest of
  // a flood of unauthenticated connections, core/bootstrap_admission.hpp) is
  // opened again until the deadline; a verdict refusing the rank, or bytes
  // that are not the root's protocol, end the join at once.
  void join() {
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      std::string failure;
      try {
        if (handshake(deadline, &failure)) return;
      } catch (const BootstrapError& e) {
        if (Clock::now() >= deadline) throw;
        ANTDT_WARN("rank ", rank_, ": the bootstrap root closed the connection during the handshake (", e.what(),
                   "); connecting again");
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      raise<BootstrapError>(failure);
    }
  }

  // One attempt. BootstrapError when the connection broke; false with the
  // reason when the root refused the rank or sent something malformed.
  bool handshake(Clock::time_point deadline, std::string* failure) {
    // Before the root's listener is known to be open, a refusal only means
    // rank 0 has not got there yet; once it is (the id says so, or this rank
    // reached it before), only a root that is gone or gave up refuses: waiting
    // for the timeout would gain nothing.
    const bool refusal_is_final = root_.listening || reached_root_;
    bool refused = false;
    root_fd_ = net::connect_to(net::Endpoint{root_.host, root_.port}, deadline, refusal_is_final ? &refused : nullptr);
    if (refused)
      raise<PeerLostError>("rank ", rank_, ": the bootstrap root (rank 0) at ", root_.host, ":", root_.port,
                           " refuses connections although it was listening (",
                           reached_root_ ? "this rank reached it before" : "since the unique id was made",
                           "): rank 0's process is gone, or it gave up on this communicator");
    reached_root_ = true;
    std::array<std::byte, wire::kChallengeBytes> raw{};
    net::recv_all(root_fd_.get(), raw, deadline);
    wire::Challenge challenge;
    try {
      challenge = wire::decode_challenge(raw);
    } catch (const BootstrapError& e) {
      *failure = e.what();
      return false;
    }
    wire::Hello hello{static_cast<std::uint32_t>(rank_), static_cast<std::uint32_t>(size_), {}};
    hello.mac = wire::prove(root_.secret, challenge, hello.rank, hello.size);
    net::send_all(root_fd_.get(), wire::encode(hello), deadline);
    std::array<std::byte, wire::kVerdictHeadBytes> head{};
    net::recv_all(root_fd_.get(), head, deadline);
    std::pair<bool, std::size_t> verdict;
    try {
      verdict = wire::decode_verdict_head(head);
    } catch (const BootstrapError& e) {
      *failure = e.what();
      return false;
    }
    std::string reason(verdict.second, '\0');
    net::recv_all(root_fd_.get(), std::as_writable_bytes(std::span(reason)), deadline);
    if (verdict.first) return true;
    root_fd_.reset();
    *failure = cat("the bootstrap root refused rank ", rank_, ": ", reason);
    return false;
  }

  RootAddress root_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  net::Fd root_fd_;               // non-root ranks: connection to the root
  bool reached_root_ = false;     // non-root ranks: a connection to the root was accepted once
  std::vector<net::Fd> peers_;    // root: connection per rank
  std::function<void()> still_wanted_;  // root: asked while ranks are missing (admit_ranks)
};

}  // namespace

std::unique_ptr<Bootstrap> make_tcp_bootstrap(const UniqueId& id, int rank, int size,
                                              std::chrono::milliseconds timeout, std::function<void()> still_wanted) {
  ANTDT_CHECK_ARG(size >= 1, "communicator size must be >= 1, got ", size);
  ANTDT_CHECK_ARG(rank >= 0 && rank < size, "rank ", rank, " is out of range [0, ", size, ")");
  return std::make_unique<TcpBootstrap>(decode_unique_id(id), rank, size, timeout, std::move(still_wanted));
}

}  // namespace antdt
