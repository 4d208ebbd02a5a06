// NVTX ranges (for Nsight Systems) around collectives and steps, emitted when
// ANTDT_NVTX=1 in a build with CUDA; a no-op otherwise. Usable by code that
// is compiled without CUDA (no CUDA headers here).
#pragma once

namespace antdt::cuda {

// ANTDT_NVTX=1 and the library was built with CUDA. Reads the configuration
// each time (an atomic load), so tests may change it with reload_config();
// an invalid configuration counts as disabled.
bool nvtx_enabled() noexcept;

// Push/pop on the calling thread's range stack in the "antdt" domain. Prefer
// NvtxRange, which always pops what it pushed.
void nvtx_push(const char* name) noexcept;
void nvtx_pop() noexcept;

// A range from construction to destruction, on the constructing thread.
// `name` is copied by NVTX at push time.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) noexcept : active_(nvtx_enabled()) {
    if (active_) nvtx_push(name);
  }
  ~NvtxRange() {
    if (active_) nvtx_pop();
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

  bool active() const noexcept { return active_; }

 private:
  bool active_;
};

}  // namespace antdt::cuda
