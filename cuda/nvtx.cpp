// NVTX through the header-only nvtx3 API: nothing to link; the calls are
// cheap no-ops until a tool (nsys) injects its library.
#include "cuda/nvtx.hpp"

#include "core/config.hpp"

#include <nvtx3/nvToolsExt.h>

namespace antdt::cuda {
namespace {

nvtxDomainHandle_t antdt_domain() noexcept {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("antdt");
  return domain;
}

}  // namespace

bool nvtx_enabled() noexcept {
  try {
    return config().nvtx;
  } catch (...) {
    return false;  // an invalid configuration is reported where it is used
  }
}

void nvtx_push(const char* name) noexcept {
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = name != nullptr ? name : "";
  nvtxDomainRangePushEx(antdt_domain(), &attributes);
}

void nvtx_pop() noexcept { nvtxDomainRangePop(antdt_domain()); }

}  // namespace antdt::cuda
