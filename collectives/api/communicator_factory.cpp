// The communicator factory (collectives/api/communicator_factory.hpp): from a
// UniqueId or the environment to a rank's Communicator over its transport.
#include "collectives/api/communicator_factory.hpp"

#include "collectives/api/make_communicator.hpp"
#include "collectives/communicator.hpp"
#include "core/bootstrap.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/inject.hpp"
#include "core/log.hpp"
#include "core/net.hpp"
#include "core/node_identity.hpp"
#include "core/topology.hpp"
#include "transport/fault/fault_transport.hpp"
#include "transport/inproc/inproc_transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

#include <array>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <map>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace antdt {

namespace detail {
Communicator make_communicator(std::unique_ptr<transport::Transport> transport, std::uint32_t comm_id,
                               const Config& cfg, control::Endpoints control,
                               std::span<const std::uint64_t> rank_nodes, bool tcp_links) {
  auto impl = std::make_unique<CommImpl>(std::move(transport), comm_id, cfg, std::move(control));
  if (!rank_nodes.empty()) impl->set_rank_nodes(rank_nodes);
  impl->set_tcp_links(tcp_links);
  return Communicator(std::move(impl));
}
}  // namespace detail

namespace api {
namespace {

// What the algorithm selection needs to know about where the ranks sit.
struct RankLayout {
  std::vector<std::uint64_t> nodes;  // every rank's node identity
  bool tcp_links = false;            // some rank reaches a peer over TCP
};

// Every rank's node (ANTDT_NODE_ID, else host name and boot id), for the
// topology-aware collectives, and whether its transport reaches a peer over
// TCP: one bootstrap allgather of 16 bytes per rank.
RankLayout exchange_rank_layout(Bootstrap& boot, const Config& cfg, const transport::Transport& transport) {
  const std::array<std::uint64_t, 2> mine{topology_node(cfg.node_id), transport.tcp_links() ? 1u : 0u};
  const auto all = boot.allgather(std::as_bytes(std::span(mine)));
  RankLayout layout;
  layout.nodes.resize(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    std::array<std::uint64_t, 2> theirs{};
    if (all[r].size() != sizeof theirs)
      raise<BootstrapError>("rank ", r, " sent a node identity of ", all[r].size(), " bytes instead of ",
                            sizeof theirs);
    std::memcpy(theirs.data(), all[r].data(), sizeof theirs);
    layout.nodes[r] = theirs[0];
    layout.tcp_links = layout.tcp_links || theirs[1] != 0;
  }
  return layout;
}

std::uint32_t comm_id_from(const UniqueId& id) {
  // Bytes of the random job secret: the same on every rank, different per job.
  auto root = decode_unique_id(id);
  std::uint32_t v;
  std::memcpy(&v, root.secret.data(), sizeof v);
  return v;
}

void log_startup(const Config& cfg, int rank, int size, std::string_view how) {
  if (!log::enabled(LogLevel::info)) return;
  ANTDT_INFO("antdt ", ANTDT_VERSION_MAJOR, ".", ANTDT_VERSION_MINOR, ".", ANTDT_VERSION_PATCH, ": rank ", rank,
             " of ", size, " via ", how);
  for (const auto& line : cfg.describe()) ANTDT_INFO("  ", line);
}

// Ranks as threads joined through the public create(): one group per id.
struct InprocGroup {
  std::shared_ptr<transport::InprocFabric> fabric;
  std::mutex mu;
  std::vector<control::Endpoints> control;
  control::Endpoints take_control(int rank) {
    std::lock_guard lock(mu);
    return std::move(control.at(static_cast<std::size_t>(rank)));
  }
};
std::mutex inproc_registry_mu;
std::map<std::array<std::byte, ANTDT_UNIQUE_ID_BYTES>, std::weak_ptr<InprocGroup>> inproc_registry;

std::shared_ptr<InprocGroup> inproc_group_for(const UniqueId& id, int size) {
  std::lock_guard lock(inproc_registry_mu);
  auto& weak = inproc_registry[id.bytes];
  if (auto group = weak.lock()) return group;
  auto group = std::make_shared<InprocGroup>();
  group->fabric = std::make_shared<transport::InprocFabric>(size);
  group->control = control::make_inproc_endpoints(size);
  weak = group;
  return group;
}

// Binds this process to its share of the node's cores (ANTDT_BIND) and its
// memory to their NUMA node, and reports the topology at INFO. Done before the
// transport starts so that UCX's threads and buffers inherit the placement.
void place_rank(const Config& cfg, int local_rank, int local_size) {
  const bool report = log::enabled(LogLevel::info);
  const bool can_bind = cfg.bind != BindMode::none && local_rank >= 0 && local_size > 0;
  if (!report && !can_bind) return;
  Topology topo = Topology::detect();
  if (report)
    for (const auto& line : topo.describe()) ANTDT_INFO("topology: ", line);
  if (!can_bind) return;
  auto pus = topo.bind_rank(local_rank, local_size, cfg.bind);
  if (pus.empty()) return;
  std::string list;
  for (unsigned pu : pus) list += cat(list.empty() ? "" : ",", pu);
  ANTDT_INFO("local rank ", local_rank, " of ", local_size, " bound to PUs ", list);
  topo.bind_memory_to_local_numa();
}

// Rank 0's own link to its arbiter is a socketpair; the other ranks' links are
// the bootstrap's connections (already authenticated).
control::Endpoints control_from(std::vector<net::Fd> links, int rank) {
  control::Endpoints ep;
  if (rank != 0) {
    ep.client = std::move(links.at(0));
    return ep;
  }
  auto [server_end, client_end] = control::socket_pair();
  links.at(0) = std::move(server_end);
  ep.server = std::move(links);
  ep.client = std::move(client_end);
  return ep;
}

Communicator create_with(const UniqueId& id, int rank, int size, const Config& cfg, std::string_view how,
                         int local_rank = -1, int local_size = -1, std::function<void()> still_wanted = {}) {
  ANTDT_CHECK_ARG(size >= 1, "communicator size must be >= 1, got ", size);
  ANTDT_CHECK_ARG(rank >= 0 && rank < size, "rank ", rank, " is out of range [0, ", size, ")");
  log::set_process_rank(rank);
  log_startup(cfg, rank, size, how);
  if (cfg.transport != "inproc")
    place_rank(cfg, cfg.local_rank.value_or(local_rank), cfg.local_size.value_or(local_size));
  // ANTDT_INJECT's transport effects for this rank (delay, bandwidth cap) wrap the transport.
  auto with_faults = [&](std::unique_ptr<transport::Transport> t) {
    auto injector = Injector::from_config(cfg, rank, size);
    return transport::has_transport_faults(injector) ? transport::make_fault_transport(std::move(t), injector)
                                                     : std::move(t);
  };
  if (cfg.transport == "inproc") {
    auto group = inproc_group_for(id, size);
    auto t = with_faults(transport::make_inproc_transport(group->fabric, rank, cfg));
    auto control = group->take_control(rank);
    control.unique_id.assign(id.bytes.begin(), id.bytes.end());
    return detail::make_communicator(std::move(t), comm_id_from(id), cfg, std::move(control));
  }
  auto boot = make_tcp_bootstrap(id, rank, size, cfg.timeout, std::move(still_wanted));
  auto t = with_faults(transport::make_ucx_transport(*boot, cfg));
  const RankLayout layout = exchange_rank_layout(*boot, cfg, *t);
  auto control = control_from(boot->take_links(), rank);
  control.unique_id.assign(id.bytes.begin(), id.bytes.end());
  return detail::make_communicator(std::move(t), comm_id_from(id), cfg, std::move(control), layout.nodes,
                                   layout.tcp_links);
}

Communicator single_rank(const Config& cfg) {
  log::set_process_rank(0);
  log_startup(cfg, 0, 1, "no launcher environment (single rank)");
  Config single = cfg;
  auto t = transport::make_inproc_transport(std::make_shared<transport::InprocFabric>(1), 0, single);
  return detail::make_communicator(std::move(t), 1, single, std::move(control::make_inproc_endpoints(1).at(0)));
}

// mpirun and friends start every rank with the same job id but no shared
// secret: rank 0 makes the unique id and publishes it in a private file that
// the other ranks of the job (same user, same node or shared directory) read.
std::string id_file_path(const Config& cfg, const LauncherRanks& job) {
  std::string safe;
  for (char c : job.job_id) safe.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return cat(cfg.bootstrap_dir, "/antdt-", ::getuid(), "-", safe, ".id");
}

void publish_id(const std::string& path, const UniqueId& id) {
  std::string tmp = cat(path, ".", ::getpid(), ".tmp");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) raise<BootstrapError>("cannot write the bootstrap id file ", tmp, ": ", std::strerror(errno),
                                    " (set ANTDT_BOOTSTRAP_DIR to a writable directory)");
  std::string text = id.to_string();
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    raise<BootstrapError>("cannot publish the bootstrap id file ", path, ": ", std::strerror(errno));
  }
}

UniqueId read_published_id(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    std::ifstream in(path);
    std::string text;
    if (in && std::getline(in, text) && text.size() == 2 * ANTDT_UNIQUE_ID_BYTES) return UniqueId::from_string(text);
    if (std::chrono::steady_clock::now() >= deadline)
      raise<TimeoutError>("rank 0 did not publish the bootstrap id in ", path, " within ", timeout.count(),
                          " ms (ANTDT_TIMEOUT_MS); is rank 0 running, and is ANTDT_BOOTSTRAP_DIR shared by all ranks?");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace

Communicator communicator_from_unique_id(const UniqueId& id, int rank, int size, const CommOptions& opts,
                                        std::function<void()> still_wanted) {
  Config cfg = config();
  ANTDT_CHECK_ARG(opts.transport == "ucx" || opts.transport == "inproc", "unknown transport '", opts.transport,
                  "' (expected ucx or inproc)");
  cfg.transport = opts.transport;
  return create_with(id, rank, size, cfg, "unique id", -1, -1, std::move(still_wanted));
}

Communicator communicator_from_env() {
  const Config& cfg = config();
  if (cfg.rank.has_value() != cfg.world_size.has_value())
    raise<ConfigError>("ANTDT_RANK and ANTDT_WORLD_SIZE must be set together");
  if (cfg.rank) {
    if (*cfg.world_size == 1) return single_rank(cfg);
    if (cfg.root.empty() || cfg.secret.empty())
      raise<ConfigError>("ANTDT_RANK/ANTDT_WORLD_SIZE need ANTDT_ROOT=host:port (where rank 0 listens) and "
                         "ANTDT_SECRET=<32 hex digits> (the same on every rank)");
    auto ep = net::parse_endpoint(cfg.root);
    RootAddress root{ep.host, ep.port, cfg.secret_bytes("ANTDT_ROOT")};
    return create_with(encode_unique_id(root), *cfg.rank, *cfg.world_size, cfg, "ANTDT_RANK/ANTDT_ROOT");
  }
  auto job = launcher_ranks([](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  });
  if (!job) return single_rank(cfg);
  if (job->size < 1)
    raise<ConfigError>(job->source, " gives this process rank ", job->rank,
                       " but not the job size; set ANTDT_WORLD_SIZE (with ANTDT_RANK, ANTDT_ROOT and ANTDT_SECRET)");
  if (job->size == 1) return single_rank(cfg);
  if (job->job_id.empty())
    raise<ConfigError>(job->source, " gives no job id to name the bootstrap file; set ANTDT_RANK, ANTDT_WORLD_SIZE, "
                       "ANTDT_ROOT and ANTDT_SECRET instead");
  const std::string path = id_file_path(cfg, *job);
  if (job->rank == 0) {
    UniqueId id = UniqueId::create();
    publish_id(path, id);
    try {
      auto comm = create_with(id, 0, job->size, cfg, job->source, job->local_rank, job->local_size);
      ::unlink(path.c_str());
      return comm;
    } catch (...) {
      ::unlink(path.c_str());
      throw;
    }
  }
  UniqueId id = read_published_id(path, cfg.timeout);
  return create_with(id, job->rank, job->size, cfg, job->source, job->local_rank, job->local_size);
}

}  // namespace api
}  // namespace antdt
