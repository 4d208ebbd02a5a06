#include "collectives/api/python/buffer.hpp"

#include <pybind11/numpy.h>

#include <cstdint>
#include <string>

namespace py = pybind11;

namespace antdt::python {
namespace {

InvalidArgument refusal(const char* what, const std::string& why) {
  return InvalidArgument(std::string(what) + ": " + why);
}

// torch.float32 -> f32 and so on, by the dtype's printed name (no torch headers).
DataType dtype_of_tensor(const char* what, const std::string& name) {
  if (name == "torch.float32") return DataType::f32;
  if (name == "torch.float64") return DataType::f64;
  if (name == "torch.float16") return DataType::f16;
  if (name == "torch.bfloat16") return DataType::bf16;
  if (name == "torch.int8") return DataType::i8;
  if (name == "torch.uint8") return DataType::u8;
  if (name == "torch.int32") return DataType::i32;
  if (name == "torch.int64") return DataType::i64;
  throw refusal(what, "tensor dtype " + name + " is not supported (float32/64, float16, bfloat16, int8, uint8, int32, int64)");
}

DataType dtype_of_array(const char* what, const py::dtype& dt) {
  const char kind = dt.kind();
  const auto size = static_cast<std::size_t>(dt.itemsize());
  if (kind == 'f' && size == 4) return DataType::f32;
  if (kind == 'f' && size == 8) return DataType::f64;
  if (kind == 'f' && size == 2) return DataType::f16;
  if (kind == 'i' && size == 1) return DataType::i8;
  if (kind == 'u' && size == 1) return DataType::u8;
  if (kind == 'i' && size == 4) return DataType::i32;
  if (kind == 'u' && size == 4) return DataType::u32;
  if (kind == 'i' && size == 8) return DataType::i64;
  if (kind == 'u' && size == 8) return DataType::u64;
  throw refusal(what, "numpy dtype " + py::str(py::handle(dt)).cast<std::string>() + " is not supported");
}

Buffer tensor_buffer(py::handle t, const char* what) {
  if (!t.attr("is_contiguous")().cast<bool>())
    throw refusal(what, "the tensor is not contiguous (call .contiguous() and copy the result back)");
  if (t.attr("requires_grad").cast<bool>())
    throw refusal(what, "the tensor requires grad: autograd would not see the write (pass tensor.detach())");
  const std::string device = py::str(t.attr("device").attr("type")).cast<std::string>();
  if (device != "cpu" && device != "cuda") throw refusal(what, "tensors on device '" + device + "' are not supported");
  Buffer b;
  b.dtype = dtype_of_tensor(what, py::str(t.attr("dtype")).cast<std::string>());
  b.count = t.attr("numel")().cast<std::size_t>();
  b.data = reinterpret_cast<void*>(t.attr("data_ptr")().cast<std::uintptr_t>());
  return b;
}

}  // namespace

Buffer buffer_of(py::handle object, const char* what, bool writable) {
  if (py::hasattr(object, "data_ptr") && py::hasattr(object, "numel")) return tensor_buffer(object, what);
  if (!py::isinstance<py::array>(object))
    throw refusal(what, "expected a numpy array or a torch tensor, got " +
                     py::str(py::type::handle_of(object).attr("__name__")).cast<std::string>());
  auto array = py::reinterpret_borrow<py::array>(object);
  if (!(array.flags() & py::array::c_style)) throw refusal(what, "the array is not C-contiguous (use numpy.ascontiguousarray)");
  if (writable && !array.writeable()) throw refusal(what, "the array is read-only");
  Buffer b;
  b.dtype = dtype_of_array(what, array.dtype());
  b.count = static_cast<std::size_t>(array.size());
  b.data = const_cast<void*>(array.data());
  return b;
}

}  // namespace antdt::python
