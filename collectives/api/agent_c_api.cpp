// The C functions of include/antdt/agent.h: an antdtAgent_t owns an AgentImpl
// (collectives/api/agent_impl.hpp). Each runs its body through c_api_guarded
// (collectives/api/c_api.hpp), which turns an antdt::Error into its status code.
#include <antdt/agent.h>

#include "collectives/api/agent_impl.hpp"
#include "collectives/api/c_api.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <memory>

// The object behind an antdtAgent_t.
struct antdtAgent {
  antdtAgent(const antdt::AgentOptions& options, const antdt::Config& cfg) : impl(options, cfg) {}
  antdt::detail::AgentImpl impl;
};

namespace {

antdt::detail::AgentImpl& unwrap(antdtAgent_t agent) {
  ANTDT_CHECK_ARG(agent != nullptr, "agent handle is null");
  return agent->impl;
}

template <class Struct>
void check_struct(const Struct* s, const char* name) {
  ANTDT_CHECK_ARG(s != nullptr, name, " pointer is null");
  ANTDT_CHECK_ARG(s->struct_size >= sizeof(Struct), name, ".struct_size is ", s->struct_size, ", expected at least ",
                  sizeof(Struct), " (set it to sizeof(", name, "))");
}

void set_flag(int* out, bool value) {
  if (out != nullptr) *out = value ? 1 : 0;
}

}  // namespace

extern "C" {

antdtStatus_t antdtAgentCreate(antdtAgent_t* agent, const antdtAgentOptions* options) {
  return antdt::api::c_api_guarded([&] {
    ANTDT_CHECK_ARG(agent != nullptr, "output agent pointer is null");
    *agent = nullptr;
    antdt::AgentOptions o;
    if (options != nullptr) {
      check_struct(options, "antdtAgentOptions");
      o.dataset_size = options->dataset_size;
      o.epochs = options->epochs;
      o.global_batch = options->global_batch;
      o.shard_size = options->shard_size;
    }
    auto handle = std::make_unique<antdtAgent>(o, antdt::config());
    *agent = handle.release();  // owned by the caller until antdtAgentDestroy
  });
}

antdtStatus_t antdtAgentDestroy(antdtAgent_t agent) {
  return antdt::api::c_api_guarded([&] {
    ANTDT_CHECK_ARG(agent != nullptr, "agent handle is null");
    std::unique_ptr<antdtAgent> owned(agent);
  });
}

antdtStatus_t antdtAgentRank(antdtAgent_t agent, int* rank, int* size, int* incarnation) {
  return antdt::api::c_api_guarded([&] {
    auto& a = unwrap(agent);
    if (rank != nullptr) *rank = a.rank();
    if (size != nullptr) *size = a.size();
    if (incarnation != nullptr) *incarnation = a.incarnation();
  });
}

antdtStatus_t antdtAgentComm(antdtAgent_t agent, antdtComm_t* comm) {
  return antdt::api::c_api_guarded([&] {
    ANTDT_CHECK_ARG(comm != nullptr, "output communicator pointer is null");
    *comm = unwrap(agent).communicator_handle();
  });
}

antdtStatus_t antdtAgentRebuildNeeded(antdtAgent_t agent, int* needed) {
  return antdt::api::c_api_guarded([&] {
    ANTDT_CHECK_ARG(needed != nullptr, "output pointer is null");
    set_flag(needed, unwrap(agent).rebuild_needed());
  });
}

antdtStatus_t antdtAgentNextStep(antdtAgent_t agent, antdtStepPlan* plan) {
  return antdt::api::c_api_guarded([&] {
    check_struct(plan, "antdtStepPlan");
    const antdt::StepPlan p = unwrap(agent).next_step();
    plan->step = p.step;
    plan->local_batch = p.local_batch;
    plan->micro_batches = p.micro_batches;
    plan->micro_batch = p.micro_batch;
    plan->late = static_cast<antdtLatePolicy_t>(p.late);
    plan->staleness = p.staleness;
    plan->stop = p.stop ? 1 : 0;
    plan->restart = p.restart ? 1 : 0;
    plan->rebuild = p.rebuild ? 1 : 0;
    plan->generation = p.generation;
  });
}

antdtStatus_t antdtAgentNextSamples(antdtAgent_t agent, uint64_t* ids, size_t capacity, size_t* count,
                                    int* finished) {
  return antdt::api::c_api_guarded([&] {
    ANTDT_CHECK_ARG(count != nullptr, "count pointer is null");
    ANTDT_CHECK_ARG(ids != nullptr || capacity == 0, "sample id buffer is null with capacity ", capacity);
    *count = 0;
    antdt::SampleBatch batch = unwrap(agent).next_samples(capacity);
    std::copy(batch.samples.begin(), batch.samples.end(), ids);
    *count = batch.samples.size();
    set_flag(finished, batch.finished);
  });
}

antdtStatus_t antdtAgentReportStep(antdtAgent_t agent, const antdtStepReport* report) {
  return antdt::api::c_api_guarded([&] {
    check_struct(report, "antdtStepReport");
    ANTDT_CHECK_ARG(report->fate >= ANTDT_FATE_INCLUDED && report->fate <= ANTDT_FATE_NONE, "fate ",
                    static_cast<int>(report->fate), " is not an antdtFate_t");
    antdt::StepReport r;
    r.compute_s = report->compute_s;
    r.samples = report->samples;
    r.fate = static_cast<antdt::Fate>(report->fate);
    r.wait_s = report->wait_s;
    r.transfer_s = report->transfer_s;
    unwrap(agent).report_step(r);
  });
}

antdtStatus_t antdtAgentCommit(antdtAgent_t agent, int* done) {
  return antdt::api::c_api_guarded([&] { set_flag(done, unwrap(agent).commit()); });
}

antdtStatus_t antdtAgentGiveBack(antdtAgent_t agent, int* done) {
  return antdt::api::c_api_guarded([&] { set_flag(done, unwrap(agent).give_back()); });
}

antdtStatus_t antdtAgentSettle(antdtAgent_t agent, antdtFate_t fate, int* done) {
  return antdt::api::c_api_guarded([&] {
    ANTDT_CHECK_ARG(fate >= ANTDT_FATE_INCLUDED && fate <= ANTDT_FATE_NONE, "fate ", static_cast<int>(fate),
                    " is not an antdtFate_t");
    set_flag(done, unwrap(agent).settle(static_cast<antdt::Fate>(fate)));
  });
}

antdtStatus_t antdtAgentRequestRestart(antdtAgent_t agent) {
  return antdt::api::c_api_guarded([&] { unwrap(agent).request_restart(); });
}

antdtStatus_t antdtAgentShouldExit(antdtAgent_t agent, int* should_exit, int* exit_code) {
  return antdt::api::c_api_guarded([&] {
    auto& a = unwrap(agent);
    set_flag(should_exit, a.should_exit());
    if (exit_code != nullptr) *exit_code = a.exit_code();
  });
}

}  // extern "C"
