/* AntDT comm — C API.
 *
 * Every function returns an antdtStatus_t; ANTDT_OK is success. On failure,
 * antdtLastError() returns a message naming the cause, for the calling thread.
 * Structs passed in carry their size in the first field (`struct_size`) so the
 * library can grow them without breaking callers built against older headers.
 */
#ifndef ANTDT_COMM_H
#define ANTDT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include <antdt/export.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ANTDT_VERSION_MAJOR 0
#define ANTDT_VERSION_MINOR 1
#define ANTDT_VERSION_PATCH 0
#define ANTDT_VERSION_CODE (ANTDT_VERSION_MAJOR * 10000 + ANTDT_VERSION_MINOR * 100 + ANTDT_VERSION_PATCH)

typedef enum {
  ANTDT_OK = 0,
  ANTDT_ERR_INVALID_ARGUMENT = 1, /* a null pointer, bad count, dtype, op or rank */
  ANTDT_ERR_CONFIG = 2,           /* a malformed ANTDT_* environment variable */
  ANTDT_ERR_BOOTSTRAP = 3,        /* rendezvous failed, or a peer could not prove the job secret */
  ANTDT_ERR_TRANSPORT = 4,        /* the network layer failed (peer unreachable, UCX error) */
  ANTDT_ERR_TIMEOUT = 5,          /* a wait exceeded ANTDT_TIMEOUT_MS */
  ANTDT_ERR_MISMATCH = 6,         /* ranks called a collective with different count/dtype/op/root */
  ANTDT_ERR_REMOTE_ABORT = 7,     /* another rank aborted the communicator */
  ANTDT_ERR_ABORTED = 8,          /* this rank aborted the communicator */
  ANTDT_ERR_UNSUPPORTED = 9,      /* the operation is not available in this build */
  ANTDT_ERR_INTERNAL = 10,        /* a bug: please report it */
  ANTDT_ERR_RESYNC = 11,          /* a partial-collective rank fell more results behind than are kept */
  ANTDT_ERR_PEER_LOST = 12        /* a peer rank's process died or its connection closed (names rank, host, pid) */
} antdtStatus_t;

typedef enum {
  ANTDT_F32 = 0, ANTDT_F64 = 1, ANTDT_F16 = 2, ANTDT_BF16 = 3, ANTDT_I8 = 4,
  ANTDT_U8 = 5, ANTDT_I32 = 6, ANTDT_U32 = 7, ANTDT_I64 = 8, ANTDT_U64 = 9
} antdtDataType_t;

typedef enum { ANTDT_SUM = 0, ANTDT_PROD = 1, ANTDT_MIN = 2, ANTDT_MAX = 3, ANTDT_AVG = 4 } antdtReduceOp_t;

#define ANTDT_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[ANTDT_UNIQUE_ID_BYTES];
} antdtUniqueId;

typedef struct antdtComm* antdtComm_t;

/* Version as ANTDT_VERSION_CODE of the library actually loaded. */
ANTDT_API antdtStatus_t antdtGetVersion(int* version);
ANTDT_API const char* antdtStatusString(antdtStatus_t status);
/* The last error message of the calling thread ("" when none). */
ANTDT_API const char* antdtLastError(void);

ANTDT_API antdtStatus_t antdtGetUniqueId(antdtUniqueId* id);
ANTDT_API antdtStatus_t antdtCommInitRank(antdtComm_t* comm, int nranks, const antdtUniqueId* id, int rank);
/* Joins the job described by ANTDT_RANK/ANTDT_WORLD_SIZE/ANTDT_ROOT or mpirun's environment. */
ANTDT_API antdtStatus_t antdtCommInitFromEnv(antdtComm_t* comm);
ANTDT_API antdtStatus_t antdtCommDestroy(antdtComm_t comm);
/* Safe from any thread; never blocks. Peers' calls fail with ANTDT_ERR_REMOTE_ABORT. */
ANTDT_API antdtStatus_t antdtCommAbort(antdtComm_t comm);
ANTDT_API antdtStatus_t antdtCommRank(antdtComm_t comm, int* rank);
ANTDT_API antdtStatus_t antdtCommSize(antdtComm_t comm, int* size);

ANTDT_API antdtStatus_t antdtAllReduce(const void* sendbuf, void* recvbuf, size_t count,
                                       antdtDataType_t dtype, antdtReduceOp_t op, antdtComm_t comm);
ANTDT_API antdtStatus_t antdtBroadcast(const void* sendbuf, void* recvbuf, size_t count,
                                       antdtDataType_t dtype, int root, antdtComm_t comm);
ANTDT_API antdtStatus_t antdtBarrier(antdtComm_t comm);

/* Step timing for the Monitor; stream is a cudaStream_t or NULL (CPU clock). */
ANTDT_API antdtStatus_t antdtStepBegin(antdtComm_t comm);
ANTDT_API antdtStatus_t antdtComputeBegin(antdtComm_t comm, void* stream);
ANTDT_API antdtStatus_t antdtComputeEnd(antdtComm_t comm, void* stream);
ANTDT_API antdtStatus_t antdtStepEnd(antdtComm_t comm, uint64_t samples);

/* Partial collectives (see antdt/comm.hpp and docs/partial.md). */
typedef enum { ANTDT_LATE_WAIT = 0, ANTDT_LATE_DROP = 1, ANTDT_LATE_DEFER = 2 } antdtLatePolicy_t;
typedef enum { ANTDT_FATE_INCLUDED = 0, ANTDT_FATE_DEFERRED = 1, ANTDT_FATE_DROPPED = 2, ANTDT_FATE_NONE = 3 } antdtFate_t;
typedef struct {
  size_t struct_size; /* sizeof(antdtPartialOptions): set it, so the struct can grow */
  antdtLatePolicy_t policy;
  double weight;
  uint32_t staleness;
  uint64_t samples;
} antdtPartialOptions;
typedef struct {
  size_t struct_size; /* sizeof(antdtPartialResult) */
  uint64_t step;
  antdtFate_t fate;
  uint64_t contribution_step;
  int participants;
  double total_weight;
  uint64_t steps_behind;
  /* Ranks the arbiter knew were gone when it decided `step` (antdtStragglerClass says which:
     ANTDT_STRAGGLER_LOST); their contributions since are in no result. Written only when struct_size
     covers it: a caller built before it existed passes the smaller size and is served as before. */
  int lost_ranks;
} antdtPartialResult;
ANTDT_API antdtStatus_t antdtPartialAllReduce(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                                              antdtReduceOp_t op, const antdtPartialOptions* opts,
                                              antdtPartialResult* result, antdtComm_t comm);
ANTDT_API antdtStatus_t antdtPartialFinish(antdtComm_t comm, antdtPartialResult* result);
/* How the arbiter last classified `rank` (antdt::StragglerClass; docs/partial.md). */
typedef enum {
  ANTDT_STRAGGLER_HEALTHY = 0, ANTDT_STRAGGLER_LEADER = 1, ANTDT_STRAGGLER_DETERMINISTIC = 2,
  ANTDT_STRAGGLER_TRANSIENT = 3, ANTDT_STRAGGLER_PERSISTENT = 4,
  ANTDT_STRAGGLER_LOST = 5 /* the rank's process is gone; the steps go on without it */
} antdtStragglerClass_t;
ANTDT_API antdtStatus_t antdtStragglerClass(antdtComm_t comm, int rank, antdtStragglerClass_t* cls);

/* ---- Collective suite (docs/collectives.md). Host memory; counts from 0. ---- */
/* sendbuf: size blocks of recvcount elements; recvbuf gets block `rank` reduced.
 * In place when recvbuf == sendbuf + rank * recvcount elements. */
ANTDT_API antdtStatus_t antdtReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                           antdtDataType_t dtype, antdtReduceOp_t op, antdtComm_t comm);
/* recvbuf gets every rank's sendcount elements in rank order.
 * In place when sendbuf == recvbuf + rank * sendcount elements. */
ANTDT_API antdtStatus_t antdtAllGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                       antdtDataType_t dtype, antdtComm_t comm);
/* Rank b contributes recvcounts[b] elements (size entries, the same on every rank),
 * placed at element displs[b] of recvbuf; displs NULL packs them in rank order.
 * In place when sendbuf == recvbuf + displs[rank] elements. */
ANTDT_API antdtStatus_t antdtAllGatherV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                        const size_t* displs, antdtDataType_t dtype, antdtComm_t comm);
/* root's recvbuf gets the reduction; recvbuf is ignored on other ranks. */
ANTDT_API antdtStatus_t antdtReduce(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                                    antdtReduceOp_t op, int root, antdtComm_t comm);
/* Block j (count elements) of sendbuf goes to block `rank` of rank j's recvbuf. In place when equal. */
ANTDT_API antdtStatus_t antdtAlltoAll(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                                      antdtComm_t comm);
/* Point-to-point: the n-th send to a peer matches its n-th receive from this rank. */
ANTDT_API antdtStatus_t antdtSend(const void* sendbuf, size_t count, antdtDataType_t dtype, int peer,
                                  antdtComm_t comm);
ANTDT_API antdtStatus_t antdtRecv(void* recvbuf, size_t count, antdtDataType_t dtype, int peer, antdtComm_t comm);
/* Calls between these only record themselves; antdtGroupEnd runs them (allreduces fused). */
ANTDT_API antdtStatus_t antdtGroupStart(antdtComm_t comm);
ANTDT_API antdtStatus_t antdtGroupEnd(antdtComm_t comm);

/* ---- Device buffers (docs/gpu.md) ----
 * Every collective accepts device memory (cudaMalloc). These variants name the
 * cudaStream_t (as void*; NULL: the legacy default stream) that the call is
 * ordered after and that waits for its result, as in NCCL: synchronise the
 * stream before reading the result on the host. With host buffers and a
 * non-NULL stream, the stream's work is waited for first. */
ANTDT_API antdtStatus_t antdtAllReduceStream(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                                             antdtReduceOp_t op, antdtComm_t comm, void* stream);
ANTDT_API antdtStatus_t antdtBroadcastStream(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                                             int root, antdtComm_t comm, void* stream);
ANTDT_API antdtStatus_t antdtReduceStream(const void* sendbuf, void* recvbuf, size_t count, antdtDataType_t dtype,
                                          antdtReduceOp_t op, int root, antdtComm_t comm, void* stream);
ANTDT_API antdtStatus_t antdtReduceScatterStream(const void* sendbuf, void* recvbuf, size_t recvcount,
                                                 antdtDataType_t dtype, antdtReduceOp_t op, antdtComm_t comm,
                                                 void* stream);
ANTDT_API antdtStatus_t antdtAllGatherStream(const void* sendbuf, void* recvbuf, size_t sendcount,
                                             antdtDataType_t dtype, antdtComm_t comm, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* ANTDT_COMM_H */
