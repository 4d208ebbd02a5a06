/* mpi_perf_common: what the Open MPI baselines (mpi_allreduce_perf,
 * mpi_collective_perf) share with each other and with the antdt perf tools'
 * interface: the nccl-tests options (-b -e -f -i -n -w -c -d -o), the size
 * sweep, the error exits and the table (header, one row per size with
 * out-of-place and in-place columns, summary). Each program keeps its own
 * collective, inputs, checks and bus-bandwidth factor. */
#ifndef ANTDT_PERF_BASELINES_MPI_PERF_COMMON_H
#define ANTDT_PERF_BASELINES_MPI_PERF_COMMON_H

#include <mpi.h>

#include <getopt.h>
#include <stddef.h>

typedef struct {
  size_t min_bytes;
  size_t max_bytes;
  size_t step_factor; /* multiply when > 1 */
  size_t step_bytes;  /* otherwise add */
  int iters;
  int warmup_iters;
  int check;
  int is_double; /* float or double */
} perf_options_t;

/* MPI_Init, and the rank, size and name that the functions below report with. */
void perf_init(int* argc, char*** argv, const char* tool_name);
int perf_rank(void);
int perf_size(void);
const char* perf_tool_name(void);

/* For usage errors, which every rank detects alike: rank 0 says why, exit 2. */
void perf_fail(const char* message);
/* For errors of one rank: the others must not wait for it (MPI_Abort, 3). */
void perf_die(const char* message);

/* A decimal int in [-1e9, 1e9]; 0 on bad input. */
int perf_parse_int(const char* text, int* out);

/* A program's own options, parsed in the same getopt_long loop as the common
 * ones (so that abbreviations of long names stay unambiguous across both). */
typedef struct {
  const char* short_options;          /* e.g. "C:r:" */
  const struct option* long_options;  /* {NULL, 0, NULL, 0}-terminated */
  const char* usage_lines;            /* --help lines, printed before -h's */
  /* One of short_options' letters; perf_fail on a bad value. */
  void (*parse)(int letter, const char* value, void* context);
  /* After every option, before the sweep's own checks: e.g. a required option. */
  void (*check)(void* context);
  void* context;
} perf_extra_options_t;

/* Parses argv (extra: NULL when a program has no options of its own); bad
 * input, and a maxbytes of more elements than MPI's int count holds, end the
 * program through perf_fail; --help exits 0. */
perf_options_t perf_parse_options(int argc, char** argv, const perf_extra_options_t* extra);

/* Bytes per element, and its MPI type. */
size_t perf_width(const perf_options_t* opts);
MPI_Datatype perf_type(const perf_options_t* opts);

/* Next size in the sweep, or 0 when done (sizes are visited while <= max). */
int perf_next_size(const perf_options_t* opts, size_t size, size_t* next);

/* The table every rank takes part in (rows need two MPI_Allreduce calls);
 * rank 0 prints it. */
typedef struct {
  const perf_options_t* options;
  const char* redop; /* the redop column: "sum", "none" */
  int root;          /* the root column: -1 unless the collective has one */
  /* busbw from algbw: the collective's share of the traffic on each link. */
  double (*bus_bandwidth)(double algbw);
  unsigned long long wrong_total;
  double busbw_total;
  int rows;
} perf_table_t;

perf_table_t perf_table(const perf_options_t* opts, const char* redop, int root, double (*bus_bandwidth)(double));
/* "# Collective test starting: TOOL[ (variant)]", the options, one line per
 * rank, the column heads; variant may be NULL. */
void perf_table_header(const perf_table_t* table, const char* variant);
/* One row: times[0] and wrong[0] out of place, [1] in place, this rank's own;
 * the row has the slowest rank's time and every rank's wrong elements. */
void perf_table_row(perf_table_t* table, size_t bytes, size_t count, const double times[2],
                    const unsigned long long wrong[2]);
/* The summary lines; returns the exit code (non-zero when any element was wrong). */
int perf_table_footer(const perf_table_t* table);

/* The stderr line of a rank that found wrong elements. */
void perf_report_wrong(size_t bytes, int in_place, unsigned long long wrong, size_t first);

#endif
