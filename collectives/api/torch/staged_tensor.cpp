#include "staged_tensor.hpp"

#include <ATen/ATen.h>

namespace antdt::pytorch {

StagedTensor::StagedTensor(const at::Tensor& tensor, Use use) : original_(tensor), use_(use) {
  if (tensor.is_contiguous()) {
    buffer_ = tensor;
  } else if (use == Use::write) {
    buffer_ = at::empty(tensor.sizes(), tensor.options().memory_format(at::MemoryFormat::Contiguous));
  } else {
    buffer_ = tensor.contiguous();
  }
}

void StagedTensor::write_back() {
  if (use_ != Use::read && !buffer_.is_same(original_)) original_.copy_(buffer_);
}

}  // namespace antdt::pytorch
