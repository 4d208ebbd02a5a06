#include "transport/ucx/ucx_transport.hpp"

#include "core/log.hpp"
#include "core/wire_codec.hpp"
#include "core/printable.hpp"
#include "transport/transport_checks.hpp"

#include <ucp/api/ucp.h>

#include <poll.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <sched.h>
#include <thread>
#include <type_traits>
#include <unistd.h>
#include <utility>

namespace antdt::transport {

namespace {

// ---------------------------------------------------------------------------
// Tag layout
// ---------------------------------------------------------------------------
constexpr unsigned kRankBits = 20;
constexpr std::uint64_t kControlBit = std::uint64_t{1} << 63;
// Within the control space: set for the connection handshake at creation,
// clear for abort messages (which the wildcard control receive matches).
constexpr std::uint64_t kHelloBit = std::uint64_t{1} << 62;
constexpr std::uint64_t kAbortMask = kControlBit | kHelloBit;
// Within the data space: set for bare device-payload messages (post_send_device),
// so they never match a headed receive, nor the other way round.
constexpr std::uint64_t kBareBit = std::uint64_t{1} << 61;
// Within the data space: set for the payload half of a split message, whose
// tag has the split number where a user tag would be. (The same bit with bit
// 63 marks the handshake; the control receive needs bit 63 set, so it never
// takes a payload half.)
constexpr std::uint64_t kPayloadBit = std::uint64_t{1} << 62;
constexpr std::uint64_t kFullMask = ~std::uint64_t{0};
static_assert(kTagBits + kRankBits < 61, "user tag and source rank must stay clear of the bare, payload and control bits");
constexpr int kMaxRanks = 1 << kRankBits;

std::uint64_t data_tag(std::uint64_t tag, int source) noexcept {
  return (tag << kRankBits) | static_cast<std::uint64_t>(source);
}
// Split numbers count per sender and destination and wrap after 2^40 split
// messages, long after the earlier ones with a number have been received.
std::uint64_t payload_tag(std::uint64_t split_number, int source) noexcept {
  return kPayloadBit | data_tag(split_number & kMaxTag, source);
}

// In front of the MessageHeader of every headed message: which form it is
// and, for a header half, which payload half follows (host byte order, as the
// MessageHeader). The receiver cannot tell the forms by the tag, as UCX 1.13
// does not report the sender's tag to a receive's callback (its
// ucp_tag_recv_info_t::sender_tag came back as garbage here), nor by the
// MessageHeader, which raw users of the transport need not fill in.
struct WirePrefix {
  static constexpr std::uint32_t kSingle = 0x53445441;  // "ATDS": the payload follows in this message
  static constexpr std::uint32_t kSplit = 0x48445441;   // "ATDH": a header half; the payload half follows
  std::uint32_t form = kSingle;
  std::uint32_t reserved = 0;
  std::uint64_t split_number = 0;   // header half: the payload half's number
  std::uint64_t payload_bytes = 0;  // header half: the payload half's length
};
static_assert(sizeof(WirePrefix) == 24);
// A header half as it travels: one contiguous buffer.
struct HeaderHalf {
  WirePrefix prefix;
  MessageHeader header;
};
static_assert(sizeof(HeaderHalf) == sizeof(WirePrefix) + sizeof(MessageHeader));
constexpr std::size_t kHeadBytes = sizeof(HeaderHalf);  // in front of a single message's payload
std::uint64_t control_tag(int source) noexcept { return kControlBit | static_cast<std::uint64_t>(source); }
std::uint64_t hello_tag(int source) noexcept { return kControlBit | kHelloBit | static_cast<std::uint64_t>(source); }

// ---------------------------------------------------------------------------
// Bounds on every wait inside the transport
// ---------------------------------------------------------------------------
// A blocked wait wakes at least this often to re-check its deadline and aborts.
constexpr auto kPollSlice = std::chrono::milliseconds(100);
// How long cancel() waits for a send the peer has not matched before it closes
// the endpoint (which ends every operation on it). After an abort nothing is
// going to match any more, so it gives up sooner.
constexpr auto kCancelBound = std::chrono::seconds(5);
constexpr auto kCancelBoundAborted = std::chrono::milliseconds(200);
// A wait that ends because of this rank's abort first drives the abort
// messages out (their first send to a peer may still need the connection set
// up), for at most this long.
constexpr auto kAbortLinger = std::chrono::milliseconds(500);
// Closing: deliver what is in flight, then close the endpoints.
constexpr auto kFlushBound = std::chrono::seconds(5);
constexpr auto kFlushBoundAborted = std::chrono::milliseconds(500);
constexpr auto kCloseBound = std::chrono::seconds(2);
// Messages nobody received (a collective that failed half-way) are taken off
// the worker before it goes, so UCX does not warn about each one; bounded.
constexpr auto kDrainBound = std::chrono::milliseconds(200);
constexpr int kMaxDrainedMessages = 4096;
// ucp_worker_progress is called until it reports no events, but not forever.
constexpr unsigned kMaxProgressRounds = 64;
// Operation slots made up front; more are made only if more operations are pending at once.
constexpr int kInitialSlotsPerPeer = 4;

// ---------------------------------------------------------------------------
// Abort control message: magic u32, version u16, reserved u16, origin i32,
// status i32, reason length u32, reason bytes. Little-endian.
// ---------------------------------------------------------------------------
constexpr std::uint32_t kAbortMagic = 0x41445441;  // "ADTA"
constexpr std::uint16_t kAbortVersion = 1;
constexpr std::size_t kAbortFixedBytes = 20;
constexpr std::size_t kAbortMaxBytes = kAbortFixedBytes + kMaxAbortReasonBytes;
// Leave control message, sent by a closing transport to every live peer after
// its last messages were flushed: magic u32, version u16, reserved u16,
// origin i32. Little-endian. The peer then knows nothing more comes from it.
constexpr std::uint32_t kLeaveMagic = 0x4C445441;  // "ATDL"
constexpr std::uint16_t kLeaveVersion = 1;
constexpr std::size_t kLeaveBytes = 12;
static_assert(kLeaveBytes <= kAbortMaxBytes, "the control receive buffer holds a leave message");

// ---------------------------------------------------------------------------
// RAII for UCP objects
// ---------------------------------------------------------------------------
struct ConfigDeleter {
  void operator()(ucp_config_t* c) const noexcept { ucp_config_release(c); }
};
struct ContextDeleter {
  void operator()(ucp_context_h c) const noexcept { ucp_cleanup(c); }
};
struct WorkerDeleter {
  void operator()(ucp_worker_h w) const noexcept { ucp_worker_destroy(w); }
};
using ConfigPtr = std::unique_ptr<ucp_config_t, ConfigDeleter>;
using ContextPtr = std::unique_ptr<std::remove_pointer_t<ucp_context_h>, ContextDeleter>;
using WorkerPtr = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, WorkerDeleter>;

void check_ucs(ucs_status_t status, std::string_view what) {
  if (status != UCS_OK) raise<TransportError>("UCX: ", what, " failed: ", ucs_status_string(status));
}

// UCX 1.13 leaves its shared-memory transports (posix, sysv) out of endpoints
// that ask for peer error handling unless they advertise it, and then every
// message between ranks of one host goes over TCP loopback (measured here:
// 6.5 us and 1.1 GB/s instead of 0.8 us and 11.7 GB/s). ANTDT_UCX_SHM=fast
// (the default) makes them advertise it. A dead peer process is then found by
// UCX's keepalive, every 20 s by default; 2 s finds it within seconds
// (measured: a killed rank is reported 2.0 s later) and does not flag a live
// rank that is merely busy, as the check is whether the process exists.
//
// What UCX does not survive there: a sender takes a slot of the receiver's
// FIFO, writes the message, then marks the slot written, and the receiver
// reads slots strictly in order. A rank killed between the two leaves a slot
// that is never marked: its receiver takes no message from anyone over shared
// memory any more, and every wait on it ends only at ANTDT_TIMEOUT_MS (about 1
// kill in 150 at 4 KiB, docs/configuration.md#dead-ranks).
// ANTDT_UCX_SHM=safe leaves UCX's choice (TCP loopback), for jobs that must go
// on past a kill -9 (partial collectives under drop/defer). UCX reads these
// only from the environment, once per process (the first transport's mode
// holds); a value the user set is kept.
void default_ucx_environment(UcxShm mode) {
  static std::once_flag once;
  std::call_once(once, [mode] {
    const char* shm_with_peer_errors = mode == UcxShm::fast ? "y" : "n";
    ::setenv("UCX_POSIX_ERROR_HANDLING", shm_with_peer_errors, 0);
    ::setenv("UCX_SYSV_ERROR_HANDLING", shm_with_peer_errors, 0);
    ::setenv("UCX_KEEPALIVE_INTERVAL", "2s", 0);
  });
}

// Whether UCX_TLS leaves UCX's shared-memory transports (mm: posix, sysv) in.
bool shared_memory_transports_enabled() {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || tls[0] == '^') return true;
  const std::string_view list(tls);
  for (std::string_view name : {"all", "sm", "mm", "posix", "sysv"})
    if (list.find(name) != std::string_view::npos) return true;
  return false;
}

// Sets UCX's setting `key` to `value` in `config` unless the user set its
// variable `env_name`: a value the user chose wins. `key` is what
// ucp_config_modify matches against a transport's own table: the variable's
// name without "UCX_" and, for some transports (TCP), without the transport's
// prefix too (UCX warns "invalid configurations" for a key nothing took).
void default_ucx_setting(ucp_config_t& config, const char* env_name, const char* key, const char* value) {
  if (std::getenv(env_name) != nullptr) return;
  if (ucp_config_modify(&config, key, value) != UCS_OK)
    ANTDT_INFO("ucx transport: could not set ", env_name, "=", value, "; keeping UCX's default");
}

// ucp_ep_print_info's text for `ep`: its lanes ("lane[0]:  1:tcp/lo.0 md[1]
// ...") and the byte ranges of each protocol.
std::string print_endpoint(ucp_ep_h ep) {
  char* text = nullptr;
  std::size_t length = 0;
  FILE* stream = ::open_memstream(&text, &length);
  if (stream == nullptr) raise<TransportError>("UCX: open_memstream failed: ", std::strerror(errno));
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  std::string info(text, length);
  std::free(text);
  return info;
}

// Whether an endpoint's text names a lane of UCX's tcp transport: a line
// "lane[0]:  1:tcp/lo.0 md[1] -> md[1]/tcp/...", the resource "<index>:tcp/".
bool has_tcp_lane(std::string_view info) {
  for (std::size_t at = info.find("lane["); at != std::string_view::npos; at = info.find("lane[", at + 1)) {
    const std::string_view line = info.substr(at, info.find('\n', at) - at);
    if (line.find(":tcp/") != std::string_view::npos) return true;
  }
  return false;
}

bool all_finished(std::span<Completion* const> ops) noexcept {
  return std::all_of(ops.begin(), ops.end(), [](const Completion* op) { return !op->pending(); });
}

bool is_peer_failure(ucs_status_t status) noexcept {
  return status == UCS_ERR_CONNECTION_RESET || status == UCS_ERR_ENDPOINT_TIMEOUT ||
         status == UCS_ERR_UNREACHABLE || status == UCS_ERR_REJECTED;
}

}  // namespace

std::vector<std::byte> encode_abort_message(const AbortInfo& info) {
  const std::string_view reason = std::string_view(info.reason).substr(0, kMaxAbortReasonBytes);
  wire::ByteWriter out;
  out.buffer().reserve(kAbortFixedBytes + reason.size());
  out.put_le(kAbortMagic);
  out.put_le(kAbortVersion);
  out.put_le(std::uint16_t{0});
  out.put_le(static_cast<std::uint32_t>(info.origin_rank));
  out.put_le(static_cast<std::uint32_t>(info.status));
  out.put_le(static_cast<std::uint32_t>(reason.size()));
  out.bytes(std::as_bytes(std::span(reason.data(), reason.size())));
  return out.take();
}

std::vector<std::byte> encode_leave_message(int origin_rank) {
  wire::ByteWriter out;
  out.buffer().reserve(kLeaveBytes);
  out.put_le(kLeaveMagic);
  out.put_le(kLeaveVersion);
  out.put_le(std::uint16_t{0});
  out.put_le(static_cast<std::uint32_t>(origin_rank));
  return out.take();
}

std::optional<int> decode_leave_message(std::span<const std::byte> bytes, int size) {
  if (bytes.size() != kLeaveBytes) return std::nullopt;
  wire::ByteReader in(bytes, "UCX leave message");
  const auto magic = in.get_le<std::uint32_t>();
  const auto version = in.get_le<std::uint16_t>();
  const auto reserved = in.get_le<std::uint16_t>();
  const auto origin = static_cast<std::int32_t>(in.get_le<std::uint32_t>());
  if (magic != kLeaveMagic || version != kLeaveVersion || reserved != 0) return std::nullopt;
  if (origin < 0 || origin >= size) return std::nullopt;
  return origin;
}

std::optional<AbortInfo> decode_abort_message(std::span<const std::byte> bytes, int size) {
  // Anything malformed is not an abort message (nullopt), so the sizes are
  // checked before the reader could raise.
  if (bytes.size() < kAbortFixedBytes) return std::nullopt;
  wire::ByteReader in(bytes, "UCX abort message");
  const auto magic = in.get_le<std::uint32_t>();
  const auto version = in.get_le<std::uint16_t>();
  const auto reserved = in.get_le<std::uint16_t>();
  if (magic != kAbortMagic || version != kAbortVersion || reserved != 0) return std::nullopt;
  const auto origin = static_cast<std::int32_t>(in.get_le<std::uint32_t>());
  const auto status = static_cast<std::int32_t>(in.get_le<std::uint32_t>());
  const auto reason_bytes = in.get_le<std::uint32_t>();
  if (origin < 0 || origin >= size) return std::nullopt;
  if (reason_bytes > kMaxAbortReasonBytes || bytes.size() != kAbortFixedBytes + reason_bytes) return std::nullopt;
  AbortInfo info;
  info.origin_rank = origin;
  info.status = status;
  info.reason.resize(reason_bytes);
  in.bytes(std::as_writable_bytes(std::span(info.reason.data(), info.reason.size())));
  return info;
}

class UcxTransport final : public Transport {
 public:
  UcxTransport(Bootstrap& boot, const Config& cfg, const UcxOptions& options);
  ~UcxTransport() override { close(); }
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string_view name() const noexcept override { return "ucx"; }
  std::string endpoint_info(int peer);
  bool tcp_links() const noexcept override { return tcp_links_; }

  void post_send(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done) override;
  void post_recv(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) override;
  bool device_payloads() const noexcept override { return device_payloads_; }
  void post_send_device(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done) override;
  void post_recv_device(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) override;
  WaitResult wait(std::span<Completion* const> ops, Deadline deadline) override;
  void progress() override;
  void cancel(Completion& op) override;
  void abort(int status, std::string_view reason) noexcept override;
  std::optional<AbortInfo> abort_info() const override;
  std::optional<std::string> peer_failure(int peer) const override;
  std::string describe_peer(int peer) const override;

 private:
  // One posted operation while UCX holds it. Slots live in a deque (stable
  // addresses) and are recycled through a free list: posting does not allocate.
  struct OpSlot {
    UcxTransport* owner = nullptr;
    Completion* done = nullptr;  // null once detached (the caller no longer waits for it)
    void* request = nullptr;     // the UCX request while one is outstanding
    std::array<ucp_dt_iov_t, 3> iov{};  // [prefix, header, payload]; UCX reads it until completion
    std::uint64_t tag = 0;
    std::byte* buffer = nullptr;  // the caller's payload
    std::size_t capacity = 0;     // receive: payload bytes the buffer holds; send: the payload's size
    int peer = -1;
    bool is_recv = false;
    bool bare = false;  // a device-payload message: no header
    bool cancel_requested = false;
    // Sends: the UCX operations not completed yet (one, or the two halves of
    // a split message) and the first failure among them.
    int parts_pending = 0;
    ucs_status_t parts_status = UCS_OK;
    void* payload_request = nullptr;  // send: the payload half's request while outstanding
    // The prefix (and, for a split send, the header half) on the wire; a
    // receive's prefix lands here.
    HeaderHalf wire{};
    bool header_arrived = false;   // a header half matched; its payload half is (to be) received
    bool payload_posted = false;   // `request` is now the payload half's receive
    std::uint64_t payload_tag = 0;   // the payload half's UCP tag
    std::size_t payload_bytes = 0;   // its length, as the header half says
    OpSlot* prev = nullptr;  // in the active list
    OpSlot* next = nullptr;  // in the active list, or the free list
  };

  struct Peer {
    UcxTransport* owner = nullptr;
    int rank = -1;
    ucp_ep_h ep = nullptr;
    std::uint64_t next_split = 0;  // the split number of the next split message to this peer
    bool failed = false;
    bool failure_handled = false;
    bool failure_reported = false;  // logged (handle_peer_failures, or fail_peer itself)
    // It sent its leave message (it closed its transport): its endpoint
    // failing afterwards is its departure, not a fault.
    bool left = false;
    std::string failure;  // "peer rank N failed: ..."
  };

  // Holds the worker for this thread; on release, sends abort messages that
  // another thread asked for while the worker was held.
  class WorkerLock {
   public:
    explicit WorkerLock(UcxTransport& t) : t_(t) {
      t_.worker_mu_.lock();
      t_.holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    }
    ~WorkerLock() {
      t_.holder_.store(std::thread::id{}, std::memory_order_relaxed);
      t_.worker_mu_.unlock();
      t_.drain_abort_sends();
    }
    WorkerLock(const WorkerLock&) = delete;
    WorkerLock& operator=(const WorkerLock&) = delete;
    // Lets other threads post and drive while this one sleeps in poll(); every
    // release() is followed by reacquire() before the lock goes out of scope.
    void release() {
      t_.holder_.store(std::thread::id{}, std::memory_order_relaxed);
      t_.worker_mu_.unlock();
      t_.drain_abort_sends();
    }
    void reacquire() {
      t_.worker_mu_.lock();
      t_.holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    }

   private:
    UcxTransport& t_;
  };

  static void on_send_done(void* request, ucs_status_t status, void* user_data);
  static void on_recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data);
  static void on_control_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data);
  static void on_control_sent(void* request, ucs_status_t status, void* user_data);
  static void on_peer_error(void* arg, ucp_ep_h ep, ucs_status_t status);

  void send(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done, bool bare);
  void recv(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done, bool bare);
  // The UCX datatype, buffer and entry count of a slot's (single) message.
  void describe_message(OpSlot& slot, Completion& done, ucp_request_param_t& param, void*& buffer, std::size_t& count);
  bool splits(std::size_t payload_bytes, bool bare) const noexcept {
    return !bare && split_bytes_ > 0 && payload_bytes >= split_bytes_;
  }
  // Posts one UCX send of a slot; `request` keeps it while outstanding.
  static ucp_request_param_t send_param(OpSlot& slot);
  void post_send_part(ucp_ep_h ep, void* buffer, std::size_t count, std::uint64_t ucp_tag,
                      const ucp_request_param_t& param, OpSlot& slot, void*& request);
  void post_held_payload(OpSlot& slot);
  void finish_send_part(OpSlot& slot, ucs_status_t status);
  // A header half matched `slot`'s receive: its payload half is posted by post_payload_halves().
  void header_half_arrived(OpSlot& slot, std::size_t length);
  unsigned post_payload_halves();
  unsigned release_held_payloads();
  OpSlot& acquire_slot();
  void release_slot(OpSlot& slot) noexcept;
  void finish_send(OpSlot& slot, ucs_status_t status);
  void finish_recv(OpSlot& slot, ucs_status_t status, std::size_t length);
  void end(Completion& op, State state, std::string error = {});

  unsigned drive();
  void handle_events();
  void block(Deadline deadline, Clock::time_point now);
  void sleep_on_events(Deadline deadline, Clock::time_point now);  // poll() on the armed worker's descriptor
  bool progress_until(const Completion& op, Deadline until);
  bool progress_until_complete(void* request, Deadline until);
  void post_control_recv();
  void connect_all(std::chrono::milliseconds bound);
  void handle_control_message(ucs_status_t status, std::size_t length);
  void send_abort_messages();
  void relay_abort();
  // `info` (local_abort_ or abort_info_, read under abort_mu_) to every live
  // peer, unless an abort message (own or relayed) already went.
  void send_abort_once(const std::optional<AbortInfo>& info, std::string_view what, LogLevel failure_level);
  void push_abort_messages(Deadline until);
  void drain_abort_sends() noexcept;
  void handle_peer_failures();
  void handle_peer_left(int rank);
  void send_leave_messages();
  // `message` under this rank's control tag to every live peer (for which
  // `reaches`, when given, is true).
  void send_control_to_peers(std::span<const std::byte> message, std::string_view what, LogLevel failure_level,
                             const std::function<bool(int)>& reaches = {});
  bool flush_worker(Clock::duration bound);
  void close_endpoint(Peer& peer, bool force);
  void fail_peer(int rank, std::string failure);
  void record_abort(const AbortInfo& info);
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }
  void drain_unexpected(Deadline until);
  void close() noexcept;

  int rank_;
  int size_;
  // Device payloads: the context moves CUDA memory (or the tests' option);
  // the memory type every bare message is handed to UCX with.
  bool device_payloads_ = false;
  ucs_memory_type_t device_memory_type_ = UCS_MEMORY_TYPE_CUDA;
  ProgressMode progress_mode_;
  std::chrono::microseconds spin_;
  std::size_t split_bytes_;  // Config::ucx_split_bytes: payloads this large are split (0: never)
  std::shared_ptr<std::atomic<bool>> hold_split_payloads_;  // UcxOptions (tests)
  std::function<bool(int, int)> abort_reaches_;              // UcxOptions (tests)

  // Declaration order is destruction order in reverse: the worker goes before
  // the context, and before the slots its callbacks point into.
  ContextPtr context_;
  std::deque<OpSlot> slots_;
  OpSlot* free_slots_ = nullptr;
  OpSlot* active_slots_ = nullptr;
  std::vector<Peer> peers_;
  // Which peers failed and why, readable from any thread (peer_failure); the
  // Peer records themselves belong to whoever holds the worker.
  mutable std::mutex lost_mu_;
  std::vector<std::string> lost_;        // index = rank; empty: not lost
  std::vector<std::string> identities_;  // index = rank: "pid P on host H" as the peer reported it
  void record_lost(int rank, const std::string& failure);
  std::vector<void*> closing_requests_;  // endpoint closes still in flight
  // Receives whose header half arrived, in arrival order; their payload
  // halves are posted by drive() and recv(), outside UCX's callbacks.
  std::vector<OpSlot*> header_halves_;
  // Sends whose payload half waits for UcxOptions::hold_split_payloads (tests).
  std::vector<OpSlot*> held_payloads_;

  // Control traffic.
  std::array<std::byte, kAbortMaxBytes> control_rx_{};
  void* control_rx_request_ = nullptr;
  bool control_rx_ready_ = false;
  ucs_status_t control_rx_status_ = UCS_OK;
  std::size_t control_rx_length_ = 0;
  std::vector<std::byte> control_tx_;  // this rank's abort message, or the one it relays
  std::vector<std::byte> leave_tx_;  // the leave message, alive until the worker goes
  bool tcp_links_ = false;           // some peer's endpoint has a TCP lane (set once connected)
  int control_sends_in_flight_ = 0;
  bool abort_sent_ = false;  // an abort message (own or relayed) went to the peers
  bool peer_failure_pending_ = false;
  bool closing_ = false;

  // Abort state, shared with other threads.
  std::atomic<bool> aborted_{false};
  std::atomic<bool> control_send_pending_{false};
  mutable std::mutex abort_mu_;
  std::optional<AbortInfo> abort_info_;   // first seen, local or remote
  std::optional<AbortInfo> local_abort_;  // this rank's own abort()

  std::mutex worker_mu_;
  std::atomic<std::thread::id> holder_{};
  // Threads in wait() sleeping without the worker lock: whoever drives events
  // meanwhile signals the worker, as their completions may be among them.
  std::atomic<int> sleepers_{0};
  WorkerPtr worker_;
  int event_fd_ = -1;
};

// ---------------------------------------------------------------------------
// Setup
// ---------------------------------------------------------------------------
UcxTransport::UcxTransport(Bootstrap& boot, const Config& cfg, const UcxOptions& options)
    : rank_(boot.rank()),
      size_(boot.size()),
      progress_mode_(cfg.progress),
      spin_(cfg.spin_before_sleep),
      split_bytes_(cfg.ucx_split_bytes),
      hold_split_payloads_(options.hold_split_payloads),
      abort_reaches_(options.abort_reaches) {
  ANTDT_CHECK_ARG(size_ >= 1 && size_ <= kMaxRanks, "make_ucx_transport: group size ", size_, " is outside [1, ",
                  kMaxRanks, "]");
  check_peer(rank_, size_, "make_ucx_transport");

  // UCX_* environment variables (UCX_TLS, UCX_NET_DEVICES, ...) are read here by UCX itself.
  default_ucx_environment(cfg.ucx_shm);
  ucp_config_t* raw_config = nullptr;
  check_ucs(ucp_config_read(nullptr, nullptr, &raw_config), "ucp_config_read");
  ConfigPtr config(raw_config);
  // Messages below UCX's rendezvous threshold travel as 8 KiB fragments through
  // the receiver's shared-memory FIFO, 64 slots by default; when several ranks
  // send to one (push-pull servers) it fills, and a blocked sender is not
  // woken when it drains. 256 slots (≈ 2 MiB of /dev/shm per rank, so only for
  // up to kFifoRanks ranks) made 4-rank push-pull of 8 MiB 2.7x faster and
  // left AllReduce as it was (docs/benchmarks.md). A value the user set wins.
  // UCX_TLS without a shared-memory transport (tcp,self: the network path)
  // has no FIFO, and UCX would warn that the setting is invalid.
  constexpr int kFifoRanks = 16;
  if (size_ <= kFifoRanks && shared_memory_transports_enabled())
    default_ucx_setting(*config, "UCX_MM_FIFO_SIZE", "MM_FIFO_SIZE", "256");
  // UCX's TCP transport copies messages up to its send segment (8 KiB by
  // default) in one piece and sends larger ones by rendezvous, a round trip
  // before any data moves. A 2-rank ring step of 32 KiB then took ~75 us
  // where one copy takes ~30 (ucx_perftest tag_lat). 64 KiB segments (the
  // receive segment must hold a whole one) made a 64 KiB AllReduce over TCP
  // 1.8x faster at 2 ranks and a 4-rank 256 KiB one 2.4x
  // (docs/benchmarks.md#tcp-segments-2026-12-07).
  // TCP only: shared memory and RDMA keep their own settings.
  default_ucx_setting(*config, "UCX_TCP_TX_SEG_SIZE", "TX_SEG_SIZE", "64K");
  default_ucx_setting(*config, "UCX_TCP_RX_SEG_SIZE", "RX_SEG_SIZE", "128K");

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.estimated_num_eps = static_cast<std::size_t>(size_);
  ucp_context_h raw_context = nullptr;
  check_ucs(ucp_init(&params, config.get(), &raw_context), "ucp_init");
  context_.reset(raw_context);
  {
    // UCX built with CUDA support (cuda_copy, cuda_ipc, gdr_copy, or RDMA
    // with GPUDirect) lists CUDA among the context's memory types.
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    check_ucs(ucp_context_query(context_.get(), &attr), "ucp_context_query");
    device_payloads_ = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    if (options.device_payloads_in_host_memory) {
      device_payloads_ = true;
      device_memory_type_ = UCS_MEMORY_TYPE_HOST;
    }
  }

  // SERIALIZED: whichever thread holds worker_mu_ may drive the worker.
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h raw_worker = nullptr;
  check_ucs(ucp_worker_create(context_.get(), &worker_params, &raw_worker), "ucp_worker_create");
  worker_.reset(raw_worker);
  check_ucs(ucp_worker_get_efd(worker_.get(), &event_fd_), "ucp_worker_get_efd");

  Bytes my_address;
  {
    ucp_address_t* address = nullptr;
    std::size_t address_bytes = 0;
    check_ucs(ucp_worker_get_address(worker_.get(), &address, &address_bytes), "ucp_worker_get_address");
    const auto* first = reinterpret_cast<const std::byte*>(address);
    my_address.assign(first, first + address_bytes);
    ucp_worker_release_address(worker_.get(), address);
  }
  const std::vector<Bytes> addresses = boot.allgather(my_address);
  if (addresses.size() != static_cast<std::size_t>(size_)) {
    raise<TransportError>("UCX: the address exchange returned ", addresses.size(), " addresses for ", size_,
                          " ranks");
  }

  // Who each peer is, for the error that names a lost one (PeerLostError).
  {
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    const std::string me = cat("pid ", ::getpid(), " on ", host);
    const std::vector<Bytes> ids = boot.allgather(std::as_bytes(std::span(me.data(), me.size())));
    identities_.resize(static_cast<std::size_t>(size_));
    lost_.resize(static_cast<std::size_t>(size_));
    for (std::size_t r = 0; r < ids.size() && r < identities_.size(); ++r)
      identities_[r] = printable(std::string_view(reinterpret_cast<const char*>(ids[r].data()),
                                                  std::min<std::size_t>(ids[r].size(), 300)));
  }

  for (int i = 0; i < size_ * kInitialSlotsPerPeer; ++i) release_slot(slots_.emplace_back());

  peers_.resize(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    Peer& peer = peers_[static_cast<std::size_t>(r)];
    peer.owner = this;
    peer.rank = r;
    const Bytes& address = addresses[static_cast<std::size_t>(r)];
    if (address.empty()) raise<TransportError>("UCX: rank ", r, " sent an empty worker address");
    ucp_ep_params_t ep_params{};
    ep_params.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep_params.err_handler.cb = &UcxTransport::on_peer_error;
    ep_params.err_handler.arg = &peer;
    const ucs_status_t status = ucp_ep_create(worker_.get(), &ep_params, &peer.ep);
    if (status != UCS_OK) {
      raise<TransportError>("UCX: creating the endpoint to peer rank ", r, " failed: ", ucs_status_string(status));
    }
  }

  WorkerLock lock(*this);
  post_control_recv();
  connect_all(cfg.timeout);
  tcp_links_ = std::any_of(peers_.begin(), peers_.end(), [&](const Peer& peer) {
    return peer.rank != rank_ && peer.ep != nullptr && has_tcp_lane(print_endpoint(peer.ep));
  });
  ANTDT_INFO("ucx transport: rank ", rank_, " of ", size_, " ready (worker address ", my_address.size(),
             " bytes; device payloads ", device_payloads_ ? "accepted" : "not accepted: UCX lacks CUDA support",
             "; payloads of ", split_bytes_ > 0 ? cat(split_bytes_, " bytes and more") : std::string("no size"),
             " sent as a contiguous message of their own)");
}

// UCX connects an endpoint on its first use, which needs both sides to drive
// their workers. Doing it now, while every rank is here and progressing, means
// an abort sent later from a rank that stops progressing right after still
// goes out at once; and a peer that cannot be reached shows up here, by name.
void UcxTransport::connect_all(std::chrono::milliseconds bound) {
  std::vector<void*> requests;
  std::vector<int> request_peer;
  auto track = [&](void* request, int peer, std::string_view what) {
    if (UCS_PTR_IS_ERR(request)) {
      raise<TransportError>("UCX: connecting to peer rank ", peer, " failed (", what, "): ",
                            ucs_status_string(UCS_PTR_STATUS(request)));
    }
    if (request != nullptr) {
      requests.push_back(request);
      request_peer.push_back(peer);
    }
  };
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype = ucp_dt_make_contig(1);
    track(ucp_tag_recv_nbx(worker_.get(), nullptr, 0, hello_tag(peer), kFullMask, &param), peer, "receive");
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype = ucp_dt_make_contig(1);
    track(ucp_tag_send_nbx(peers_[static_cast<std::size_t>(peer)].ep, nullptr, 0, hello_tag(rank_), &param), peer,
          "send");
  }
  const Deadline until = Clock::now() + bound;
  std::string unreachable;
  std::string failed;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const bool finished = progress_until_complete(requests[i], until);
    const ucs_status_t status = ucp_request_check_status(requests[i]);
    if (!finished) {
      ucp_request_cancel(worker_.get(), requests[i]);
      unreachable += cat(unreachable.empty() ? "" : ", ", request_peer[i]);
    } else if (status != UCS_OK) {
      failed += cat(failed.empty() ? "" : "; ", "rank ", request_peer[i], ": ", ucs_status_string(status));
    }
    ucp_request_free(requests[i]);
  }
  if (!unreachable.empty()) {
    raise<TransportError>("UCX: rank ", rank_, " could not connect to peer ranks ", unreachable, " within ",
                          bound.count(), " ms");
  }
  if (!failed.empty()) raise<TransportError>("UCX: rank ", rank_, " could not connect to peers: ", failed);
}

// ---------------------------------------------------------------------------
// Slots and completions
// ---------------------------------------------------------------------------
UcxTransport::OpSlot& UcxTransport::acquire_slot() {
  OpSlot* slot = free_slots_;
  if (slot == nullptr) {
    slot = &slots_.emplace_back();
  } else {
    free_slots_ = slot->next;
  }
  *slot = OpSlot{};
  slot->owner = this;
  slot->next = active_slots_;
  if (active_slots_ != nullptr) active_slots_->prev = slot;
  active_slots_ = slot;
  return *slot;
}

void UcxTransport::release_slot(OpSlot& slot) noexcept {
  if (slot.owner != nullptr) {  // unlink from the active list
    if (slot.prev != nullptr) slot.prev->next = slot.next;
    if (slot.next != nullptr) slot.next->prev = slot.prev;
    if (active_slots_ == &slot) active_slots_ = slot.next;
  }
  slot.owner = nullptr;
  slot.done = nullptr;
  slot.prev = nullptr;
  slot.next = free_slots_;
  free_slots_ = &slot;
}

void UcxTransport::end(Completion& op, State state, std::string error) {
  if (state == State::failed) op.error = std::move(error);
  op.handle = nullptr;
  op.state.store(state, std::memory_order_release);
}

void UcxTransport::finish_send(OpSlot& slot, ucs_status_t status) {
  if (Completion* op = slot.done) {
    const Peer& peer = peers_[static_cast<std::size_t>(slot.peer)];
    if (status == UCS_OK) {
      end(*op, State::done);
    } else if (slot.cancel_requested) {
      end(*op, State::cancelled);
    } else if (peer.failed) {
      end(*op, State::failed, cat("send to rank ", slot.peer, " with tag ", slot.tag, " failed: ", peer.failure));
    } else if (is_peer_failure(status)) {
      end(*op, State::failed,
          cat("send to rank ", slot.peer, " with tag ", slot.tag, " failed: peer rank ", slot.peer,
              " failed: ", ucs_status_string(status)));
    } else {
      end(*op, State::failed,
          cat("send to rank ", slot.peer, " with tag ", slot.tag, " failed: ", ucs_status_string(status)));
    }
  }
  release_slot(slot);
}

void UcxTransport::finish_send_part(OpSlot& slot, ucs_status_t status) {
  if (status != UCS_OK && slot.parts_status == UCS_OK) slot.parts_status = status;
  if (--slot.parts_pending == 0) finish_send(slot, slot.parts_status);
}

void UcxTransport::finish_recv(OpSlot& slot, ucs_status_t status, std::size_t length) {
  if (Completion* op = slot.done) {
    const Peer& peer = peers_[static_cast<std::size_t>(slot.peer)];
    // A payload half is the payload alone; a single message has the header in front.
    const std::size_t header = slot.bare || slot.payload_posted ? 0 : kHeadBytes;
    const std::size_t capacity = slot.payload_posted ? slot.payload_bytes : slot.capacity;
    if (status == UCS_OK) {
      const std::size_t payload = length - std::min(length, header);
      if (length < header) {
        end(*op, State::failed,
            cat("message from rank ", slot.peer, " with tag ", slot.tag, " has ", length,
                " bytes, less than a message header (", kHeadBytes, ")"));
      } else if (header > 0 && slot.wire.prefix.form != WirePrefix::kSingle) {
        end(*op, State::failed,
            cat("message from rank ", slot.peer, " with tag ", slot.tag, " is malformed (form ",
                slot.wire.prefix.form, ")"));
      } else {
        op->received_bytes = payload;
        end(*op, State::done);
      }
    } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
      const std::string incoming = length > capacity + header ? cat(length - header, " payload bytes")
                                                              : std::string("a longer payload");
      op->truncated = true;
      end(*op, State::failed, truncation_error(slot.peer, slot.tag, slot.capacity, incoming));
    } else if (peer.failed) {
      end(*op, State::failed, cat("receive from rank ", slot.peer, " with tag ", slot.tag, " failed: ", peer.failure));
    } else if (status == UCS_ERR_CANCELED) {
      end(*op, State::cancelled);
    } else {
      end(*op, State::failed,
          cat("receive from rank ", slot.peer, " with tag ", slot.tag, " failed: ", ucs_status_string(status)));
    }
  }
  release_slot(slot);
}

void UcxTransport::on_send_done(void* request, ucs_status_t status, void* user_data) {
  auto* slot = static_cast<OpSlot*>(user_data);
  ucp_request_free(request);
  (request == slot->payload_request ? slot->payload_request : slot->request) = nullptr;
  slot->owner->finish_send_part(*slot, status);
}

void UcxTransport::on_recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                                void* user_data) {
  auto* slot = static_cast<OpSlot*>(user_data);
  ucp_request_free(request);
  slot->request = nullptr;
  const std::size_t length = info != nullptr ? info->length : 0;
  if (status == UCS_OK && !slot->bare && !slot->payload_posted && slot->wire.prefix.form == WirePrefix::kSplit) {
    slot->owner->header_half_arrived(*slot, length);
    return;
  }
  slot->owner->finish_recv(*slot, status, length);
}

// ---------------------------------------------------------------------------
// Split messages
// ---------------------------------------------------------------------------
void UcxTransport::header_half_arrived(OpSlot& slot, std::size_t length) {
  if (length != kHeadBytes) {
    // Not what a sender of this transport sends; nothing to pair it with.
    if (Completion* op = slot.done) {
      end(*op, State::failed,
          cat("message from rank ", slot.peer, " with tag ", slot.tag, " is a malformed split header of ", length,
              " bytes (", kHeadBytes, " expected)"));
    }
    release_slot(slot);
    return;
  }
  slot.header_arrived = true;
  slot.payload_bytes = static_cast<std::size_t>(slot.wire.prefix.payload_bytes);
  slot.payload_tag = payload_tag(slot.wire.prefix.split_number, slot.peer);
  header_halves_.push_back(&slot);
}

unsigned UcxTransport::post_payload_halves() {
  // Posting may complete a payload half at once (its callback runs inside);
  // that never appends here: only header halves do.
  const auto posted = static_cast<unsigned>(header_halves_.size());
  for (std::size_t i = 0; i < header_halves_.size(); ++i) {
    OpSlot& slot = *header_halves_[i];
    if (closing_) {  // the payload half is left to drain_unexpected()
      if (slot.done != nullptr) end(*slot.done, State::cancelled);
      release_slot(slot);
      continue;
    }
    if (slot.done != nullptr && slot.payload_bytes > slot.capacity) {
      // Truncated: the receive fails now. Its payload half is still taken
      // (into 0 bytes: UCX reports it truncated and writes nothing), or the
      // sender's rendezvous would never end.
      Completion& op = *slot.done;
      op.truncated = true;
      end(op, State::failed,
          truncation_error(slot.peer, slot.tag, slot.capacity, cat(slot.payload_bytes, " payload bytes")));
      slot.done = nullptr;
    }
    if (slot.done == nullptr) {  // nobody waits for the data any more: drain it
      slot.buffer = nullptr;
      slot.capacity = 0;
      slot.payload_bytes = 0;
    }
    slot.payload_posted = true;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL |
                         UCP_OP_ATTR_FIELD_DATATYPE;
    param.cb.recv = &UcxTransport::on_recv_done;
    param.user_data = &slot;
    param.datatype = ucp_dt_make_contig(1);
    void* request =
        ucp_tag_recv_nbx(worker_.get(), slot.buffer, slot.payload_bytes, slot.payload_tag, kFullMask, &param);
    if (UCS_PTR_IS_ERR(request)) {
      finish_recv(slot, UCS_PTR_STATUS(request), 0);
    } else if (slot.owner != nullptr) {  // else the callback has run and released the slot
      slot.request = request;
      // The peer is gone: only what it sent before can still match (above).
      if (peers_[static_cast<std::size_t>(slot.peer)].failed) ucp_request_cancel(worker_.get(), request);
    }
  }
  header_halves_.clear();
  return posted;
}

void UcxTransport::post_held_payload(OpSlot& slot) {
  const Peer& target = peers_[static_cast<std::size_t>(slot.peer)];
  if (target.failed || target.ep == nullptr || closing_) {
    finish_send_part(slot, UCS_ERR_CANCELED);
    return;
  }
  --slot.parts_pending;  // it was counted while held; post_send_part counts it again
  post_send_part(target.ep, slot.buffer, slot.capacity, payload_tag(slot.wire.prefix.split_number, rank_),
                 send_param(slot), slot, slot.payload_request);
}

unsigned UcxTransport::release_held_payloads() {
  if (held_payloads_.empty()) return 0;
  const bool hold = hold_split_payloads_ && hold_split_payloads_->load(std::memory_order_acquire);
  unsigned released = 0;
  std::vector<OpSlot*> held = std::move(held_payloads_);
  held_payloads_.clear();
  for (OpSlot* slot : held) {
    const Peer& target = peers_[static_cast<std::size_t>(slot->peer)];
    if (hold && !closing_ && !target.failed) {
      held_payloads_.push_back(slot);
      continue;
    }
    post_held_payload(*slot);
    ++released;
  }
  return released;
}

// ---------------------------------------------------------------------------
// Posting
// ---------------------------------------------------------------------------
void UcxTransport::post_send(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done) {
  send(peer, tag, payload, done, false);
}
void UcxTransport::post_recv(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) {
  recv(peer, tag, payload, done, false);
}
void UcxTransport::post_send_device(int peer, std::uint64_t tag, std::span<const std::byte> payload,
                                    Completion& done) {
  if (!device_payloads_) Transport::post_send_device(peer, tag, payload, done);
  send(peer, tag, payload, done, true);
}
void UcxTransport::post_recv_device(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) {
  if (!device_payloads_) Transport::post_recv_device(peer, tag, payload, done);
  recv(peer, tag, payload, done, true);
}

void UcxTransport::describe_message(OpSlot& slot, Completion& done, ucp_request_param_t& param, void*& buffer,
                                    std::size_t& count) {
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
  if (slot.bare) {
    // One contiguous buffer of one memory type: UCX picks its CUDA-capable
    // transports from the memory type, and an IOV may not mix host and device.
    param.datatype = ucp_dt_make_contig(1);
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param.memory_type = device_memory_type_;
    buffer = slot.buffer;
    count = slot.capacity;
    return;
  }
  // [prefix, header, payload]: a receive takes either form, a header half
  // filling the first two entries exactly.
  param.datatype = ucp_dt_make_iov();
  buffer = slot.iov.data();
  slot.iov[0] = {&slot.wire.prefix, sizeof(WirePrefix)};
  slot.iov[1] = {&done.header, sizeof(MessageHeader)};
  slot.iov[2] = {slot.buffer, slot.capacity};
  count = slot.capacity == 0 ? 2 : 3;
}

ucp_request_param_t UcxTransport::send_param(OpSlot& slot) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.send = &UcxTransport::on_send_done;
  param.user_data = &slot;
  param.datatype = ucp_dt_make_contig(1);
  return param;
}

void UcxTransport::post_send_part(ucp_ep_h ep, void* buffer, std::size_t count, std::uint64_t ucp_tag,
                                  const ucp_request_param_t& param, OpSlot& slot, void*& request) {
  ++slot.parts_pending;
  void* posted = ucp_tag_send_nbx(ep, buffer, count, ucp_tag, &param);
  if (UCS_PTR_IS_PTR(posted) && posted != nullptr) {
    request = posted;  // on_send_done counts it off
    return;
  }
  finish_send_part(slot, posted == nullptr ? UCS_OK : UCS_PTR_STATUS(posted));
}

void UcxTransport::send(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done,
                        bool bare) {
  check_peer(peer, size_, "post_send");
  check_tag(tag, "post_send");
  done.reset();
  WorkerLock lock(*this);
  Peer& target = peers_[static_cast<std::size_t>(peer)];
  if (target.failed || target.ep == nullptr) {
    end(done, State::failed, cat("send to rank ", peer, " with tag ", tag, " failed: ", target.failure));
    return;
  }
  OpSlot& slot = acquire_slot();
  slot.done = &done;
  slot.peer = peer;
  slot.tag = tag;
  slot.bare = bare;
  // UCX's buffers have no const variant; a send only reads them.
  slot.buffer = const_cast<std::byte*>(payload.data());
  slot.capacity = payload.size();
  // The posting counts as a part: no completion below ends the slot before every part is out.
  slot.parts_pending = 1;
  const std::uint64_t ucp_tag = data_tag(tag, rank_) | (bare ? kBareBit : 0);
  ucp_request_param_t param = send_param(slot);
  if (splits(payload.size(), bare)) {
    slot.wire = HeaderHalf{WirePrefix{WirePrefix::kSplit, 0, target.next_split++, payload.size()}, done.header};
    post_send_part(target.ep, &slot.wire, sizeof(HeaderHalf), ucp_tag, param, slot, slot.request);
    if (slot.parts_status == UCS_OK) {
      if (hold_split_payloads_ && hold_split_payloads_->load(std::memory_order_acquire)) {
        ++slot.parts_pending;  // posted by release_held_payloads()
        held_payloads_.push_back(&slot);
      } else {
        post_send_part(target.ep, slot.buffer, slot.capacity, payload_tag(slot.wire.prefix.split_number, rank_), param,
                       slot, slot.payload_request);
      }
    }
  } else {
    void* buffer = nullptr;
    std::size_t count = 0;
    describe_message(slot, done, param, buffer, count);
    post_send_part(target.ep, buffer, count, ucp_tag, param, slot, slot.request);
  }
  finish_send_part(slot, UCS_OK);  // may end the operation: every part completed at once
  if (done.pending()) done.handle = &slot;
}

void UcxTransport::recv(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done, bool bare) {
  check_peer(peer, size_, "post_recv");
  check_tag(tag, "post_recv");
  done.reset();
  WorkerLock lock(*this);
  OpSlot& slot = acquire_slot();
  slot.done = &done;
  slot.peer = peer;
  slot.tag = tag;
  slot.is_recv = true;
  slot.bare = bare;
  slot.buffer = payload.data();
  slot.capacity = payload.size();

  // No immediate completion: UCX 1.13 does not report the received length
  // (recv_info) for a receive that completes inside ucp_tag_recv_nbx, but it
  // does pass it to the callback, which then runs before the call returns.
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = &UcxTransport::on_recv_done;
  param.user_data = &slot;
  void* buffer = nullptr;
  std::size_t count = 0;
  describe_message(slot, done, param, buffer, count);
  // Headed receives take a single message or the header half of a split one.
  const std::uint64_t ucp_tag = data_tag(tag, peer) | (bare ? kBareBit : 0);
  void* request = ucp_tag_recv_nbx(worker_.get(), buffer, count, ucp_tag, kFullMask, &param);
  if (UCS_PTR_IS_ERR(request)) {
    finish_recv(slot, UCS_PTR_STATUS(request), 0);
    return;
  }
  if (!done.pending()) return;  // the callback has run, freed the request and recycled the slot
  done.handle = &slot;
  if (slot.header_arrived) {  // a header half was waiting (the callback freed the request): on to its payload
    post_payload_halves();
    return;
  }
  slot.request = request;
  // A message the dead peer sent before it failed has matched above; nothing more will come.
  if (peers_[static_cast<std::size_t>(peer)].failed) ucp_request_cancel(worker_.get(), request);
}

// ---------------------------------------------------------------------------
// Progress and waiting
// ---------------------------------------------------------------------------
unsigned UcxTransport::drive() {
  unsigned events = 0;
  for (unsigned round = 0; round < kMaxProgressRounds; ++round) {
    // Payload halves go out (held ones, tests) and are received right after
    // their header halves, so each pair costs one pass.
    unsigned n = ucp_worker_progress(worker_.get());
    n += post_payload_halves();
    n += release_held_payloads();
    events += n;
    if (n == 0) break;
  }
  handle_events();
  // Another thread asleep in wait() may have had its operations among these events.
  if (events > 0 && sleepers_.load(std::memory_order_acquire) > 0) ucp_worker_signal(worker_.get());
  return events;
}

void UcxTransport::handle_events() {
  // Control messages first: a peer that aborts and then closes sends its abort
  // before its endpoints go, and the abort (the root cause) must be on record
  // before the operations waiting for that peer fail.
  if (control_rx_ready_) {
    control_rx_ready_ = false;
    handle_control_message(control_rx_status_, control_rx_length_);
    post_control_recv();
  }
  if (peer_failure_pending_) handle_peer_failures();
  if (control_send_pending_.exchange(false, std::memory_order_acq_rel)) send_abort_messages();
}

void UcxTransport::block(Deadline deadline, Clock::time_point now) {
  // Arming fails with BUSY while events are unprocessed; the caller progresses and comes back.
  const ucs_status_t armed = ucp_worker_arm(worker_.get());
  if (armed == UCS_ERR_BUSY) return;
  check_ucs(armed, "ucp_worker_arm");
  sleep_on_events(deadline, now);
}

void UcxTransport::sleep_on_events(Deadline deadline, Clock::time_point now) {
  const auto slice = std::min<Clock::duration>(deadline - now, kPollSlice);
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(slice).count();
  pollfd fd{event_fd_, POLLIN, 0};
  if (::poll(&fd, 1, static_cast<int>(std::max<std::int64_t>(ms, 1))) < 0 && errno != EINTR) {
    raise<TransportError>("UCX: poll on the worker's event descriptor failed: ", std::strerror(errno));
  }
}

WaitResult UcxTransport::wait(std::span<Completion* const> ops, Deadline deadline) {
  for (const Completion* op : ops) ANTDT_CHECK_ARG(op != nullptr, "wait: null operation in the list");
  WorkerLock lock(*this);
  const auto start = Clock::now();
  const Deadline spin_end = progress_mode_ == ProgressMode::spin   ? Deadline::max()
                            : progress_mode_ == ProgressMode::wake ? start
                                                                   : start + spin_;
  for (;;) {
    const unsigned events = drive();
    // An abort wins over completion: once the group aborted, every wait says so.
    if (aborted()) {
      push_abort_messages(Clock::now() + kAbortLinger);
      return WaitResult::aborted;
    }
    if (all_finished(ops)) return WaitResult::done;
    const auto now = Clock::now();
    if (now >= deadline) return WaitResult::timeout;
    if (events > 0) continue;
    if (now < spin_end) {
      // Spinning, but give the core away between polls: with more ranks than
      // cores the peer we wait for may need this very core to send.
      sched_yield();
      continue;
    }
    // Sleep without holding the worker: a communicator's progress thread may
    // be waiting here for a whole collective while the caller posts and tests
    // point-to-point transfers on the same worker.
    const ucs_status_t armed = ucp_worker_arm(worker_.get());
    if (armed == UCS_ERR_BUSY) continue;  // events arrived meanwhile: drive them first
    check_ucs(armed, "ucp_worker_arm");
    sleepers_.fetch_add(1, std::memory_order_acq_rel);
    lock.release();
    try {
      sleep_on_events(deadline, now);
    } catch (...) {
      lock.reacquire();
      sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      throw;
    }
    lock.reacquire();
    sleepers_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void UcxTransport::progress() {
  WorkerLock lock(*this);
  drive();
}

bool UcxTransport::progress_until(const Completion& op, Deadline until) {
  while (op.pending()) {
    drive();
    if (!op.pending()) break;
    const auto now = Clock::now();
    if (now >= until) return false;
    block(until, now);
  }
  return true;
}

void UcxTransport::push_abort_messages(Deadline until) {
  while (control_sends_in_flight_ > 0) {
    drive();
    if (control_sends_in_flight_ == 0) break;
    const auto now = Clock::now();
    if (now >= until) return;
    block(until, now);
  }
}

bool UcxTransport::progress_until_complete(void* request, Deadline until) {
  while (ucp_request_check_status(request) == UCS_INPROGRESS) {
    drive();
    if (ucp_request_check_status(request) != UCS_INPROGRESS) break;
    const auto now = Clock::now();
    if (now >= until) return false;
    block(until, now);
  }
  return true;
}

// ---------------------------------------------------------------------------
// Cancel
// ---------------------------------------------------------------------------
void UcxTransport::cancel(Completion& op) {
  if (!op.pending()) return;
  WorkerLock lock(*this);
  auto* slot = static_cast<OpSlot*>(op.handle);
  if (slot == nullptr) {  // never posted
    end(op, State::cancelled);
    return;
  }
  slot->cancel_requested = true;
  // A receive not yet matched ends here and now; a send (or a matched receive
  // still transferring) runs to its end, which progress drives. A receive
  // whose header half has arrived is matched: its payload half is on its way
  // (the sender posted both together) and is taken, so neither its buffer is
  // left to UCX nor the payload to a later receive. A split send's request is
  // its header half's: its payload half follows whatever happens to it.
  const bool matched = slot->is_recv && slot->header_arrived;
  if (slot->request != nullptr && !matched) ucp_request_cancel(worker_.get(), slot->request);
  const auto bound = aborted() ? std::chrono::duration_cast<Clock::duration>(kCancelBoundAborted)
                               : std::chrono::duration_cast<Clock::duration>(kCancelBound);
  if (progress_until(op, Clock::now() + bound)) return;

  // The peer did not take the message: closing the endpoint is the only way
  // to make UCX let go of the buffer. It ends every operation to that peer.
  const int peer = slot->peer;
  fail_peer(peer, cat("peer rank ", peer, " failed: its endpoint was closed because an operation with it could not "
                                          "be cancelled within ",
                      std::chrono::duration_cast<std::chrono::milliseconds>(bound).count(), " ms"));
  if (progress_until(op, Clock::now() + kCloseBound)) return;

  log::write(LogLevel::error, cat("ucx transport: rank ", rank_, ": an operation with rank ", peer,
                                  " did not end after its endpoint was closed; abandoning it"));
  slot->done = nullptr;
  end(op, State::cancelled);
}

// ---------------------------------------------------------------------------
// Peer failures
// ---------------------------------------------------------------------------
void UcxTransport::on_peer_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  if (peer->failed) return;
  peer->failed = true;
  peer->failure = peer->left ? cat("peer rank ", peer->rank, " failed: it closed its transport")
                             : cat("peer rank ", peer->rank, " failed: ", ucs_status_string(status));
  peer->owner->peer_failure_pending_ = true;
  if (!peer->owner->closing_) peer->owner->record_lost(peer->rank, peer->failure);
  // Logged by handle_peer_failures(), after the control messages of this
  // round: a leave message that arrived just before makes it a departure.
}

void UcxTransport::handle_peer_left(int rank) {
  Peer& peer = peers_[static_cast<std::size_t>(rank)];
  peer.left = true;
  if (peer.failed || rank == rank_) return;
  // It flushed everything it sent before this message: a receive from it
  // that is still unmatched never will be. Fail it now rather than when the
  // connection's end is noticed (on shared memory, by the keepalive).
  peer.failed = true;
  peer.failure = cat("peer rank ", rank, " failed: it closed its transport");
  if (!closing_) record_lost(rank, peer.failure);
  peer_failure_pending_ = true;
}

void UcxTransport::fail_peer(int rank, std::string failure) {
  Peer& peer = peers_[static_cast<std::size_t>(rank)];
  if (!peer.failed) {
    peer.failed = true;
    peer.failure = std::move(failure);
    peer.failure_reported = true;
    log::write(LogLevel::warn, cat("ucx transport: rank ", rank_, ": ", peer.failure));
    if (!closing_) record_lost(rank, peer.failure);
  }
  peer_failure_pending_ = true;
  handle_peer_failures();
}

void UcxTransport::record_lost(int rank, const std::string& failure) {
  std::lock_guard guard(lost_mu_);
  auto& slot = lost_.at(static_cast<std::size_t>(rank));
  if (slot.empty()) slot = failure.empty() ? std::string("failed") : failure;
}

std::optional<std::string> UcxTransport::peer_failure(int peer) const {
  if (peer < 0 || peer >= size_) return std::nullopt;
  std::lock_guard guard(lost_mu_);
  const auto& slot = lost_[static_cast<std::size_t>(peer)];
  if (slot.empty()) return std::nullopt;
  return slot;
}

std::string UcxTransport::describe_peer(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(identities_.size()) || identities_[static_cast<std::size_t>(peer)].empty())
    return cat("rank ", peer);
  return cat("rank ", peer, " (", identities_[static_cast<std::size_t>(peer)], ")");
}

void UcxTransport::close_endpoint(Peer& peer, bool force) {
  if (peer.ep == nullptr) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucp_ep_h ep = std::exchange(peer.ep, nullptr);
  void* request = ucp_ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(request) && request != nullptr) {
    closing_requests_.push_back(request);
  } else if (UCS_PTR_IS_ERR(request) && !force) {
    ANTDT_INFO("ucx transport: rank ", rank_, ": closing the endpoint to rank ", peer.rank, ": ",
               ucs_status_string(UCS_PTR_STATUS(request)));
  }
}

void UcxTransport::handle_peer_failures() {
  peer_failure_pending_ = false;
  for (Peer& peer : peers_) {
    if (!peer.failed || peer.failure_handled) continue;
    peer.failure_handled = true;
    if (!peer.failure_reported) {
      peer.failure_reported = true;
      // Peers that closed their transports, or any peer once this one is
      // closing, are expected to go: that is not worth a warning.
      const LogLevel level = closing_ || peer.left ? LogLevel::info : LogLevel::warn;
      if (log::enabled(level)) log::write(level, cat("ucx transport: rank ", rank_, ": ", peer.failure));
    }
    // UCX wants a failed endpoint closed by force; that also ends our sends to it.
    close_endpoint(peer, /*force=*/true);
    // Receives are not tied to an endpoint: end the ones waiting for this peer.
    for (OpSlot* slot = active_slots_; slot != nullptr;) {
      OpSlot* next = slot->next;  // cancelling may complete (and recycle) this slot right away
      if (slot->is_recv && slot->peer == peer.rank && slot->request != nullptr) {
        ucp_request_cancel(worker_.get(), slot->request);
      }
      slot = next;
    }
  }
}

// ---------------------------------------------------------------------------
// Abort
// ---------------------------------------------------------------------------
void UcxTransport::record_abort(const AbortInfo& info) {
  bool first = false;
  {
    std::lock_guard guard(abort_mu_);
    if (!abort_info_) {
      abort_info_ = info;
      first = true;
    }
    aborted_.store(true, std::memory_order_release);
  }
  if (first) {
    ANTDT_INFO("ucx transport: rank ", rank_, " saw an abort from rank ", info.origin_rank, " (status ",
               info.status, "): ", info.reason);
  }
}

void UcxTransport::abort(int status, std::string_view reason) noexcept {
  try {
    {
      std::lock_guard guard(abort_mu_);
      if (local_abort_) return;  // idempotent: the first call wins
      local_abort_ = AbortInfo{rank_, status, cut_reason(reason)};
    }
    record_abort(*local_abort_);
  } catch (...) {
    // No memory for the reason: still stop every wait here.
    aborted_.store(true, std::memory_order_release);
    return;
  }
  control_send_pending_.store(true, std::memory_order_release);
  if (holder_.load(std::memory_order_relaxed) == std::this_thread::get_id()) return;  // our own holder sends
  if (worker_mu_.try_lock()) {
    holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    try {
      if (control_send_pending_.exchange(false, std::memory_order_acq_rel)) send_abort_messages();
    } catch (const std::exception& e) {
      log::write(LogLevel::error, cat("ucx transport: sending abort messages failed: ", e.what()));
    }
    holder_.store(std::thread::id{}, std::memory_order_relaxed);
    worker_mu_.unlock();
  } else {
    // Another thread holds the worker, maybe blocked in poll(): wake it; it sends.
    ucp_worker_signal(worker_.get());
  }
}

void UcxTransport::drain_abort_sends() noexcept {
  while (control_send_pending_.load(std::memory_order_acquire) && worker_mu_.try_lock()) {
    holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    try {
      if (control_send_pending_.exchange(false, std::memory_order_acq_rel)) send_abort_messages();
    } catch (const std::exception& e) {
      log::write(LogLevel::error, cat("ucx transport: sending abort messages failed: ", e.what()));
    }
    holder_.store(std::thread::id{}, std::memory_order_relaxed);
    worker_mu_.unlock();
  }
}

void UcxTransport::send_abort_messages() { send_abort_once(local_abort_, "abort", LogLevel::warn); }

void UcxTransport::relay_abort() {
  // A rank that learned of an abort from a peer passes it on before it
  // leaves. Its leave message fails whatever a peer still waits for from it,
  // and the origin's own message to that peer may be slower (a first
  // connection) or lost (a failed send): the peer must see the root cause
  // first, not this departure. Messages from one sender match in order, so
  // the relay is ahead of the leave message.
  send_abort_once(abort_info_, "relayed abort", LogLevel::info);
}

void UcxTransport::send_abort_once(const std::optional<AbortInfo>& info, std::string_view what,
                                   LogLevel failure_level) {
  if (abort_sent_) return;
  {
    std::lock_guard guard(abort_mu_);
    if (!info) return;
    control_tx_ = encode_abort_message(*info);
  }
  abort_sent_ = true;
  std::function<bool(int)> reaches;
  if (abort_reaches_) reaches = [this](int peer) { return abort_reaches_(rank_, peer); };
  send_control_to_peers(control_tx_, what, failure_level, reaches);
}

void UcxTransport::send_control_to_peers(std::span<const std::byte> message, std::string_view what,
                                         LogLevel failure_level, const std::function<bool(int)>& reaches) {
  // Best effort and non-blocking: the sends complete whenever the worker is
  // driven next; `message` must stay alive until then (a member).
  for (Peer& peer : peers_) {
    if (peer.rank == rank_ || peer.failed || peer.ep == nullptr) continue;
    if (reaches && !reaches(peer.rank)) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    param.cb.send = &UcxTransport::on_control_sent;
    param.user_data = this;
    param.datatype = ucp_dt_make_contig(1);
    void* request = ucp_tag_send_nbx(peer.ep, message.data(), message.size(), control_tag(rank_), &param);
    if (UCS_PTR_IS_ERR(request)) {
      if (log::enabled(failure_level))
        log::write(failure_level, cat("ucx transport: rank ", rank_, ": ", what, " message to rank ", peer.rank,
                                      " failed: ", ucs_status_string(UCS_PTR_STATUS(request))));
    } else if (request != nullptr) {
      ++control_sends_in_flight_;
    }
  }
}

void UcxTransport::on_control_sent(void* request, ucs_status_t /*status*/, void* user_data) {
  ucp_request_free(request);
  --static_cast<UcxTransport*>(user_data)->control_sends_in_flight_;
}

void UcxTransport::on_control_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                                   void* user_data) {
  auto* self = static_cast<UcxTransport*>(user_data);
  ucp_request_free(request);
  self->control_rx_request_ = nullptr;
  self->control_rx_status_ = status;
  self->control_rx_length_ = info != nullptr ? info->length : 0;
  // A leave message is marked at once: the end of the peer's connection may
  // be reported in this same progress round, before handle_events() runs.
  if (status == UCS_OK) {
    const auto bytes = std::span<const std::byte>(self->control_rx_.data(),
                                                  std::min(self->control_rx_length_, self->control_rx_.size()));
    if (auto origin = decode_leave_message(bytes, self->size_))
      self->peers_[static_cast<std::size_t>(*origin)].left = true;
  }
  // Parsed and re-posted by handle_events(), outside UCX's callback.
  self->control_rx_ready_ = true;
}

void UcxTransport::post_control_recv() {
  while (!closing_ && control_rx_request_ == nullptr) {
    // No immediate completion, as for data receives: the callback reports the length.
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE |
                         UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = &UcxTransport::on_control_recv;
    param.user_data = this;
    param.datatype = ucp_dt_make_contig(1);
    control_rx_ready_ = false;
    void* request =
        ucp_tag_recv_nbx(worker_.get(), control_rx_.data(), control_rx_.size(), kControlBit, kAbortMask, &param);
    if (UCS_PTR_IS_ERR(request)) {
      raise<TransportError>("UCX: posting the control receive failed: ",
                            ucs_status_string(UCS_PTR_STATUS(request)));
    }
    if (control_rx_ready_) {  // a control message was waiting: the callback ran and freed the request
      control_rx_ready_ = false;
      handle_control_message(control_rx_status_, control_rx_length_);
      continue;
    }
    control_rx_request_ = request;
  }
}

void UcxTransport::handle_control_message(ucs_status_t status, std::size_t length) {
  if (status == UCS_ERR_CANCELED) return;
  if (status != UCS_OK) {
    log::write(LogLevel::warn, cat("ucx transport: rank ", rank_, ": dropped a control message: ",
                                   ucs_status_string(status)));
    return;
  }
  const auto bytes = std::span<const std::byte>(control_rx_.data(), std::min(length, control_rx_.size()));
  if (auto info = decode_abort_message(bytes, size_)) {
    record_abort(*info);
  } else if (auto origin = decode_leave_message(bytes, size_)) {
    handle_peer_left(*origin);
  } else {
    log::write(LogLevel::warn, cat("ucx transport: rank ", rank_, ": dropped a malformed control message of ",
                                   length, " bytes"));
  }
}

std::optional<AbortInfo> UcxTransport::abort_info() const {
  // Every collective asks: answer the common case without the lock
  // (abort_info_ is only ever set together with aborted_).
  if (!aborted()) return std::nullopt;
  std::lock_guard guard(abort_mu_);
  if (abort_info_) return abort_info_;
  if (aborted()) return AbortInfo{rank_, static_cast<int>(Status::aborted), {}};
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Teardown: deliver what is in flight (bounded), then close every endpoint
// (gracefully where the flush worked, by force where a peer is gone).
// ---------------------------------------------------------------------------
void UcxTransport::close() noexcept {
  try {
    WorkerLock lock(*this);
    handle_events();  // abort messages asked for but not sent yet
    relay_abort();    // flushed with the rest, ahead of the leave message
    closing_ = true;
    if (control_rx_request_ != nullptr) ucp_request_cancel(worker_.get(), control_rx_request_);
    control_rx_ready_ = false;
    for (OpSlot* slot = active_slots_; slot != nullptr;) {
      OpSlot* next = slot->next;
      if (slot->is_recv && slot->request != nullptr) {
        slot->cancel_requested = true;
        ucp_request_cancel(worker_.get(), slot->request);
      }
      slot = next;
    }

    drain_unexpected(Clock::now() + kDrainBound);

    const auto flush_bound = aborted() ? std::chrono::duration_cast<Clock::duration>(kFlushBoundAborted)
                                       : std::chrono::duration_cast<Clock::duration>(kFlushBound);
    bool flushed = flush_worker(flush_bound);
    if (flushed) {
      // Everything this rank sent is out: tell the peers nothing more comes,
      // so they neither wait for it nor take its departure for a fault.
      send_leave_messages();
      flushed = flush_worker(flush_bound);
    }
    if (!flushed) {
      ANTDT_INFO("ucx transport: rank ", rank_, ": messages still in flight after ",
                 std::chrono::duration_cast<std::chrono::milliseconds>(flush_bound).count(),
                 " ms; closing endpoints by force");
    }

    for (Peer& peer : peers_) close_endpoint(peer, /*force=*/!flushed || peer.failed);
    const Deadline close_until = Clock::now() + kCloseBound;
    // By index: progress may report more failed peers, whose closes are appended.
    for (std::size_t i = 0; i < closing_requests_.size(); ++i) {
      progress_until_complete(closing_requests_[i], close_until);
    }
    for (void* request : closing_requests_) ucp_request_free(request);
    closing_requests_.clear();
    drain_unexpected(Clock::now() + kDrainBound);  // leave messages of peers that closed meanwhile

    // Whatever is still pending now never completes: tell its owner.
    for (OpSlot* slot = active_slots_; slot != nullptr; slot = slot->next) {
      if (slot->done != nullptr) {
        end(*slot->done, State::cancelled);
        slot->done = nullptr;
      }
    }
  } catch (const std::exception& e) {
    log::write(LogLevel::error, cat("ucx transport: closing rank ", rank_, " failed: ", e.what()));
  }
}

bool UcxTransport::flush_worker(Clock::duration bound) {
  ucp_request_param_t param{};
  void* flush = ucp_worker_flush_nbx(worker_.get(), &param);
  if (UCS_PTR_IS_ERR(flush)) return false;
  if (flush == nullptr) return true;
  const bool flushed =
      progress_until_complete(flush, Clock::now() + bound) && ucp_request_check_status(flush) == UCS_OK;
  ucp_request_free(flush);
  return flushed;
}

void UcxTransport::send_leave_messages() {
  leave_tx_ = encode_leave_message(rank_);
  send_control_to_peers(leave_tx_, "leave", LogLevel::info);
}

void UcxTransport::drain_unexpected(Deadline until) {
  std::vector<std::byte> scratch;
  for (int drained = 0; drained < kMaxDrainedMessages && Clock::now() < until; ++drained) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h message = ucp_tag_probe_nb(worker_.get(), 0, 0, /*remove=*/1, &info);
    if (message == nullptr) return;
    scratch.resize(info.length);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype = ucp_dt_make_contig(1);
    void* request = ucp_tag_msg_recv_nbx(worker_.get(), scratch.data(), scratch.size(), message, &param);
    if (UCS_PTR_IS_PTR(request) && request != nullptr) {
      progress_until_complete(request, until);
      ucp_request_free(request);  // released now, or by UCX when it completes
    }
  }
}

std::string UcxTransport::endpoint_info(int peer) {
  check_peer(peer, size_, "ucx_endpoint_info");
  WorkerLock lock(*this);
  const ucp_ep_h ep = peers_[static_cast<std::size_t>(peer)].ep;
  if (ep == nullptr) raise<TransportError>("ucx_endpoint_info: the endpoint to rank ", peer, " is closed");
  return print_endpoint(ep);
}

std::string ucx_endpoint_info(Transport& transport, int peer) {
  auto* ucx = dynamic_cast<UcxTransport*>(&transport);
  ANTDT_CHECK_ARG(ucx != nullptr, "ucx_endpoint_info: the transport is '", transport.name(), "', not ucx");
  return ucx->endpoint_info(peer);
}

std::unique_ptr<Transport> make_ucx_transport(Bootstrap& boot, const Config& cfg, const UcxOptions& options) {
  return std::make_unique<UcxTransport>(boot, cfg, options);
}

}  // namespace antdt::transport
