// The fold's messages (collectives/power_of_two_fold.hpp).
#include "collectives/power_of_two_fold.hpp"

namespace antdt::coll {

bool PowerOfTwoFold::sit_out(Call& call, std::size_t& index, std::span<std::byte> data) const {
  const int r = call.rank();
  if (!sits_out(r)) return false;
  call.wait(call.send(index++, r + 1, data));
  call.wait(call.recv(index++, r + 1, data));
  return true;
}

void PowerOfTwoFold::take_in(Call& call, std::size_t& index, std::span<std::byte> data,
                             std::span<std::byte> incoming, DataType dtype, ReduceOp op) const {
  const int r = call.rank();
  if (!takes_in(r)) return;
  const auto theirs = incoming.first(data.size());
  call.wait(call.recv(index++, r - 1, theirs));
  call.memory().reduce_into(dtype, op, data, theirs, data);
  call.memory().settle();
}

void PowerOfTwoFold::give_back(Call& call, std::size_t& index, std::span<const std::byte> data) const {
  const int r = call.rank();
  if (takes_in(r)) call.wait(call.send(index++, r - 1, data));
}

}  // namespace antdt::coll
