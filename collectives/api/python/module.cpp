// antdt._agent: Python bindings of the public Agent API (include/antdt/agent.hpp)
// and of the Communicator calls a training loop makes through it (allreduce,
// broadcast, partial_allreduce, partial_finish, barrier). The Python wrapper
// antdt/agent.py is the documented interface (docs/torch.md).
//
// Every blocking call releases the GIL, so other Python threads (a data loader,
// a progress printer) run while a rank waits for its peers.
#include "collectives/api/python/buffer.hpp"

#include <antdt/agent.hpp>
#include <antdt/comm.hpp>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

namespace py = pybind11;
using namespace antdt;

namespace {

// The Agent's communicator as Python sees it. The Agent rebuilds its
// communicator in place on a new generation; a handle taken before a rebuild
// refuses every call afterwards instead of using a communicator that changed
// membership under it.
class CommHandle {
 public:
  CommHandle(Agent& agent, Communicator& comm) : agent_(&agent), comm_(&comm), generation_(agent.generation()) {}

  Communicator& get() const {
    if (agent_->generation() != generation_)
      throw InvalidArgument("this communicator belongs to generation " + std::to_string(generation_) +
                            ", replaced by generation " + std::to_string(agent_->generation()) +
                            " at a rebuild: call agent.communicator() again");
    return *comm_;
  }
  std::uint64_t generation() const noexcept { return generation_; }

 private:
  Agent* agent_;
  Communicator* comm_;
  std::uint64_t generation_;
};

void check_pair(const python::Buffer& send, const python::Buffer& recv) {
  if (send.count != recv.count)
    throw InvalidArgument("send has " + std::to_string(send.count) + " elements but recv has " +
                          std::to_string(recv.count));
  if (send.dtype != recv.dtype)
    throw InvalidArgument("send is " + std::string(dtype_name(send.dtype)) + " but recv is " +
                          std::string(dtype_name(recv.dtype)));
}

void bind_enums(py::module_& m) {
  py::enum_<LatePolicy>(m, "LatePolicy")
      .value("wait", LatePolicy::wait).value("drop", LatePolicy::drop).value("defer", LatePolicy::defer);
  py::enum_<Fate>(m, "Fate")
      .value("included", Fate::included).value("deferred", Fate::deferred)
      .value("dropped", Fate::dropped).value("none", Fate::none);
  py::enum_<ReduceOp>(m, "ReduceOp")
      .value("sum", ReduceOp::sum).value("prod", ReduceOp::prod).value("min", ReduceOp::min)
      .value("max", ReduceOp::max).value("avg", ReduceOp::avg);
  py::enum_<StragglerClass>(m, "StragglerClass")
      .value("healthy", StragglerClass::healthy).value("leader", StragglerClass::leader)
      .value("deterministic", StragglerClass::deterministic).value("transient", StragglerClass::transient)
      .value("persistent", StragglerClass::persistent).value("lost", StragglerClass::lost);
}

void bind_records(py::module_& m) {
  py::class_<StepPlan>(m, "StepPlan")
      .def_readonly("step", &StepPlan::step).def_readonly("local_batch", &StepPlan::local_batch)
      .def_readonly("micro_batches", &StepPlan::micro_batches).def_readonly("micro_batch", &StepPlan::micro_batch)
      .def_readonly("late", &StepPlan::late).def_readonly("staleness", &StepPlan::staleness)
      .def_readonly("stop", &StepPlan::stop).def_readonly("restart", &StepPlan::restart)
      .def_readonly("rebuild", &StepPlan::rebuild).def_readonly("generation", &StepPlan::generation)
      .def("__repr__", [](const StepPlan& p) {
        return "StepPlan(step=" + std::to_string(p.step) + ", local_batch=" + std::to_string(p.local_batch) +
               ", micro_batches=" + std::to_string(p.micro_batches) + ", late=" +
               std::to_string(static_cast<int>(p.late)) + ", stop=" + (p.stop ? "True" : "False") + ")";
      });
  py::class_<SampleBatch>(m, "SampleBatch")
      .def_readonly("samples", &SampleBatch::samples).def_readonly("epoch", &SampleBatch::epoch)
      .def_readonly("finished", &SampleBatch::finished)
      .def("__len__", &SampleBatch::size);
  py::class_<PartialResult>(m, "PartialResult")
      .def_readonly("step", &PartialResult::step).def_readonly("fate", &PartialResult::fate)
      .def_readonly("contribution_step", &PartialResult::contribution_step)
      .def_readonly("participants", &PartialResult::participants)
      .def_readonly("total_weight", &PartialResult::total_weight)
      .def_readonly("steps_behind", &PartialResult::steps_behind)
      .def_readonly("lost_ranks", &PartialResult::lost_ranks);
}

void bind_communicator(py::module_& m) {
  py::class_<CommHandle>(m, "Communicator")
      .def_property_readonly("rank", [](const CommHandle& c) { return c.get().rank(); })
      .def_property_readonly("size", [](const CommHandle& c) { return c.get().size(); })
      .def_property_readonly("generation", &CommHandle::generation)
      .def("allreduce",
           [](const CommHandle& c, py::handle send, py::handle recv, ReduceOp op) {
             const auto s = python::buffer_of(send, "send", false);
             const auto r = python::buffer_of(recv, "recv", true);
             check_pair(s, r);
             Communicator& comm = c.get();
             py::gil_scoped_release unlocked;
             comm.allreduce(s.data, r.data, s.count, s.dtype, op);
           },
           py::arg("send"), py::arg("recv"), py::arg("op") = ReduceOp::sum)
      .def("broadcast",
           [](const CommHandle& c, py::handle buffer, int root) {
             const auto b = python::buffer_of(buffer, "buffer", true);
             Communicator& comm = c.get();
             py::gil_scoped_release unlocked;
             comm.broadcast(b.data, b.data, b.count, b.dtype, root);
           },
           py::arg("buffer"), py::arg("root"))
      .def("barrier",
           [](const CommHandle& c) {
             Communicator& comm = c.get();
             py::gil_scoped_release unlocked;
             comm.barrier();
           })
      .def("partial_allreduce",
           [](const CommHandle& c, py::handle send, py::handle recv, ReduceOp op, LatePolicy policy, double weight,
              std::uint32_t staleness, std::uint64_t samples) {
             const auto s = python::buffer_of(send, "send", false);
             const auto r = python::buffer_of(recv, "recv", true);
             check_pair(s, r);
             PartialOptions o;
             o.policy = policy;
             o.weight = weight;
             o.staleness = staleness;
             o.samples = samples;
             Communicator& comm = c.get();
             py::gil_scoped_release unlocked;
             return comm.partial_allreduce(s.data, r.data, s.count, s.dtype, op, o);
           },
           py::arg("send"), py::arg("recv"), py::arg("op") = ReduceOp::sum, py::arg("policy") = LatePolicy::wait,
           py::arg("weight") = 1.0, py::arg("staleness") = 1, py::arg("samples") = 0)
      .def("partial_finish",
           [](const CommHandle& c) {
             Communicator& comm = c.get();
             py::gil_scoped_release unlocked;
             return comm.partial_finish();
           })
      .def("straggler_class", [](const CommHandle& c, int rank) { return c.get().straggler_class(rank); });
}

void bind_agent(py::module_& m) {
  py::class_<Agent>(m, "Agent")
      .def_static("from_env",
                  [](std::uint64_t dataset_size, std::uint32_t epochs, std::uint64_t shard_size,
                     std::uint64_t global_batch) {
                    AgentOptions o;
                    o.dataset_size = dataset_size;
                    o.epochs = epochs;
                    o.shard_size = shard_size;
                    o.global_batch = global_batch;
                    py::gil_scoped_release unlocked;
                    return std::make_unique<Agent>(Agent::from_env(o));
                  },
                  py::arg("dataset_size") = 0, py::arg("epochs") = 1, py::arg("shard_size") = 0,
                  py::arg("global_batch") = 0)
      .def_property_readonly("rank", &Agent::rank)
      .def_property_readonly("size", &Agent::size)
      .def_property_readonly("incarnation", &Agent::incarnation)
      .def_property_readonly("generation", &Agent::generation)
      .def("rebuild_needed", &Agent::rebuild_needed)
      .def("communicator",
           [](Agent& a) {
             Communicator* comm = nullptr;
             {
               py::gil_scoped_release unlocked;
               comm = &a.communicator();
             }
             return CommHandle(a, *comm);
           },
           py::keep_alive<0, 1>())
      .def("next_step", &Agent::next_step, py::call_guard<py::gil_scoped_release>())
      .def("next_samples", &Agent::next_samples, py::call_guard<py::gil_scoped_release>())
      .def("report_step",
           [](Agent& a, double compute_s, std::uint64_t samples, Fate fate, double wait_s, double transfer_s) {
             StepReport r;
             r.compute_s = compute_s;
             r.samples = samples;
             r.fate = fate;
             r.wait_s = wait_s;
             r.transfer_s = transfer_s;
             py::gil_scoped_release unlocked;
             a.report_step(r);
           },
           py::arg("compute_s") = -1.0, py::arg("samples") = 0, py::arg("fate") = Fate::included,
           py::arg("wait_s") = 0.0, py::arg("transfer_s") = 0.0)
      .def("commit", &Agent::commit, py::call_guard<py::gil_scoped_release>())
      .def("give_back", &Agent::give_back, py::call_guard<py::gil_scoped_release>())
      .def("settle", &Agent::settle, py::call_guard<py::gil_scoped_release>())
      .def("request_restart", &Agent::request_restart, py::call_guard<py::gil_scoped_release>())
      .def("should_exit", &Agent::should_exit)
      .def_property_readonly("exit_code", &Agent::exit_code)
      .def("close", &Agent::close, py::call_guard<py::gil_scoped_release>());
}

}  // namespace

PYBIND11_MODULE(_agent, m) {
  m.doc() = "antdt Agent and Communicator bindings (use antdt.agent)";
  // Every antdt::Error becomes antdt._agent.Error (a RuntimeError) with the
  // library's message; .status names the code (e.g. "timeout", "resync").
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object exc = py::handle(error.ptr())(e.what());
      exc.attr("status") = status_name(e.status());
      PyErr_SetObject(error.ptr(), exc.ptr());
    }
  });
  bind_enums(m);
  bind_records(m);
  bind_communicator(m);
  bind_agent(m);
}
