// Process helpers of the integration drivers that start ranks by hand: a free
// loopback port, waiting until a server listens on it, the environment a child
// rank gets, fork + execve.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace child_process {

// A loopback port nothing listens on right now (the kernel's choice for an ephemeral bind).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// A free loopback port other than `taken` (a port probed earlier that nothing
// has bound yet, which the kernel may hand out again); -1 after 8 tries.
inline int free_port_other_than(int taken) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int port = free_port();
    if (port != taken) return port;
  }
  return -1;
}

// Whether a socket of this network namespace listens on 127.0.0.1:port, from
// /proc/net/tcp (no connection is made, so the server logs nothing).
inline bool listening_on_loopback(int port) {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  char wanted[16];
  std::snprintf(wanted, sizeof wanted, "0100007F:%04X", static_cast<unsigned>(port));
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (local == wanted && state == "0A") return true;  // 0A: TCP_LISTEN
  }
  return false;
}

// Waits until a server (a child just started) listens on 127.0.0.1:port, at
// most `limit`. A port from free_port() is only free when it is probed: until
// the child has bound it, the kernel may hand the same port to the next
// free_port() of another process (antdt-run's, for its bootstrap root), and
// the second bind then fails with "Address already in use".
inline bool wait_listening(int port, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!listening_on_loopback(port)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "nothing listens on 127.0.0.1:%d after %lld ms\n", port,
                   static_cast<long long>(limit.count()));
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// The parent's environment without launcher or ANTDT_ variables, plus `extra`.
inline std::vector<std::string> child_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    bool drop = false;
    for (const std::string_view prefix : {"ANTDT_", "OMPI_", "PMIX_", "PMI_", "SLURM_"})
      drop = drop || text.starts_with(prefix);
    if (!drop) env.emplace_back(text);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// Starts args[0] with args and exactly env_strings as its environment.
inline pid_t launch(std::vector<std::string> args, const std::vector<std::string>& env_strings) {
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (const auto& s : env_strings) envp.push_back(const_cast<char*>(s.c_str()));
  envp.push_back(nullptr);
  std::fflush(stdout);  // else the child would write again what the parent had buffered
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execve(argv[0], argv.data(), envp.data());
    std::perror("execve");
    ::_exit(127);
  }
  return pid;
}

}  // namespace child_process
