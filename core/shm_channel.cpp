#include "core/shm_channel.hpp"

#include "core/error.hpp"
#include "core/node_identity.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <linux/futex.h>
#include <new>
#include <random>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace antdt {
namespace {

constexpr std::uint64_t kMagic = 0x414e544454534d31ULL;  // "ANTDTSM1"
constexpr std::size_t kLine = 64;

constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept { return (n + to - 1) / to * to; }

// The futex word is the low half of the stamp: a reader sleeps while it still
// holds the value it saw, and every publish changes it (stamps only grow).
std::uint32_t futex_value(std::uint64_t stamp) noexcept { return static_cast<std::uint32_t>(stamp); }

// Inode of /proc/<who>/ns/pid (0 when unknown).
std::uint64_t pid_namespace(const std::string& who) noexcept {
  struct stat st {};
  if (::stat(("/proc/" + who + "/ns/pid").c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_ino);
}

// The state letter and start time of /proc/<who>/stat. errno tells why when false.
struct ProcStat {
  char state = '?';
  std::uint64_t start_time = 0;
};
bool read_proc_stat(const std::string& who, ProcStat& out) noexcept {
  const int fd = ::open(("/proc/" + who + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t got = ::read(fd, buf, sizeof buf - 1);
  const int err = errno;
  ::close(fd);
  if (got <= 0) {
    errno = got < 0 ? err : EIO;
    return false;
  }
  buf[got] = '\0';
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // fields count from the last ')'. The state is field 3, the start time 22.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) {
    errno = EIO;
    return false;
  }
  ++p;
  for (int field = 3; field <= 22; ++field) {
    while (*p == ' ') ++p;
    if (*p == '\0') {
      errno = EIO;
      return false;
    }
    if (field == 3) out.state = *p;
    if (field == 22) out.start_time = std::strtoull(p, nullptr, 10);
    while (*p != ' ' && *p != '\0') ++p;
  }
  return true;
}

}  // namespace

// Each slot starts on its own cache line (so a writer never shares a line with
// another slot) with this 32-byte header, and its data follows in the same
// line: a reader of a message up to 32 bytes moves one line.
struct ShmChannel::SlotHeader {
  std::atomic<std::uint64_t> stamp{0};  // the latest stamp published (0: none yet)
  std::atomic<std::uint64_t> hash{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint32_t> futex{0};
  std::uint32_t unused = 0;
};

struct alignas(kLine) AnnounceLine {
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::uint64_t> hash{0};
  // Who this rank is, written once when it maps the segment: what a peer
  // waiting for it needs to tell a dead process from a slow one.
  std::atomic<std::int64_t> pid{0};
  std::atomic<std::uint64_t> pid_ns{0};      // inode of its /proc/self/ns/pid (0: unknown)
  std::atomic<std::uint64_t> start_time{0};  // field 22 of its /proc/<pid>/stat (0: unknown)
};
static_assert(sizeof(AnnounceLine) == kLine);

struct alignas(kLine) ShmChannel::SegmentHeader {
  std::atomic<std::uint64_t> magic{0};  // stored last by the creator
  std::uint64_t nranks = 0;
  std::uint64_t slots = 0;
  std::uint64_t slot_bytes = 0;
  std::atomic<std::uint32_t> sleepers{0};  // readers inside a futex wait (any slot)
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to work across processes");
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "futex word layout");

NodeKey NodeKey::local() {
  NodeKey key;
  key.host = node_identity();
  struct stat st {};
  if (::stat("/proc/self/ns/ipc", &st) == 0) key.ipc_ns = static_cast<std::uint64_t>(st.st_ino);
  key.uid = static_cast<std::uint64_t>(::geteuid());
  return key;
}

std::size_t ShmChannel::slot_stride(std::size_t slot_bytes) noexcept {
  static_assert(sizeof(SlotHeader) == 32 && kLine % alignof(SlotHeader) == 0);
  return round_up(sizeof(SlotHeader) + slot_bytes, kLine);
}

std::size_t ShmChannel::segment_bytes(const SegmentShape& shape) noexcept {
  const auto n = static_cast<std::size_t>(shape.nranks);
  return sizeof(SegmentHeader) + n * sizeof(AnnounceLine) +
         static_cast<std::size_t>(shape.slots) * n * slot_stride(shape.slot_bytes);
}

std::string ShmChannel::make_name(std::uint32_t comm_id) {
  std::random_device rd;
  const std::uint64_t nonce = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return cat("/antdt-", ::getpid(), "-", comm_id, "-", std::hex, nonce);
}

namespace {
void check_shape(const ShmChannel::SegmentShape& shape, int rank) {
  ANTDT_CHECK_ARG(shape.nranks >= 1 && rank >= 0 && rank < shape.nranks, "shared-memory channel: rank ", rank,
                  " of ", shape.nranks);
  ANTDT_CHECK_ARG(shape.slots >= 1, "shared-memory channel: ", shape.slots, " slots per rank");
}
}  // namespace

std::unique_ptr<ShmChannel> ShmChannel::create(std::string name, const SegmentShape& shape, int rank) {
  check_shape(shape, rank);
  const std::size_t bytes = segment_bytes(shape);
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) raise<TransportError>("shm_open(", name, ", O_CREAT) failed: ", std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    raise<TransportError>("ftruncate of shared memory ", name, " to ", bytes, " bytes failed: ", std::strerror(err));
  }
  // tmpfs allocates pages on first touch: without a reservation a /dev/shm
  // too small for the segment would kill the process with SIGBUS in a collective.
  if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    raise<TransportError>("reserving ", bytes, " bytes of shared memory for ", name, " failed: ", std::strerror(err),
                          " (is /dev/shm large enough? ANTDT_SHM_MAX_BYTES / ANTDT_SHM_BULK_BYTES size it)");
  }
  // MAP_POPULATE: page faults happen here, not in the first collectives.
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    raise<TransportError>("mmap of shared memory ", name, " (", bytes, " bytes) failed: ", std::strerror(err));
  }
  // ftruncate zero-filled the segment: every slot and announcement starts at
  // 0 (no round, no call). The shape fields let the other ranks check that
  // they agree on it.
  auto* header = ::new (base) SegmentHeader{};
  header->nranks = static_cast<std::uint64_t>(shape.nranks);
  header->slots = static_cast<std::uint64_t>(shape.slots);
  header->slot_bytes = shape.slot_bytes;
  header->magic.store(kMagic, std::memory_order_release);
  return std::make_unique<ShmChannel>(Key{}, std::move(name), shape, rank, base, bytes);
}

std::unique_ptr<ShmChannel> ShmChannel::open(std::string name, const SegmentShape& shape, int rank) {
  check_shape(shape, rank);
  const std::size_t bytes = segment_bytes(shape);
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) raise<TransportError>("shm_open(", name, ") failed: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    ::close(fd);
    raise<TransportError>("shared memory ", name, " has ", st.st_size, " bytes, expected ", bytes);
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) raise<TransportError>("mmap of shared memory ", name, " failed: ", std::strerror(err));
  auto channel = std::make_unique<ShmChannel>(Key{}, std::move(name), shape, rank, base, bytes);
  const auto& header = channel->header();
  if (header.magic.load(std::memory_order_acquire) != kMagic ||
      header.nranks != static_cast<std::uint64_t>(shape.nranks) ||
      header.slots != static_cast<std::uint64_t>(shape.slots) || header.slot_bytes != shape.slot_bytes)
    raise<TransportError>("shared memory ", channel->name_, " has another layout (", header.nranks, " ranks, ",
                          header.slots, " slots of ", header.slot_bytes, " bytes; expected ", shape.nranks, ", ",
                          shape.slots, ", ", shape.slot_bytes, ")");
  return channel;
}

ShmChannel::ShmChannel(Key, std::string name, const SegmentShape& shape, int rank, void* base, std::size_t mapped)
    : name_(std::move(name)), shape_(shape), rank_(rank), base_(base), mapped_(mapped) {
  // Recorded before this rank reports the segment mapped, so every peer can
  // read it once the set-up's verdict is out.
  auto* lines = reinterpret_cast<AnnounceLine*>(static_cast<std::byte*>(base_) + sizeof(SegmentHeader));
  AnnounceLine& line = lines[rank_];
  ProcStat self;
  line.start_time.store(read_proc_stat("self", self) ? self.start_time : 0, std::memory_order_relaxed);
  line.pid_ns.store(pid_namespace("self"), std::memory_order_relaxed);
  line.pid.store(::getpid(), std::memory_order_release);
}

ShmChannel::~ShmChannel() {
  if (rank_ == 0) unlink();
  ::munmap(base_, mapped_);
}

void ShmChannel::unlink() noexcept {
  if (unlinked_) return;
  unlinked_ = true;
  ::shm_unlink(name_.c_str());  // ENOENT when already gone: fine
}

ShmChannel::SegmentHeader& ShmChannel::header() const noexcept { return *static_cast<SegmentHeader*>(base_); }

ShmChannel::SlotHeader& ShmChannel::slot_header(int rank, int slot) const noexcept {
  const auto index = static_cast<std::size_t>(rank) * static_cast<std::size_t>(shape_.slots) +
                     static_cast<std::size_t>(slot);
  auto* at = static_cast<std::byte*>(base_) + sizeof(SegmentHeader) +
             static_cast<std::size_t>(shape_.nranks) * sizeof(AnnounceLine) + index * slot_stride(shape_.slot_bytes);
  return *reinterpret_cast<SlotHeader*>(at);
}

std::span<std::byte> ShmChannel::own_slot(int slot) noexcept {
  return {reinterpret_cast<std::byte*>(&slot_header(rank_, slot) + 1), shape_.slot_bytes};
}

void ShmChannel::publish(int slot, std::uint64_t stamp, std::uint64_t hash, std::size_t bytes) noexcept {
  SlotHeader& s = slot_header(rank_, slot);
  s.hash.store(hash, std::memory_order_relaxed);
  s.bytes.store(bytes, std::memory_order_relaxed);
  s.stamp.store(stamp, std::memory_order_release);  // the data and the fields above are visible with it
  // seq_cst store then seq_cst load of sleepers, mirrored by the reader's
  // increment then load: either the reader sees the new value or we see it asleep.
  s.futex.store(futex_value(stamp), std::memory_order_seq_cst);
  if (header().sleepers.load(std::memory_order_seq_cst) > 0)
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&s.futex), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

ShmChannel::Peek ShmChannel::peek(int peer, int slot, std::uint64_t stamp) const noexcept {
  const SlotHeader& s = slot_header(peer, slot);
  Peek p;
  if (s.stamp.load(std::memory_order_acquire) < stamp) return p;
  p.ready = true;
  p.hash = s.hash.load(std::memory_order_relaxed);
  p.bytes = s.bytes.load(std::memory_order_relaxed);
  p.data = {reinterpret_cast<const std::byte*>(&s + 1), std::min<std::size_t>(p.bytes, shape_.slot_bytes)};
  return p;
}

// A sequence lock: the pair (seq, hash) is written as seq = 0, hash, seq, and
// a reader keeps it only when it saw the same non-zero seq before and after
// the hash. Without it a reader could pair a call's number with the next
// call's hash (the peer moves on the moment it has everyone's data) and
// report a mismatch that is not there.
void ShmChannel::announce(std::uint64_t seq, std::uint64_t hash) noexcept {
  auto* lines = reinterpret_cast<AnnounceLine*>(static_cast<std::byte*>(base_) + sizeof(SegmentHeader));
  AnnounceLine& line = lines[rank_];
  line.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  line.hash.store(hash, std::memory_order_relaxed);
  line.seq.store(seq, std::memory_order_release);
}

ShmChannel::Announcement ShmChannel::announced(int peer) const noexcept {
  const auto* lines = reinterpret_cast<const AnnounceLine*>(static_cast<const std::byte*>(base_) + sizeof(SegmentHeader));
  const AnnounceLine& line = lines[peer];
  Announcement a;
  a.seq = line.seq.load(std::memory_order_acquire);
  a.hash = line.hash.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (line.seq.load(std::memory_order_relaxed) != a.seq) a.seq = 0;  // torn: being rewritten
  return a;
}

int ShmChannel::peer_pid(int peer) const noexcept {
  const auto* lines = reinterpret_cast<const AnnounceLine*>(static_cast<const std::byte*>(base_) + sizeof(SegmentHeader));
  return static_cast<int>(lines[peer].pid.load(std::memory_order_acquire));
}

bool ShmChannel::peer_gone(int peer) const noexcept {
  const auto* lines = reinterpret_cast<const AnnounceLine*>(static_cast<const std::byte*>(base_) + sizeof(SegmentHeader));
  const AnnounceLine& line = lines[peer];
  const auto pid = static_cast<pid_t>(line.pid.load(std::memory_order_acquire));
  if (pid <= 0) return false;
  // A pid means something here only in the namespace it came from (a peer in
  // another container that shares our IPC namespace has its own pids).
  static const std::uint64_t own_ns = pid_namespace("self");
  const std::uint64_t ns = line.pid_ns.load(std::memory_order_relaxed);
  if (ns == 0 || ns != own_ns) return false;
  ProcStat st;
  if (read_proc_stat(std::to_string(pid), st)) {
    if (st.state == 'Z' || st.state == 'X') return true;  // dead, not yet reaped by its parent
    const std::uint64_t start = line.start_time.load(std::memory_order_relaxed);
    return start != 0 && st.start_time != start;  // the pid now names another process
  }
  if (errno == ENOENT || errno == ESRCH) return true;
  // No /proc to read: the signal check, which cannot tell zombies or reuse.
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

void ShmChannel::sleep_until_published(int peer, int slot, std::uint64_t stamp,
                                       std::chrono::microseconds max_wait) noexcept {
  SlotHeader& s = slot_header(peer, slot);
  auto& sleepers = header().sleepers;
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  // The futex word is read before the stamp: a publish after this read
  // changes the word, so the wait below returns at once instead of sleeping.
  const std::uint32_t seen = s.futex.load(std::memory_order_seq_cst);
  if (s.stamp.load(std::memory_order_seq_cst) < stamp) {
    const auto us = max_wait.count();
    timespec timeout{static_cast<time_t>(us / 1'000'000), static_cast<long>(us % 1'000'000) * 1000};
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&s.futex), FUTEX_WAIT, seen, &timeout, nullptr, 0);
  }
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace antdt
