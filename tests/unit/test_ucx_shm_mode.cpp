// ANTDT_UCX_SHM (core/config.hpp, transport/ucx/ucx_transport.cpp): whether
// UCX's shared-memory transports serve endpoints with peer error handling.
// UCX reads the variables once per process, so each case runs in a child.
#include "transport_fixtures.hpp"

#include "transport/ucx/ucx_transport.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace antdt {
namespace {

// The child's side (a fresh process: UCX's variables are set once per
// process, and this test binary's other tests set them already): a one-rank
// UCX transport made with the mode in ANTDT_TEST_UCX_SHM, then
// UCX_POSIX_ERROR_HANDLING and UCX_SYSV_ERROR_HANDLING compared with
// ANTDT_TEST_EXPECT_POSIX / ANTDT_TEST_EXPECT_SYSV. The exit status says.
TEST(UcxShmModeChild, DISABLED_ReportsTheVariables) {
  int code = 0;
  try {
    transport_test::prepare_ucx_environment();
    Config cfg = transport_test::transport_config();
    cfg.ucx_shm = std::strcmp(std::getenv("ANTDT_TEST_UCX_SHM"), "safe") == 0 ? UcxShm::safe : UcxShm::fast;
    auto rendezvous = std::make_shared<InprocRendezvous>(1, std::chrono::seconds(30));
    InprocBootstrap boot(rendezvous, 0);
    auto t = transport::make_ucx_transport(boot, cfg);
    const char* posix = std::getenv("UCX_POSIX_ERROR_HANDLING");
    const char* sysv = std::getenv("UCX_SYSV_ERROR_HANDLING");
    if (posix == nullptr || std::strcmp(posix, std::getenv("ANTDT_TEST_EXPECT_POSIX")) != 0) code = 2;
    if (sysv == nullptr || std::strcmp(sysv, std::getenv("ANTDT_TEST_EXPECT_SYSV")) != 0) code = 3;
  } catch (...) {
    code = 4;
  }
  std::_Exit(code);
}

// Runs the child's side in a fresh copy of this binary: `user_posix` is what
// the user set (nullptr: unset). Returns its exit status (-1: it did not exit).
int child_sees(const char* mode, const char* user_posix, const char* expect_posix, const char* expect_sysv) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::unsetenv("UCX_POSIX_ERROR_HANDLING");
    ::unsetenv("UCX_SYSV_ERROR_HANDLING");
    if (user_posix != nullptr) ::setenv("UCX_POSIX_ERROR_HANDLING", user_posix, 1);
    ::setenv("ANTDT_TEST_UCX_SHM", mode, 1);
    ::setenv("ANTDT_TEST_EXPECT_POSIX", expect_posix, 1);
    ::setenv("ANTDT_TEST_EXPECT_SYSV", expect_sysv, 1);
    ::execl("/proc/self/exe", "antdt_unit_tests", "--gtest_also_run_disabled_tests",
            "--gtest_filter=UcxShmModeChild.DISABLED_ReportsTheVariables", static_cast<char*>(nullptr));
    std::_Exit(5);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(UcxShmMode, FastLetsSharedMemoryServeEndpointsWithPeerErrorHandling) {
  EXPECT_EQ(child_sees("fast", nullptr, "y", "y"), 0);
}

TEST(UcxShmMode, SafeLeavesSharedMemoryOutOfThem) {
  EXPECT_EQ(child_sees("safe", nullptr, "n", "n"), 0);
}

TEST(UcxShmMode, AValueTheUserSetWins) {
  EXPECT_EQ(child_sees("safe", "y", "y", "n"), 0);  // posix as the user set it, sysv from the mode
}

}  // namespace
}  // namespace antdt
