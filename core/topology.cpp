// Machine topology through hwloc (CPUs, NUMA, PCI) and libibverbs (RDMA).
#include "core/topology.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <hwloc.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace antdt {

struct Topology::Hwloc {
  hwloc_topology_t topology = nullptr;
  Hwloc() = default;
  Hwloc(const Hwloc&) = delete;
  Hwloc& operator=(const Hwloc&) = delete;
  ~Hwloc() {
    if (topology) hwloc_topology_destroy(topology);
  }
};

namespace {

// Owns an hwloc bitmap (cpuset or nodeset).
class Bitmap {
 public:
  Bitmap() : bits_(hwloc_bitmap_alloc()) {
    if (!bits_) raise<InternalError>("hwloc_bitmap_alloc failed: out of memory");
  }
  explicit Bitmap(hwloc_const_bitmap_t copy) : bits_(hwloc_bitmap_dup(copy)) {
    if (!bits_) raise<InternalError>("hwloc_bitmap_dup failed: out of memory");
  }
  Bitmap(const Bitmap&) = delete;
  Bitmap& operator=(const Bitmap&) = delete;
  ~Bitmap() { hwloc_bitmap_free(bits_); }
  hwloc_bitmap_t get() const noexcept { return bits_; }

  std::vector<unsigned> members() const {
    std::vector<unsigned> out;
    for (int i = hwloc_bitmap_first(bits_); i >= 0; i = hwloc_bitmap_next(bits_, i)) {
      out.push_back(static_cast<unsigned>(i));
    }
    return out;
  }

 private:
  hwloc_bitmap_t bits_;
};

// The PUs of `cpuset` that this process may use.
std::vector<unsigned> allowed_pus(hwloc_topology_t topo, hwloc_const_cpuset_t cpuset) {
  if (!cpuset) return {};
  Bitmap result(cpuset);
  hwloc_bitmap_and(result.get(), result.get(), hwloc_topology_get_allowed_cpuset(topo));
  return result.members();
}

std::string pci_bus_id(const hwloc_obj_t obj) {
  const auto& pci = obj->attr->pcidev;
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%01x", static_cast<unsigned>(pci.domain),
                static_cast<unsigned>(pci.bus), static_cast<unsigned>(pci.dev), static_cast<unsigned>(pci.func));
  return text;
}

std::string pci_name(const hwloc_obj_t obj) {
  if (obj->name && *obj->name) return obj->name;
  const unsigned vendor = obj->attr->pcidev.vendor_id;
  const char* vendor_name = vendor == 0x10de   ? "NVIDIA "
                            : vendor == 0x15b3 ? "Mellanox "
                            : vendor == 0x8086 ? "Intel "
                            : vendor == 0x1002 ? "AMD "
                            : vendor == 0x14e4 ? "Broadcom "
                            : vendor == 0x1d0f ? "Amazon "
                            : vendor == 0x1af4 ? "virtio "
                                               : "";
  char text[64];
  std::snprintf(text, sizeof text, "%spci %04x:%04x", vendor_name, vendor,
                static_cast<unsigned>(obj->attr->pcidev.device_id));
  return text;
}

// The NUMA node closest to an I/O object, when its locality is one node.
int io_numa_node(hwloc_topology_t topo, hwloc_obj_t obj) {
  const hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (!ancestor || !ancestor->nodeset || hwloc_bitmap_weight(ancestor->nodeset) != 1) return -1;
  return hwloc_bitmap_first(ancestor->nodeset);
}

void collect_os_devices(hwloc_obj_t pci, std::vector<std::string>& names) {
  for (hwloc_obj_t child = pci->io_first_child; child; child = child->next_sibling) {
    if (child->type == HWLOC_OBJ_OS_DEVICE && child->name) names.emplace_back(child->name);
  }
}

std::vector<RdmaDevice> list_rdma_devices(std::string& note) {
  int count = 0;
  errno = 0;
  const std::unique_ptr<ibv_device*, decltype(&ibv_free_device_list)> list(ibv_get_device_list(&count),
                                                                           &ibv_free_device_list);
  if (!list) {
    note = cat("libibverbs lists no devices (", std::strerror(errno != 0 ? errno : ENODEV), ")");
    return {};
  }
  std::vector<RdmaDevice> devices;
  for (int i = 0; i < count; ++i) {
    RdmaDevice device;
    const char* name = ibv_get_device_name(list.get()[i]);
    device.name = name ? name : cat("device", i);
    const std::unique_ptr<ibv_context, decltype(&ibv_close_device)> context(ibv_open_device(list.get()[i]),
                                                                            &ibv_close_device);
    ibv_device_attr attributes{};
    if (!context) {
      device.error = cat("ibv_open_device failed: ", std::strerror(errno));
    } else if (const int rc = ibv_query_device(context.get(), &attributes); rc != 0) {
      device.error = cat("ibv_query_device failed: ", std::strerror(rc));
    } else {
      for (unsigned port = 1; port <= attributes.phys_port_cnt; ++port) {
        ibv_port_attr port_attributes{};
        RdmaPort p;
        p.number = port;
        if (ibv_query_port(context.get(), static_cast<std::uint8_t>(port), &port_attributes) != 0) {
          p.state = "unknown (ibv_query_port failed)";
          p.link_layer = "unspecified";
        } else {
          p.state = ibv_port_state_str(port_attributes.state);
          p.link_layer = port_attributes.link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand"
                         : port_attributes.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet"
                                                                                 : "unspecified";
        }
        device.ports.push_back(std::move(p));
      }
    }
    devices.push_back(std::move(device));
  }
  if (devices.empty()) note = "libibverbs lists no devices";
  return devices;
}

std::string format_bytes(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// Sets the calling thread's CPU binding; logs instead of throwing.
bool set_thread_binding(hwloc_topology_t topo, const std::vector<unsigned>& pus) {
  Bitmap set;
  for (unsigned pu : pus) hwloc_bitmap_set(set.get(), pu);
  if (hwloc_set_cpubind(topo, set.get(), HWLOC_CPUBIND_THREAD) != 0) {
    ANTDT_WARN("could not bind this thread to PUs ", format_cpu_list(pus), ": ", std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

std::string format_cpu_list(const std::vector<unsigned>& cpus) {
  std::vector<unsigned> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) out += cat("-", sorted[j]);
    i = j + 1;
  }
  return out;
}

std::size_t largest_cache_bytes() noexcept {
  static const std::size_t bytes = [] {
    hwloc_topology_t topo = nullptr;
    if (hwloc_topology_init(&topo) != 0) return std::size_t{0};
    std::size_t largest = 0;
    // CPUs and caches only: no I/O devices to scan (nor the leaking "pci" plugin, as in detect()).
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
    if (hwloc_topology_load(topo) == 0) {
      for (hwloc_obj_type_t type : {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L4CACHE,
                                    HWLOC_OBJ_L5CACHE}) {
        const hwloc_obj_t cache = hwloc_get_obj_by_type(topo, type, 0);
        if (cache && cache->attr) largest = std::max(largest, static_cast<std::size_t>(cache->attr->cache.size));
      }
    }
    hwloc_topology_destroy(topo);
    return largest;
  }();
  return bytes;
}

Topology Topology::detect() {
  Topology t;
  t.hwloc_ = std::make_shared<Hwloc>();
  if (hwloc_topology_init(&t.hwloc_->topology) != 0) {
    t.hwloc_->topology = nullptr;
    raise<InternalError>("hwloc_topology_init failed: ", std::strerror(errno));
  }
  hwloc_topology_t topo = t.hwloc_->topology;
  // PCI devices and their OS devices (GPUs, NICs), skipping bridges and the like.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // The Linux backend reads PCI devices from sysfs; the libpciaccess-based
  // "pci" plugin would only add model names, and it leaks memory on every load
  // (which LeakSanitizer reports in every test that looks at the topology).
  hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  if (hwloc_topology_load(topo) != 0) {
    raise<InternalError>("hwloc could not load the machine topology: ", std::strerror(errno));
  }

  const int numa_count = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < numa_count; ++i) {
    const hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    NumaNode n;
    n.os_index = node->os_index;
    n.pus = allowed_pus(topo, node->cpuset);
    n.local_memory_bytes = node->attr ? node->attr->numanode.local_memory : 0;
    t.numa_nodes_.push_back(std::move(n));
  }

  const auto numa_of = [&](const std::vector<unsigned>& pus) {
    for (const NumaNode& n : t.numa_nodes_) {
      if (!pus.empty() && std::includes(n.pus.begin(), n.pus.end(), pus.begin(), pus.end())) {
        return static_cast<int>(n.os_index);
      }
    }
    return -1;
  };
  const int core_count = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < core_count; ++i) {
    const hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
    CpuCore c;
    c.pus = allowed_pus(topo, core->cpuset);
    if (c.pus.empty()) continue;
    c.numa_node = numa_of(c.pus);
    t.cores_.push_back(std::move(c));
  }
  if (t.cores_.empty()) {
    // No core information (some virtual machines): every PU counts as a core.
    for (unsigned pu : allowed_pus(topo, hwloc_topology_get_allowed_cpuset(topo))) {
      CpuCore c;
      c.pus = {pu};
      c.numa_node = numa_of(c.pus);
      t.cores_.push_back(std::move(c));
    }
  }

  for (hwloc_obj_t pci = hwloc_get_next_pcidev(topo, nullptr); pci; pci = hwloc_get_next_pcidev(topo, pci)) {
    const unsigned class_id = pci->attr->pcidev.class_id;
    const unsigned base_class = class_id >> 8;
    PciDevice d;
    if (base_class == 0x03) {  // display controller (VGA, 3D)
      d.kind = PciDevice::Kind::gpu;
    } else if (base_class == 0x02 || class_id == 0x0c06) {  // network controller, InfiniBand
      d.kind = PciDevice::Kind::nic;
    } else {
      continue;
    }
    d.bus_id = pci_bus_id(pci);
    d.name = pci_name(pci);
    collect_os_devices(pci, d.os_devices);
    d.numa_node = io_numa_node(topo, pci);
    (d.kind == PciDevice::Kind::gpu ? t.gpus_ : t.nics_).push_back(std::move(d));
  }

  t.rdma_devices_ = list_rdma_devices(t.rdma_note_);
  return t;
}

std::size_t Topology::pu_count() const noexcept {
  std::size_t n = 0;
  for (const CpuCore& c : cores_) n += c.pus.size();
  return n;
}

std::vector<std::string> Topology::describe() const {
  std::vector<std::string> lines;
  std::vector<unsigned> all_pus;
  for (const CpuCore& c : cores_) all_pus.insert(all_pus.end(), c.pus.begin(), c.pus.end());
  lines.push_back(cat("topology: ", cores_.size(), " cores, ", pu_count(), " PUs (", format_cpu_list(all_pus), "), ",
                      numa_nodes_.size(), " NUMA node(s)"));
  for (const NumaNode& n : numa_nodes_) {
    std::size_t node_cores = 0;
    for (const CpuCore& c : cores_) node_cores += c.numa_node == static_cast<int>(n.os_index) ? 1 : 0;
    lines.push_back(cat("  NUMA node ", n.os_index, ": ", node_cores, " cores, PUs ",
                        n.pus.empty() ? std::string("none") : format_cpu_list(n.pus), ", ",
                        format_bytes(n.local_memory_bytes)));
  }
  const auto describe_pci = [&lines](const char* what, const std::vector<PciDevice>& devices) {
    if (devices.empty()) {
      lines.push_back(cat("  ", what, ": none reported by hwloc"));
      return;
    }
    for (const PciDevice& d : devices) {
      std::string os;
      for (const std::string& name : d.os_devices) os += (os.empty() ? "" : ", ") + name;
      lines.push_back(cat("  ", what, " ", d.bus_id, ": ", d.name, os.empty() ? "" : " (", os, os.empty() ? "" : ")",
                          d.numa_node >= 0 ? cat(", NUMA node ", d.numa_node) : std::string()));
    }
  };
  describe_pci("GPU", gpus_);
  describe_pci("NIC", nics_);
  if (rdma_devices_.empty()) lines.push_back(cat("  RDMA: none (", rdma_note_.empty() ? "no devices" : rdma_note_, ")"));
  for (const RdmaDevice& d : rdma_devices_) {
    if (!d.error.empty()) {
      lines.push_back(cat("  RDMA ", d.name, ": ", d.error));
      continue;
    }
    for (const RdmaPort& p : d.ports) {
      lines.push_back(cat("  RDMA ", d.name, " port ", p.number, ": ", p.state, ", ", p.link_layer));
    }
    if (d.ports.empty()) lines.push_back(cat("  RDMA ", d.name, ": no ports"));
  }
  return lines;
}

std::vector<unsigned> Topology::bind_rank(int local_rank, int local_size, BindMode mode) const {
  if (mode == BindMode::none) return {};
  if (mode == BindMode::automatic && local_size <= 0) return {};
  ANTDT_CHECK_ARG(local_size > 0 && local_rank >= 0 && local_rank < local_size, "cannot bind local rank ", local_rank,
                  " of ", local_size, ": expected 0 <= local rank < local size");
  hwloc_topology_t topo = hwloc_->topology;

  if (mode == BindMode::automatic) {
    Bitmap current;
    if (hwloc_get_cpubind(topo, current.get(), HWLOC_CPUBIND_THREAD) != 0) {
      ANTDT_INFO("not binding: the current CPU binding is unknown (", std::strerror(errno), ")");
      return {};
    }
    if (!hwloc_bitmap_isincluded(hwloc_topology_get_allowed_cpuset(topo), current.get())) {
      ANTDT_INFO("not binding: already bound to PUs ", format_cpu_list(current.members()),
                 " (by the launcher or the application)");
      return {};
    }
  }

  const auto rank = static_cast<std::size_t>(local_rank);
  const auto ranks = static_cast<std::size_t>(local_size);
  std::vector<unsigned> pus;
  if (mode == BindMode::numa) {
    std::vector<const NumaNode*> nodes;
    for (const NumaNode& n : numa_nodes_) {
      if (!n.pus.empty()) nodes.push_back(&n);
    }
    if (nodes.empty()) {
      ANTDT_WARN("not binding to a NUMA node: hwloc reports no NUMA node with CPUs");
      return {};
    }
    pus = nodes[rank * nodes.size() / ranks]->pus;
  } else {
    const std::size_t count = cores_.size();
    if (count == 0) {
      ANTDT_WARN("not binding to cores: hwloc reports no usable cores");
      return {};
    }
    // Even split of the cores when they suffice, else one core each, round-robin.
    const std::size_t first = ranks <= count ? rank * count / ranks : rank % count;
    const std::size_t last = ranks <= count ? (rank + 1) * count / ranks : first + 1;
    for (std::size_t c = first; c < last; ++c) pus.insert(pus.end(), cores_[c].pus.begin(), cores_[c].pus.end());
  }
  std::sort(pus.begin(), pus.end());
  if (!set_thread_binding(topo, pus)) return {};
  ANTDT_INFO("bound local rank ", local_rank, "/", local_size, " to PUs ", format_cpu_list(pus), " (",
             mode == BindMode::numa ? "numa" : "cores", ")");
  return pus;
}

bool Topology::bind_memory_to_local_numa() const {
  hwloc_topology_t topo = hwloc_->topology;
  Bitmap cpus;
  if (hwloc_get_cpubind(topo, cpus.get(), HWLOC_CPUBIND_THREAD) != 0) {
    ANTDT_INFO("memory policy unchanged: the current CPU binding is unknown (", std::strerror(errno), ")");
    return false;
  }
  Bitmap nodes;
  hwloc_cpuset_to_nodeset(topo, cpus.get(), nodes.get());
  const int weight = hwloc_bitmap_weight(nodes.get());
  if (weight != 1) {
    ANTDT_INFO("memory policy unchanged: this thread's PUs ", format_cpu_list(cpus.members()), " span ",
               weight < 0 ? std::string("all") : std::to_string(weight), " NUMA nodes");
    return false;
  }
  if (hwloc_set_membind(topo, nodes.get(), HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0) {
    ANTDT_INFO("memory policy unchanged: hwloc_set_membind to NUMA node ", hwloc_bitmap_first(nodes.get()),
               " failed: ", std::strerror(errno));
    return false;
  }
  ANTDT_INFO("memory of this thread now prefers NUMA node ", hwloc_bitmap_first(nodes.get()));
  return true;
}

}  // namespace antdt
