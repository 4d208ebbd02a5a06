// antdt_flood_perf: how much unauthenticated connections delay a legitimate
// job start, and what they cost the listener (docs/benchmarks.md,
// "Unauthenticated connection flood"; issue 16 item 4).
//
// A flooder process (forked at the start, before any thread, so that the
// listener's RSS is its own) keeps --connections connections open to the
// listener: a third idle, a third slow (one byte a second), a third partial
// (4 bytes of a frame head, then nothing). A connection the listener closes is
// opened again at once (--no-reconnect: not), so the pressure stays while the
// legitimate ranks arrive. Two listeners:
//  - bootstrap: the root of a --ranks communicator (Communicator::create,
//    ranks as threads). Rank 0 starts first; once every flood connection was
//    established, ranks 1.. start; timed from their start to every create()
//    returned;
//  - coordinator: a CoordinatorService; once the flood is established, --ranks
//    clients say hello (CoordinatorClient) and ask their first plan; timed
//    from their start to the last plan.
// Each is run --repeats times without and with the flood; the listener's RSS
// (this process: the ranks, the root, the coordinator) is sampled meanwhile.
// Exit 1 when a legitimate rank failed; the delay is reported, not checked.
#include "core/bootstrap.hpp"
#include "core/error.hpp"
#include "core/net.hpp"
#include "scheduler/coordinator/client.hpp"
#include "scheduler/coordinator/service.hpp"

#include <antdt/comm.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <random>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
namespace coord = antdt::sched::coord;

void raise_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// ---------------------------------------------------------------------------
// The flooder (child process): raw sockets only, no library state.
// Commands on its control socket, one per line: "flood <port> <n> <reconnect>"
// answers "ready <established> <opened>" once every connection was established
// once (or after 10 s); "stop" closes them all and answers "stopped <opened>".
// ---------------------------------------------------------------------------
enum class Kind { idle, slow, partial };

struct Slot {
  int fd = -1;
  Kind kind = Kind::idle;
  bool connecting = false;
  bool ever = false;
  Clock::time_point next;  // slow: next byte; closed: next connect attempt
  int sent = 0;
};

class Flooder {
 public:
  explicit Flooder(int control) : control_(control) {}

  void run() {
    std::string line;
    while (read_line(line)) {
      if (line.rfind("flood ", 0) == 0) {
        unsigned port = 0, n = 0, reconnect = 1;
        std::sscanf(line.c_str(), "flood %u %u %u", &port, &n, &reconnect);
        flood(static_cast<std::uint16_t>(port), n, reconnect != 0);
      }
    }
  }

 private:
  bool read_line(std::string& line) {
    line.clear();
    for (char c; ;) {
      const ssize_t n = ::read(control_, &c, 1);
      if (n <= 0) return false;
      if (c == '\n') return true;
      line.push_back(c);
    }
  }

  void reply(const std::string& text) {
    const std::string out = text + "\n";
    [[maybe_unused]] auto n = ::write(control_, out.data(), out.size());
  }

  void open_slot(Slot& s) {
    s.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s.fd < 0) {
      s.next = Clock::now() + std::chrono::milliseconds(10);
      return;
    }
    ++opened_;
    const int rc = ::connect(s.fd, reinterpret_cast<const sockaddr*>(&addr_), sizeof addr_);
    s.connecting = rc != 0 && errno == EINPROGRESS;
    if (rc != 0 && !s.connecting) close_slot(s);
    else if (rc == 0) established(s);
  }

  void established(Slot& s) {
    s.connecting = false;
    s.ever = true;
    s.sent = 0;
    s.next = Clock::now() + std::chrono::seconds(1);
    if (s.kind == Kind::partial) {
      const char head[4] = {0, 0, 0, 0};
      [[maybe_unused]] auto n = ::send(s.fd, head, sizeof head, MSG_NOSIGNAL);
    }
  }

  void close_slot(Slot& s) {
    if (s.fd >= 0) ::close(s.fd);
    s.fd = -1;
    s.connecting = false;
    // Refused before the listener is up: try again. Closed by the listener: again only with reconnect.
    s.next = Clock::now() + std::chrono::milliseconds(reconnect_ || !s.ever ? 1 : 1000000000);
  }

  void flood(std::uint16_t port, unsigned n, bool reconnect) {
    reconnect_ = reconnect;
    opened_ = 0;
    addr_ = {};
    addr_.sin_family = AF_INET;
    addr_.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &addr_.sin_addr);
    std::vector<Slot> slots(n);
    for (unsigned i = 0; i < n; ++i) {
      slots[i].kind = static_cast<Kind>(i % 3);
      open_slot(slots[i]);
    }
    bool announced = false;
    const auto give_up = Clock::now() + std::chrono::seconds(10);
    std::vector<pollfd> fds;
    std::vector<Slot*> polled;
    char sink[4096];
    for (;;) {
      fds.clear();
      polled.clear();
      fds.push_back({control_, POLLIN, 0});
      for (auto& s : slots) {
        if (s.fd < 0) continue;
        fds.push_back({s.fd, static_cast<short>(s.connecting ? POLLOUT : POLLIN), 0});
        polled.push_back(&s);
      }
      ::poll(fds.data(), fds.size(), 5);
      if (fds[0].revents != 0) {
        std::string line;
        const bool alive = read_line(line);
        for (auto& s : slots)
          if (s.fd >= 0) ::close(s.fd);
        if (alive) reply("stopped " + std::to_string(opened_));
        return;
      }
      for (std::size_t i = 0; i < polled.size(); ++i) {
        Slot& s = *polled[i];
        if (fds[i + 1].revents == 0) continue;
        if (s.connecting) {
          int err = 0;
          socklen_t len = sizeof err;
          ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) close_slot(s);
          else established(s);
          continue;
        }
        // The challenge, or the end: read it all, close on EOF or error.
        const ssize_t got = ::recv(s.fd, sink, sizeof sink, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) close_slot(s);
      }
      const auto now = Clock::now();
      for (auto& s : slots) {
        if (s.fd < 0 && now >= s.next) {
          open_slot(s);
        } else if (s.fd >= 0 && !s.connecting && s.kind == Kind::slow && now >= s.next) {
          const char zero = 0;
          if (::send(s.fd, &zero, 1, MSG_NOSIGNAL) == 1) ++s.sent;
          s.next = now + std::chrono::seconds(1);
        }
      }
      if (!announced) {
        const bool all = std::all_of(slots.begin(), slots.end(), [](const Slot& s) { return s.ever; });
        if (all || now >= give_up) {
          const auto ever = std::count_if(slots.begin(), slots.end(), [](const Slot& s) { return s.ever; });
          reply("ready " + std::to_string(ever) + " " + std::to_string(opened_));
          announced = true;
        }
      }
    }
  }

  int control_;
  sockaddr_in addr_{};
  bool reconnect_ = true;
  std::uint64_t opened_ = 0;
};

// The parent's handle on the flooder.
class FloodControl {
 public:
  explicit FloodControl(int fd) : fd_(fd) {}
  // Returns how many connections were established once.
  long start(std::uint16_t port, int n, bool reconnect) {
    send("flood " + std::to_string(port) + " " + std::to_string(n) + " " + (reconnect ? "1" : "0"));
    long ever = 0, opened = 0;
    std::sscanf(receive().c_str(), "ready %ld %ld", &ever, &opened);
    return ever;
  }
  // Returns how many connections it opened in all (reconnections included).
  long stop() {
    send("stop");
    long opened = 0;
    std::sscanf(receive().c_str(), "stopped %ld", &opened);
    return opened;
  }

 private:
  void send(const std::string& line) {
    const std::string out = line + "\n";
    if (::write(fd_, out.data(), out.size()) != static_cast<ssize_t>(out.size()))
      antdt::raise<antdt::InternalError>("flooder: control write failed");
  }
  std::string receive() {
    std::string line;
    for (char c;;) {
      if (::read(fd_, &c, 1) != 1) antdt::raise<antdt::InternalError>("flooder: it died");
      if (c == '\n') return line;
      line.push_back(c);
    }
  }
  int fd_;
};

// ---------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------
double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// Samples this process's RSS until stopped; keeps the peak.
class RssSampler {
 public:
  RssSampler() : peak_(rss_mib()), thread_([this] {
      while (!stop_.load()) {
        const double now = rss_mib();
        double seen = peak_.load();
        while (now > seen && !peak_.compare_exchange_weak(seen, now)) {}
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }) {}
  ~RssSampler() {
    stop_.store(true);
    thread_.join();
  }
  double peak() const { return peak_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<double> peak_;
  std::thread thread_;
};

struct Run {
  double legit_ms = 0;
  bool ok = true;
  std::string problem;
  long established = 0, opened = 0;
  double rss_before = 0, rss_peak = 0;
};

struct Options {
  int connections = 1000;
  int ranks = 4;
  int repeats = 3;
  bool reconnect = true;
  std::string targets = "bootstrap,coordinator";
  std::string transport = "ucx";
  double settle_s = 0;  // flood time before the ranks start
};

antdt::UniqueId loopback_id() {
  antdt::net::Endpoint bound;
  { antdt::net::Fd probe = antdt::net::listen_on("127.0.0.1", 0, &bound); }
  antdt::RootAddress root;
  root.host = "127.0.0.1";
  root.port = bound.port;
  std::random_device rd;
  for (auto& b : root.secret) b = static_cast<std::byte>(rd());
  return antdt::encode_unique_id(root);
}

Run bootstrap_run(const Options& o, FloodControl* flood) {
  Run run;
  const antdt::UniqueId id = loopback_id();
  const std::uint16_t port = antdt::decode_unique_id(id).port;
  antdt::CommOptions copts;
  copts.transport = o.transport;
  std::vector<std::string> errors(static_cast<std::size_t>(o.ranks));
  std::vector<std::optional<antdt::Communicator>> comms(static_cast<std::size_t>(o.ranks));
  auto rank_thread = [&](int r) {
    return std::thread([&, r] {
      try {
        comms[static_cast<std::size_t>(r)].emplace(antdt::Communicator::create(id, r, o.ranks, copts));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  };
  run.rss_before = rss_mib();
  std::vector<std::thread> threads;
  {
    RssSampler rss;
    threads.push_back(rank_thread(0));  // binds the root's listener
    if (flood) {
      run.established = flood->start(port, o.connections, o.reconnect);
      std::this_thread::sleep_for(std::chrono::duration<double>(o.settle_s));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const auto t0 = Clock::now();
    for (int r = 1; r < o.ranks; ++r) threads.push_back(rank_thread(r));
    for (auto& t : threads) t.join();
    run.legit_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    run.rss_peak = rss.peak();
  }
  if (flood) run.opened = flood->stop();
  for (int r = 0; r < o.ranks; ++r)
    if (!errors[static_cast<std::size_t>(r)].empty()) {
      run.ok = false;
      run.problem = antdt::cat("rank ", r, ": ", errors[static_cast<std::size_t>(r)]);
    }
  return run;
}

Run coordinator_run(const Options& o, FloodControl* flood) {
  Run run;
  const std::array<std::byte, 16> secret{std::byte{7}, std::byte{7}, std::byte{7}};
  coord::CoordinatorOptions copts;
  copts.world_size = o.ranks;
  copts.dataset_size = 100000;
  coord::CoordinatorService service(copts, antdt::net::Endpoint{"127.0.0.1", 0}, secret);
  std::vector<std::string> errors(static_cast<std::size_t>(o.ranks));
  std::vector<std::unique_ptr<coord::CoordinatorClient>> clients(static_cast<std::size_t>(o.ranks));
  run.rss_before = rss_mib();
  {
    RssSampler rss;
    if (flood) {
      run.established = flood->start(service.address().port, o.connections, o.reconnect);
      std::this_thread::sleep_for(std::chrono::duration<double>(o.settle_s));
    }
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int r = 0; r < o.ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          auto c = std::make_unique<coord::CoordinatorClient>(service.address(), secret, r, o.ranks, 0, 0,
                                                              std::chrono::seconds(30));
          c->plan(1);
          clients[static_cast<std::size_t>(r)] = std::move(c);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    run.legit_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    run.rss_peak = rss.peak();
  }
  if (flood) run.opened = flood->stop();
  for (auto& c : clients)
    if (c) c->bye(false);
  for (int r = 0; r < o.ranks; ++r)
    if (!errors[static_cast<std::size_t>(r)].empty()) {
      run.ok = false;
      run.problem = antdt::cat("rank ", r, ": ", errors[static_cast<std::size_t>(r)]);
    }
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"antdt_flood_perf: legitimate job start under a flood of unauthenticated connections"};
  app.add_option("-c,--connections", o.connections, "flood connections (idle, slow, partial: a third each)")
      ->check(CLI::Range(1, 10000));
  app.add_option("-n,--ranks", o.ranks, "legitimate ranks")->check(CLI::Range(2, 64));
  app.add_option("-r,--repeats", o.repeats, "runs per case (median reported)")->check(CLI::Range(1, 100));
  app.add_option("--targets", o.targets, "bootstrap, coordinator, or both (comma-separated)");
  app.add_option("--transport", o.transport, "the communicators' transport (bootstrap target)");
  app.add_option("--settle", o.settle_s, "seconds the flood runs before the ranks start (past the listeners' 5 s "
                 "handshake deadline, the closed connections are being reopened)")->check(CLI::Range(0.0, 600.0));
  app.add_flag("!--no-reconnect", o.reconnect, "the flooder does not reopen connections the listener closed");
  CLI11_PARSE(app, argc, argv);

  raise_fd_limit();
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    std::perror("socketpair");
    return 2;
  }
  const pid_t child = ::fork();
  if (child < 0) {
    std::perror("fork");
    return 2;
  }
  if (child == 0) {
    ::close(pair[0]);
    Flooder(pair[1]).run();
    ::_exit(0);
  }
  ::close(pair[1]);
  FloodControl flood(pair[0]);

  int status = 0;
  try {
    std::printf("# unauthenticated flood: %d connections (1/3 idle, 1/3 one byte/s, 1/3 partial frame head)%s, "
                "%d legitimate ranks, %d repeat(s), ranks start %.1f s after the flood\n",
                o.connections, o.reconnect ? ", reopened when closed" : "", o.ranks, o.repeats, o.settle_s);
    std::printf("# %-12s %-6s %10s %10s %11s %9s %13s %13s\n", "listener", "flood", "median_ms", "max_ms",
                "established", "opened", "rss_before_MiB", "rss_peak_MiB");
    for (const std::string target : {"bootstrap", "coordinator"}) {
      if (o.targets.find(target) == std::string::npos) continue;
      double base_median = 0;
      // Not counted: the first communicator of the process pays for the transport's start-up.
      if (target == "bootstrap") bootstrap_run(o, nullptr);
      for (const bool flooded : {false, true}) {
        std::vector<double> times;
        Run last;
        double peak = 0;
        for (int i = 0; i < o.repeats; ++i) {
          last = target == "bootstrap" ? bootstrap_run(o, flooded ? &flood : nullptr)
                                       : coordinator_run(o, flooded ? &flood : nullptr);
          if (!last.ok) {
            std::fprintf(stderr, "antdt_flood_perf: %s%s: a legitimate rank failed: %s\n", target.c_str(),
                         flooded ? " under the flood" : "", last.problem.c_str());
            status = 1;
          }
          times.push_back(last.legit_ms);
          peak = std::max(peak, last.rss_peak);
        }
        const double med = median(times);
        std::printf("  %-12s %-6s %10.1f %10.1f %11ld %9ld %13.1f %13.1f\n", target.c_str(), flooded ? "yes" : "no",
                    med, *std::max_element(times.begin(), times.end()), last.established, last.opened,
                    last.rss_before, peak);
        if (!flooded) base_median = med;
        else
          std::printf("# %s: the flood delays the start by %.1f ms (median; target <= 1000 ms)\n", target.c_str(),
                      med - base_median);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "antdt_flood_perf: %s\n", e.what());
    status = 2;
  }
  ::close(pair[0]);
  int child_status = 0;
  ::waitpid(child, &child_status, 0);
  return status;
}
