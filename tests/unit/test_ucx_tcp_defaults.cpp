// The UCX settings the transport chooses for TCP (transport/ucx/ucx_transport.cpp):
// 64 KiB send segments, so messages below the transport's split size (64 KiB)
// go eagerly instead of by rendezvous (a round trip first), unless the user
// set UCX_TCP_TX_SEG_SIZE. UCX reads its
// transport list from the environment, so each case runs in a child with
// UCX_TLS=tcp,self and reads what UCX chose for the endpoint between two ranks.
// The same children check Transport::tcp_links(), which the algorithm
// selection reads: true over tcp,self, false over shared memory.
#include "transport_fixtures.hpp"

#include "transport/ucx/ucx_transport.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>

namespace antdt {
namespace {

// The size from which UCX sends a tagged message by rendezvous on an
// endpoint, from ucp_ep_print_info's first line
// "tag_send: 0..<egr/short>..A..<egr/zcopy>..B..<rndv>..(inf)" (B), or 0 when
// there is no such line. UCX 1.13 over TCP with its 8 KiB segments: 20553.
std::size_t rendezvous_from(const std::string& info) {
  static const std::regex range(R"(tag_send: [^\n]*\.\.(\d+)\.\.<rndv>)");
  std::smatch m;
  if (!std::regex_search(info, m, range)) return 0;
  return static_cast<std::size_t>(std::stoull(m[1].str()));
}

// The child's side (a fresh process, so the environment it was given is what
// UCX reads): two ranks as threads over UCX_TLS as given; rank 0 reads its
// endpoint to rank 1 and exits 0 if rendezvous starts within
// [ANTDT_TEST_RNDV_MIN, ANTDT_TEST_RNDV_MAX] bytes (when set) and both ranks'
// tcp_links() say ANTDT_TEST_TCP_LINKS ("1" or "0"), else prints what it saw.
TEST(UcxTcpDefaultsChild, DISABLED_ReportsTheRendezvousThreshold) {
  int code = 0;
  try {
    std::string info;
    std::atomic<int> tcp_links_wrong{0};
    const bool want_tcp = std::strcmp(std::getenv("ANTDT_TEST_TCP_LINKS"), "1") == 0;
    const auto outcomes = transport_test::run_group(transport_test::Kind::ucx, 2, [&](transport::Transport& t) {
      if (t.rank() == 0) info = transport::ucx_endpoint_info(t, 1);
      if (t.tcp_links() != want_tcp) ++tcp_links_wrong;
    });
    const std::string failed = transport_test::failures(outcomes);
    if (!failed.empty()) {
      std::fprintf(stderr, "%s", failed.c_str());
      code = 2;
    } else if (tcp_links_wrong > 0) {
      std::fprintf(stderr, "tcp_links() is not %d on %d rank(s); the endpoint:\n%s", want_tcp ? 1 : 0,
                   tcp_links_wrong.load(), info.c_str());
      code = 6;
    } else if (std::getenv("ANTDT_TEST_RNDV_MIN") != nullptr) {
      const std::size_t limit = rendezvous_from(info);
      const auto lo = std::stoull(std::getenv("ANTDT_TEST_RNDV_MIN"));
      const auto hi = std::stoull(std::getenv("ANTDT_TEST_RNDV_MAX"));
      if (limit < lo || limit > hi) {
        std::fprintf(stderr, "rendezvous from %zu bytes, expected [%llu, %llu]; the endpoint:\n%s", limit,
                     static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi), info.c_str());
        code = 3;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    code = 4;
  }
  std::fflush(stderr);
  std::_Exit(code);
}

// Runs the child's side over `tls` with UCX_TCP_TX_SEG_SIZE as the user set
// it (nullptr: unset); rndv_max 0: no rendezvous check. Returns its exit
// status (-1: it did not exit).
int child_sees(const char* user_tx_seg, std::size_t rndv_min, std::size_t rndv_max, const char* tls = "tcp,self",
               bool tcp_links = true) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("UCX_TLS", tls, 1);
    ::unsetenv("UCX_TCP_TX_SEG_SIZE");
    ::unsetenv("UCX_TCP_RX_SEG_SIZE");
    if (user_tx_seg != nullptr) ::setenv("UCX_TCP_TX_SEG_SIZE", user_tx_seg, 1);
    ::unsetenv("ANTDT_TEST_RNDV_MIN");
    if (rndv_max > 0) {
      ::setenv("ANTDT_TEST_RNDV_MIN", std::to_string(rndv_min).c_str(), 1);
      ::setenv("ANTDT_TEST_RNDV_MAX", std::to_string(rndv_max).c_str(), 1);
    }
    ::setenv("ANTDT_TEST_TCP_LINKS", tcp_links ? "1" : "0", 1);
    ::execl("/proc/self/exe", "antdt_unit_tests", "--gtest_also_run_disabled_tests",
            "--gtest_filter=UcxTcpDefaultsChild.DISABLED_ReportsTheRendezvousThreshold", static_cast<char*>(nullptr));
    std::_Exit(5);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// A single-form message is at most 64 KiB of payload and 56 bytes of
// headers (ucx_transport.hpp); larger payloads are split, their payload half
// sent by rendezvous on purpose.
constexpr std::size_t kLargestSingleMessage = 64 * 1024 + 56;

TEST(UcxTcpDefaults, MessagesBelowTheSplitGoEagerly) {
  EXPECT_EQ(child_sees(nullptr, kLargestSingleMessage, 1024 * 1024), 0);
}

// With UCX's own 8 KiB (or 16 KiB) segments rendezvous starts near 20 (37) KiB.
TEST(UcxTcpDefaults, ASegmentSizeTheUserSetWins) {
  EXPECT_EQ(child_sees("8K", 8 * 1024, 32 * 1024), 0);
  EXPECT_EQ(child_sees("16K", 16 * 1024, 48 * 1024), 0);
}

// Two ranks of one process over UCX's shared memory: no TCP lane.
TEST(UcxTcpDefaults, SharedMemoryEndpointsAreNotTcpLinks) {
  EXPECT_EQ(child_sees(nullptr, 0, 0, "self,sm", /*tcp_links=*/false), 0);
}

}  // namespace
}  // namespace antdt
