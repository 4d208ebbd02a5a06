// A Python buffer (a numpy array or a torch tensor) as the pointer, element
// count and dtype that the antdt API takes. Tensors are read through their own
// attributes (data_ptr, numel, dtype, is_contiguous), so the module needs no
// torch headers and works the same with or without torch installed.
#pragma once

#include <antdt/comm.hpp>

#include <pybind11/pybind11.h>

#include <cstddef>

namespace antdt::python {

struct Buffer {
  void* data = nullptr;
  std::size_t count = 0;  // elements
  DataType dtype = DataType::f32;
};

// Throws antdt::InvalidArgument naming `what` (e.g. "send") when the object is
// neither a C-contiguous numpy array nor a contiguous tensor of a supported
// dtype, or (writable) when it cannot be written.
Buffer buffer_of(pybind11::handle object, const char* what, bool writable);

}  // namespace antdt::python
