#include "core/bootstrap_admission.hpp"

#include "core/bootstrap_drop_log.hpp"
#include "core/bootstrap_wire.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <openssl/rand.h>
#include <poll.h>
#include <string>
#include <sys/resource.h>

namespace antdt {

std::size_t fit_pending_cap(std::size_t wanted) {
  constexpr rlim_t kReserve = 256;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return wanted;
  const rlim_t needed = static_cast<rlim_t>(wanted) + kReserve;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < needed) {
    const rlim_t raised = lim.rlim_max == RLIM_INFINITY ? needed : std::min(lim.rlim_max, needed);
    if (raised > lim.rlim_cur) {
      rlimit want = lim;
      want.rlim_cur = raised;
      if (::setrlimit(RLIMIT_NOFILE, &want) == 0) lim.rlim_cur = raised;
    }
  }
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= needed) return wanted;
  const rlim_t room = lim.rlim_cur > kReserve + 16 ? lim.rlim_cur - kReserve : 16;
  return static_cast<std::size_t>(room);
}

AdmissionLimits AdmissionLimits::for_size(int size) {
  AdmissionLimits limits;
  limits.max_pending =
      fit_pending_cap(std::max<std::size_t>(kDefaultMaxPending, static_cast<std::size_t>(std::max(size, 0))));
  return limits;
}

namespace {

using net::Clock;
using Bytes = std::vector<std::byte>;

// One connection between its accept and its verdict.
struct Handshake {
  enum class State { awaiting_hello, sending_acceptance, sending_refusal, done };
  net::Fd fd;
  std::string peer;
  Clock::time_point deadline;
  wire::Challenge challenge;
  State state = State::awaiting_hello;
  Bytes out;              // the challenge, later the verdict
  std::size_t sent = 0;   // bytes of `out` already written
  std::array<std::byte, wire::kHelloBytes> hello{};
  std::size_t received = 0;
  int rank = -1;          // sending_acceptance: the rank it proved
};

class Admission {
 public:
  Admission(int listener, std::span<const std::byte> secret, int size, Clock::time_point deadline,
            std::chrono::milliseconds timeout, const AdmissionLimits& limits, const std::function<void()>& still_wanted)
      : listener_(listener), secret_(secret), size_(size), deadline_(deadline), timeout_(timeout), limits_(limits),
        still_wanted_(still_wanted),
        peers_(static_cast<std::size_t>(size)), claimed_(static_cast<std::size_t>(size), false) {
    net::set_nonblocking(listener_);
  }

  std::vector<net::Fd> run() {
    std::vector<pollfd> fds;
    std::vector<Handshake*> polled;
    while (joined_ < size_ - 1) {
      const auto now = Clock::now();
      if (now >= deadline_) raise_timeout();
      if (still_wanted_ && now >= next_check_) {
        still_wanted_();
        next_check_ = now + kCheckInterval;
      }
      fds.clear();
      polled.clear();
      const bool listening = now >= listener_paused_until_;
      if (listening) fds.push_back({listener_, POLLIN, 0});
      auto wake_at = listening ? deadline_ : std::min(deadline_, listener_paused_until_);
      for (const auto& h : pending_) {
        short events = h->sent < h->out.size() ? POLLOUT : 0;
        if (h->state == Handshake::State::awaiting_hello) events |= POLLIN;
        fds.push_back({h->fd.get(), events, 0});
        polled.push_back(h.get());
        wake_at = std::min(wake_at, h->deadline);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake_at - now).count();
      const long long cap = still_wanted_ ? kCheckInterval.count() : 1000;
      const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(wait + 1, 0, cap)));
      if (rc < 0 && errno != EINTR) raise<BootstrapError>("bootstrap root: poll failed: ", std::strerror(errno));
      if (rc > 0) {
        const std::size_t first = listening ? 1 : 0;
        for (std::size_t i = 0; i < polled.size(); ++i)
          if (fds[first + i].revents != 0) progress(*polled[i]);
        if (listening && fds[0].revents != 0) accept_new();
      }
      const auto after = Clock::now();
      for (const auto& h : pending_)
        if (h->state != Handshake::State::done && after >= h->deadline)
          drop(*h, cat("no complete handshake within ", limits_.handshake.count(), " ms"));
      std::erase_if(pending_, [](const auto& h) { return h->state == Handshake::State::done; });
    }
    return std::move(peers_);
  }

 private:
  [[noreturn]] void raise_timeout() const {
    std::string missing;
    for (int r = 1; r < size_; ++r)
      if (!peers_[static_cast<std::size_t>(r)]) missing += cat(missing.empty() ? "" : ",", r);
    raise<TimeoutError>("bootstrap root: only ", joined_, " of ", size_ - 1, " ranks joined within ", timeout_.count(),
                        " ms (ANTDT_TIMEOUT_MS); missing ranks ", missing);
  }

  void accept_new() {
    // Bounded per round, so that a flood of connections cannot starve the
    // handshakes already in progress.
    for (std::size_t n = 0; n < limits_.max_pending; ++n) {
      std::string peer;
      net::Fd fd;
      try {
        fd = net::accept_pending(listener_, &peer);
      } catch (const BootstrapError& e) {
        // Out of descriptors: make room by the oldest handshake, or, with none
        // to drop, look at the listener again a little later instead of spinning.
        if (Handshake* oldest = oldest_pending()) {
          drop(*oldest, cat("dropped to make room (", e.what(), ")"));
          continue;
        }
        ANTDT_WARN("bootstrap root: ", e.what());
        listener_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
        return;
      }
      if (!fd) return;
      if (active() >= limits_.max_pending) {
        Handshake* oldest = oldest_pending();
        drop(*oldest, cat(limits_.max_pending, " handshakes were in progress (the cap); the oldest goes first"));
      }
      start(std::move(fd), std::move(peer));
    }
  }

  void start(net::Fd fd, std::string peer) {
    auto h = std::make_unique<Handshake>();
    h->fd = std::move(fd);
    h->peer = std::move(peer);
    h->deadline = std::min(deadline_, Clock::now() + limits_.handshake);
    if (RAND_bytes(reinterpret_cast<unsigned char*>(h->challenge.nonce.data()),
                   static_cast<int>(h->challenge.nonce.size())) != 1)
      raise<InternalError>("RAND_bytes failed");
    h->out = wire::encode(h->challenge);
    Handshake& ref = *h;
    pending_.push_back(std::move(h));
    flush(ref);
  }

  std::size_t active() const {
    return static_cast<std::size_t>(std::count_if(pending_.begin(), pending_.end(), [](const auto& h) {
      return h->state != Handshake::State::done;
    }));
  }

  Handshake* oldest_pending() const {
    for (const auto& h : pending_)
      if (h->state != Handshake::State::done) return h.get();
    return nullptr;
  }

  // Reads and writes what the connection allows now, without waiting.
  void progress(Handshake& h) {
    if (h.state == Handshake::State::done) return;
    if (h.state == Handshake::State::awaiting_hello) {
      try {
        while (h.received < h.hello.size()) {
          const std::size_t n = net::recv_some(h.fd.get(), std::span(h.hello).subspan(h.received));
          if (n == 0) break;
          h.received += n;
        }
      } catch (const BootstrapError& e) {
        drop(h, e.what());
        return;
      }
      if (h.received == h.hello.size()) decide(h);
    }
    flush(h);
  }

  void decide(Handshake& h) {
    wire::Hello hello;
    try {
      hello = wire::decode_hello(h.hello);
    } catch (const BootstrapError& e) {
      drop(h, e.what());  // malformed: no verdict, as for any garbage
      return;
    }
    std::string why;
    if (!wire::verify(secret_, h.challenge, hello))
      why = cat("rank ", hello.rank, " could not prove the job secret (wrong ANTDT_SECRET or unique id)");
    else if (hello.size != static_cast<std::uint32_t>(size_))
      why = cat("rank ", hello.rank, " believes the job has ", hello.size, " ranks, the root has ", size_);
    else if (hello.rank == 0 || hello.rank >= static_cast<std::uint32_t>(size_))
      why = cat("rank ", hello.rank, " is out of range [1, ", size_, ")");
    else if (claimed_[hello.rank])
      why = cat("rank ", hello.rank, " joined twice");
    if (!why.empty()) {
      log_.warn("refused connection from ", h.peer, ": ", why);
      h.state = Handshake::State::sending_refusal;
      queue(h, wire::encode(wire::Verdict{false, why}));
      return;
    }
    // Claimed now, so that a second connection proving the same rank while this
    // verdict is on its way is refused as a duplicate.
    h.rank = static_cast<int>(hello.rank);
    claimed_[hello.rank] = true;
    h.state = Handshake::State::sending_acceptance;
    queue(h, wire::encode(wire::Verdict{true, {}}));
  }

  void queue(Handshake& h, Bytes bytes) {
    h.out.erase(h.out.begin(), h.out.begin() + static_cast<std::ptrdiff_t>(h.sent));
    h.sent = 0;
    h.out.insert(h.out.end(), bytes.begin(), bytes.end());
  }

  void flush(Handshake& h) {
    if (h.state == Handshake::State::done) return;
    try {
      while (h.sent < h.out.size()) {
        const std::size_t n = net::send_some(h.fd.get(), std::span(h.out).subspan(h.sent));
        if (n == 0) return;  // the socket is full: POLLOUT tells when to go on
        h.sent += n;
      }
    } catch (const BootstrapError& e) {
      if (h.state == Handshake::State::sending_refusal) {
        close(h);  // the peer may be gone already; the refusal was logged
      } else {
        drop(h, e.what());
      }
      return;
    }
    if (h.state == Handshake::State::sending_acceptance) {
      peers_[static_cast<std::size_t>(h.rank)] = std::move(h.fd);
      ++joined_;
      h.state = Handshake::State::done;
    } else if (h.state == Handshake::State::sending_refusal) {
      close(h);
    }
  }

  void drop(Handshake& h, const std::string& why) {
    log_.warn("refused connection from ", h.peer, ": ", why);
    close(h);
  }

  void close(Handshake& h) {
    if (h.state == Handshake::State::sending_acceptance) claimed_[static_cast<std::size_t>(h.rank)] = false;
    h.fd.reset();
    h.state = Handshake::State::done;
  }

  int listener_;
  std::span<const std::byte> secret_;
  int size_;
  Clock::time_point deadline_;
  std::chrono::milliseconds timeout_;
  AdmissionLimits limits_;
  const std::function<void()>& still_wanted_;
  std::vector<net::Fd> peers_;
  std::vector<bool> claimed_;
  int joined_ = 0;
  std::vector<std::unique_ptr<Handshake>> pending_;  // in accept order: the oldest first
  Clock::time_point listener_paused_until_{};
  DropLog log_{"bootstrap root"};
  static constexpr std::chrono::milliseconds kCheckInterval{200};
  Clock::time_point next_check_{};
};

}  // namespace

std::vector<net::Fd> admit_ranks(int listener, std::span<const std::byte> secret, int size,
                                 net::Clock::time_point deadline, std::chrono::milliseconds timeout,
                                 const AdmissionLimits& limits, const std::function<void()>& still_wanted) {
  ANTDT_CHECK_ARG(limits.max_pending >= 1, "bootstrap root: the cap on handshakes in progress must be >= 1");
  return Admission(listener, secret, size, deadline, timeout, limits, still_wanted).run();
}

}  // namespace antdt
