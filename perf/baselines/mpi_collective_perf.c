/* mpi_collective_perf: the Open MPI baselines of antdt_reducescatter_perf,
 * antdt_allgather_perf and antdt_broadcast_perf (-C reducescatter | allgather
 * | broadcast; mpi_allreduce_perf is AllReduce's).
 *
 * Same options as mpi_allreduce_perf (-b -e -f -i -n -w -c -d, nccl-tests
 * names) plus -C and -r (the broadcast root), the same sizes as the antdt
 * tools (nccl-tests'): ReduceScatter's size is each rank's input (n blocks),
 * AllGather's the gathered output (n blocks), Broadcast's the message; busbw =
 * algbw * (n-1)/n for the first two, algbw for Broadcast. Inputs are small
 * integers (exact in float and double), sums over ranks for ReduceScatter.
 * Table: out-of-place then in-place (MPI_IN_PLACE; Broadcast: the same
 * buffer); time is the slowest rank's average per iteration. Rank 0 prints;
 * the exit code is non-zero when any element is wrong. The options, sweep and
 * table are mpi_allreduce_perf's too: mpi_perf_common.h. */
#include "mpi_perf_common.h"

#include <stdlib.h>
#include <string.h>

enum { COLL_REDUCESCATTER, COLL_ALLGATHER, COLL_BROADCAST };
static const char* const kCollectiveNames[] = {"reducescatter", "allgather", "broadcast"};

typedef struct {
  perf_options_t common; /* -b -e -f -i -n -w -c -d -o */
  int collective;        /* COLL_* */
  int root;              /* broadcast */
} options_t;

static void parse_own_option(int letter, const char* value, void* context) {
  options_t* opts = context;
  switch (letter) {
    case 'C':
      for (opts->collective = 2; opts->collective >= 0; --opts->collective)
        if (strcmp(value, kCollectiveNames[opts->collective]) == 0) break;
      if (opts->collective < 0) perf_fail("-C: reducescatter, allgather or broadcast");
      break;
    default: /* 'r' */
      if (!perf_parse_int(value, &opts->root) || opts->root < 0 || opts->root >= perf_size())
        perf_fail("-r root out of range");
      break;
  }
}

static void check_own_options(void* context) {
  const options_t* opts = context;
  if (opts->collective < 0) perf_fail("-C is required: reducescatter, allgather or broadcast");
}

static options_t parse_options(int argc, char** argv) {
  static const struct option own_long_options[] = {
      {"collective", required_argument, NULL, 'C'}, {"root", required_argument, NULL, 'r'}, {NULL, 0, NULL, 0}};
  options_t opts = {{0}, -1, 0};
  perf_extra_options_t own;
  own.short_options = "C:r:";
  own.long_options = own_long_options;
  own.usage_lines =
      "  -C,--collective <c>    reducescatter, allgather or broadcast (required)\n"
      "  -r,--root <n>          broadcast root (default 0)\n";
  own.parse = parse_own_option;
  own.check = check_own_options;
  own.context = &opts;
  opts.common = perf_parse_options(argc, argv, &own);
  return opts;
}

/* ReduceScatter and AllGather move (n-1)/n of the data over each link, Broadcast all of it. */
static double ring_bus_bandwidth(double algbw) { return algbw * ((double)(perf_size() - 1) / perf_size()); }
static double broadcast_bus_bandwidth(double algbw) { return algbw; }

static void put(void* buffer, size_t i, int is_double, double v) {
  if (is_double) ((double*)buffer)[i] = v;
  else ((float*)buffer)[i] = (float)v;
}
static double get(const void* buffer, size_t i, int is_double) {
  return is_double ? ((const double*)buffer)[i] : (double)((const float*)buffer)[i];
}

/* The one call of the collective; in place: MPI_IN_PLACE (Broadcast: one buffer). */
static void run_once(const options_t* o, void* send, void* recv, size_t block, MPI_Datatype type, int in_place) {
  switch (o->collective) {
    case COLL_REDUCESCATTER:
      /* In place, the input is recv (n blocks) and the result its first block. */
      MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, (int)block, type, MPI_SUM, MPI_COMM_WORLD);
      break;
    case COLL_ALLGATHER:
      if (in_place) MPI_Allgather(MPI_IN_PLACE, 0, type, recv, (int)block, type, MPI_COMM_WORLD);
      else MPI_Allgather(send, (int)block, type, recv, (int)block, type, MPI_COMM_WORLD);
      break;
    default: MPI_Bcast(in_place ? recv : send, (int)block, type, o->root, MPI_COMM_WORLD); break;
  }
}

/* The inputs of one call: ReduceScatter (rank + 1) * (i % 7 + 1) over all n
 * blocks, AllGather's own block (rank + 1) * (j % 7 + 1) at its place,
 * Broadcast's root payload (i % 7 + 1) * 3 (others' buffers hold NaN). */
static void fill(const options_t* o, void* send, void* recv, size_t block, int in_place) {
  const size_t n = (size_t)perf_size(), r = (size_t)perf_rank();
  size_t i;
  switch (o->collective) {
    case COLL_REDUCESCATTER:
      for (i = 0; i < n * block; ++i)
        put(in_place ? recv : send, i, o->common.is_double, (double)(r + 1) * (double)(i % 7 + 1));
      break;
    case COLL_ALLGATHER:
      memset(recv, 0xff, n * block * (o->common.is_double ? 8 : 4));
      for (i = 0; i < block; ++i)
        put(in_place ? (char*)recv + r * block * (o->common.is_double ? 8 : 4) : send, i, o->common.is_double,
            (double)(r + 1) * (double)(i % 7 + 1));
      break;
    default:
      memset(in_place ? recv : send, 0xff, block * (o->common.is_double ? 8 : 4));
      if (perf_rank() == o->root)
        for (i = 0; i < block; ++i) put(in_place ? recv : send, i, o->common.is_double, (double)(i % 7 + 1) * 3.0);
      break;
  }
}

static unsigned long long count_wrong(const options_t* o, const void* send, const void* recv, size_t block,
                                      int in_place, size_t* first) {
  const int world_size = perf_size();
  const size_t n = (size_t)world_size, r = (size_t)perf_rank();
  const double ranks_total = (double)world_size * (world_size + 1) / 2.0;
  unsigned long long wrong = 0;
  size_t i, b;
  const void* result = o->collective == COLL_BROADCAST && !in_place ? send : recv;
  for (i = 0; i < (o->collective == COLL_ALLGATHER ? n * block : block); ++i) {
    double expected;
    if (o->collective == COLL_REDUCESCATTER) expected = ranks_total * (double)((r * block + i) % 7 + 1);
    else if (o->collective == COLL_ALLGATHER) {
      b = i / block;
      expected = (double)(b + 1) * (double)(i % block % 7 + 1);
    } else expected = (double)(i % 7 + 1) * 3.0;
    if (get(result, i, o->common.is_double) != expected) {
      if (wrong == 0) *first = i;
      ++wrong;
    }
  }
  return wrong;
}

static double time_calls(const options_t* o, void* send, void* recv, size_t block, MPI_Datatype type, int in_place) {
  int i;
  double start;
  for (i = 0; i < o->common.warmup_iters; ++i) run_once(o, send, recv, block, type, in_place);
  MPI_Barrier(MPI_COMM_WORLD);
  start = MPI_Wtime();
  for (i = 0; i < o->common.iters; ++i) run_once(o, send, recv, block, type, in_place);
  return (MPI_Wtime() - start) * 1.0e6 / o->common.iters;
}

int main(int argc, char** argv) {
  options_t opts;
  perf_table_t table;
  size_t width, size, next = 0, n;
  char *send, *recv;
  MPI_Datatype type;
  int exit_code;

  perf_init(&argc, &argv, "mpi_collective_perf");
  opts = parse_options(argc, argv);
  n = (size_t)perf_size();
  width = perf_width(&opts.common);
  type = perf_type(&opts.common);
  send = malloc(opts.common.max_bytes + width);
  recv = malloc(opts.common.max_bytes + width);
  if (send == NULL || recv == NULL) perf_die("out of memory");

  table = perf_table(&opts.common, opts.collective == COLL_REDUCESCATTER ? "sum" : "none",
                     opts.collective == COLL_BROADCAST ? opts.root : -1,
                     opts.collective == COLL_BROADCAST ? broadcast_bus_bandwidth : ring_bus_bandwidth);
  perf_table_header(&table, kCollectiveNames[opts.collective]);
  for (size = opts.common.min_bytes;; size = next) {
    /* Elements per rank's block (Broadcast: the message). */
    const size_t block = opts.collective == COLL_BROADCAST ? size / width : size / width / n;
    const size_t count = opts.collective == COLL_BROADCAST ? block : block * n, bytes = count * width;
    double times[2];
    unsigned long long wrong[2] = {0, 0};
    size_t first = 0;
    int in_place;

    for (in_place = 0; in_place < 2; ++in_place) {
      fill(&opts, send, recv, block, in_place);
      times[in_place] = time_calls(&opts, send, recv, block, type, in_place);
      if (opts.common.check) {
        fill(&opts, send, recv, block, in_place);
        run_once(&opts, send, recv, block, type, in_place);
        wrong[in_place] = count_wrong(&opts, send, recv, block, in_place, &first);
        if (wrong[in_place] > 0) perf_report_wrong(bytes, in_place, wrong[in_place], first);
      }
    }
    perf_table_row(&table, bytes, count, times, wrong);
    if (!perf_next_size(&opts.common, size, &next)) break;
  }

  exit_code = perf_table_footer(&table);
  free(send);
  free(recv);
  MPI_Finalize();
  return exit_code;
}
