/* mpi_allreduce_perf: the Open MPI MPI_Allreduce baseline for antdt_allreduce_perf.
 *
 * Same options (-b -e -f -i -n -w -c -d -o, nccl-tests names), same input
 * pattern for sum ((rank + 1) * (i % 7 + 1), exact in float and double), same
 * table: out-of-place (separate buffers) then in-place (MPI_IN_PLACE); time is
 * the slowest rank's average per iteration; busbw = algbw * 2(n-1)/n.
 * Rank 0 prints; the exit code is non-zero when any element is wrong. The
 * options, sweep and table are mpi_collective_perf's too: mpi_perf_common.h. */
#include "mpi_perf_common.h"

#include <stdlib.h>
#include <string.h>

/* Each rank sends and receives the whole vector: 2(n-1)/n of it per link. */
static double bus_bandwidth(double algbw) {
  const int world_size = perf_size();
  return world_size > 0 ? algbw * 2.0 * (world_size - 1) / world_size : 0.0;
}

/* Input and expected values are small integers: exact in float and double. */
static void fill_input(void* buffer, size_t count, int is_double) {
  const int world_rank = perf_rank();
  size_t i;
  for (i = 0; i < count; ++i) {
    const double v = (double)(world_rank + 1) * (double)(i % 7 + 1);
    if (is_double) ((double*)buffer)[i] = v;
    else ((float*)buffer)[i] = (float)v;
  }
}

static unsigned long long count_wrong(const void* buffer, size_t count, int is_double, size_t* first) {
  const int world_size = perf_size();
  const double ranks_total = (double)world_size * (world_size + 1) / 2.0;
  unsigned long long wrong = 0;
  size_t i;
  for (i = 0; i < count; ++i) {
    const double expected = ranks_total * (double)(i % 7 + 1);
    const double got = is_double ? ((const double*)buffer)[i] : (double)((const float*)buffer)[i];
    if (got != expected) {
      if (wrong == 0) *first = i;
      ++wrong;
    }
  }
  return wrong;
}

static double time_allreduce(const void* send, void* recv, size_t count, MPI_Datatype type, int iters) {
  int i;
  const double start = MPI_Wtime();
  for (i = 0; i < iters; ++i) MPI_Allreduce(send, recv, (int)count, type, MPI_SUM, MPI_COMM_WORLD);
  return (MPI_Wtime() - start) * 1.0e6 / iters;
}

int main(int argc, char** argv) {
  perf_options_t opts;
  perf_table_t table;
  size_t width, capacity, size, next = 0;
  char *input, *result;
  MPI_Datatype type;
  int exit_code;

  perf_init(&argc, &argv, "mpi_allreduce_perf");
  opts = perf_parse_options(argc, argv, NULL);
  width = perf_width(&opts);
  type = perf_type(&opts);
  capacity = (opts.max_bytes / width > 0 ? opts.max_bytes / width : 1) * width;
  input = malloc(capacity);
  result = malloc(capacity);
  if (input == NULL || result == NULL) perf_die("out of memory");
  fill_input(input, capacity / width, opts.is_double);
  memset(result, 0, capacity);

  table = perf_table(&opts, "sum", -1, bus_bandwidth);
  perf_table_header(&table, NULL);
  for (size = opts.min_bytes;; size = next) {
    const size_t count = size / width, bytes = count * width;
    double times[2];
    unsigned long long wrong[2] = {0, 0};
    size_t first = 0;
    int w;

    /* Out of place. */
    for (w = 0; w < opts.warmup_iters; ++w) MPI_Allreduce(input, result, (int)count, type, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    times[0] = time_allreduce(input, result, count, type, opts.iters);
    if (opts.check) {
      memset(result, 0xff, bytes); /* NaN in float and double: never equal to the expected value */
      MPI_Allreduce(input, result, (int)count, type, MPI_SUM, MPI_COMM_WORLD);
      wrong[0] = count_wrong(result, count, opts.is_double, &first);
      if (wrong[0] > 0) perf_report_wrong(bytes, 0, wrong[0], first);
    }
    /* In place, on zeros so that repeated sums stay bounded; checked once on the input. */
    memset(result, 0, bytes);
    for (w = 0; w < opts.warmup_iters; ++w)
      MPI_Allreduce(MPI_IN_PLACE, result, (int)count, type, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    times[1] = time_allreduce(MPI_IN_PLACE, result, count, type, opts.iters);
    if (opts.check) {
      memcpy(result, input, bytes);
      MPI_Allreduce(MPI_IN_PLACE, result, (int)count, type, MPI_SUM, MPI_COMM_WORLD);
      wrong[1] = count_wrong(result, count, opts.is_double, &first);
      if (wrong[1] > 0) perf_report_wrong(bytes, 1, wrong[1], first);
    }
    perf_table_row(&table, bytes, count, times, wrong);
    if (!perf_next_size(&opts, size, &next)) break;
  }

  exit_code = perf_table_footer(&table);
  free(input);
  free(result);
  MPI_Finalize();
  return exit_code;
}
