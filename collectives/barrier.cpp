// Dissemination barrier: in round k every rank signals rank + 2^k and waits for
// rank - 2^k. After ceil(log2 n) rounds every rank has (transitively) heard from
// every other, so nobody leaves before everybody arrived.
#include "collectives/algorithms.hpp"

namespace antdt::coll {

void barrier_dissemination(Call& call) {
  const int n = call.size();
  const int r = call.rank();
  std::size_t index = 0;
  for (int distance = 1; distance < n; distance <<= 1) {
    std::size_t s = call.send(index++, (r + distance) % n, {});
    std::size_t q = call.recv(index++, (r - distance + n) % n, {});
    call.wait(q);
    call.wait(s);
  }
}

}  // namespace antdt::coll
