// A tensor as the one contiguous buffer antdt reads or writes. A contiguous
// tensor is its own buffer; any other (a transposed view, a slice with
// strides, channels-last) goes through a contiguous copy, and what antdt wrote
// there is copied back by write_back(). So a non-contiguous tensor is reduced
// correctly, never left silently unchanged.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace antdt::pytorch {

class StagedTensor {
 public:
  enum class Use {
    read,        // antdt only reads it (a send, a gather's input)
    write,       // antdt only writes it (a receive, a gather's output): no copy in
    read_write,  // in place (all_reduce, broadcast)
  };

  StagedTensor(const at::Tensor& tensor, Use use);

  void* data() const { return buffer_.data_ptr(); }
  std::size_t numel() const { return static_cast<std::size_t>(buffer_.numel()); }
  std::size_t nbytes() const { return buffer_.nbytes(); }
  const at::Tensor& buffer() const { return buffer_; }

  // Copies the buffer into the tensor when it was staged and antdt wrote it.
  void write_back();

 private:
  at::Tensor original_;
  at::Tensor buffer_;
  Use use_;
};

}  // namespace antdt::pytorch
