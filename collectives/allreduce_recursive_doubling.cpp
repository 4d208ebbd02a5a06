// Recursive-doubling AllReduce, for small messages: log2(p) rounds of
// whole-vector exchanges instead of the ring's 2(n-1) steps.
//
// p = the largest power of two <= n, extra = n - p. Fold: among the first
// 2*extra ranks each even rank sends its vector to the odd rank above it and
// sits out; the odd rank reduces and takes part as rank r/2. Ranks from
// 2*extra on take part as r - extra. In round k every taking-part rank v
// exchanges its whole vector with v ^ 2^k and reduces. Last, each odd rank of
// the fold sends the result back to its even partner.
//
// Each pair reduces (lower rank's vector) ⊕ (higher rank's vector), so both
// partners compute the same bits, and every rank ends with the same result.
//
// Cost: (log2 p + 2·[n≠p]) α + (log2 p + 2·[n≠p]) m β + (log2 p + [n≠p]) m γ.
#include "collectives/algorithms.hpp"
#include "collectives/power_of_two_fold.hpp"

#include "core/dtype.hpp"

#include <cstring>

namespace antdt::coll {

void allreduce_recursive_doubling(Call& call, const std::byte* send, std::byte* recv, std::size_t count,
                                  DataType dtype, ReduceOp op) {
  const int n = call.size();
  const int r = call.rank();
  const std::size_t bytes = count * dtype_size(dtype);
  if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
  const std::span<std::byte> acc(recv, bytes);
  const std::span<std::byte> incoming = call.scratch(bytes);

  const PowerOfTwoFold fold(n);
  std::size_t index = 0;

  if (fold.sit_out(call, index, acc)) return;
  fold.take_in(call, index, acc, incoming, dtype, op);

  const int v = fold.virtual_rank(r);
  for (int mask = 1; mask < fold.p; mask <<= 1) {
    const int partner_v = v ^ mask;
    const int partner = fold.real_rank(partner_v);
    const std::size_t q = call.recv(index++, partner, incoming);
    const std::size_t s = call.send(index++, partner, acc);
    call.wait(q);
    call.wait(s);  // acc is about to change
    if (partner_v < v)
      reduce_into(dtype, op, acc, incoming, acc);
    else
      reduce_into(dtype, op, acc, acc, incoming);
  }
  if (op == ReduceOp::avg) finish_avg(dtype, acc, static_cast<std::size_t>(n));

  fold.give_back(call, index, acc);
}

}  // namespace antdt::coll
