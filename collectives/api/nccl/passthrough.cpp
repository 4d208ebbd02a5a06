#include "passthrough.hpp"

#include "cuda_runtime_loader.hpp"
#include "passthrough_steps.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace antdt_nccl::passthrough {
namespace {

// Per function: calls, CPU time inside the forwarded call, and GPU time from the
// events of calls whose events have completed.
struct Stats {
  std::uint64_t calls = 0;
  double cpu_us = 0;
  std::uint64_t gpu_timed = 0;
  double gpu_us = 0;
};
struct PendingEvents {
  Fn fn;
  void* begin;
  void* end;
  ncclComm_t step_of = nullptr;  // an AllReduce that ends a Monitor step of this communicator
};

struct Accounting {
  std::mutex mu;
  std::array<Stats, kFnCount> stats{};
  std::vector<PendingEvents> pending;  // recorded, not yet known to be complete

  // Reads the events that completed (cudaEventQuery: never waits).
  void harvest(const CudaRuntime& cuda) {
    std::size_t kept = 0;
    for (PendingEvents& p : pending) {
      if (cuda.EventQuery(p.end) != 0) {
        pending[kept++] = p;
        continue;
      }
      float ms = 0;
      if (cuda.EventElapsedTime(&ms, p.begin, p.end) == 0) {
        Stats& s = stats[static_cast<std::size_t>(p.fn)];
        ++s.gpu_timed;
        s.gpu_us += ms * 1000.0;
      }
      if (p.step_of != nullptr) {
        gpu_step(p.step_of, p.begin, p.end, cuda);  // keeps the end event for the next step's compute
      } else {
        cuda.EventDestroy(p.begin);
        cuda.EventDestroy(p.end);
      }
    }
    pending.resize(kept);
  }

  ~Accounting() {
    const bool any = std::any_of(stats.begin(), stats.end(), [](const Stats& s) { return s.calls > 0; });
    if (!any || std::getenv("ANTDT_NCCL_QUIET") != nullptr) return;
    std::fprintf(stderr, "libantdt_nccl passthrough (%s): per forwarded function\n", library_name().c_str());
    for (std::size_t f = 0; f < kFnCount; ++f) {
      const Stats& s = stats[f];
      if (s.calls == 0) continue;
      std::fprintf(stderr, "  %-24s calls %8llu  cpu %10.1f us  gpu %s\n", fn_name(static_cast<Fn>(f)),
                   static_cast<unsigned long long>(s.calls), s.cpu_us,
                   s.gpu_timed == 0 ? "not timed (no CUDA device)"
                                    : (std::to_string(s.gpu_us) + " us over " + std::to_string(s.gpu_timed) + " calls").c_str());
    }
  }
  static std::string library_name() {
    const char* path = std::getenv("ANTDT_NCCL_LIBRARY");
    return path != nullptr ? path : "libnccl.so.2";
  }
};

Accounting& accounting() {
  static Accounting a;
  return a;
}

// Opens the real NCCL: never this shim itself (the next libnccl.so.2 could be us
// when the shim is installed under that name).
void* open_real() {
  Dl_info self{};
  dladdr(reinterpret_cast<void*>(&open_real), &self);
  auto is_self = [&](void* handle) {
    void* sym = dlsym(handle, "ncclGetVersion");
    Dl_info where{};
    return sym != nullptr && dladdr(sym, &where) != 0 && self.dli_fbase == where.dli_fbase;
  };
  if (const char* path = std::getenv("ANTDT_NCCL_LIBRARY")) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) std::fprintf(stderr, "libantdt_nccl: ANTDT_NCCL_LIBRARY=%s: %s\n", path, dlerror());
    return h != nullptr && !is_self(h) ? h : nullptr;
  }
  for (const char* name : {"libnccl.so.2", "libnccl.so"}) {
    void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr && !is_self(h)) return h;
  }
  std::fprintf(stderr, "libantdt_nccl: passthrough mode found no real libnccl.so.2 (set ANTDT_NCCL_LIBRARY)\n");
  return nullptr;
}

}  // namespace

const Table& real() {
  static const Table table = [] {
    Table t;
    void* h = open_real();
    if (h == nullptr) return t;
#define NCCL_FN(ret, name, params, args) t.name = reinterpret_cast<ret(*) params>(dlsym(h, "nccl" #name));
#include "nccl_functions.def"
#undef NCCL_FN
    return t;
  }();
  return table;
}

const char* fn_name(Fn f) noexcept {
  static constexpr const char* kNames[] = {
#define NCCL_FN(ret, name, params, args) "nccl" #name,
#include "nccl_functions.def"
#undef NCCL_FN
  };
  const auto i = static_cast<std::size_t>(f);
  return i < kFnCount ? kNames[i] : "(not an NCCL function)";
}

ncclResult_t missing(Fn fn) {
  std::fprintf(stderr, "libantdt_nccl passthrough: %s is not in the real NCCL library\n", fn_name(fn));
  return ncclInvalidUsage;
}

CallTiming begin_call(cudaStream_t stream, bool has_stream) {
  CallTiming t;
  t.stream = stream;
  const CudaRuntime& cuda = cuda_runtime();
  if (has_stream && cuda.has_device && cuda.EventCreate(&t.begin_event) == 0) {
    if (cuda.EventRecord(t.begin_event, stream) != 0) {
      cuda.EventDestroy(t.begin_event);
      t.begin_event = nullptr;
    }
  }
  t.start = std::chrono::steady_clock::now();
  return t;
}

void settle_events() {
  Accounting& a = accounting();
  const CudaRuntime& cuda = cuda_runtime();
  if (cuda.has_device) cuda.DeviceSynchronize();
  std::lock_guard lock(a.mu);
  a.harvest(cuda);
}

// ncclGroupStart .. ncclGroupEnd nesting of this thread: an AllReduce inside a
// group is part of a fused step, not a step of its own.
int& group_depth() {
  thread_local int depth = 0;
  return depth;
}

void end_call(Fn fn, const CallTiming& t, ncclComm_t comm) {
  const auto end_time = std::chrono::steady_clock::now();
  const double cpu_us = std::chrono::duration<double, std::micro>(end_time - t.start).count();
  if (fn == Fn::GroupStart) ++group_depth();
  if (fn == Fn::GroupEnd && group_depth() > 0) --group_depth();
  const bool step = comm != nullptr && group_depth() == 0 && fn == Fn::AllReduce;
  Accounting& a = accounting();
  const CudaRuntime& cuda = cuda_runtime();
  std::lock_guard lock(a.mu);
  Stats& s = a.stats[static_cast<std::size_t>(fn)];
  ++s.calls;
  s.cpu_us += cpu_us;
  if (t.begin_event != nullptr) {
    void* end = nullptr;
    if (cuda.EventCreate(&end) == 0 && cuda.EventRecord(end, t.stream) == 0)
      a.pending.push_back({fn, t.begin_event, end, step ? comm : nullptr});
    else
      cuda.EventDestroy(t.begin_event);
    a.harvest(cuda);
  } else if (step) {
    cpu_step(comm, t.start, end_time);
  }
}

}  // namespace antdt_nccl::passthrough
