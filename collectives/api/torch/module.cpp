// antdt.torch._C: the Python face of ProcessGroupAntdt. antdt/torch/__init__.py
// registers _create_process_group as the "antdt" backend of torch.distributed.
#include "process_group.hpp"

#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include <chrono>

namespace {

namespace py = pybind11;
using antdt::pytorch::ProcessGroupAntdt;

c10::intrusive_ptr<c10d::ProcessGroup> create_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                            int size, std::chrono::duration<double> timeout) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  return c10::make_intrusive<ProcessGroupAntdt>(store, rank, size, ms);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "antdt's torch.distributed backend (a c10d::ProcessGroup over libantdt_comm)";
  py::class_<ProcessGroupAntdt, c10::intrusive_ptr<ProcessGroupAntdt>, c10d::ProcessGroup>(m, "ProcessGroupAntdt")
      .def_property_readonly("timeout", &ProcessGroupAntdt::timeout);
  // The backend creator torch.distributed calls: (store, rank, world_size, timeout).
  // Joining blocks on the other ranks, so it runs without the GIL.
  m.def("_create_process_group", &create_process_group, py::arg("store"), py::arg("rank"), py::arg("world_size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
}
