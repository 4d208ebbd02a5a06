// The rules push-pull's weights follow: which weights a dtype accepts, and
// when a weighted aggregate is already the result. Aggregates are kept in
// weighted_sum_type(t), added to with accumulate_weighted and finished with
// finish_weighted (core/dtype.hpp).
#pragma once

#include <antdt/comm.hpp>

namespace antdt::coll::pushpull {

// f32, f64, f16 or bf16: the dtypes that take any weight and an average.
bool is_float(DataType t) noexcept;
// Checks that `weight` suits `t` (finite, >= 0; integral for integer dtypes).
void check_weight(DataType t, double weight, const char* what);
// True when finish_weighted for (t, op) is a plain copy, so acc can be sent as it is.
bool finish_is_copy(DataType t, ReduceOp op) noexcept;

}  // namespace antdt::coll::pushpull
