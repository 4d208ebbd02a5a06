// The public C++ API: antdt::Communicator's methods (include/antdt/comm.hpp).
// How one is made is in communicator_factory.cpp; the C API in comm_c_api.cpp.
#include <antdt/comm.hpp>

#include "collectives/api/communicator_factory.hpp"
#include "collectives/collectives.hpp"
#include "collectives/communicator.hpp"
#include "collectives/telemetry/step_timing.hpp"
#include "core/error.hpp"
#include "cuda/nvtx.hpp"

namespace antdt {

// ---------------------------------------------------------------------------
// Communicator
// ---------------------------------------------------------------------------
Communicator::Communicator(std::unique_ptr<detail::CommImpl> impl) noexcept : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

int Communicator::rank() const noexcept { return impl_->rank(); }
int Communicator::size() const noexcept { return impl_->size(); }
std::string_view Communicator::transport_name() const noexcept { return impl_->transport().name(); }

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  coll::execute(*impl_, {.kind = coll::Kind::allreduce, .send = send, .recv = recv, .count = count, .dtype = dtype,
                         .op = op},
                coll::Mode::blocking);
}
void Communicator::broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root) {
  coll::execute(*impl_, {.kind = coll::Kind::broadcast, .send = send, .recv = recv, .count = count, .dtype = dtype,
                         .root = root},
                coll::Mode::blocking);
}
void Communicator::barrier() { coll::execute(*impl_, {.kind = coll::Kind::barrier}, coll::Mode::blocking); }
void Communicator::abort(std::string_view reason) noexcept { impl_->abort(reason); }

PartialResult Communicator::partial_allreduce(const void* send, void* recv, std::size_t count, DataType dtype,
                                              ReduceOp op, const PartialOptions& opts) {
  return coll::execute(*impl_, {.kind = coll::Kind::partial, .send = send, .recv = recv, .count = count, .dtype = dtype,
                                .op = op, .partial = &opts},
                       coll::Mode::partial)
      .partial;
}
PartialResult Communicator::partial_finish() { return coll::partial_finish(*impl_); }
StragglerClass Communicator::straggler_class(int rank) const { return coll::straggler_class(*impl_, rank); }

// NVTX: a range per training step (ANTDT_NVTX=1), pushed here and popped by end_step.
void Communicator::begin_step() {
  impl_->step_timing().begin_step();
  if (cuda::nvtx_enabled()) cuda::nvtx_push("antdt step");
}
void Communicator::begin_compute(void* stream) { impl_->step_timing().begin_compute(stream); }
void Communicator::end_compute(void* stream) { impl_->step_timing().end_compute(stream); }
void Communicator::end_step(std::uint64_t samples) {
  if (cuda::nvtx_enabled()) cuda::nvtx_pop();
  const StragglerClass cls = coll::straggler_class(*impl_, impl_->rank());  // for the trace: as the arbiter last said
  impl_->step_timing().end_step(samples, cls);
}

void Communicator::check_same_extent(std::size_t a, std::size_t b) {
  ANTDT_CHECK_ARG(a == b, "send and recv spans differ in size (", a, " vs ", b, " elements)");
}

Communicator Communicator::create(const UniqueId& id, int rank, int size, const CommOptions& opts) {
  return api::communicator_from_unique_id(id, rank, size, opts);
}
Communicator Communicator::from_env() { return api::communicator_from_env(); }

}  // namespace antdt
