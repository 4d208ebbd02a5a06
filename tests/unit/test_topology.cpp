// Topology detection and rank binding (core/topology.cpp). Affinity is checked
// with sched_getaffinity and the sysfs CPU/NUMA lists, independently of hwloc.
// Every binding test runs in its own thread and restores the mask it found.
#include "core/topology.hpp"

#include <gtest/gtest.h>

#include <hwloc.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>

namespace antdt {
namespace {

std::vector<unsigned> current_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<unsigned> cpus;
  for (unsigned i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  }
  return cpus;
}

void set_affinity(const std::vector<unsigned>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned c : cpus) CPU_SET(c, &set);
  ASSERT_EQ(sched_setaffinity(0, sizeof set, &set), 0);
}

// Restores the calling thread's affinity when the test body ends.
class AffinityGuard {
 public:
  AffinityGuard() : saved_(current_affinity()) {}
  ~AffinityGuard() { set_affinity(saved_); }
  AffinityGuard(const AffinityGuard&) = delete;
  AffinityGuard& operator=(const AffinityGuard&) = delete;

 private:
  std::vector<unsigned> saved_;
};

// Runs `body` on a fresh thread (bindings never leak into the test runner's
// main thread), restoring the mask it started with.
void on_fresh_thread(const std::function<void()>& body) {
  std::thread([&body] {
    AffinityGuard guard;
    body();
  }).join();
}

// "0-2,5" -> {0,1,2,5}
std::vector<unsigned> parse_cpu_list(const std::string& text) {
  std::vector<unsigned> cpus;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (part.empty() || part == "\n") continue;
    const auto dash = part.find('-');
    const unsigned first = static_cast<unsigned>(std::stoul(part.substr(0, dash)));
    const unsigned last = dash == std::string::npos ? first : static_cast<unsigned>(std::stoul(part.substr(dash + 1)));
    for (unsigned c = first; c <= last; ++c) cpus.push_back(c);
  }
  return cpus;
}

std::optional<std::vector<unsigned>> read_cpu_list(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return parse_cpu_list(line);
}

std::vector<unsigned> intersect(std::vector<unsigned> a, std::vector<unsigned> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::vector<unsigned> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::vector<unsigned> all_pus(const Topology& t) {
  std::vector<unsigned> pus;
  for (const CpuCore& c : t.cores()) pus.insert(pus.end(), c.pus.begin(), c.pus.end());
  std::sort(pus.begin(), pus.end());
  return pus;
}

class TopologyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { topology_ = std::make_unique<Topology>(Topology::detect()); }
  static void TearDownTestSuite() { topology_.reset(); }
  static const Topology& topo() { return *topology_; }

 private:
  static inline std::unique_ptr<Topology> topology_;
};

TEST_F(TopologyTest, FindsCoresAndPus) {
  ASSERT_GE(topo().cores().size(), 1u);
  EXPECT_GE(topo().pu_count(), topo().cores().size());
  EXPECT_GE(topo().numa_nodes().size(), 1u);
  const auto pus = all_pus(topo());
  EXPECT_EQ(pus.size(), topo().pu_count());
  EXPECT_EQ(std::set<unsigned>(pus.begin(), pus.end()).size(), pus.size()) << "a PU belongs to two cores";
  for (const CpuCore& c : topo().cores()) EXPECT_FALSE(c.pus.empty());
  // Every CPU this process may run on right now is one of the PUs.
  for (unsigned cpu : current_affinity()) {
    EXPECT_TRUE(std::binary_search(pus.begin(), pus.end(), cpu)) << "CPU " << cpu << " missing";
  }
}

TEST_F(TopologyTest, CoresMatchSysfsThreadSiblings) {
  const auto pus = all_pus(topo());
  for (const CpuCore& core : topo().cores()) {
    for (unsigned pu : core.pus) {
      const auto siblings =
          read_cpu_list("/sys/devices/system/cpu/cpu" + std::to_string(pu) + "/topology/thread_siblings_list");
      if (!siblings) GTEST_SKIP() << "sysfs CPU topology not readable";
      EXPECT_EQ(intersect(*siblings, pus), core.pus) << "PU " << pu;
    }
  }
}

TEST_F(TopologyTest, NumaNodesMatchSysfs) {
  const auto pus = all_pus(topo());
  std::vector<unsigned> covered;
  for (const NumaNode& node : topo().numa_nodes()) {
    covered.insert(covered.end(), node.pus.begin(), node.pus.end());
    const auto listed = read_cpu_list("/sys/devices/system/node/node" + std::to_string(node.os_index) + "/cpulist");
    if (!listed) continue;  // no sysfs NUMA information (hwloc then makes one node)
    EXPECT_EQ(intersect(*listed, pus), node.pus) << "NUMA node " << node.os_index;
  }
  std::sort(covered.begin(), covered.end());
  EXPECT_EQ(covered, pus) << "NUMA nodes do not cover every PU exactly once";
}

TEST_F(TopologyTest, DescribeIsNonEmpty) {
  const auto lines = topo().describe();
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find(std::to_string(topo().cores().size()) + " cores"), std::string::npos) << lines[0];
  std::string all;
  for (const auto& line : lines) all += line + "\n";
  EXPECT_NE(all.find("GPU"), std::string::npos) << all;
  EXPECT_NE(all.find("RDMA"), std::string::npos) << all;
  for (const RdmaDevice& d : topo().rdma_devices()) EXPECT_NE(all.find(d.name), std::string::npos) << all;
  for (const PciDevice& d : topo().gpus()) EXPECT_NE(all.find(d.bus_id), std::string::npos) << all;
}

TEST_F(TopologyTest, NoneLeavesAffinityAlone) {
  on_fresh_thread([] {
    const auto before = current_affinity();
    EXPECT_TRUE(topo().bind_rank(0, 2, BindMode::none).empty());
    EXPECT_EQ(current_affinity(), before);
  });
}

TEST_F(TopologyTest, CoresSingleRankGetsEveryCore) {
  on_fresh_thread([] {
    const auto bound = topo().bind_rank(0, 1, BindMode::cores);
    EXPECT_EQ(bound, all_pus(topo()));
    EXPECT_EQ(current_affinity(), all_pus(topo()));
  });
}

TEST_F(TopologyTest, CoresSplitEvenlyAmongLocalRanks) {
  const int cores = static_cast<int>(topo().cores().size());
  std::vector<std::vector<unsigned>> masks(static_cast<std::size_t>(cores));
  for (int rank = 0; rank < cores; ++rank) {
    on_fresh_thread([&] {
      const auto bound = topo().bind_rank(rank, cores, BindMode::cores);
      masks[static_cast<std::size_t>(rank)] = current_affinity();
      EXPECT_EQ(bound, masks[static_cast<std::size_t>(rank)]);
    });
  }
  // One core each: every mask is exactly one core's PUs, no two ranks share.
  std::vector<unsigned> all;
  for (const auto& mask : masks) {
    const bool is_one_core = std::any_of(topo().cores().begin(), topo().cores().end(),
                                         [&](const CpuCore& c) { return c.pus == mask; });
    EXPECT_TRUE(is_one_core);
    all.insert(all.end(), mask.begin(), mask.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, all_pus(topo()));
}

TEST_F(TopologyTest, MoreRanksThanCoresGoRoundRobin) {
  const int cores = static_cast<int>(topo().cores().size());
  const int ranks = 2 * cores;
  std::vector<std::vector<unsigned>> masks(static_cast<std::size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank) {
    on_fresh_thread([&] {
      topo().bind_rank(rank, ranks, BindMode::cores);
      masks[static_cast<std::size_t>(rank)] = current_affinity();
    });
  }
  for (int rank = 0; rank < cores; ++rank) {
    const auto& mask = masks[static_cast<std::size_t>(rank)];
    EXPECT_EQ(mask, masks[static_cast<std::size_t>(rank + cores)]) << "rank " << rank;
    EXPECT_TRUE(std::any_of(topo().cores().begin(), topo().cores().end(),
                            [&](const CpuCore& c) { return c.pus == mask; }))
        << "rank " << rank << " is not on exactly one core";
    if (rank > 0) {
      EXPECT_NE(mask, masks[static_cast<std::size_t>(rank - 1)]);
    }
  }
}

TEST_F(TopologyTest, NumaBindsToOneNode) {
  const int ranks = 2;
  for (int rank = 0; rank < ranks; ++rank) {
    on_fresh_thread([&] {
      const auto bound = topo().bind_rank(rank, ranks, BindMode::numa);
      const auto mask = current_affinity();
      EXPECT_EQ(bound, mask);
      const bool is_one_node = std::any_of(topo().numa_nodes().begin(), topo().numa_nodes().end(),
                                           [&](const NumaNode& n) { return n.pus == mask; });
      EXPECT_TRUE(is_one_node) << "rank " << rank << " bound to " << format_cpu_list(mask);
      // Cross-check with the kernel's list for that node.
      for (const NumaNode& n : topo().numa_nodes()) {
        if (n.pus != mask) continue;
        const auto listed = read_cpu_list("/sys/devices/system/node/node" + std::to_string(n.os_index) + "/cpulist");
        if (listed) {
          EXPECT_EQ(intersect(*listed, all_pus(topo())), mask);
        }
      }
    });
  }
}

TEST_F(TopologyTest, AutomaticBindsOnlyAnUnboundThread) {
  const auto pus = all_pus(topo());
  on_fresh_thread([&] {
    set_affinity(pus);  // as if no launcher had bound us
    const auto cores_rank0 = topo().bind_rank(0, static_cast<int>(topo().cores().size()), BindMode::automatic);
    EXPECT_EQ(cores_rank0, topo().cores()[0].pus);
    EXPECT_EQ(current_affinity(), topo().cores()[0].pus);
  });
  on_fresh_thread([&] {
    set_affinity(pus);
    EXPECT_TRUE(topo().bind_rank(0, 0, BindMode::automatic).empty()) << "local_size 0 must not bind";
    EXPECT_EQ(current_affinity(), pus);
  });
  if (pus.size() < 2) GTEST_SKIP() << "one PU: cannot make a partial binding";
  on_fresh_thread([&] {
    const std::vector<unsigned> launcher_binding = {pus.back()};
    set_affinity(launcher_binding);
    EXPECT_TRUE(topo().bind_rank(0, 2, BindMode::automatic).empty());
    EXPECT_EQ(current_affinity(), launcher_binding);
  });
}

TEST_F(TopologyTest, BadLocalRankThrows) {
  on_fresh_thread([] {
    const auto before = current_affinity();
    EXPECT_THROW(topo().bind_rank(2, 2, BindMode::cores), InvalidArgument);
    EXPECT_THROW(topo().bind_rank(-1, 2, BindMode::numa), InvalidArgument);
    EXPECT_THROW(topo().bind_rank(0, 0, BindMode::cores), InvalidArgument);
    EXPECT_THROW(topo().bind_rank(3, 2, BindMode::automatic), InvalidArgument);
    EXPECT_EQ(current_affinity(), before);
  });
}

TEST_F(TopologyTest, MemoryFollowsTheThreadsNumaNode) {
  on_fresh_thread([] {
    ASSERT_FALSE(topo().bind_rank(0, 1, BindMode::numa).empty());
    bool bound = false;
    EXPECT_NO_THROW(bound = topo().bind_memory_to_local_numa());
    if (!bound) GTEST_SKIP() << "the system refused a memory policy (e.g. seccomp in a container)";
    // Independent check through a separate hwloc topology of this machine.
    hwloc_topology_t check = nullptr;
    ASSERT_EQ(hwloc_topology_init(&check), 0);
    ASSERT_EQ(hwloc_topology_load(check), 0);
    hwloc_nodeset_t nodes = hwloc_bitmap_alloc();
    hwloc_membind_policy_t policy = HWLOC_MEMBIND_DEFAULT;
    EXPECT_EQ(hwloc_get_membind(check, nodes, &policy, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET), 0);
    EXPECT_EQ(policy, HWLOC_MEMBIND_BIND);
    EXPECT_EQ(hwloc_bitmap_weight(nodes), 1);
    hwloc_set_membind(check, nodes, HWLOC_MEMBIND_DEFAULT, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET);
    hwloc_bitmap_free(nodes);
    hwloc_topology_destroy(check);
  });
}

TEST(TopologyFormat, CpuList) {
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list({5}), "5");
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({3, 1, 2, 2}), "1-3");
}

// The largest cache hwloc reports is the largest "size" under
// /sys/devices/system/cpu/cpu*/cache (read here without hwloc).
TEST(Topology, LargestCacheMatchesSysfs) {
  std::size_t sysfs = 0;
  for (int cpu = 0; cpu < 1024; ++cpu) {
    bool any = false;
    for (int index = 0; index < 8; ++index) {
      std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" + std::to_string(index) + "/size");
      std::string text;
      if (!(in >> text)) continue;
      any = true;
      std::size_t value = std::stoull(text);
      if (text.back() == 'K') value <<= 10;
      if (text.back() == 'M') value <<= 20;
      sysfs = std::max(sysfs, value);
    }
    if (!any && cpu > 0) break;
  }
  if (sysfs == 0) GTEST_SKIP() << "sysfs lists no CPU caches here";
  EXPECT_EQ(largest_cache_bytes(), sysfs);
}

}  // namespace
}  // namespace antdt
