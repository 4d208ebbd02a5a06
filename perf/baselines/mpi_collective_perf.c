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
 * the exit code is non-zero when any element is wrong. */
#include <mpi.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOOL_NAME "mpi_collective_perf"

typedef struct {
  size_t min_bytes;
  size_t max_bytes;
  size_t step_factor; /* multiply when > 1 */
  size_t step_bytes;  /* otherwise add */
  int iters;
  int warmup_iters;
  int check;
  int is_double; /* float or double */
  int collective; /* COLL_* */
  int root;       /* broadcast */
} options_t;

enum { COLL_REDUCESCATTER, COLL_ALLGATHER, COLL_BROADCAST };
static const char* const kCollectiveNames[] = {"reducescatter", "allgather", "broadcast"};

static int world_rank = 0;
static int world_size = 1;

/* For usage errors, which every rank detects alike. */
static void fail(const char* message) {
  if (world_rank == 0) fprintf(stderr, "%s: %s\n", TOOL_NAME, message);
  MPI_Finalize();
  exit(2);
}

/* For errors of one rank: the others must not wait for it. */
static void die(const char* message) {
  fprintf(stderr, "%s: rank %d: %s\n", TOOL_NAME, world_rank, message);
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

static int parse_int(const char* text, int* out) {
  char* end = NULL;
  long value;
  errno = 0;
  value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < -1000000000L || value > 1000000000L) return 0;
  *out = (int)value;
  return 1;
}

static void usage(void) {
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
         "  -C,--collective <c>    reducescatter, allgather or broadcast (required)\n"
         "  -r,--root <n>          broadcast root (default 0)\n"
         "  -h,--help\n",
         TOOL_NAME);
}

static options_t parse_options(int argc, char** argv) {
  static const struct option long_options[] = {
      {"minbytes", required_argument, NULL, 'b'},   {"maxbytes", required_argument, NULL, 'e'},
      {"stepfactor", required_argument, NULL, 'f'}, {"stepbytes", required_argument, NULL, 'i'},
      {"iters", required_argument, NULL, 'n'},      {"warmup_iters", required_argument, NULL, 'w'},
      {"check", required_argument, NULL, 'c'},      {"datatype", required_argument, NULL, 'd'},
      {"op", required_argument, NULL, 'o'},         {"help", no_argument, NULL, 'h'},
      {"collective", required_argument, NULL, 'C'}, {"root", required_argument, NULL, 'r'},
      {NULL, 0, NULL, 0}};
  options_t opts = {8, (size_t)64 << 20, 2, 0, 20, 5, 1, 0, -1, 0};
  int factor_given = 0, step_given = 0, factor = 2, ok = 0, c;
  char message[256];
  opterr = 0;
  while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:C:r:h", long_options, NULL)) != -1) {
    switch (c) {
      case 'b': opts.min_bytes = parse_size(optarg, &ok); if (!ok) fail("bad -b size (expected 8, 1K, 64M, 2G)"); break;
      case 'e': opts.max_bytes = parse_size(optarg, &ok); if (!ok) fail("bad -e size (expected 8, 1K, 64M, 2G)"); break;
      case 'i': opts.step_bytes = parse_size(optarg, &ok); if (!ok) fail("bad -i size (expected 8, 1K, 64M, 2G)");
        step_given = 1; break;
      case 'f': if (!parse_int(optarg, &factor) || factor < 1) fail("-f stepfactor must be an integer >= 1");
        factor_given = 1; break;
      case 'n': if (!parse_int(optarg, &opts.iters) || opts.iters < 1) fail("-n iters must be >= 1"); break;
      case 'w': if (!parse_int(optarg, &opts.warmup_iters) || opts.warmup_iters < 0) fail("-w warmup iters must be >= 0"); break;
      case 'c': if (!parse_int(optarg, &opts.check) || (opts.check != 0 && opts.check != 1)) fail("-c check must be 0 or 1"); break;
      case 'd':
        if (strcmp(optarg, "float") == 0 || strcmp(optarg, "f32") == 0) opts.is_double = 0;
        else if (strcmp(optarg, "double") == 0 || strcmp(optarg, "f64") == 0) opts.is_double = 1;
        else fail("-d: this baseline supports float and double");
        break;
      case 'o': if (strcmp(optarg, "sum") != 0) fail("-o: this baseline supports sum only"); break;
      case 'C':
        for (opts.collective = 2; opts.collective >= 0; --opts.collective)
          if (strcmp(optarg, kCollectiveNames[opts.collective]) == 0) break;
        if (opts.collective < 0) fail("-C: reducescatter, allgather or broadcast");
        break;
      case 'r': if (!parse_int(optarg, &opts.root) || opts.root < 0 || opts.root >= world_size) fail("-r root out of range");
        break;
      case 'h': usage(); MPI_Finalize(); exit(0);
      default:
        snprintf(message, sizeof message, "unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        fail(message);
    }
  }
  if (optind < argc) fail("unexpected positional argument (see --help)");
  if (opts.collective < 0) fail("-C is required: reducescatter, allgather or broadcast");
  /* As in nccl-tests, a factor > 1 wins; -i alone (or with -f 1) steps by bytes. */
  if (factor_given) {
    opts.step_factor = (size_t)factor;
    if (factor <= 1 && !step_given) opts.step_bytes = (size_t)1 << 20;
  } else {
    opts.step_factor = step_given ? 1 : 2;
  }
  if (opts.step_factor <= 1 && opts.step_bytes == 0) fail("the size sweep never advances: -f > 1 or -i > 0");
  if (opts.min_bytes > opts.max_bytes) fail("minbytes is larger than maxbytes");
  return opts;
}

/* Next size in the sweep, or 0 when done (sizes are visited while <= max). */
static int next_size(const options_t* opts, size_t size, size_t* next) {
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
    if (all == NULL) die("out of memory");
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

static void format_columns(char* out, size_t out_size, double time_us, size_t bytes, double factor, int check,
                           unsigned long long wrong, double* busbw_out) {
  char time_text[32], wrong_text[32];
  const double algbw = time_us > 0 ? (double)bytes / 1.0e3 / time_us : 0.0;
  const double busbw = algbw * factor;
  if (time_us >= 10000.0) snprintf(time_text, sizeof time_text, "%7.0f", time_us);
  else if (time_us >= 100.0) snprintf(time_text, sizeof time_text, "%7.1f", time_us);
  else snprintf(time_text, sizeof time_text, "%7.2f", time_us);
  if (check) snprintf(wrong_text, sizeof wrong_text, "%llu", wrong);
  else snprintf(wrong_text, sizeof wrong_text, "N/A");
  snprintf(out, out_size, "  %7s  %6.2f  %6.2f  %5s", time_text, algbw, busbw, wrong_text);
  *busbw_out = busbw;
}

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
  const size_t n = (size_t)world_size, r = (size_t)world_rank;
  size_t i;
  switch (o->collective) {
    case COLL_REDUCESCATTER:
      for (i = 0; i < n * block; ++i) put(in_place ? recv : send, i, o->is_double, (double)(r + 1) * (double)(i % 7 + 1));
      break;
    case COLL_ALLGATHER:
      memset(recv, 0xff, n * block * (o->is_double ? 8 : 4));
      for (i = 0; i < block; ++i)
        put(in_place ? (char*)recv + r * block * (o->is_double ? 8 : 4) : send, i, o->is_double,
            (double)(r + 1) * (double)(i % 7 + 1));
      break;
    default:
      memset(in_place ? recv : send, 0xff, block * (o->is_double ? 8 : 4));
      if (world_rank == o->root)
        for (i = 0; i < block; ++i) put(in_place ? recv : send, i, o->is_double, (double)(i % 7 + 1) * 3.0);
      break;
  }
}

static unsigned long long count_wrong(const options_t* o, const void* send, const void* recv, size_t block,
                                      int in_place, size_t* first) {
  const size_t n = (size_t)world_size, r = (size_t)world_rank;
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
    if (get(result, i, o->is_double) != expected) {
      if (wrong == 0) *first = i;
      ++wrong;
    }
  }
  return wrong;
}

static double time_calls(const options_t* o, void* send, void* recv, size_t block, MPI_Datatype type, int in_place) {
  int i;
  double start;
  for (i = 0; i < o->warmup_iters; ++i) run_once(o, send, recv, block, type, in_place);
  MPI_Barrier(MPI_COMM_WORLD);
  start = MPI_Wtime();
  for (i = 0; i < o->iters; ++i) run_once(o, send, recv, block, type, in_place);
  return (MPI_Wtime() - start) * 1.0e6 / o->iters;
}

int main(int argc, char** argv) {
  options_t opts;
  size_t width, size, next = 0, n;
  char *send, *recv;
  MPI_Datatype type;
  unsigned long long wrong_total = 0;
  double busbw_total = 0, factor;
  int rows = 0;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  opts = parse_options(argc, argv);
  n = (size_t)world_size;
  width = opts.is_double ? sizeof(double) : sizeof(float);
  type = opts.is_double ? MPI_DOUBLE : MPI_FLOAT;
  if (opts.max_bytes / width > (size_t)2147483647) fail("maxbytes exceeds MPI's int element count");
  factor = opts.collective == COLL_BROADCAST ? 1.0 : (double)(world_size - 1) / world_size;
  send = malloc(opts.max_bytes + width);
  recv = malloc(opts.max_bytes + width);
  if (send == NULL || recv == NULL) die("out of memory");

  if (world_rank == 0) {
    printf("# Collective test starting: %s (%s)\n", TOOL_NAME, kCollectiveNames[opts.collective]);
    printf("# nRanks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d "
           "transport: mpi\n#\n",
           world_size, opts.min_bytes, opts.max_bytes, opts.step_factor > 1 ? opts.step_factor : opts.step_bytes,
           opts.step_factor > 1 ? "factor" : "bytes", opts.warmup_iters, opts.iters, opts.check);
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

  for (size = opts.min_bytes;; size = next) {
    /* Elements per rank's block (Broadcast: the message). */
    const size_t block = opts.collective == COLL_BROADCAST ? size / width : size / width / n;
    const size_t count = opts.collective == COLL_BROADCAST ? block : block * n, bytes = count * width;
    double times[2], slowest[2], busbw[2];
    unsigned long long wrong[2] = {0, 0}, wrong_sum[2] = {0, 0};
    size_t first = 0;
    char columns[2][128];
    int in_place;

    for (in_place = 0; in_place < 2; ++in_place) {
      fill(&opts, send, recv, block, in_place);
      times[in_place] = time_calls(&opts, send, recv, block, type, in_place);
      if (opts.check) {
        fill(&opts, send, recv, block, in_place);
        run_once(&opts, send, recv, block, type, in_place);
        wrong[in_place] = count_wrong(&opts, send, recv, block, in_place, &first);
        if (wrong[in_place] > 0)
          fprintf(stderr, "%s: rank %d: %zu bytes %s: %llu wrong elements, first at %zu\n", TOOL_NAME, world_rank,
                  bytes, in_place ? "in-place" : "out-of-place", wrong[in_place], first);
      }
    }
    MPI_Allreduce(times, slowest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(wrong, wrong_sum, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    format_columns(columns[0], sizeof columns[0], slowest[0], bytes, factor, opts.check, wrong_sum[0], &busbw[0]);
    format_columns(columns[1], sizeof columns[1], slowest[1], bytes, factor, opts.check, wrong_sum[1], &busbw[1]);
    wrong_total += wrong_sum[0] + wrong_sum[1];
    busbw_total += busbw[0] + busbw[1];
    rows += 2;
    if (world_rank == 0) {
      printf("%12zu  %12zu  %8s  %6s  %6d%s%s\n", bytes, count, opts.is_double ? "double" : "float",
             opts.collective == COLL_REDUCESCATTER ? "sum" : "none",
             opts.collective == COLL_BROADCAST ? opts.root : -1, columns[0], columns[1]);
      fflush(stdout);
    }
    if (!next_size(&opts, size, &next)) break;
  }

  if (world_rank == 0) {
    printf("# Out of bounds values : %llu %s\n", wrong_total, wrong_total == 0 ? "OK" : "FAILED");
    printf("# Avg bus bandwidth    : %g \n#\n", rows > 0 ? busbw_total / rows : 0.0);
    fflush(stdout);
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return wrong_total == 0 ? 0 : 1;
}
