// A stand-in for the real libnccl.so, for testing passthrough mode without a
// GPU: it exports the NCCL API and appends one line per call, with its
// arguments, to $NCCL_STANDIN_LOG. Pointers are written as the order of their
// first appearance (p0, p1, ...), so two runs of one program compare equal
// whatever the address layout, while a pointer swapped for another does not.
// It does no work: GetUniqueId gives a fixed id, InitRank a fake handle.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>

namespace {
std::mutex mu;
std::map<const void*, int> pointer_ids;

std::string show(const void* p) {
  if (p == nullptr) return "null";
  auto [it, fresh] = pointer_ids.emplace(p, static_cast<int>(pointer_ids.size()));
  return "p" + std::to_string(it->second);
}
template <class T>
std::string show(T v) {
  if constexpr (std::is_pointer_v<T>) return show(static_cast<const void*>(v));
  else if constexpr (std::is_same_v<T, ncclUniqueId>) {
    char hex[17];
    for (int i = 0; i < 8; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(v.internal[i]));
    return std::string("id:") + hex;
  } else return std::to_string(static_cast<long long>(v));
}

template <class... A>
void record(const char* name, A... a) {
  std::lock_guard lock(mu);
  std::string line = name;
  ((line += " " + show(a)), ...);
  const char* path = std::getenv("NCCL_STANDIN_LOG");
  if (FILE* f = path != nullptr ? std::fopen(path, "a") : nullptr) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

struct ncclComm* fake_comm() {
  static char handles[64];
  static int next = 0;
  return reinterpret_cast<struct ncclComm*>(&handles[next++ % 64]);
}

template <class R>
R result_of() {
  if constexpr (std::is_same_v<R, ncclResult_t>) return ncclSuccess;
  else if constexpr (std::is_pointer_v<R>) return "nccl stand-in";
  else return;
}

// Outputs the caller reads, by type: handles, ids, counts, async state.
char scratch_buffer[4096];
template <class T>
void output(T v) {
  if constexpr (std::is_same_v<T, ncclComm_t*>) { if (v) *v = fake_comm(); }
  else if constexpr (std::is_same_v<T, ncclUniqueId*>) { if (v) std::memset(v, 0x5a, sizeof *v); }
  else if constexpr (std::is_same_v<T, int*>) { if (v) *v = 1; }
  else if constexpr (std::is_same_v<T, ncclResult_t*>) { if (v) *v = ncclSuccess; }
  else if constexpr (std::is_same_v<T, void**>) { if (v) *v = scratch_buffer; }
  else if constexpr (std::is_same_v<T, ncclRedOp_t*>) { if (v) *v = static_cast<ncclRedOp_t>(ncclNumOps); }
  else if constexpr (std::is_same_v<T, ncclWindow_t*>) { if (v) *v = nullptr; }
}
template <class... A>
void outputs(A... a) { (output(a), ...); }
// ncclCommInitAll's handle array has ndev entries.
void outputs(ncclComm_t* comms, int ndev, const int*) {
  for (int i = 0; i < ndev; ++i) comms[i] = fake_comm();
}
}  // namespace

#define NCCL_COMMA_ARGS(...) __VA_OPT__(, ) __VA_ARGS__
#define NCCL_FN(ret, name, params, args)                                       \
  extern "C" __attribute__((visibility("default"))) ret nccl##name params {    \
    record("nccl" #name NCCL_COMMA_ARGS args);                                 \
    outputs args;                                                              \
    return result_of<ret>();                                                   \
  }
#include "collectives/api/nccl/nccl_functions.def"
#undef NCCL_FN
