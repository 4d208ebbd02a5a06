/* nccl_allreduce_perf: an nccl-tests style AllReduce benchmark written only
 * against nccl.h, to measure the NCCL-API path: run it through the shim
 * (LD_PRELOAD=libantdt_nccl.so) beside antdt_allreduce_perf, or on the real NCCL.
 * Rank/size from mpirun's environment; the unique id travels through <id-file>.
 *
 *   nccl_allreduce_perf <id-file> [-b bytes] [-e bytes] [-f factor] [-n iters] [-w warmup] [-G]
 *   nccl_allreduce_perf <id-file> -S steps [-c compute_ms] [-B count] [-r slow_rank -x slow_factor]
 *                       [-p spike_p -k spike_factor]      (straggler loop: compute + ncclAllReduce)
 *
 * -G allocates the buffers with ncclMemAlloc (device memory where there is a GPU)
 * and skips the result check. Rank 0 prints the table. */
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, nranks;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

#define OK(call)                                                                              \
  do {                                                                                        \
    ncclResult_t r_ = (call);                                                                 \
    if (r_ != ncclSuccess) {                                                                  \
      fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

static ncclUniqueId exchange_id(const char* path) {
  ncclUniqueId id;
  char tmp[4200];
  if (rank == 0) {
    OK(ncclGetUniqueId(&id));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) exit(2);
    return id;
  }
  for (double t0 = now_s(); now_s() - t0 < 30; usleep(10000)) {
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t got = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (got == 1) return id;
    }
  }
  fprintf(stderr, "rank %d: no id in %s\n", rank, path);
  exit(2);
}

/* The compute phase is a timed wait, as in antdt_straggler_perf: the real compute
 * runs on a GPU, and with more ranks than cores a busy loop would take the CPU the
 * other ranks' transfers need, so the policies would be compared on contention. */
static void compute_for(double seconds) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  long long ns = (long long)until.tv_nsec + (long long)(seconds * 1e9);
  until.tv_sec += (time_t)(ns / 1000000000LL);
  until.tv_nsec = (long)(ns % 1000000000LL);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) != 0) {
  }
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <id-file> [options]\n", argv[0]);
    return 2;
  }
  const char* id_path = argv[1];
  size_t min_bytes = 8, max_bytes = 64u << 20;
  double factor = 2, compute_ms = 10, slow_x = 1, spike_p = 0, spike_x = 1;
  int iters = 20, warmup = 5, device = 0, steps = 0, slow_rank = -1;
  size_t batch_count = 1 << 20;
  int opt;
  optind = 2;
  while ((opt = getopt(argc, argv, "b:e:f:n:w:GS:c:B:r:x:p:k:")) != -1) {
    switch (opt) {
      case 'b': min_bytes = strtoull(optarg, NULL, 10); break;
      case 'e': max_bytes = strtoull(optarg, NULL, 10); break;
      case 'f': factor = atof(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      case 'G': device = 1; break;
      case 'S': steps = atoi(optarg); break;
      case 'c': compute_ms = atof(optarg); break;
      case 'B': batch_count = strtoull(optarg, NULL, 10); break;
      case 'r': slow_rank = atoi(optarg); break;
      case 'x': slow_x = atof(optarg); break;
      case 'p': spike_p = atof(optarg); break;
      case 'k': spike_x = atof(optarg); break;
      default: return 2;
    }
  }
  const char* r = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("ANTDT_RANK");
  const char* n = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("ANTDT_WORLD_SIZE");
  rank = r ? atoi(r) : 0;
  nranks = n ? atoi(n) : 1;
  ncclUniqueId id = exchange_id(id_path);
  ncclComm_t comm;
  OK(ncclCommInitRank(&comm, nranks, id, rank));

  if (steps > 0) {
    /* Straggler loop: compute (a timed wait), then ncclAllReduce of the "gradient". */
    float* g = malloc(batch_count * sizeof(float));
    for (size_t i = 0; i < batch_count; ++i) g[i] = 1.0f;
    unsigned seed = 12345u + (unsigned)rank;
    double t0 = now_s();
    for (int s = 0; s < steps; ++s) {
      double c = compute_ms / 1e3 * (rank == slow_rank ? slow_x : 1);
      if (spike_p > 0 && (double)rand_r(&seed) / RAND_MAX < spike_p) c *= spike_x;
      compute_for(c);
      OK(ncclAllReduce(g, g, batch_count, ncclFloat, ncclAvg, comm, NULL));
    }
    /* The job's time is the slowest rank's: with defer the fast ranks finish up to
     * S steps early. (A max AllReduce of another dtype also ends the partial run.) */
    double elapsed = now_s() - t0, job = 0;
    OK(ncclAllReduce(&elapsed, &job, 1, ncclFloat64, ncclMax, comm, NULL));
    if (rank == 0)
      printf("nccl straggler loop: %d ranks, %d steps, compute %.1f ms (rank %d x%.1f, spikes p=%.2f x%.1f): "
             "%.2f steps/s (job time %.3f s; samples/s = steps/s x ranks x batch)\n",
             nranks, steps, compute_ms, slow_rank, slow_x, spike_p, spike_x, steps / job, job);
    free(g);
  } else {
    void *send, *recv;
    if (device) {
      OK(ncclMemAlloc(&send, max_bytes));
      OK(ncclMemAlloc(&recv, max_bytes));
    } else {
      send = malloc(max_bytes);
      recv = malloc(max_bytes);
      for (size_t i = 0; i < max_bytes / 4; ++i) ((float*)send)[i] = (float)(rank + 1);
    }
    if (rank == 0)
      printf("# nccl_allreduce_perf: %d ranks, float sum, %s buffers\n#%12s %12s %10s %10s %10s %6s\n", nranks,
             device ? "ncclMemAlloc" : "host", "size(B)", "count", "time(us)", "algbw", "busbw", "wrong");
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes = (size_t)(bytes * factor) > bytes ? (size_t)(bytes * factor) : bytes + 1) {
      size_t count = bytes / 4;
      for (int i = 0; i < warmup; ++i) OK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL));
      double t0 = now_s();
      for (int i = 0; i < iters; ++i) OK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL));
      double us = (now_s() - t0) / iters * 1e6;
      long wrong = 0;
      if (!device) {
        float want = (float)nranks * (nranks + 1) / 2;
        for (size_t i = 0; i < count; ++i) wrong += ((float*)recv)[i] != want;
      }
      double algbw = us > 0 ? (double)(count * 4) / us / 1e3 : 0;
      if (rank == 0)
        printf(" %12zu %12zu %10.2f %10.3f %10.3f %6ld\n", count * 4, count, us, algbw,
               algbw * 2.0 * (nranks - 1) / nranks, wrong);
      if (wrong) return 1;
    }
    if (device) {
      OK(ncclMemFree(send));
      OK(ncclMemFree(recv));
    } else {
      free(send);
      free(recv);
    }
  }
  OK(ncclCommDestroy(comm));
  return 0;
}
