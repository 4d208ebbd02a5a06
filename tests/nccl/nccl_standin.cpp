// A stand-in for the real libnccl.so, for testing passthrough mode without a
// GPU: it exports the NCCL API and appends one line per call, with its
// arguments, to $NCCL_STANDIN_LOG. Pointers are written as the order of their
// first appearance (p0, p1, ...), so two runs of one program compare equal
// whatever the address layout, while a pointer swapped for another does not.
// It does no work: GetUniqueId gives a fixed id, InitRank a fake handle --
// except ncclAllGather when $NCCL_STANDIN_GATHER_DIR is set: then the ranks of
// one mpirun job really gather, through files in that directory (each call
// writes its part, then waits up to 30 s for every rank's), so the shim's
// cross-rank report can be tested without a GPU. CommCount and CommUserRank
// then answer the nranks and rank given to InitRank.
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>
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
void outputs(const char*, A... a) { (output(a), ...); }

// InitRank's (nranks, rank) of each fake handle, and its AllGather calls so far.
struct Member {
  int nranks = 1, rank = 0;
  int gathers = 0;
};
std::map<ncclComm_t, Member> members;

void outputs(const char*, ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  *comm = fake_comm();
  members[*comm] = Member{nranks, rank, 0};
}
// The version of the nccl.h it was built against, as the real library answers.
void outputs(const char*, int* version) {
  if (version != nullptr) *version = NCCL_VERSION_CODE;
}
void outputs(const char* name, ncclComm_t comm, int* out) {
  if (out == nullptr) return;
  auto it = members.find(comm);
  if (std::strcmp(name, "ncclCommCount") == 0) *out = it != members.end() ? it->second.nranks : 1;
  else if (std::strcmp(name, "ncclCommUserRank") == 0) *out = it != members.end() ? it->second.rank : 0;
  else *out = 1;
}
std::size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
void outputs(const char*, const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
             cudaStream_t) {
  const char* dir = std::getenv("NCCL_STANDIN_GATHER_DIR");
  auto it = members.find(comm);
  if (dir == nullptr || it == members.end() || send == nullptr || recv == nullptr) return;
  Member& m = it->second;
  const std::size_t bytes = count * type_size(type);
  const std::string base = std::string(dir) + "/gather" + std::to_string(m.gathers++) + ".rank";
  const std::string mine = base + std::to_string(m.rank);
  std::ofstream(mine + ".tmp", std::ios::binary).write(static_cast<const char*>(send), static_cast<std::streamsize>(bytes));
  std::rename((mine + ".tmp").c_str(), mine.c_str());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int r = 0; r < m.nranks; ++r) {
    const std::string part = base + std::to_string(r);
    std::ifstream in;
    while (!(in = std::ifstream(part, std::ios::binary)) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (data.size() == bytes) std::memcpy(static_cast<char*>(recv) + r * bytes, data.data(), bytes);
  }
}
// ncclCommInitAll's handle array has ndev entries.
void outputs(const char*, ncclComm_t* comms, int ndev, const int*) {
  for (int i = 0; i < ndev; ++i) comms[i] = fake_comm();
}
}  // namespace

#define NCCL_COMMA_ARGS(...) __VA_OPT__(, ) __VA_ARGS__
#define NCCL_FN(ret, name, params, args)                                       \
  extern "C" __attribute__((visibility("default"))) ret nccl##name params {    \
    record("nccl" #name NCCL_COMMA_ARGS args);                                 \
    outputs("nccl" #name NCCL_COMMA_ARGS args);                                \
    return result_of<ret>();                                                   \
  }
#include "collectives/api/nccl/nccl_functions.def"
#undef NCCL_FN
