/* A test client written only against the real nccl.h and linked to the real
 * libnccl.so: run it with LD_PRELOAD=libantdt_nccl.so under mpirun (any rank
 * count) and it checks every collective, dtype and op, in-place calls, count 0,
 * groups, split, shrink, non-blocking init, abort and the error paths on host
 * buffers, against values it computes itself.
 *
 *   nccl_client <id-file> [defer <steps> [nodrain]]   ("defer": the step loop, run under ANTDT_NCCL_LATE=wait
 *                                                     or defer; "nodrain": finalize straight after the loop)
 *   nccl_client <id-file> steps <steps> <slow-rank>   (a training-like loop: 2 ms of "compute", 6 ms on
 *                                                     <slow-rank>, then an AllReduce; for the straggler report)
 *
 * The rank and size come from mpirun's environment (OMPI_COMM_WORLD_RANK/SIZE)
 * or antdt-run's (ANTDT_RANK/ANTDT_WORLD_SIZE);
 * rank 0 writes each unique id to <id-file>.<n> (renamed into place), the
 * others read it: no MPI library is linked. "defer" runs a training-like loop
 * of AllReduces instead and checks that the replicas are bit-identical and that
 * every contribution landed exactly once. */
#include <nccl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, nranks, failures, checks;
static const char* id_path;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    ++checks;                                              \
    if (!(cond)) {                                         \
      ++failures;                                          \
      fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
    }                                                      \
  } while (0)

#define NCCL_OK(call)                                                                          \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    CHECK(r_ == ncclSuccess, "%s -> %d (%s): %s", #call, (int)r_, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Rank 0 makes the n-th id and publishes it; the others wait for it (30 s at most). */
static ncclUniqueId shared_id(int n) {
  char path[4096], tmp[4200];
  ncclUniqueId id;
  snprintf(path, sizeof path, "%s.%d", id_path, n);
  if (rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (f == NULL || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      fprintf(stderr, "rank 0: cannot write %s\n", path);
      exit(2);
    }
    return id;
  }
  for (double t0 = now_s(); now_s() - t0 < 30;) {
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      size_t got = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (got == 1) return id;
    }
    usleep(10000);
  }
  fprintf(stderr, "rank %d: no id in %s after 30 s\n", rank, path);
  exit(2);
}

/* ---- values of every dtype as doubles ---- */
static uint16_t f2h(float f) { /* exact for the small integers and halves used here */
  if (f == 0) return 0;
  uint16_t s = f < 0 ? 0x8000 : 0;
  f = fabsf(f);
  int e;
  float m = frexpf(f, &e);
  return (uint16_t)(s | ((e - 1 + 15) << 10) | (uint16_t)lrintf((m * 2 - 1) * 1024));
}
static float h2f(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}
static void put(void* buf, size_t i, ncclDataType_t t, double v) {
  switch (t) {
    case ncclInt8: ((int8_t*)buf)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t*)buf)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t*)buf)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t*)buf)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t*)buf)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t*)buf)[i] = (uint64_t)v; break;
    case ncclFloat16: ((uint16_t*)buf)[i] = f2h((float)v); break;
    case ncclBfloat16: { float f = (float)v; uint32_t x; memcpy(&x, &f, 4); ((uint16_t*)buf)[i] = (uint16_t)(x >> 16); break; }
    case ncclFloat32: ((float*)buf)[i] = (float)v; break;
    default: ((double*)buf)[i] = v; break;
  }
}
static double get(const void* buf, size_t i, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return ((const int8_t*)buf)[i];
    case ncclUint8: return ((const uint8_t*)buf)[i];
    case ncclInt32: return ((const int32_t*)buf)[i];
    case ncclUint32: return ((const uint32_t*)buf)[i];
    case ncclInt64: return (double)((const int64_t*)buf)[i];
    case ncclUint64: return (double)((const uint64_t*)buf)[i];
    case ncclFloat16: return h2f(((const uint16_t*)buf)[i]);
    case ncclBfloat16: { uint32_t x = (uint32_t)((const uint16_t*)buf)[i] << 16; float f; memcpy(&f, &x, 4); return f; }
    case ncclFloat32: return ((const float*)buf)[i];
    default: return ((const double*)buf)[i];
  }
}
static int is_float(ncclDataType_t t) { return t >= ncclFloat16 && t <= ncclBfloat16; }
static const char* type_name(ncclDataType_t t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"};
  return names[t];
}

/* Rank r's element i: 1..3, so products of 4 ranks fit int8. */
static double value(int r, size_t i) { return (double)((r + (int)i) % 3 + 1); }

static double expected(ncclRedOp_t op, size_t i, ncclDataType_t t) {
  double acc = value(0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = value(r, i);
    if (op == ncclSum || op == ncclAvg) acc += v;
    else if (op == ncclProd) acc *= v;
    else if (op == ncclMax) acc = v > acc ? v : acc;
    else acc = v < acc ? v : acc;
  }
  if (op == ncclAvg) acc = is_float(t) ? acc / nranks : floor(acc / nranks);
  return acc;
}

static void test_allreduce_every_type_and_op(ncclComm_t comm) {
  const size_t count = 1000;
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  for (int t = ncclInt8; t <= ncclBfloat16; ++t) {
    ncclDataType_t dt = (ncclDataType_t)t;
    void* send = malloc(count * 8);
    void* recv = malloc(count * 8);
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
      for (int in_place = 0; in_place < 2; ++in_place) {
        for (size_t i = 0; i < count; ++i) put(send, i, dt, value(rank, i));
        void* out = in_place ? send : recv;
        NCCL_OK(ncclAllReduce(send, out, count, dt, ops[o], comm, NULL));
        int bad = 0;
        for (size_t i = 0; i < count && !bad; ++i) {
          double want = expected(ops[o], i, dt), got = get(out, i, dt);
          double tol = is_float(dt) ? fabs(want) * (dt == ncclBfloat16 ? 1e-2 : dt == ncclFloat16 ? 2e-3 : 1e-6) : 0;
          if (fabs(got - want) > tol) {
            bad = 1;
            CHECK(0, "allreduce %s op %d%s: element %zu is %g, expected %g", type_name(dt), (int)ops[o],
                  in_place ? " in place" : "", i, got, want);
          }
        }
        CHECK(!bad, "allreduce");
      }
    }
    free(send);
    free(recv);
  }
  /* count 0 does nothing and succeeds, even with NULL buffers */
  NCCL_OK(ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, comm, NULL));
}

static void test_collectives(ncclComm_t comm) {
  const size_t n = 64;
  const int root = nranks - 1;
  float* a = calloc(n * nranks, sizeof(float));
  float* b = calloc(n * nranks, sizeof(float));
  /* Broadcast, and Bcast in place */
  for (size_t i = 0; i < n; ++i) a[i] = rank == root ? (float)(i * 2) : -1.0f;
  NCCL_OK(ncclBroadcast(a, b, n, ncclFloat, root, comm, NULL));
  for (size_t i = 0; i < n; ++i) CHECK(b[i] == (float)(i * 2), "broadcast[%zu] = %g", i, b[i]);
  for (size_t i = 0; i < n; ++i) a[i] = rank == 0 ? (float)i + 0.5f : 0;
  NCCL_OK(ncclBcast(a, n, ncclFloat, 0, comm, NULL));
  for (size_t i = 0; i < n; ++i) CHECK(a[i] == (float)i + 0.5f, "bcast[%zu] = %g", i, a[i]);
  /* Reduce to root 0 */
  for (size_t i = 0; i < n; ++i) a[i] = (float)value(rank, i);
  memset(b, 0, n * sizeof(float));
  NCCL_OK(ncclReduce(a, b, n, ncclFloat, ncclMax, 0, comm, NULL));
  if (rank == 0)
    for (size_t i = 0; i < n; ++i) CHECK(b[i] == (float)expected(ncclMax, i, ncclFloat), "reduce[%zu] = %g", i, b[i]);
  /* AllGather, and in place */
  for (size_t i = 0; i < n; ++i) a[i] = (float)(rank * 1000 + (int)i);
  NCCL_OK(ncclAllGather(a, b, n, ncclFloat, comm, NULL));
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < n; ++i) CHECK(b[r * n + i] == (float)(r * 1000 + (int)i), "allgather[%d][%zu]", r, i);
  for (size_t i = 0; i < n; ++i) b[rank * n + i] = (float)(rank + 7);
  NCCL_OK(ncclAllGather(b + rank * n, b, n, ncclFloat, comm, NULL));
  for (int r = 0; r < nranks; ++r) CHECK(b[r * n] == (float)(r + 7), "allgather in place [%d] = %g", r, b[r * n]);
  /* ReduceScatter: block r = sum over ranks of their block r */
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < n; ++i) a[r * n + i] = (float)(rank + r + (int)i);
  NCCL_OK(ncclReduceScatter(a, b, n, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int s = 0; s < nranks; ++s) want += (float)(s + rank + (int)i);
    CHECK(b[i] == want, "reducescatter[%zu] = %g, expected %g", i, b[i], want);
  }
  /* AlltoAll: block j of rank r goes to block r of rank j */
  for (int j = 0; j < nranks; ++j)
    for (size_t i = 0; i < n; ++i) a[j * n + i] = (float)(rank * 100 + j);
  NCCL_OK(ncclAlltoAll(a, b, n, ncclFloat, comm, NULL));
  for (int r = 0; r < nranks; ++r) CHECK(b[r * n] == (float)(r * 100 + rank), "alltoall[%d] = %g", r, b[r * n]);
  /* Gather to root, Scatter from root */
  for (size_t i = 0; i < n; ++i) a[i] = (float)(rank * 10 + 1);
  memset(b, 0, n * nranks * sizeof(float));
  NCCL_OK(ncclGather(a, b, n, ncclFloat, root, comm, NULL));
  if (rank == root)
    for (int r = 0; r < nranks; ++r) CHECK(b[r * n + n - 1] == (float)(r * 10 + 1), "gather[%d] = %g", r, b[r * n]);
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < n; ++i) a[r * n + i] = rank == root ? (float)(r * 3 + 2) : -1.0f;
  memset(b, 0, n * sizeof(float));
  NCCL_OK(ncclScatter(a, b, n, ncclFloat, root, comm, NULL));
  for (size_t i = 0; i < n; ++i) CHECK(b[i] == (float)(rank * 3 + 2), "scatter[%zu] = %g", i, b[i]);
  /* Send/Recv around a ring, in a group */
  if (nranks > 1) {
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    for (size_t i = 0; i < n; ++i) a[i] = (float)(rank + 0.25);
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(a, n, ncclFloat, next, comm, NULL));
    NCCL_OK(ncclRecv(b, n, ncclFloat, prev, comm, NULL));
    NCCL_OK(ncclGroupEnd());
    CHECK(b[0] == (float)(prev + 0.25) && b[n - 1] == (float)(prev + 0.25), "ring recv %g", b[0]);
  }
  /* A group of AllReduces (fused by antdt) and a broadcast */
  {
    float x[3][16];
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 16; ++i) x[k][i] = (float)(rank + k);
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(x[0], x[0], 16, ncclFloat, ncclSum, comm, NULL));
    NCCL_OK(ncclAllReduce(x[1], x[1], 16, ncclFloat, ncclSum, comm, NULL));
    NCCL_OK(ncclBroadcast(x[2], x[2], 16, ncclFloat, 0, comm, NULL));
    NCCL_OK(ncclGroupEnd());
    float s0 = 0, s1 = 0;
    for (int r = 0; r < nranks; ++r) s0 += (float)r, s1 += (float)(r + 1);
    CHECK(x[0][15] == s0 && x[1][0] == s1 && x[2][3] == 2.0f, "group: %g %g %g", x[0][15], x[1][0], x[2][3]);
  }
  /* PreMulSum: each rank its own scalar (rank + 1) */
  {
    double s = rank + 1.0, y[8];
    ncclRedOp_t op;
    NCCL_OK(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat64, ncclScalarHostImmediate, comm));
    for (int i = 0; i < 8; ++i) y[i] = (double)(i + 1);
    NCCL_OK(ncclAllReduce(y, y, 8, ncclFloat64, op, comm, NULL));
    double want = 0;
    for (int r = 0; r < nranks; ++r) want += (r + 1.0) * 8;
    CHECK(y[7] == want, "premulsum %g, expected %g", y[7], want);
    NCCL_OK(ncclRedOpDestroy(op, comm));
    CHECK(ncclRedOpDestroy(op, comm) == ncclInvalidArgument, "a destroyed op is destroyed twice");
  }
  free(a);
  free(b);
}

static void test_errors(ncclComm_t comm) {
  float x[4] = {0};
  CHECK(ncclAllReduce(x, x, 4, ncclFloat8e4m3, ncclSum, comm, NULL) == ncclInvalidArgument, "fp8 e4m3 refused");
  CHECK(strstr(ncclGetLastError(comm), "fp8") != NULL, "last error names fp8: '%s'", ncclGetLastError(comm));
  CHECK(ncclAllReduce(x, x, 4, ncclFloat8e5m2, ncclSum, comm, NULL) == ncclInvalidArgument, "fp8 e5m2 refused");
  CHECK(ncclAllReduce(x, x, 4, ncclNumTypes, ncclSum, comm, NULL) == ncclInvalidArgument, "bad dtype");
  CHECK(ncclAllReduce(x, x, 4, ncclFloat, (ncclRedOp_t)(ncclNumOps + 40), comm, NULL) == ncclInvalidArgument, "bad op");
  CHECK(ncclAllReduce(NULL, x, 4, ncclFloat, ncclSum, comm, NULL) == ncclInvalidArgument, "NULL send");
  CHECK(ncclBroadcast(x, x, 4, ncclFloat, nranks, comm, NULL) == ncclInvalidArgument, "bad root");
  CHECK(ncclSend(x, 4, ncclFloat, -1, comm, NULL) == ncclInvalidArgument, "bad peer");
  CHECK(ncclAllReduce(x, x, 4, ncclFloat, ncclSum, NULL, NULL) == ncclInvalidArgument, "NULL comm");
  CHECK(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  ncclWindow_t win;
  CHECK(ncclCommWindowRegister(comm, x, sizeof x, &win, NCCL_WIN_DEFAULT) == ncclInvalidUsage, "windows refused");
  void* handle = NULL;
  NCCL_OK(ncclCommRegister(comm, x, sizeof x, &handle));
  NCCL_OK(ncclCommDeregister(comm, handle));
  CHECK(strlen(ncclGetErrorString(ncclInvalidArgument)) > 0, "error string");
}

/* Ranks disagree on the count: an error on every rank, within the timeout, never a hang. */
static void test_mismatch(ncclComm_t world) {
  if (nranks < 2) return;
  ncclComm_t c = NULL;
  NCCL_OK(ncclCommSplit(world, 0, rank, &c, NULL));
  if (c == NULL) return;
  float x[8] = {0};
  double t0 = now_s();
  ncclResult_t r = ncclAllReduce(x, x, rank == 0 ? 4 : 8, ncclFloat, ncclSum, c, NULL);
  CHECK(r != ncclSuccess, "a count mismatch across ranks is an error on every rank (got %d)", (int)r);
  CHECK(strlen(ncclGetLastError(c)) > 0, "the mismatch is explained");
  CHECK(now_s() - t0 < 20, "the mismatch was reported in %.1f s", now_s() - t0);
  double t1 = now_s();
  NCCL_OK(ncclCommAbort(c));
  CHECK(now_s() - t1 < 5, "abort took %.1f s", now_s() - t1);
}

static void test_split_and_shrink(ncclComm_t world) {
  /* colors by parity, keys reversed: new rank = position in descending world rank */
  ncclComm_t half = NULL;
  NCCL_OK(ncclCommSplit(world, rank % 2, nranks - rank, &half, NULL));
  int members = 0, below = 0;
  for (int r = 0; r < nranks; ++r)
    if (r % 2 == rank % 2) {
      ++members;
      if (r > rank) ++below;
    }
  int count = -1, me = -1;
  NCCL_OK(ncclCommCount(half, &count));
  NCCL_OK(ncclCommUserRank(half, &me));
  CHECK(count == members && me == below, "split: count %d rank %d, expected %d %d", count, me, members, below);
  int v = rank;
  NCCL_OK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, half, NULL));
  int want = 0;
  for (int r = rank % 2; r < nranks; r += 2) want += r;
  CHECK(v == want, "split allreduce %d, expected %d", v, want);
  NCCL_OK(ncclCommFinalize(half));
  CHECK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, half, NULL) == ncclInvalidUsage, "collective after finalize");
  NCCL_OK(ncclCommDestroy(half));
  /* NCCL_SPLIT_NOCOLOR: rank 0 stays out */
  ncclComm_t rest = (ncclComm_t)&v;
  NCCL_OK(ncclCommSplit(world, rank == 0 ? NCCL_SPLIT_NOCOLOR : 1, rank, &rest, NULL));
  CHECK((rank == 0) == (rest == NULL), "NOCOLOR gives NULL (rank %d: %p)", rank, (void*)rest);
  if (rest != NULL) NCCL_OK(ncclCommDestroy(rest));
  /* Shrink: the last rank is excluded and does not call */
  if (nranks > 1) {
    int excluded = nranks - 1;
    if (rank != excluded) {
      ncclComm_t small = NULL;
      NCCL_OK(ncclCommShrink(world, &excluded, 1, &small, NULL, NCCL_SHRINK_DEFAULT));
      count = -1;
      NCCL_OK(ncclCommCount(small, &count));
      CHECK(count == nranks - 1, "shrink count %d", count);
      v = 1;
      NCCL_OK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, small, NULL));
      CHECK(v == nranks - 1, "shrink allreduce %d", v);
      NCCL_OK(ncclCommDestroy(small));
    }
  }
}

static void test_nonblocking_init_and_abort(void) {
  ncclUniqueId id = shared_id(1);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t c = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&c, nranks, id, rank, &config);
  CHECK(r == ncclInProgress || r == ncclSuccess, "non-blocking init returns %d", (int)r);
  ncclResult_t state = ncclInProgress;
  for (double t0 = now_s(); state == ncclInProgress && now_s() - t0 < 30;) {
    NCCL_OK(ncclCommGetAsyncError(c, &state));
    if (state == ncclInProgress) usleep(1000);
  }
  CHECK(state == ncclSuccess, "non-blocking init finished with %d", (int)state);
  double x = 1;
  NCCL_OK(ncclAllReduce(&x, &x, 1, ncclDouble, ncclSum, c, NULL));
  CHECK(x == nranks, "allreduce on the non-blocking comm %g", x);
  double t0 = now_s();
  NCCL_OK(ncclCommAbort(c));
  CHECK(now_s() - t0 < 5, "abort took %.1f s", now_s() - t0);
}

/* One process, two ranks (threads), driven from one thread with a group. */
static void test_init_all(void) {
  ncclComm_t comms[2];
  NCCL_OK(ncclCommInitAll(comms, 2, NULL));
  float x[2][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}};
  NCCL_OK(ncclGroupStart());
  for (int i = 0; i < 2; ++i) NCCL_OK(ncclAllReduce(x[i], x[i], 4, ncclFloat, ncclSum, comms[i], NULL));
  NCCL_OK(ncclGroupEnd());
  CHECK(x[0][0] == 11 && x[1][3] == 44, "init-all group allreduce %g %g", x[0][0], x[1][3]);
  for (int i = 0; i < 2; ++i) NCCL_OK(ncclCommDestroy(comms[i]));
}

/* Defer mode: every step's result must be the same on every rank (bit-identical),
 * and the sum over all results of the per-rank contribution counts must equal the
 * steps each rank made: a contribution is the one-hot vector e_rank. */
static void run_defer(ncclComm_t comm, int steps, int drain) {
  float* g = calloc((size_t)nranks + 1, sizeof(float));
  double* landed = calloc((size_t)nranks, sizeof(double));
  uint64_t digest = 1469598103934665603ull;
  for (int s = 0; s < steps; ++s) {
    memset(g, 0, (size_t)(nranks + 1) * sizeof(float));
    g[rank] = 1.0f;
    g[nranks] = (float)s;  /* this rank's step, summed: identical on every rank only if replicas agree */
    NCCL_OK(ncclAllReduce(g, g, nranks + 1, ncclFloat, ncclSum, comm, NULL));
    for (int r = 0; r < nranks; ++r) landed[r] += g[r];
    const unsigned char* p = (const unsigned char*)g;
    for (size_t i = 0; i < (size_t)(nranks + 1) * sizeof(float); ++i) digest = (digest ^ p[i]) * 1099511628211ull;
  }
  if (!drain) {
    /* Finalize at once: the slowed rank is still up to S steps behind, and the
     * fast ranks (the arbiter's among them) must not leave it stranded. */
    free(g);
    free(landed);
    return;
  }
  /* drain: BSP barriers so the last deferred contributions land */
  for (int s = 0; s < 4; ++s) {
    memset(g, 0, (size_t)(nranks + 1) * sizeof(float));
    NCCL_OK(ncclAllReduce(g, g, nranks + 1, ncclFloat, ncclSum, comm, NULL));
    for (int r = 0; r < nranks; ++r) landed[r] += g[r];
  }
  /* A broadcast while the partial run is open (the shim ends the run first): rank 0's
   * digest must reach every rank, and equal its own. */
  uint64_t root_digest = digest;
  NCCL_OK(ncclBroadcast(&root_digest, &root_digest, 1, ncclUint64, 0, comm, NULL));
  CHECK(root_digest == digest, "rank 0's replica differs from rank %d's (broadcast)", rank);
  /* compare digests: every rank's must be the same */
  uint64_t all[64] = {0};
  uint64_t mine[64] = {0};
  mine[rank < 64 ? rank : 0] = digest;
  NCCL_OK(ncclAllReduce(mine, all, 64, ncclUint64, ncclSum, comm, NULL));
  for (int r = 0; r < nranks && r < 64; ++r) CHECK(all[r] == digest, "replica %d differs from rank %d's results", r, rank);
  for (int r = 0; r < nranks; ++r)
    CHECK(landed[r] == steps, "rank %d's contributions landed %g times, expected %d", r, landed[r], steps);
  free(g);
  free(landed);
}

/* A training-like loop whose compute is a sleep, one rank 3x slower: what the
 * straggler report must name. Results are not checked (a stand-in does no work). */
static void run_steps(ncclComm_t comm, int steps, int slow_rank) {
  float g[64] = {0};
  for (int s = 0; s < steps; ++s) {
    usleep(rank == slow_rank ? 6000 : 2000);
    NCCL_OK(ncclAllReduce(g, g, 64, ncclFloat, ncclSum, comm, NULL));
  }
}

int main(int argc, char** argv) {
  const char* r = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("ANTDT_RANK");
  const char* n = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("ANTDT_WORLD_SIZE");
  if (argc < 2) {
    fprintf(stderr, "usage: %s <id-file> [defer <steps> [nodrain]]\n", argv[0]);
    return 2;
  }
  id_path = argv[1];
  rank = r ? atoi(r) : 0;
  nranks = n ? atoi(n) : 1;
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  CHECK(version == NCCL_VERSION_CODE, "version %d", version);
  ncclUniqueId id = shared_id(0);
  ncclComm_t world = NULL;
  NCCL_OK(ncclCommInitRank(&world, nranks, id, rank));
  if (world == NULL) return 1;
  int device = 0;
  NCCL_OK(ncclCommCuDevice(world, &device));
  if (argc >= 5 && strcmp(argv[2], "steps") == 0) {
    run_steps(world, atoi(argv[3]), atoi(argv[4]));
  } else if (argc >= 4 && strcmp(argv[2], "defer") == 0) {
    run_defer(world, atoi(argv[3]), !(argc >= 5 && strcmp(argv[4], "nodrain") == 0));
  } else {
    test_allreduce_every_type_and_op(world);
    test_collectives(world);
    test_errors(world);
    test_split_and_shrink(world);
    test_nonblocking_init_and_abort();
    test_init_all();
    test_mismatch(world);
  }
  NCCL_OK(ncclCommFinalize(world));
  NCCL_OK(ncclCommDestroy(world));
  printf("rank %d/%d: %d checks, %d failures\n", rank, nranks, checks, failures);
  return failures == 0 ? 0 : 1;
}
