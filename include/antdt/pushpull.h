/* AntDT comm — push-pull (parameter-server mode), C API. See antdt/pushpull.hpp
 * and docs/collectives.md#push-pull for the semantics.
 *
 * Every function returns an antdtStatus_t (ANTDT_OK on success; antdtLastError()
 * names the cause of a failure). Structs passed in carry their size in the
 * first field (`struct_size`): set it to sizeof the struct.
 */
#ifndef ANTDT_PUSHPULL_H
#define ANTDT_PUSHPULL_H

#include <antdt/comm.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct antdtPushPull* antdtPushPull_t;

/* One tensor of the key table (the same table on every rank). */
typedef struct {
  uint64_t key;
  size_t count;
  antdtDataType_t dtype;
} antdtPushPullKey;

typedef struct {
  size_t struct_size;     /* sizeof(antdtPushPullOptions) */
  const int* servers;     /* dedicated server ranks; NULL / 0: every rank serves a shard */
  int nservers;
  size_t partition_bytes; /* 0: ANTDT_PS_PARTITION_BYTES (default 4 MiB) */
} antdtPushPullOptions;

/* Collective over `comm` (which must outlive the handle). opts may be NULL (defaults). */
ANTDT_API antdtStatus_t antdtPushPullCreate(antdtPushPull_t* pp, antdtComm_t comm, const antdtPushPullKey* keys,
                                            size_t nkeys, const antdtPushPullOptions* opts);
ANTDT_API antdtStatus_t antdtPushPullDestroy(antdtPushPull_t pp);
/* Adds weight * data (the key's count elements) into the aggregate. Collective. */
ANTDT_API antdtStatus_t antdtPush(antdtPushPull_t pp, uint64_t key, const void* data, double weight);
/* out gets the aggregate: ANTDT_SUM, or ANTDT_AVG (sum / total weight). Collective. */
ANTDT_API antdtStatus_t antdtPull(antdtPushPull_t pp, uint64_t key, void* out, antdtReduceOp_t op);
/* Push and pull in one round closed by the partial-collective arbiter (docs/partial.md#partial-push).
 * result_info may be NULL. */
ANTDT_API antdtStatus_t antdtPartialPush(antdtPushPull_t pp, uint64_t key, const void* data, void* result,
                                         antdtReduceOp_t op, const antdtPartialOptions* opts,
                                         antdtPartialResult* result_info);

/* Device buffers (docs/pushpull.md#device-buffers): data, out and result may be device memory
 * (cudaMalloc) in every call above. Such a call is ordered after the work already enqueued on a
 * CUDA stream and makes that stream wait for its result: the functions above use the legacy default
 * stream, the ones below take a cudaStream_t (as void*; NULL: the legacy default stream).
 * Synchronise the stream before reading a pulled result on the host. With host buffers and a
 * non-NULL stream, the stream's work is waited for first. */
ANTDT_API antdtStatus_t antdtPushStream(antdtPushPull_t pp, uint64_t key, const void* data, double weight,
                                        void* stream);
ANTDT_API antdtStatus_t antdtPullStream(antdtPushPull_t pp, uint64_t key, void* out, antdtReduceOp_t op,
                                        void* stream);
ANTDT_API antdtStatus_t antdtPartialPushStream(antdtPushPull_t pp, uint64_t key, const void* data, void* result,
                                               antdtReduceOp_t op, const antdtPartialOptions* opts,
                                               antdtPartialResult* result_info, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* ANTDT_PUSHPULL_H */
