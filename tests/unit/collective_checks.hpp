// One checked call of a collective against the references (reference.hpp):
// every element, the send buffer untouched, nothing written past the end.
// Shared by the collective suite (every algorithm the table picks) and the
// hierarchical tests (the hierarchy forced): the same check on both paths.
#pragma once

#include "reference.hpp"

#include <antdt/comm.hpp>

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace antdt::test {

// AllReduce of `count` elements (in place: into the send buffer).
inline void check_allreduce(Communicator& comm, DataType t, ReduceOp op, std::size_t count, bool in_place) {
  const std::size_t es = dtype_size(t);
  std::vector<std::byte> send(count * es), recv(count * es + 1, std::byte{0x5a});
  for (std::size_t i = 0; i < count; ++i) store(t, send.data(), i, input(t, op, comm.rank(), i));
  std::byte* out = in_place ? send.data() : recv.data();
  comm.allreduce(send.data(), out, count, t, op);
  const std::string what = where("allreduce", t, op, count, in_place);
  for (std::size_t i = 0; i < count; ++i) expect_element(what, i, load(t, out, i), expected(t, op, comm.size(), i), t, op);
  if (!in_place && recv[count * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past the end");
}

// ReduceScatter of `count` elements per rank; element j of block b is element
// b*count + j of the whole input.
inline void check_reduce_scatter(Communicator& comm, DataType t, ReduceOp op, std::size_t count, bool in_place) {
  const int n = comm.size();
  const auto un = static_cast<std::size_t>(n);
  const auto r = static_cast<std::size_t>(comm.rank());
  const std::size_t es = dtype_size(t);
  std::vector<std::byte> send(un * count * es + 1), recv(count * es + 1, std::byte{0x5a});
  for (std::size_t i = 0; i < un * count; ++i) store(t, send.data(), i, input(t, op, comm.rank(), i));
  const std::vector<std::byte> original = send;
  std::byte* out = in_place ? send.data() + r * count * es : recv.data();
  comm.reduce_scatter(send.data(), out, count, t, op);
  const std::string what = where("reduce_scatter", t, op, count, in_place);
  for (std::size_t j = 0; j < count; ++j)
    expect_element(what, j, load(t, out, j), expected(t, op, n, r * count + j), t, op);
  if (!in_place) {
    if (send != original) throw std::runtime_error(what + ": the send buffer changed");
    if (recv[count * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past the end");
  }
}

// AllGather of `count` elements per rank (in place: from the rank's own block of recv).
inline void check_allgather(Communicator& comm, DataType t, std::size_t count, bool in_place) {
  const auto un = static_cast<std::size_t>(comm.size());
  const auto r = static_cast<std::size_t>(comm.rank());
  const std::size_t es = dtype_size(t);
  std::vector<std::byte> send(count * es), recv(un * count * es + 1, std::byte{0x5a});
  for (std::size_t i = 0; i < count; ++i) store(t, send.data(), i, tag_value(t, r, 0, i));
  const std::byte* from = send.data();
  if (in_place) {
    if (count > 0) std::memcpy(recv.data() + r * count * es, send.data(), count * es);
    from = recv.data() + r * count * es;
  }
  comm.allgather(from, recv.data(), count, t);
  const std::string what = where("allgather", t, ReduceOp::sum, count, in_place);
  for (std::size_t b = 0; b < un; ++b)
    for (std::size_t i = 0; i < count; ++i)
      expect_element(cat(what, " block ", b), i, load(t, recv.data(), b * count + i), tag_value(t, b, 0, i), t,
                     ReduceOp::sum);
  if (recv[un * count * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past the end");
}

}  // namespace antdt::test
