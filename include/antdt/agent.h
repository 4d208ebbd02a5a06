/* AntDT comm — the Agent's C API (see antdt/agent.hpp and docs/scheduler.md,
 * "Agent and coordinator").
 *
 * Every function returns an antdtStatus_t (antdtLastError() has the message).
 * Structs carry their size in the first field, `struct_size`: set it to
 * sizeof(the struct) (the *_INIT macros do), so the library can grow them.
 *
 *   antdtAgentOptions opts = ANTDT_AGENT_OPTIONS_INIT;
 *   opts.dataset_size = N;
 *   antdtAgent_t agent;  antdtAgentCreate(&agent, &opts);
 *   for (;;) {
 *     antdtStepPlan plan = ANTDT_STEP_PLAN_INIT;  antdtAgentNextStep(agent, &plan);
 *     if (plan.restart) { antdtAgentDestroy(agent); return exit_code; }  (antdtAgentShouldExit)
 *     if (plan.stop) break;
 *     antdtComm_t comm;  antdtAgentComm(agent, &comm);  (rebuilt first when plan.rebuild)
 *     antdtAgentNextSamples(agent, ids, capacity, &count, &finished);
 *     ... compute, antdtAllReduce(..., comm) ...
 *     antdtAgentReportStep(agent, &report);  antdtAgentCommit(agent, NULL);
 *   }
 *   antdtAgentDestroy(agent);
 */
#ifndef ANTDT_AGENT_H
#define ANTDT_AGENT_H

#include <antdt/comm.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct antdtAgent* antdtAgent_t;

typedef struct {
  size_t struct_size;    /* sizeof(antdtAgentOptions) */
  uint64_t dataset_size; /* samples the coordinator shards (rank 0's value when it hosts it); 0: none */
  uint32_t epochs;       /* 0: no end */
  uint64_t global_batch; /* samples per step over all ranks; 0: 32 per rank */
  uint64_t shard_size;   /* samples per shard; 0: ANTDT_DDS_SHARD_SIZE */
} antdtAgentOptions;
#define ANTDT_AGENT_OPTIONS_INIT {sizeof(antdtAgentOptions), 0, 1, 0, 0}

typedef struct {
  size_t struct_size; /* sizeof(antdtStepPlan) */
  uint64_t step;
  uint64_t local_batch;
  uint32_t micro_batches;
  uint64_t micro_batch;
  antdtLatePolicy_t late;
  uint32_t staleness;
  int stop;           /* 1: the data is consumed; every rank leaves its loop at this step */
  int restart;        /* 1: exit the process with the restart code (antdtAgentShouldExit) */
  int rebuild;        /* 1: the communicator is re-created before this step (antdtAgentComm does it) */
  uint64_t generation;
} antdtStepPlan;
#define ANTDT_STEP_PLAN_INIT {sizeof(antdtStepPlan), 0, 0, 1, 0, ANTDT_LATE_WAIT, 1, 0, 0, 0, 0}

typedef struct {
  size_t struct_size; /* sizeof(antdtStepReport) */
  double compute_s;   /* < 0: from the communicator's step timing (antdtStepBegin / antdtStepEnd) */
  uint64_t samples;
  antdtFate_t fate;
  double wait_s;
  double transfer_s;
} antdtStepReport;
#define ANTDT_STEP_REPORT_INIT {sizeof(antdtStepReport), -1.0, 0, ANTDT_FATE_INCLUDED, 0.0, 0.0}

/* Joins the job from the environment (as antdtCommInitFromEnv, plus ANTDT_COORDINATOR and
 * ANTDT_INCARNATION). options may be NULL (defaults). */
ANTDT_API antdtStatus_t antdtAgentCreate(antdtAgent_t* agent, const antdtAgentOptions* options);
/* Says bye to the coordinator and destroys the agent and its communicator. */
ANTDT_API antdtStatus_t antdtAgentDestroy(antdtAgent_t agent);
ANTDT_API antdtStatus_t antdtAgentRank(antdtAgent_t agent, int* rank, int* size, int* incarnation);
/* The communicator of the current generation, owned by the agent: do not destroy it. Valid until the
 * next rebuild (a plan with rebuild = 1) or antdtAgentDestroy; call it again after antdtAgentNextStep. */
ANTDT_API antdtStatus_t antdtAgentComm(antdtAgent_t agent, antdtComm_t* comm);
ANTDT_API antdtStatus_t antdtAgentRebuildNeeded(antdtAgent_t agent, int* needed);
ANTDT_API antdtStatus_t antdtAgentNextStep(antdtAgent_t agent, antdtStepPlan* plan);
/* Up to min(capacity, the plan's local batch) sample ids into ids; *count of them. finished (may be
 * NULL): 1 when every epoch was handed out and consumed. */
ANTDT_API antdtStatus_t antdtAgentNextSamples(antdtAgent_t agent, uint64_t* ids, size_t capacity, size_t* count,
                                              int* finished);
ANTDT_API antdtStatus_t antdtAgentReportStep(antdtAgent_t agent, const antdtStepReport* report);
/* Settle the step's samples; *done (may be NULL) = 1 when the coordinator still held them open. */
ANTDT_API antdtStatus_t antdtAgentCommit(antdtAgent_t agent, int* done);
ANTDT_API antdtStatus_t antdtAgentGiveBack(antdtAgent_t agent, int* done);
ANTDT_API antdtStatus_t antdtAgentSettle(antdtAgent_t agent, antdtFate_t fate, int* done);
ANTDT_API antdtStatus_t antdtAgentRequestRestart(antdtAgent_t agent);
/* should_exit = 1 once a plan ordered a restart; exit_code: ANTDT_RESTART_EXIT_CODE (default 75). */
ANTDT_API antdtStatus_t antdtAgentShouldExit(antdtAgent_t agent, int* should_exit, int* exit_code);

#ifdef __cplusplus
}
#endif

#endif /* ANTDT_AGENT_H */
