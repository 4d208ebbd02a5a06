// Native mode: antdt does the work of every NCCL call (docs/nccl.md).
#pragma once

#include <nccl.h>

namespace antdt_nccl::native {
#define NCCL_FN(ret, name, params, args) ret name params;
#include "nccl_functions.def"
#undef NCCL_FN
}  // namespace antdt_nccl::native
