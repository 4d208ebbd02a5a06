#include "rendezvous.hpp"

#include <c10/util/Exception.h>

#include <vector>

namespace antdt::pytorch {

Communicator join_through_store(c10d::Store& store, const std::string& key, int rank, int size,
                                std::chrono::milliseconds timeout) {
  UniqueId id;
  if (rank == 0) {
    id = UniqueId::create();
    const std::string hex = id.to_string();
    store.set(key, std::vector<uint8_t>(hex.begin(), hex.end()));
  } else {
    try {
      store.wait({key}, timeout);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "antdt: rank ", rank, " of ", size, " did not get rank 0's unique id (store key '", key,
                  "') within ", timeout.count(), " ms: ", e.what());
    }
    const std::vector<uint8_t> hex = store.get(key);
    id = UniqueId::from_string(std::string(hex.begin(), hex.end()));
  }
  return Communicator::create(id, rank, size);
}

}  // namespace antdt::pytorch
