// ANTDT_* parsing (core/config.cpp), launcher variables, and the logger that
// depends on the configuration (core/log.cpp).
#include "core/config.hpp"
#include "core/log.hpp"
#include "test_environment.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace antdt {
namespace {

using test::ScopedEnv;
using test::StderrCapture;

using Env = std::map<std::string, std::string, std::less<>>;

Config::Lookup lookup_in(const Env& env) {
  return [&env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

Config parse(const Env& env) { return Config::from_env(lookup_in(env)); }

// The ConfigError message for `env`, or "" when it parses.
std::string error_for(const Env& env) {
  try {
    parse(env);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.status(), Status::config);
    return e.what();
  }
  return "";
}

TEST(Config, Defaults) {
  const Config c = parse({});
  EXPECT_EQ(c.log_level, LogLevel::warn);
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(60000));
  EXPECT_EQ(c.transport, "ucx");
  EXPECT_EQ(c.allreduce_algo, AllreduceAlgo::automatic);
  EXPECT_EQ(c.chunk_bytes, std::size_t{256} << 10);
  EXPECT_EQ(c.progress, ProgressMode::automatic);
  EXPECT_EQ(c.spin_before_sleep, std::chrono::microseconds(50));
  EXPECT_EQ(c.bind, BindMode::automatic);
  EXPECT_FALSE(c.rank.has_value());
  EXPECT_FALSE(c.world_size.has_value());
  EXPECT_FALSE(c.local_rank.has_value());
  EXPECT_FALSE(c.local_size.has_value());
  EXPECT_EQ(c.root, "");
  EXPECT_EQ(c.secret, "");
  EXPECT_EQ(c.bootstrap_dir, "/tmp");
}

TEST(Config, EmptyStringCountsAsUnset) {
  const Config c = parse({{"ANTDT_TIMEOUT_MS", ""}, {"ANTDT_DEBUG", ""}, {"ANTDT_RANK", ""}, {"ANTDT_ROOT", ""},
                          {"ANTDT_SECRET", ""}, {"ANTDT_CHUNK_BYTES", "  "}, {"ANTDT_BOOTSTRAP_DIR", ""}});
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(60000));
  EXPECT_EQ(c.log_level, LogLevel::warn);
  EXPECT_FALSE(c.rank.has_value());
  EXPECT_EQ(c.root, "");
  EXPECT_EQ(c.secret, "");
  EXPECT_EQ(c.chunk_bytes, std::size_t{256} << 10);
  EXPECT_EQ(c.bootstrap_dir, "/tmp");
}

TEST(Config, LogLevelCaseInsensitive) {
  EXPECT_EQ(parse({{"ANTDT_DEBUG", "ERROR"}}).log_level, LogLevel::error);
  EXPECT_EQ(parse({{"ANTDT_DEBUG", "warn"}}).log_level, LogLevel::warn);
  EXPECT_EQ(parse({{"ANTDT_DEBUG", "Info"}}).log_level, LogLevel::info);
  EXPECT_EQ(parse({{"ANTDT_DEBUG", "tRaCe"}}).log_level, LogLevel::trace);
}

TEST(Config, TimeoutRange) {
  EXPECT_EQ(parse({{"ANTDT_TIMEOUT_MS", "1"}}).timeout, std::chrono::milliseconds(1));
  EXPECT_EQ(parse({{"ANTDT_TIMEOUT_MS", "86400000"}}).timeout, std::chrono::milliseconds(86400000));
  EXPECT_EQ(parse({{"ANTDT_TIMEOUT_MS", " 250 "}}).timeout, std::chrono::milliseconds(250));
}

TEST(Config, TimeoutErrorMessageIsExact) {
  EXPECT_EQ(error_for({{"ANTDT_TIMEOUT_MS", "abc"}}),
            "ANTDT_TIMEOUT_MS='abc' is invalid: expected an integer in [1, 86400000] (milliseconds)");
}

TEST(Config, EnumsAndStrings) {
  EXPECT_EQ(parse({{"ANTDT_TRANSPORT", "UCX"}}).transport, "ucx");
  EXPECT_EQ(parse({{"ANTDT_TRANSPORT", "inproc"}}).transport, "inproc");
  EXPECT_EQ(parse({{"ANTDT_ALGO", "AUTO"}}).allreduce_algo, AllreduceAlgo::automatic);
  EXPECT_EQ(parse({{"ANTDT_ALGO", "ring"}}).allreduce_algo, AllreduceAlgo::ring);
  EXPECT_EQ(parse({{"ANTDT_ALGO", "Hierarchical"}}).allreduce_algo, AllreduceAlgo::hierarchical);
  EXPECT_EQ(parse({{"ANTDT_ALGO", "rabenseifner"}}).allreduce_algo, AllreduceAlgo::rabenseifner);
  EXPECT_EQ(parse({{"ANTDT_NODE_ID", "rack3-node7"}}).node_id, "rack3-node7");
  EXPECT_EQ(parse({}).node_id, "");
  EXPECT_EQ(parse({{"ANTDT_PROGRESS", "auto"}}).progress, ProgressMode::automatic);
  EXPECT_EQ(parse({{"ANTDT_PROGRESS", "Spin"}}).progress, ProgressMode::spin);
  EXPECT_EQ(parse({{"ANTDT_PROGRESS", "WAKE"}}).progress, ProgressMode::wake);
  EXPECT_EQ(parse({{"ANTDT_BIND", "auto"}}).bind, BindMode::automatic);
  EXPECT_EQ(parse({{"ANTDT_BIND", "NONE"}}).bind, BindMode::none);
  EXPECT_EQ(parse({{"ANTDT_BIND", "cores"}}).bind, BindMode::cores);
  EXPECT_EQ(parse({{"ANTDT_BIND", "Numa"}}).bind, BindMode::numa);
  EXPECT_EQ(parse({}).ucx_shm, UcxShm::fast);
  EXPECT_EQ(parse({{"ANTDT_UCX_SHM", "safe"}}).ucx_shm, UcxShm::safe);
  EXPECT_EQ(parse({{"ANTDT_UCX_SHM", "Fast"}}).ucx_shm, UcxShm::fast);
  EXPECT_NE(error_for({{"ANTDT_UCX_SHM", "off"}}).find("fast, safe"), std::string::npos);
  EXPECT_EQ(parse({{"ANTDT_BOOTSTRAP_DIR", "/var/tmp/antdt"}}).bootstrap_dir, "/var/tmp/antdt");
  EXPECT_EQ(parse({}).gpu_path, GpuPath::automatic);
  EXPECT_EQ(parse({{"ANTDT_GPU_PATH", "ipc"}}).gpu_path, GpuPath::ipc);
  EXPECT_EQ(parse({{"ANTDT_GPU_PATH", "Staged"}}).gpu_path, GpuPath::staged);
  EXPECT_EQ(parse({{"ANTDT_GPU_PATH", "direct"}}).gpu_path, GpuPath::direct);
  EXPECT_NE(error_for({{"ANTDT_GPU_PATH", "rdma"}}).find("auto, ipc, staged, direct"), std::string::npos);
}

TEST(Config, ChunkBytesSuffixes) {
  EXPECT_EQ(parse({{"ANTDT_CHUNK_BYTES", "4096"}}).chunk_bytes, 4096u);
  EXPECT_EQ(parse({{"ANTDT_CHUNK_BYTES", "4K"}}).chunk_bytes, 4096u);
  EXPECT_EQ(parse({{"ANTDT_CHUNK_BYTES", "4k"}}).chunk_bytes, 4096u);
  EXPECT_EQ(parse({{"ANTDT_CHUNK_BYTES", "3m"}}).chunk_bytes, 3u << 20);
  EXPECT_EQ(parse({{"ANTDT_CHUNK_BYTES", "512M"}}).chunk_bytes, 512u << 20);
  EXPECT_EQ(parse({{"ANTDT_CHUNK_BYTES", "1G"}}).chunk_bytes, 1u << 30);
  EXPECT_EQ(parse({{"ANTDT_CHUNK_BYTES", "1073741824"}}).chunk_bytes, 1u << 30);
}

TEST(Config, SpinMicroseconds) {
  EXPECT_EQ(parse({{"ANTDT_SPIN_US", "0"}}).spin_before_sleep, std::chrono::microseconds(0));
  EXPECT_EQ(parse({{"ANTDT_SPIN_US", "1000000"}}).spin_before_sleep, std::chrono::microseconds(1000000));
}

TEST(Config, Membership) {
  const Config c = parse({{"ANTDT_RANK", "3"}, {"ANTDT_WORLD_SIZE", "4"}, {"ANTDT_LOCAL_RANK", "1"},
                          {"ANTDT_LOCAL_SIZE", "2"}});
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.local_size, 2);
  // Either alone is fine: the other may come from a launcher.
  EXPECT_EQ(parse({{"ANTDT_RANK", "7"}}).rank, 7);
  EXPECT_EQ(parse({{"ANTDT_WORLD_SIZE", "1"}}).world_size, 1);
}

TEST(Config, RankMustBeBelowWorldSize) {
  const std::string e = error_for({{"ANTDT_RANK", "4"}, {"ANTDT_WORLD_SIZE", "4"}});
  EXPECT_NE(e.find("ANTDT_RANK"), std::string::npos) << e;
  EXPECT_NE(e.find("ANTDT_WORLD_SIZE"), std::string::npos) << e;
  const std::string l = error_for({{"ANTDT_LOCAL_RANK", "2"}, {"ANTDT_LOCAL_SIZE", "2"}});
  EXPECT_NE(l.find("ANTDT_LOCAL_RANK"), std::string::npos) << l;
}

TEST(Config, RootForms) {
  for (const char* root : {"node1:29500", "10.0.0.7:1", "localhost:65535", "my-host.cluster_a.example:80",
                           "[::1]:29500", "[fe80::1%eth0]:4000", "[::ffff:10.0.0.1]:80"}) {
    EXPECT_EQ(parse({{"ANTDT_ROOT", root}}).root, root);
  }
}

TEST(Config, SecretIsLowercasedHex) {
  EXPECT_EQ(parse({{"ANTDT_SECRET", "0123456789ABCDEF0123456789abcdef"}}).secret, "0123456789abcdef0123456789abcdef");
}

struct BadValue {
  const char* name;
  const char* value;
};

TEST(Config, InvalidValuesNameTheVariableAndValue) {
  static const std::string long_node_id(256, 'n');  // ANTDT_NODE_ID: at most 255 characters
  const std::vector<BadValue> bad = {
      {"ANTDT_DEBUG", "verbose"},       {"ANTDT_DEBUG", "warning"},       {"ANTDT_TIMEOUT_MS", "abc"},
      {"ANTDT_TIMEOUT_MS", "0"},        {"ANTDT_TIMEOUT_MS", "86400001"}, {"ANTDT_TIMEOUT_MS", "-5"},
      {"ANTDT_TIMEOUT_MS", "1.5"},      {"ANTDT_TIMEOUT_MS", "10ms"},     {"ANTDT_TIMEOUT_MS", "99999999999999999999"},
      {"ANTDT_TRANSPORT", "tcp"},       {"ANTDT_ALGO", "tree"},           {"ANTDT_NODE_ID", long_node_id.c_str()},
                {"ANTDT_CHUNK_BYTES", "4095"},
      {"ANTDT_CHUNK_BYTES", "2G"},      {"ANTDT_CHUNK_BYTES", "1T"},      {"ANTDT_CHUNK_BYTES", "K"},
      {"ANTDT_CHUNK_BYTES", "-4K"},     {"ANTDT_CHUNK_BYTES", "1.5M"},    {"ANTDT_CHUNK_BYTES", "4KB"},
      {"ANTDT_CHUNK_BYTES", "3k"},      {"ANTDT_CHUNK_BYTES", "9999999999999999999G"},
      {"ANTDT_PROGRESS", "busy"},       {"ANTDT_SPIN_US", "-1"},          {"ANTDT_SPIN_US", "1000001"},
      {"ANTDT_BIND", "socket"},         {"ANTDT_UCX_SHM", "yes"},        {"ANTDT_RANK", "-1"},             {"ANTDT_RANK", "one"},
      {"ANTDT_RANK", "2147483647"},     {"ANTDT_WORLD_SIZE", "0"},        {"ANTDT_WORLD_SIZE", "2147483648"},
      {"ANTDT_LOCAL_RANK", "x"},        {"ANTDT_LOCAL_SIZE", "0"},        {"ANTDT_ROOT", "host"},
      {"ANTDT_ROOT", "host:0"},         {"ANTDT_ROOT", "host:65536"},     {"ANTDT_ROOT", ":80"},
      {"ANTDT_ROOT", "host:"},          {"ANTDT_ROOT", "::1:80"},         {"ANTDT_ROOT", "[::1]"},
      {"ANTDT_ROOT", "[]:80"},          {"ANTDT_ROOT", "host:80x"},       {"ANTDT_ROOT", "host:+80"},
      {"ANTDT_ROOT", "bad host:80"},    {"ANTDT_ROOT", "[zz::1]:80"},     {"ANTDT_ROOT", "[fe80::1%]:80"},
  };
  for (const auto& [name, value] : bad) {
    const std::string e = error_for({{name, value}});
    ASSERT_FALSE(e.empty()) << name << "='" << value << "' was accepted";
    EXPECT_NE(e.find(name), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("'") + value + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("expected"), std::string::npos) << e;
  }
}

TEST(Config, PolicyConfigNestedTooDeepIsAConfigErrorNotACrash) {
  // 100 000 levels overflowed the stack (the JSON parser and dump() recurse).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string path = ::testing::TempDir() + "antdt-deep-policy.json";
  {
    std::ofstream out(path);
    out << "{\"a\": " << deep << "}";
  }
  std::string msg = error_for({{"ANTDT_POLICY_CONFIG", "@" + path}});
  EXPECT_NE(msg.find("ANTDT_POLICY_CONFIG"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nests 100001 levels deep"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 64"), std::string::npos) << msg;
  msg = error_for({{"ANTDT_POLICY_CONFIG", "{\"a\": " + deep + "}"}});
  EXPECT_NE(msg.find("nests 100001 levels deep"), std::string::npos) << msg.substr(0, 200);
  EXPECT_LT(msg.size(), 400u) << "the value is shortened in the message";
  std::remove(path.c_str());
}

TEST(Config, PolicyConfigLargerThanOneMebibyteIsAConfigError) {
  // @/dev/zero used to be read until memory ran out; a large document is refused by its size.
  std::string msg = error_for({{"ANTDT_POLICY_CONFIG", "@/dev/zero"}});
  EXPECT_NE(msg.find("ANTDT_POLICY_CONFIG='@/dev/zero' is invalid: the file has more than 1048576 bytes"),
            std::string::npos)
      << msg;
  const std::string big = "{\"a\": \"" + std::string(std::size_t{1} << 20, 'x') + "\"}";
  msg = error_for({{"ANTDT_POLICY_CONFIG", big}});
  EXPECT_NE(msg.find("is invalid: more than 1048576 bytes of JSON"), std::string::npos) << msg.substr(0, 200);
  EXPECT_LT(msg.size(), 400u) << "the value is shortened in the message";
  // Just under the limit still parses.
  const std::string fits = "{\"a\": \"" + std::string((std::size_t{1} << 20) - 16, 'x') + "\"}";
  EXPECT_EQ(error_for({{"ANTDT_POLICY_CONFIG", fits}}), "");
}

TEST(Config, PolicyConfigModestNestingStillParses) {
  // 64 levels in all, brackets inside strings not counted.
  std::string text = "{\"s\": \"[[[[{{{{\\\"]]]]\", \"a\": ";
  for (int i = 0; i < 63; ++i) text += "[";
  text += "1";
  for (int i = 0; i < 63; ++i) text += "]";
  text += ", \"b\": {}}";
  EXPECT_EQ(error_for({{"ANTDT_POLICY_CONFIG", text}}), "");
  EXPECT_NE(error_for({{"ANTDT_POLICY_CONFIG", "{\"a\": " + std::string(64, '[') + std::string(64, ']') + "}"}}),
            "");
}

TEST(Config, InvalidEnumListsAcceptedValues) {
  const std::string e = error_for({{"ANTDT_BIND", "socket"}});
  EXPECT_NE(e.find("auto, none, cores, numa"), std::string::npos) << e;
  const std::string r = error_for({{"ANTDT_ROOT", "host:0"}});
  EXPECT_NE(r.find("[1, 65535]"), std::string::npos) << r;
}

TEST(Config, InvalidSecretIsRejectedWithoutEchoingIt) {
  const std::string almost = "0123456789abcdef0123456789abcde";  // 31 digits
  for (const std::string& value : {almost, almost + "f0", almost + "g", std::string(32, 'x')}) {
    const std::string e = error_for({{"ANTDT_SECRET", value}});
    ASSERT_FALSE(e.empty()) << value;
    EXPECT_NE(e.find("ANTDT_SECRET"), std::string::npos) << e;
    EXPECT_NE(e.find("32 hex digits"), std::string::npos) << e;
    EXPECT_EQ(e.find(value), std::string::npos) << e;
  }
}

TEST(Config, ControlCharactersAreEscapedInMessages) {
  const std::string e = error_for({{"ANTDT_BIND", "co\x1b[31mres"}});
  EXPECT_EQ(e.find('\x1b'), std::string::npos) << e;
  EXPECT_NE(e.find("\\x1b"), std::string::npos) << e;
}

TEST(Config, DescribeListsEveryVariableAndHidesTheSecret) {
  const Config c = parse({{"ANTDT_SECRET", "0123456789abcdef0123456789abcdef"}, {"ANTDT_RANK", "2"},
                          {"ANTDT_CHUNK_BYTES", "2M"}, {"ANTDT_DEBUG", "info"}});
  const auto lines = c.describe();
  std::string all;
  for (const auto& line : lines) all += line + "\n";
  for (const char* name : {"ANTDT_DEBUG=INFO", "ANTDT_TIMEOUT_MS=60000", "ANTDT_TRANSPORT=ucx", "ANTDT_ALGO=auto",
                           "ANTDT_CHUNK_BYTES=2M", "ANTDT_PROGRESS=auto", "ANTDT_SPIN_US=50", "ANTDT_BIND=auto",
                           "ANTDT_RANK=2", "ANTDT_WORLD_SIZE=(unset)", "ANTDT_LOCAL_RANK=", "ANTDT_LOCAL_SIZE=",
                           "ANTDT_ROOT=", "ANTDT_SECRET=", "ANTDT_BOOTSTRAP_DIR=/tmp"}) {
    EXPECT_NE(all.find(name), std::string::npos) << name << " missing from\n" << all;
  }
  EXPECT_EQ(all.find("0123456789abcdef"), std::string::npos) << all;
}


TEST(Config, ProcessConfigReloads) {
  {
    ScopedEnv timeout("ANTDT_TIMEOUT_MS", "1234");
    reload_config();
    const Config& first = config();
    EXPECT_EQ(first.timeout, std::chrono::milliseconds(1234));
    EXPECT_EQ(&config(), &first);  // parsed once

    ::setenv("ANTDT_TIMEOUT_MS", "bogus", 1);
    EXPECT_THROW(reload_config(), ConfigError);
    EXPECT_THROW(config(), ConfigError);  // the failure is remembered
    EXPECT_EQ(first.timeout, std::chrono::milliseconds(1234));  // old references stay valid

    ::setenv("ANTDT_TIMEOUT_MS", "99", 1);
    reload_config();
    EXPECT_EQ(config().timeout, std::chrono::milliseconds(99));
  }
  EXPECT_NO_THROW(config());
}

TEST(Config, ProcessConfigIsThreadSafe) {
  ScopedEnv timeout("ANTDT_TIMEOUT_MS", "4321");
  reload_config();
  std::vector<std::thread> threads;
  std::vector<const Config*> seen(8, nullptr);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] { seen[i] = &config(); });
  }
  for (auto& t : threads) t.join();
  for (const Config* c : seen) {
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c, seen[0]);
    EXPECT_EQ(c->timeout, std::chrono::milliseconds(4321));
  }
}

// ---------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------
std::optional<LauncherRanks> launcher(const Env& env) { return launcher_ranks(lookup_in(env)); }

std::string launcher_error(const Env& env) {
  try {
    launcher(env);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Launcher, NoneWhenNoLauncherVariables) {
  EXPECT_FALSE(launcher({}).has_value());
  EXPECT_FALSE(launcher({{"ANTDT_RANK", "0"}, {"PMIX_NAMESPACE", "ns"}}).has_value());
}

TEST(Launcher, OpenMpi) {
  const auto r = launcher({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                           {"OMPI_MCA_ess_base_jobid", "3735945217"}, {"PMIX_NAMESPACE", "prterun-x-1@1"},
                           {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 5);
  EXPECT_EQ(r->size, 8);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->local_size, 4);
  EXPECT_EQ(r->job_id, "3735945217");
  EXPECT_EQ(r->source, "Open MPI");

  // Open MPI 5 (PRRTE) has no ess jobid: the PMIx namespace names the job.
  const auto v5 = launcher({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                            {"PMIX_NAMESPACE", "prterun-x-1@1"}, {"PMIX_RANK", "0"}});
  ASSERT_TRUE(v5.has_value());
  EXPECT_EQ(v5->job_id, "prterun-x-1@1");
  EXPECT_EQ(v5->local_rank, -1);
  EXPECT_EQ(v5->local_size, -1);
}

TEST(Launcher, Pmix) {
  const auto r = launcher({{"PMIX_RANK", "3"}, {"PMIX_NAMESPACE", "slurm.pmix.77.0"}});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->size, -1);
  EXPECT_EQ(r->job_id, "slurm.pmix.77.0");
  EXPECT_EQ(r->source, "PMIx");
}

TEST(Launcher, Pmi) {
  const auto r = launcher({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->size, 3);
  EXPECT_EQ(r->source, "PMI");
}

TEST(Launcher, Slurm) {
  const auto r = launcher({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"},
                           {"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "3"}});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 9);
  EXPECT_EQ(r->size, 16);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->job_id, "4242.3");
  EXPECT_EQ(r->source, "Slurm");
  const auto no_step = launcher({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_ID", "4242"}});
  ASSERT_TRUE(no_step.has_value());
  EXPECT_EQ(no_step->job_id, "4242");
}

TEST(Launcher, MalformedNumbersNameTheVariable) {
  const std::vector<std::pair<Env, std::string>> cases = {
      {{{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_RANK"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "-2"}}, "OMPI_COMM_WORLD_SIZE"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}}, "OMPI_COMM_WORLD_SIZE"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1e3"}},
       "OMPI_COMM_WORLD_LOCAL_RANK"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "zero"}},
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_RANK"},
      {{{"PMIX_RANK", "r1"}, {"PMIX_NAMESPACE", "ns"}}, "PMIX_RANK"},
      {{{"PMI_RANK", "1"}, {"PMI_SIZE", "0"}}, "PMI_SIZE"},
      {{{"PMI_RANK", "-1"}, {"PMI_SIZE", "4"}}, "PMI_RANK"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "abc"}}, "SLURM_NTASKS"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "9999999999"}}, "SLURM_LOCALID"},
  };
  for (const auto& [env, variable] : cases) {
    const std::string e = launcher_error(env);
    ASSERT_FALSE(e.empty()) << "accepted a malformed " << variable;
    EXPECT_NE(e.find(variable), std::string::npos) << e;
  }
}

// ---------------------------------------------------------------------------
// Logging (its level comes from the configuration)
// ---------------------------------------------------------------------------


TEST(Log, PrefixRankAndLevel) {
  ScopedEnv level("ANTDT_DEBUG", "INFO");
  reload_config();
  StderrCapture capture;
  log::set_process_rank(-1);
  ANTDT_WARN("unknown rank ", 1);
  log::set_process_rank(3);
  ANTDT_INFO("process rank");
  std::thread([] {
    log::set_thread_rank(7);
    ANTDT_INFO("thread rank");
    log::set_thread_rank(-1);
    ANTDT_INFO("back to process rank");
  }).join();
  ANTDT_TRACE("not shown at INFO");
  log::write(LogLevel::error, "two\nlines\n");
  log::set_process_rank(-1);
  EXPECT_EQ(capture.finish(),
            "[antdt r? WARN] unknown rank 1\n"
            "[antdt r3 INFO] process rank\n"
            "[antdt r7 INFO] thread rank\n"
            "[antdt r3 INFO] back to process rank\n"
            "[antdt r3 ERROR] two\n"
            "[antdt r3 ERROR] lines\n");
}

TEST(Log, LevelFiltering) {
  {
    ScopedEnv level("ANTDT_DEBUG", "ERROR");
    reload_config();
    EXPECT_TRUE(log::enabled(LogLevel::error));
    EXPECT_FALSE(log::enabled(LogLevel::warn));
  }
  {
    ScopedEnv level("ANTDT_DEBUG", "TRACE");
    reload_config();
    EXPECT_TRUE(log::enabled(LogLevel::trace));
  }
}

TEST(Log, BadConfigurationFallsBackToWarnWithoutThrowing) {
  ScopedEnv level("ANTDT_DEBUG", "LOUD");
  EXPECT_THROW(reload_config(), ConfigError);
  EXPECT_TRUE(log::enabled(LogLevel::warn));
  EXPECT_FALSE(log::enabled(LogLevel::info));
  StderrCapture capture;
  EXPECT_NO_THROW(ANTDT_WARN("still logs"));
  EXPECT_NE(capture.finish().find("WARN] still logs"), std::string::npos);
}

TEST(Config, NvtxIsOffByDefaultAndTakesZeroOrOne) {
  EXPECT_FALSE(parse({}).nvtx);
  EXPECT_FALSE(parse({{"ANTDT_NVTX", "0"}}).nvtx);
  EXPECT_TRUE(parse({{"ANTDT_NVTX", "1"}}).nvtx);
  EXPECT_TRUE(parse({{"ANTDT_NVTX", " 1 "}}).nvtx);
  for (const char* bad : {"2", "-1", "yes", "on", "1.0"}) {
    const std::string e = error_for({{"ANTDT_NVTX", bad}});
    EXPECT_NE(e.find("ANTDT_NVTX='"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("[0, 1]"), std::string::npos) << bad << ": " << e;
  }
  std::string described;
  for (const auto& line : parse({{"ANTDT_NVTX", "1"}}).describe()) described += line + "\n";
  EXPECT_NE(described.find("ANTDT_NVTX=1\n"), std::string::npos) << described;
}

TEST(Config, MonitorTraceAndInjectDefaults) {
  const Config c = parse({});
  EXPECT_EQ(c.monitor_window, 64u);
  EXPECT_DOUBLE_EQ(c.monitor_alpha, 0.3);
  EXPECT_DOUBLE_EQ(c.monitor_theta, 1.5);
  EXPECT_EQ(c.monitor_short_steps, 10);
  EXPECT_DOUBLE_EQ(c.monitor_grace_margin, 2.0);
  EXPECT_EQ(c.trace_dir, "");
  EXPECT_EQ(c.trace_flush_steps, 100);
  EXPECT_EQ(c.inject, nullptr);
}

TEST(Config, MonitorTraceAndInjectValues) {
  const Config c = parse({{"ANTDT_MONITOR_WINDOW", "128"},
                          {"ANTDT_MONITOR_ALPHA", "1"},
                          {"ANTDT_MONITOR_THETA", " 1.25 "},
                          {"ANTDT_MONITOR_SHORT_STEPS", "5"},
                          {"ANTDT_MONITOR_GRACE_MARGIN", "1"},
                          {"ANTDT_TRACE_DIR", "/tmp/antdt-traces"},
                          {"ANTDT_TRACE_FLUSH_STEPS", "1"},
                          {"ANTDT_INJECT", "rank=1:slow=2"}});
  EXPECT_EQ(c.monitor_window, 128u);
  EXPECT_DOUBLE_EQ(c.monitor_alpha, 1.0);
  EXPECT_DOUBLE_EQ(c.monitor_theta, 1.25);
  EXPECT_EQ(c.monitor_short_steps, 5);
  EXPECT_DOUBLE_EQ(c.monitor_grace_margin, 1.0);
  EXPECT_EQ(c.trace_dir, "/tmp/antdt-traces");
  EXPECT_EQ(c.trace_flush_steps, 1);
  ASSERT_NE(c.inject, nullptr);
  std::string described;
  for (const auto& line : c.describe()) described += line + "\n";
  for (const char* line : {"ANTDT_MONITOR_WINDOW=128\n", "ANTDT_MONITOR_ALPHA=1\n", "ANTDT_MONITOR_THETA=1.25\n",
                           "ANTDT_MONITOR_SHORT_STEPS=5\n", "ANTDT_MONITOR_GRACE_MARGIN=1\n",
                           "ANTDT_TRACE_DIR=/tmp/antdt-traces\n", "ANTDT_TRACE_FLUSH_STEPS=1\n",
                           "ANTDT_INJECT=rank=1:slow=2\n"}) {
    EXPECT_NE(described.find(line), std::string::npos) << line << " missing from\n" << described;
  }
}

TEST(Config, MonitorTraceAndInjectInvalidValuesNameTheVariable) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"ANTDT_MONITOR_WINDOW", "3"},        {"ANTDT_MONITOR_WINDOW", "65537"},
      {"ANTDT_MONITOR_ALPHA", "0"},         {"ANTDT_MONITOR_ALPHA", "1.01"},
      {"ANTDT_MONITOR_ALPHA", "abc"},       {"ANTDT_MONITOR_ALPHA", "nan"},
      {"ANTDT_MONITOR_ALPHA", "3e-1"},      {"ANTDT_MONITOR_THETA", "1"},
      {"ANTDT_MONITOR_THETA", "0.5"},       {"ANTDT_MONITOR_THETA", "inf"},
      {"ANTDT_MONITOR_SHORT_STEPS", "0"},   {"ANTDT_MONITOR_GRACE_MARGIN", "0.5"},
      {"ANTDT_MONITOR_GRACE_MARGIN", "2x"}, {"ANTDT_TRACE_FLUSH_STEPS", "0"},
      {"ANTDT_INJECT", "rank=1:slow=fast"}};
  for (const auto& [name, value] : bad) {
    const std::string e = error_for({{name, value}});
    EXPECT_NE(e.find(name + "='"), std::string::npos) << name << "=" << value << ": " << e;
    EXPECT_NE(e.find(value), std::string::npos) << name << "=" << value << ": " << e;
  }
  EXPECT_NE(error_for({{"ANTDT_MONITOR_ALPHA", "0"}}).find("a decimal number in (0, 1]"), std::string::npos);
  EXPECT_NE(error_for({{"ANTDT_MONITOR_THETA", "1"}}).find("(1, 100]"), std::string::npos);
  EXPECT_NE(error_for({{"ANTDT_MONITOR_GRACE_MARGIN", "0.5"}}).find("[1, 100]"), std::string::npos);
}

}  // namespace
TEST(Config, PartialArbiterRunsInAnExternalCoordinatorWhenThereIsOne) {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(parse({}).partial_arbiter, PartialArbiter::automatic);
  EXPECT_FALSE(parse({}).external_arbiter());
  // auto: the coordinator's when it runs apart and the ranks can prove the secret to it.
  EXPECT_TRUE(parse({{"ANTDT_COORDINATOR", "127.0.0.1:5000"}, {"ANTDT_SECRET", secret}}).external_arbiter());
  EXPECT_FALSE(parse({{"ANTDT_COORDINATOR", "127.0.0.1:5000"}, {"ANTDT_SECRET", secret},
                      {"ANTDT_COORDINATOR_EMBEDDED", "1"}}).external_arbiter());
  EXPECT_FALSE(parse({{"ANTDT_COORDINATOR", "127.0.0.1:5000"}}).external_arbiter());
  EXPECT_FALSE(parse({{"ANTDT_COORDINATOR", "127.0.0.1:5000"}, {"ANTDT_SECRET", secret},
                      {"ANTDT_PARTIAL_ARBITER", "rank0"}}).external_arbiter());
  EXPECT_TRUE(parse({{"ANTDT_COORDINATOR", "127.0.0.1:5000"}, {"ANTDT_SECRET", secret},
                     {"ANTDT_PARTIAL_ARBITER", "coordinator"}}).external_arbiter());
  EXPECT_NE(error_for({{"ANTDT_PARTIAL_ARBITER", "coordinator"}}).find("ANTDT_PARTIAL_ARBITER=coordinator needs"),
            std::string::npos);
  EXPECT_NE(error_for({{"ANTDT_PARTIAL_ARBITER", "rank1"}}).find("ANTDT_PARTIAL_ARBITER"), std::string::npos);
}

}  // namespace antdt
