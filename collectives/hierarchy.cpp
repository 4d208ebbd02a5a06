// The node hierarchy and its ring steps (collectives/hierarchy.hpp).
#include "collectives/hierarchy.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <algorithm>

namespace antdt::coll {
namespace hierarchy_detail {

std::size_t position_in(std::span<const int> ring, int rank) {
  const auto at = std::find(ring.begin(), ring.end(), rank);
  ANTDT_ASSERT(at != ring.end());
  return static_cast<std::size_t>(at - ring.begin());
}

}  // namespace hierarchy_detail

namespace {

// A span's chunks of at most `chunk` bytes, at least one (possibly empty).
void append_chunks(std::vector<std::span<std::byte>>& into, std::span<std::byte> piece, std::size_t chunk) {
  if (piece.empty()) {
    into.push_back(piece);
    return;
  }
  for (std::size_t at = 0; at < piece.size(); at += chunk) into.push_back(piece.subspan(at, std::min(chunk, piece.size() - at)));
}

}  // namespace

std::vector<int> Hierarchy::cross() const {
  std::vector<int> ring;
  ring.reserve(nodes.size());
  for (const auto& ranks : nodes) ring.push_back(ranks[position]);
  return ring;
}

Hierarchy hierarchy_of(const detail::CommImpl& comm, std::span<const int> members) {
  Hierarchy h;
  std::vector<int> node_ids;  // CommImpl's node number of each entry of h.nodes
  auto add = [&](int rank) {
    const int id = comm.node_of(rank);
    auto at = std::find(node_ids.begin(), node_ids.end(), id);
    if (at == node_ids.end()) {
      node_ids.push_back(id);
      h.nodes.emplace_back();
      at = node_ids.end() - 1;
    }
    h.nodes[static_cast<std::size_t>(at - node_ids.begin())].push_back(rank);
  };
  if (members.empty()) {
    for (int r = 0; r < comm.size(); ++r) add(r);
  } else {
    for (int r : members) add(r);
    // Rank order on every node whatever the order of the members.
    for (auto& ranks : h.nodes) std::sort(ranks.begin(), ranks.end());
  }
  h.uniform = std::all_of(h.nodes.begin(), h.nodes.end(),
                          [&](const std::vector<int>& ranks) { return ranks.size() == h.nodes.front().size(); });
  const int me = comm.rank();
  for (std::size_t j = 0; j < h.nodes.size(); ++j) {
    const auto at = std::find(h.nodes[j].begin(), h.nodes[j].end(), me);
    if (at == h.nodes[j].end()) continue;
    h.node = j;
    h.position = static_cast<std::size_t>(at - h.nodes[j].begin());
    return h;
  }
  raise<InternalError>("hierarchy_of: rank ", me, " is not among the call's members");
}

void agree_on_the_call(Call& call, std::span<const int> members) {
  const std::size_t m = members.empty() ? static_cast<std::size_t>(call.size()) : members.size();
  if (m < 2) return;
  const std::size_t i = members.empty() ? static_cast<std::size_t>(call.rank())
                                        : hierarchy_detail::position_in(members, call.rank());
  auto at = [&](std::size_t position) { return members.empty() ? static_cast<int>(position) : members[position]; };
  const std::size_t r = call.recv(0, at((i + m - 1) % m), {});
  const std::size_t w = call.send(1, at((i + 1) % m), {});
  call.wait(r);
  call.wait(w);
  call.set_index_base(call.next_free_index());
}

void ring_allgather_units(Call& call, std::span<const int> ring,
                          const std::vector<std::vector<std::span<std::byte>>>& units) {
  const std::size_t m = ring.size();
  if (m == 1) return;
  const std::size_t i = hierarchy_detail::position_in(ring, call.rank());
  const std::size_t chunk = std::max<std::size_t>(1, call.config().chunk_bytes);
  std::vector<std::vector<std::span<std::byte>>> chunks(m);
  for (std::size_t u = 0; u < m; ++u)
    for (const auto& piece : units[u]) append_chunks(chunks[u], piece, chunk);
  auto recv_unit = [&](std::size_t s) { return (i + 2 * m - s - 1) % m; };
  const int right = ring[(i + 1) % m], left = ring[(i + m - 1) % m];

  // Pool indexes: receives [0, total) in (step, chunk) order, then step 0's
  // sends, then the forward of receive t at total + first + t.
  std::size_t total = 0;
  for (std::size_t s = 0; s + 1 < m; ++s) total += chunks[recv_unit(s)].size();
  const std::size_t first = chunks[i].size();
  for (std::size_t c = 0; c < first; ++c) call.send(total + c, right, chunks[i][c]);

  std::size_t post_step = 0, post_chunk = 0, posted = 0, step = 0, chunk_at = 0;
  for (std::size_t done = 0; done < total; ++done) {
    for (; posted < total && posted < done + hierarchy_detail::kReceiveWindow; ++posted) {
      call.recv(posted, left, chunks[recv_unit(post_step)][post_chunk]);
      if (++post_chunk == chunks[recv_unit(post_step)].size()) {
        post_chunk = 0;
        ++post_step;
      }
    }
    call.wait(done);
    if (step + 2 < m) call.send(total + first + done, right, chunks[recv_unit(step)][chunk_at]);
    if (++chunk_at == chunks[recv_unit(step)].size()) {
      chunk_at = 0;
      ++step;
    }
  }
  call.wait_all();
}

void chain_broadcast(Call& call, std::span<const int> chain, std::span<std::byte> data) {
  const std::size_t m = chain.size();
  if (m < 2) return;
  const std::size_t v = hierarchy_detail::position_in(chain, call.rank());
  std::vector<std::span<std::byte>> pieces;
  append_chunks(pieces, data, std::max<std::size_t>(1, call.config().chunk_bytes));
  const std::size_t chunks = pieces.size();
  if (v == 0) {
    for (std::size_t c = 0; c < chunks; ++c) call.send(c, chain[1], pieces[c]);
    return;
  }
  // Receives [0, chunks) straight into data, forwards [chunks, 2 chunks).
  for (std::size_t c = 0; c < chunks; ++c) call.recv(c, chain[v - 1], pieces[c]);
  for (std::size_t c = 0; c < chunks; ++c) {
    call.wait(c);
    if (v + 1 < m) call.send(chunks + c, chain[v + 1], pieces[c]);
  }
  call.wait_all();
}

}  // namespace antdt::coll
