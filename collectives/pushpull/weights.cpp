// The rules push-pull's weights follow (collectives/pushpull/weights.hpp).
#include "collectives/pushpull/weights.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <cmath>

namespace antdt::coll::pushpull {

bool is_float(DataType t) noexcept {
  return t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
}

void check_weight(DataType t, double weight, const char* what) {
  ANTDT_CHECK_ARG(std::isfinite(weight) && weight >= 0, what, ": weight must be finite and >= 0, got ", weight);
  if (!is_float(t))
    ANTDT_CHECK_ARG(weight == std::trunc(weight) && weight <= 9.0e18, what, ": integer dtype ", dtype_name(t),
                    " needs an integral weight, got ", weight);
}

bool finish_is_copy(DataType t, ReduceOp op) noexcept { return op == ReduceOp::sum && weighted_sum_type(t) == t; }

}  // namespace antdt::coll::pushpull
