// The machine as hwloc and libibverbs see it: cores, hardware threads (PUs),
// NUMA nodes, GPUs and NICs on PCI, RDMA devices and their ports; and binding
// a rank's thread to its share of the cores or to its NUMA node.
//
// A machine without GPUs or RDMA devices simply reports none.
#pragma once

#include "core/config.hpp"

#include <antdt/comm.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace antdt {

struct CpuCore {
  std::vector<unsigned> pus;  // OS indexes of its hardware threads (the numbers sched_setaffinity uses)
  int numa_node = -1;         // OS index of its NUMA node, -1 when unknown
};

struct NumaNode {
  unsigned os_index = 0;
  std::vector<unsigned> pus;  // PUs local to this node (empty for memory-only nodes)
  std::uint64_t local_memory_bytes = 0;
};

// A GPU or network adapter found on the PCI bus.
struct PciDevice {
  enum class Kind { gpu, nic };
  Kind kind = Kind::gpu;
  std::string bus_id;                   // "0000:17:00.0"
  std::string name;                     // vendor/model when hwloc knows it, else "vendor:device" ids
  std::vector<std::string> os_devices;  // e.g. "cuda0", "eth0", "mlx5_0"
  int numa_node = -1;                   // OS index of the closest NUMA node, -1 when unknown
};

struct RdmaPort {
  unsigned number = 0;
  std::string state;       // "PORT_ACTIVE", "PORT_DOWN", ...
  std::string link_layer;  // "InfiniBand", "Ethernet" or "unspecified"
};

struct RdmaDevice {
  std::string name;  // "mlx5_0"
  std::vector<RdmaPort> ports;
  std::string error;  // why the device could not be queried, empty when it could
};

class Topology {
 public:
  // Loads the machine description. Throws InternalError only when hwloc cannot
  // describe the machine at all; missing GPUs or RDMA devices are not errors.
  static Topology detect();

  const std::vector<CpuCore>& cores() const noexcept { return cores_; }
  std::size_t pu_count() const noexcept;
  const std::vector<NumaNode>& numa_nodes() const noexcept { return numa_nodes_; }
  const std::vector<PciDevice>& gpus() const noexcept { return gpus_; }
  const std::vector<PciDevice>& nics() const noexcept { return nics_; }
  const std::vector<RdmaDevice>& rdma_devices() const noexcept { return rdma_devices_; }
  // Why libibverbs listed no devices (e.g. no kernel support); empty otherwise.
  const std::string& rdma_note() const noexcept { return rdma_note_; }

  // One line per fact, for the caller to log at INFO.
  std::vector<std::string> describe() const;

  // Binds the calling thread (threads it starts afterwards inherit the
  // binding) to local rank `local_rank`'s share of this node:
  //  - cores: the cores split evenly among the local ranks, all PUs of each
  //    core; with more local ranks than cores, one core each, round-robin;
  //  - numa: every PU of the NUMA node the rank falls on, ranks spread evenly
  //    over the nodes that have CPUs;
  //  - automatic: as cores, but only when local_size > 0 and the thread's
  //    current affinity covers every PU (a launcher that bound the rank
  //    already is left alone);
  //  - none: nothing.
  // Returns the PUs now bound to, empty when the binding was left unchanged.
  // Throws InvalidArgument for a local rank outside [0, local_size) when a
  // binding is asked for; a failing system call is logged, not thrown.
  std::vector<unsigned> bind_rank(int local_rank, int local_size, BindMode mode) const;

  // Prefers the NUMA node of the calling thread's CPUs for the thread's future
  // allocations (hwloc_set_membind, not strict: a full node spills over).
  // Best effort: returns false, logging why at INFO, when the thread's CPUs
  // span several NUMA nodes or the system refuses.
  bool bind_memory_to_local_numa() const;

 private:
  struct Hwloc;
  std::shared_ptr<Hwloc> hwloc_;
  std::vector<CpuCore> cores_;
  std::vector<NumaNode> numa_nodes_;
  std::vector<PciDevice> gpus_;
  std::vector<PciDevice> nics_;
  std::vector<RdmaDevice> rdma_devices_;
  std::string rdma_note_;
};

// "0-3,8,10-11": a compact list of CPU numbers for messages.
std::string format_cpu_list(const std::vector<unsigned>& cpus);

// The size of this machine's largest CPU cache (one instance: the L3 shared by
// a group of cores, where it has one), found by hwloc once per process; 0 when
// hwloc reports no cache. Data larger than this does not stay in cache between
// two passes over it.
std::size_t largest_cache_bytes() noexcept;

}  // namespace antdt
