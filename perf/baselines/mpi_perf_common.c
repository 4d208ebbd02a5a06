/* The options, sweep, error exits and table of the Open MPI baselines; see
 * mpi_perf_common.h. */
#include "mpi_perf_common.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int world_rank = 0;
static int world_size = 1;
static const char* tool_name = "mpi_perf";

void perf_init(int* argc, char*** argv, const char* name) {
  tool_name = name;
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
}

int perf_rank(void) { return world_rank; }
int perf_size(void) { return world_size; }
const char* perf_tool_name(void) { return tool_name; }

void perf_fail(const char* message) {
  if (world_rank == 0) fprintf(stderr, "%s: %s\n", tool_name, message);
  MPI_Finalize();
  exit(2);
}

void perf_die(const char* message) {
  fprintf(stderr, "%s: rank %d: %s\n", tool_name, world_rank, message);
  MPI_Abort(MPI_COMM_WORLD, 3);
  exit(3);
}

/* "8", "1K", "64M", "2G" -> bytes; 0 and *ok = 0 on bad input. */
static size_t parse_size(const char* text, int* ok) {
  char* end = NULL;
  unsigned long long value;
  unsigned shift = 0;
  *ok = 0;
  if (text == NULL || *text == '\0' || *text == '-') return 0;
  errno = 0;
  value = strtoull(text, &end, 10);
  if (errno != 0 || end == text) return 0;
  if (*end != '\0') {
    if (end[1] != '\0') return 0;
    switch (*end) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      default: return 0;
    }
  }
  if (shift > 0 && value > (ULLONG_MAX >> shift)) return 0;
  *ok = 1;
  return (size_t)(value << shift);
}

int perf_parse_int(const char* text, int* out) {
  char* end = NULL;
  long value;
  errno = 0;
  value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < -1000000000L || value > 1000000000L) return 0;
  *out = (int)value;
  return 1;
}

static void usage(const perf_extra_options_t* extra) {
  if (world_rank != 0) return;
  printf("Usage: %s [options]\n"
         "  -b,--minbytes <n>      smallest size in bytes, K/M/G suffixes (default 8)\n"
         "  -e,--maxbytes <n>      largest size in bytes (default 64M)\n"
         "  -f,--stepfactor <n>    multiply the size between rows (default 2)\n"
         "  -i,--stepbytes <n>     add bytes between rows (when -f is not given or is 1)\n"
         "  -n,--iters <n>         timed iterations per size (default 20)\n"
         "  -w,--warmup_iters <n>  untimed iterations per size (default 5)\n"
         "  -c,--check <0/1>       check results (default 1)\n"
         "  -d,--datatype <t>      float or double (default float)\n"
         "  -o,--op <op>           sum (the only op of this baseline)\n"
         "%s"
         "  -h,--help\n",
         tool_name, extra != NULL ? extra->usage_lines : "");
}

enum { kCommonLongOptions = 10, kMaxLongOptions = 32 };

/* The common long options, then the program's own, then the terminator. */
static void merge_long_options(const perf_extra_options_t* extra, struct option* merged) {
  static const struct option common[kCommonLongOptions] = {
      {"minbytes", required_argument, NULL, 'b'},   {"maxbytes", required_argument, NULL, 'e'},
      {"stepfactor", required_argument, NULL, 'f'}, {"stepbytes", required_argument, NULL, 'i'},
      {"iters", required_argument, NULL, 'n'},      {"warmup_iters", required_argument, NULL, 'w'},
      {"check", required_argument, NULL, 'c'},      {"datatype", required_argument, NULL, 'd'},
      {"op", required_argument, NULL, 'o'},         {"help", no_argument, NULL, 'h'}};
  size_t used = kCommonLongOptions;
  const struct option* own;
  memcpy(merged, common, sizeof common);
  if (extra != NULL && extra->long_options != NULL)
    for (own = extra->long_options; own->name != NULL; ++own) {
      if (used + 1 >= kMaxLongOptions) perf_die("too many long options (raise kMaxLongOptions)");
      merged[used++] = *own;
    }
  memset(&merged[used], 0, sizeof merged[used]);
}

perf_options_t perf_parse_options(int argc, char** argv, const perf_extra_options_t* extra) {
  struct option long_options[kMaxLongOptions];
  char short_options[64];
  perf_options_t opts = {8, (size_t)64 << 20, 2, 0, 20, 5, 1, 0};
  int factor_given = 0, step_given = 0, factor = 2, ok = 0, c;
  char message[256];
  merge_long_options(extra, long_options);
  snprintf(short_options, sizeof short_options, "b:e:f:i:n:w:c:d:o:h%s",
           extra != NULL && extra->short_options != NULL ? extra->short_options : "");
  opterr = 0;
  while ((c = getopt_long(argc, argv, short_options, long_options, NULL)) != -1) {
    switch (c) {
      case 'b': opts.min_bytes = parse_size(optarg, &ok);
        if (!ok) perf_fail("bad -b size (expected 8, 1K, 64M, 2G)");
        break;
      case 'e': opts.max_bytes = parse_size(optarg, &ok);
        if (!ok) perf_fail("bad -e size (expected 8, 1K, 64M, 2G)");
        break;
      case 'i': opts.step_bytes = parse_size(optarg, &ok);
        if (!ok) perf_fail("bad -i size (expected 8, 1K, 64M, 2G)");
        step_given = 1; break;
      case 'f': if (!perf_parse_int(optarg, &factor) || factor < 1) perf_fail("-f stepfactor must be an integer >= 1");
        factor_given = 1; break;
      case 'n': if (!perf_parse_int(optarg, &opts.iters) || opts.iters < 1) perf_fail("-n iters must be >= 1"); break;
      case 'w': if (!perf_parse_int(optarg, &opts.warmup_iters) || opts.warmup_iters < 0)
          perf_fail("-w warmup iters must be >= 0");
        break;
      case 'c': if (!perf_parse_int(optarg, &opts.check) || (opts.check != 0 && opts.check != 1))
          perf_fail("-c check must be 0 or 1");
        break;
      case 'd':
        if (strcmp(optarg, "float") == 0 || strcmp(optarg, "f32") == 0) opts.is_double = 0;
        else if (strcmp(optarg, "double") == 0 || strcmp(optarg, "f64") == 0) opts.is_double = 1;
        else perf_fail("-d: this baseline supports float and double");
        break;
      case 'o': if (strcmp(optarg, "sum") != 0) perf_fail("-o: this baseline supports sum only"); break;
      case 'h': usage(extra); MPI_Finalize(); exit(0);
      default:
        /* '?' and ':' are getopt's: an unknown option or a missing value. */
        if (c != '?' && c != ':' && extra != NULL && extra->parse != NULL) {
          extra->parse(c, optarg, extra->context);
          break;
        }
        snprintf(message, sizeof message, "unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        perf_fail(message);
    }
  }
  if (optind < argc) perf_fail("unexpected positional argument (see --help)");
  if (extra != NULL && extra->check != NULL) extra->check(extra->context);
  /* As in nccl-tests, a factor > 1 wins; -i alone (or with -f 1) steps by bytes. */
  if (factor_given) {
    opts.step_factor = (size_t)factor;
    if (factor <= 1 && !step_given) opts.step_bytes = (size_t)1 << 20;
  } else {
    opts.step_factor = step_given ? 1 : 2;
  }
  if (opts.step_factor <= 1 && opts.step_bytes == 0) perf_fail("the size sweep never advances: -f > 1 or -i > 0");
  if (opts.min_bytes > opts.max_bytes) perf_fail("minbytes is larger than maxbytes");
  if (opts.max_bytes / perf_width(&opts) > (size_t)2147483647) perf_fail("maxbytes exceeds MPI's int element count");
  return opts;
}

size_t perf_width(const perf_options_t* opts) { return opts->is_double ? sizeof(double) : sizeof(float); }
MPI_Datatype perf_type(const perf_options_t* opts) { return opts->is_double ? MPI_DOUBLE : MPI_FLOAT; }

int perf_next_size(const perf_options_t* opts, size_t size, size_t* next) {
  if (opts->step_factor > 1) {
    if (size > opts->max_bytes / opts->step_factor) return 0;
    *next = size * opts->step_factor;
    if (*next == 0) *next = 1;
  } else {
    if (size > opts->max_bytes - opts->step_bytes) return 0;
    *next = size + opts->step_bytes;
  }
  return *next <= opts->max_bytes;
}

/* "#  Rank  r Pid p on host transport mpi": each rank's pid and host, gathered
 * in fixed slots (pid, then the NUL-terminated name). */
static void print_rank_lines(void) {
  enum { kSlot = 64 };
  char mine[kSlot];
  char* all = NULL;
  int name_length = 0, r;
  char name[MPI_MAX_PROCESSOR_NAME];
  long pid = (long)getpid();
  memset(mine, 0, sizeof mine);
  memcpy(mine, &pid, sizeof pid);
  MPI_Get_processor_name(name, &name_length);
  if ((size_t)name_length > kSlot - sizeof pid - 1) name_length = (int)(kSlot - sizeof pid - 1);
  memcpy(mine + sizeof pid, name, (size_t)name_length); /* the slot stays NUL-terminated */
  if (world_rank == 0) {
    all = calloc((size_t)world_size, kSlot);
    if (all == NULL) perf_die("out of memory");
  }
  MPI_Gather(mine, kSlot, MPI_BYTE, all, kSlot, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (world_rank != 0) return;
  printf("# Using ranks\n");
  for (r = 0; r < world_size; ++r) {
    long rank_pid = 0;
    memcpy(&rank_pid, all + (size_t)r * kSlot, sizeof rank_pid);
    printf("#  Rank %2d Pid %6ld on %10s transport mpi\n", r, rank_pid, all + (size_t)r * kSlot + sizeof rank_pid);
  }
  printf("#\n");
  free(all);
}

perf_table_t perf_table(const perf_options_t* opts, const char* redop, int root, double (*bus_bandwidth)(double)) {
  perf_table_t table;
  table.options = opts;
  table.redop = redop;
  table.root = root;
  table.bus_bandwidth = bus_bandwidth;
  table.wrong_total = 0;
  table.busbw_total = 0;
  table.rows = 0;
  return table;
}

void perf_table_header(const perf_table_t* table, const char* variant) {
  const perf_options_t* opts = table->options;
  if (world_rank == 0) {
    if (variant != NULL) printf("# Collective test starting: %s (%s)\n", tool_name, variant);
    else printf("# Collective test starting: %s\n", tool_name);
    printf("# nRanks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d "
           "transport: mpi\n#\n",
           world_size, opts->min_bytes, opts->max_bytes, opts->step_factor > 1 ? opts->step_factor : opts->step_bytes,
           opts->step_factor > 1 ? "factor" : "bytes", opts->warmup_iters, opts->iters, opts->check);
  }
  print_rank_lines();
  if (world_rank == 0) {
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
           "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    fflush(stdout);
  }
}

/* time, algbw, busbw and #wrong of one half of a row. */
static void format_columns(const perf_table_t* table, char* out, size_t out_size, double time_us, size_t bytes,
                           unsigned long long wrong, double* busbw_out) {
  char time_text[32], wrong_text[32];
  const double algbw = time_us > 0 ? (double)bytes / 1.0e3 / time_us : 0.0;
  const double busbw = table->bus_bandwidth(algbw);
  if (time_us >= 10000.0) snprintf(time_text, sizeof time_text, "%7.0f", time_us);
  else if (time_us >= 100.0) snprintf(time_text, sizeof time_text, "%7.1f", time_us);
  else snprintf(time_text, sizeof time_text, "%7.2f", time_us);
  if (table->options->check) snprintf(wrong_text, sizeof wrong_text, "%llu", wrong);
  else snprintf(wrong_text, sizeof wrong_text, "N/A");
  snprintf(out, out_size, "  %7s  %6.2f  %6.2f  %5s", time_text, algbw, busbw, wrong_text);
  *busbw_out = busbw;
}

void perf_table_row(perf_table_t* table, size_t bytes, size_t count, const double times[2],
                    const unsigned long long wrong[2]) {
  double slowest[2], busbw[2];
  unsigned long long wrong_sum[2] = {0, 0};
  char columns[2][128];
  MPI_Allreduce(times, slowest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(wrong, wrong_sum, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  format_columns(table, columns[0], sizeof columns[0], slowest[0], bytes, wrong_sum[0], &busbw[0]);
  format_columns(table, columns[1], sizeof columns[1], slowest[1], bytes, wrong_sum[1], &busbw[1]);
  table->wrong_total += wrong_sum[0] + wrong_sum[1];
  table->busbw_total += busbw[0] + busbw[1];
  table->rows += 2;
  if (world_rank == 0) {
    printf("%12zu  %12zu  %8s  %6s  %6d%s%s\n", bytes, count, table->options->is_double ? "double" : "float",
           table->redop, table->root, columns[0], columns[1]);
    fflush(stdout);
  }
}

int perf_table_footer(const perf_table_t* table) {
  if (world_rank == 0) {
    printf("# Out of bounds values : %llu %s\n", table->wrong_total, table->wrong_total == 0 ? "OK" : "FAILED");
    printf("# Avg bus bandwidth    : %g \n#\n", table->rows > 0 ? table->busbw_total / table->rows : 0.0);
    fflush(stdout);
  }
  return table->wrong_total == 0 ? 0 : 1;
}

void perf_report_wrong(size_t bytes, int in_place, unsigned long long wrong, size_t first) {
  fprintf(stderr, "%s: rank %d: %zu bytes %s: %llu wrong elements, first at %zu\n", tool_name, world_rank, bytes,
          in_place ? "in-place" : "out-of-place", wrong, first);
}
