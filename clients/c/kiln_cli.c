/* kiln: the command-line client of kilnd. `kiln --help` lists the commands, `kiln CMD
 * --help` documents one; docs/client.md is the reference.
 *
 * A command is one entry of COMMANDS: its name, its arguments and help text, the options it
 * takes (bits of the one option table below), how many positional arguments it wants,
 * whether it needs a connection, and its function. Options are parsed with getopt_long over
 * the whole command line, so they may come before or after the command (`--url=X` too). */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "kiln/client.h"
#include "fleet.h"
#include "npy.h"
#include "protocol/rpc.h"
#include "stats.h"

enum {
  EXIT_OK = 0,
  EXIT_SERVER = 1, /* kilnd answered with an error */
  EXIT_USAGE = 2,
  EXIT_CONNECT = 3, /* kilnd unreachable, or the connection broke */
  EXIT_FILE = 4,    /* a local file could not be read or written */
};

/* --- options ------------------------------------------------------------------------------- */

enum {
  O_URL, O_TLS_CA, O_TLS_CERT, O_TLS_KEY, O_TIMEOUT, O_HELP, O_VERSION, O_COMPLETE, /* global */
  O_JSON, O_ABSENT, O_DEVICE, O_DTYPE, O_TARGET, O_FORMAT, O_OPT_LEVEL, O_FAST_MATH, O_MAX_BLOCK,
  O_GRID, O_BLOCK, O_SHARED, O_LAUNCH_TIMEOUT, O_NUMBER, O_REPEAT, O_MIN_REPEAT_MS, O_WARMUP,
  O_FLUSH, O_KIND, O_OUTPUT, O_SECONDS, O_NO_WAIT, O_TOKEN, O_ALL, O_STALE, O_LIMIT, O_UNUSED,
  O_DRY_RUN, O_AUTH_FILE, O_TRUSTED_KEYS, O_COUNT_
};
#define BIT(o) (1ull << (o))
#define GLOBAL_OPTS \
  (BIT(O_URL) | BIT(O_TLS_CA) | BIT(O_TLS_CERT) | BIT(O_TLS_KEY) | BIT(O_TIMEOUT) | BIT(O_HELP) | BIT(O_TOKEN))
#define RUN_OPTS (BIT(O_DEVICE) | BIT(O_GRID) | BIT(O_BLOCK) | BIT(O_SHARED) | BIT(O_LAUNCH_TIMEOUT))

/* getopt_long returns OPT(o); 256 up, so that no option is 0, which is getopt's optopt for
 * an unknown option */
#define OPT(o) ((o) + 256)
static const struct option LONG_OPTS[O_COUNT_ + 1] = { /* indexed by O_*; the last is zeros */
    [O_URL] = {"url", required_argument, 0, OPT(O_URL)},
    [O_TLS_CA] = {"tls-ca", required_argument, 0, OPT(O_TLS_CA)},
    [O_TLS_CERT] = {"tls-cert", required_argument, 0, OPT(O_TLS_CERT)},
    [O_TLS_KEY] = {"tls-key", required_argument, 0, OPT(O_TLS_KEY)},
    [O_TIMEOUT] = {"timeout", required_argument, 0, OPT(O_TIMEOUT)},
    [O_HELP] = {"help", no_argument, 0, OPT(O_HELP)},
    [O_VERSION] = {"version", no_argument, 0, OPT(O_VERSION)},
    [O_COMPLETE] = {"complete", no_argument, 0, OPT(O_COMPLETE)},
    [O_JSON] = {"json", no_argument, 0, OPT(O_JSON)},
    [O_ABSENT] = {"absent", no_argument, 0, OPT(O_ABSENT)},
    [O_DEVICE] = {"device", required_argument, 0, OPT(O_DEVICE)},
    [O_DTYPE] = {"dtype", required_argument, 0, OPT(O_DTYPE)},
    [O_TARGET] = {"target", required_argument, 0, OPT(O_TARGET)},
    [O_FORMAT] = {"format", required_argument, 0, OPT(O_FORMAT)},
    [O_OPT_LEVEL] = {"opt-level", required_argument, 0, OPT(O_OPT_LEVEL)},
    [O_FAST_MATH] = {"fast-math", no_argument, 0, OPT(O_FAST_MATH)},
    [O_MAX_BLOCK] = {"max-block", required_argument, 0, OPT(O_MAX_BLOCK)},
    [O_GRID] = {"grid", required_argument, 0, OPT(O_GRID)},
    [O_BLOCK] = {"block", required_argument, 0, OPT(O_BLOCK)},
    [O_SHARED] = {"shared", required_argument, 0, OPT(O_SHARED)},
    [O_LAUNCH_TIMEOUT] = {"launch-timeout", required_argument, 0, OPT(O_LAUNCH_TIMEOUT)},
    [O_NUMBER] = {"number", required_argument, 0, OPT(O_NUMBER)},
    [O_REPEAT] = {"repeat", required_argument, 0, OPT(O_REPEAT)},
    [O_MIN_REPEAT_MS] = {"min-repeat-ms", required_argument, 0, OPT(O_MIN_REPEAT_MS)},
    [O_WARMUP] = {"warmup", required_argument, 0, OPT(O_WARMUP)},
    [O_FLUSH] = {"flush", no_argument, 0, OPT(O_FLUSH)},
    [O_KIND] = {"kind", required_argument, 0, OPT(O_KIND)},
    [O_OUTPUT] = {"output", required_argument, 0, OPT(O_OUTPUT)},
    [O_SECONDS] = {"seconds", required_argument, 0, OPT(O_SECONDS)},
    [O_NO_WAIT] = {"no-wait", no_argument, 0, OPT(O_NO_WAIT)},
    [O_TOKEN] = {"token", required_argument, 0, OPT(O_TOKEN)},
    [O_ALL] = {"all", no_argument, 0, OPT(O_ALL)},
    [O_STALE] = {"stale", no_argument, 0, OPT(O_STALE)},
    [O_LIMIT] = {"limit", required_argument, 0, OPT(O_LIMIT)},
    [O_UNUSED] = {"unused", required_argument, 0, OPT(O_UNUSED)},
    [O_DRY_RUN] = {"dry-run", no_argument, 0, OPT(O_DRY_RUN)},
    [O_AUTH_FILE] = {"auth-file", required_argument, 0, OPT(O_AUTH_FILE)},
    [O_TRUSTED_KEYS] = {"trusted-keys", required_argument, 0, OPT(O_TRUSTED_KEYS)},
};

typedef struct cli {
  const char *opt[O_COUNT_]; /* an option's argument ("" for a flag); NULL when not given */
  const char *name;          /* the command's name, for messages */
  kiln_client_t *c;          /* the connection, for commands that need one */
} cli_t;

typedef struct command {
  const char *name;
  const char *args; /* the synopsis after the name */
  const char *help; /* what it does, its options */
  uint64_t opts;    /* BIT(O_...) it takes besides the global ones */
  int min_args, max_args; /* positional arguments after the name; max -1: any number */
  bool local;       /* runs without a connection */
  int (*run)(cli_t *cli, int argc, char **argv); /* argv[0] is the name */
  const char *subcommands; /* space-separated, for the completion; NULL when none */
} command_t;

static int usage_error(const cli_t *cli, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const cli_t *cli, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kiln: %s%s", cli && cli->name ? cli->name : "", cli && cli->name ? ": " : "");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nrun `kiln %s%s--help` for usage\n", cli && cli->name ? cli->name : "",
          cli && cli->name ? " " : "");
  return EXIT_USAGE;
}

/* Prints the error and maps it to an exit code; a status made from the daemon's reply says
 * "remote" where it was made (protocol/rpc.c). */
static int report(const char *what, kiln_status_t s, int local_code) {
  kiln_code_t code = kiln_status_code(s);
  bool remote = strncmp(kiln_status_where(s), "remote", 6) == 0;
  fprintf(stderr, "kiln: %s: %s: %s\n", what, kiln_code_name(code), kiln_status_message(s));
  kiln_status_free(s);
  if (remote) return EXIT_SERVER;
  if (code == KILN_E_UNAVAILABLE || code == KILN_E_TIMEOUT) return EXIT_CONNECT;
  return local_code;
}

/* A whole decimal number in [lo, hi]; nothing else (no sign, no suffix, no blank). */
static bool parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  if (!s || !isdigit((unsigned char)s[0])) return false;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* An option's number, or the default when it is absent; false (after a usage message) when
 * it is not a number in range. */
static bool opt_u64(const cli_t *cli, int o, uint64_t lo, uint64_t hi, uint64_t dflt, uint64_t *out) {
  *out = dflt;
  if (!cli->opt[o]) return true;
  if (parse_u64(cli->opt[o], lo, hi, out)) return true;
  usage_error(cli, "--%s '%s' is not a whole number from %llu to %llu", LONG_OPTS[o].name,
              cli->opt[o], (unsigned long long)lo, (unsigned long long)hi);
  return false;
}

/* "X[,Y[,Z]]" (also "XxYxZ"): 1 to 3 dimensions, each 1 .. 2^32 - 1. */
static bool parse_dims(const cli_t *cli, int o, uint64_t out[3], int *out_n) {
  const char *s = cli->opt[o];
  if (!s) return usage_error(cli, "--%s is required", LONG_OPTS[o].name), false;
  char buf[96];
  snprintf(buf, sizeof(buf), "%s", s);
  int n = 0;
  for (char *save, *t = strtok_r(buf, ",x", &save); t; t = strtok_r(NULL, ",x", &save)) {
    if (n == 3 || !parse_u64(t, 1, UINT32_MAX, &out[n])) n = 4;
    if (n == 4) break;
    n++;
  }
  if (n < 1 || n > 3 || strlen(s) >= sizeof(buf))
    return usage_error(cli, "--%s '%s' is not 1 to 3 sizes like 64 or 8,8", LONG_OPTS[o].name, s), false;
  *out_n = n;
  return true;
}

/* --- progress ------------------------------------------------------------------------------ */

/* A transfer's progress on stderr, once it has taken a second, at most ten times a second. */
typedef struct progress {
  const char *what;
  uint64_t total, t0, last;
  bool shown;
} progress_t;

static void progress_init(progress_t *p, const char *what, uint64_t total) {
  *p = (progress_t){.what = what, .total = total, .t0 = kiln_now_ns()};
}

static void progress_show(progress_t *p, uint64_t done) {
  uint64_t now = kiln_now_ns();
  if (now - p->t0 < 1000000000ull || (now - p->last < 100000000ull && done < p->total)) return;
  p->last = now;
  p->shown = true;
  double s = (double)(now - p->t0) / 1e9;
  fprintf(stderr, "\rkiln: %s: %.0f of %.0f MB (%.0f%%), %.0f MB/s ", p->what, (double)done / 1e6,
          (double)p->total / 1e6, p->total ? 100.0 * (double)done / (double)p->total : 100.0,
          (double)done / 1e6 / s);
}

static void progress_done(progress_t *p) {
  if (p->shown) fputc('\n', stderr);
}

/* --- tensors ------------------------------------------------------------------------------- */

static uint64_t u64_field(const msgpack_object *m, const char *key);

/* Uploads a .npy file as alloc + write chunks (so that a large one shows progress). */
static int upload_npy(cli_t *cli, const char *file, const char *device, const char *dtype,
                      uint64_t *out_id) {
  kiln_npy_t npy;
  kiln_status_t s = kiln_npy_open(file, &npy);
  if (s) return report(cli->name, s, EXIT_FILE);
  if (dtype) {
    kiln_dtype_t d = kiln_dtype_parse(dtype, strlen(dtype));
    if (!d || kiln_dtype_size(d) != kiln_dtype_size(npy.desc.dtype)) {
      kiln_npy_close(&npy);
      return usage_error(cli, "--dtype %s is not a dtype of the file's element size", dtype);
    }
    npy.desc.dtype = d;
  }
  uint64_t id;
  if (npy.desc.nbytes < (64u << 20)) {
    s = kiln_client_upload(cli->c, device, &npy.desc, npy.data, &id);
  } else {
    s = kiln_client_alloc(cli->c, device, npy.desc.dtype, npy.desc.shape, npy.desc.ndim, &id);
    progress_t p;
    progress_init(&p, file, npy.desc.nbytes);
    for (uint64_t off = 0; !s && off < npy.desc.nbytes; off += 32u << 20) {
      size_t n = (size_t)KILN_MIN(npy.desc.nbytes - off, 32u << 20);
      s = kiln_client_write(cli->c, id, off, (const uint8_t *)npy.data + off, n);
      progress_show(&p, off + n);
    }
    progress_done(&p);
    if (s) {
      kiln_status_t f = kiln_client_free_tensor(cli->c, id);
      kiln_status_free(f); /* the write's error is the one to report */
    }
  }
  kiln_npy_close(&npy);
  if (s) return report(cli->name, s, EXIT_SERVER);
  *out_id = id;
  return EXIT_OK;
}

static int cmd_put(cli_t *cli, int argc, char **argv) {
  uint64_t id;
  int rc = upload_npy(cli, argv[1], cli->opt[O_DEVICE], cli->opt[O_DTYPE], &id);
  if (rc) return rc;
  printf("%llu\n", (unsigned long long)id);
  return EXIT_OK;
}

static int cmd_alloc(cli_t *cli, int argc, char **argv) {
  kiln_dtype_t d = kiln_dtype_parse(argv[1], strlen(argv[1]));
  if (!d) return usage_error(cli, "'%s' is not a dtype (float32, int32, ...)", argv[1]);
  uint64_t shape[KILN_MAX_DIMS];
  uint32_t ndim = 0;
  for (int i = 2; i < argc; i++) {
    if (ndim == KILN_MAX_DIMS || !parse_u64(argv[i], 0, UINT32_MAX, &shape[ndim]))
      return usage_error(cli, "'%s' is not a dimension (at most %d of them)", argv[i], KILN_MAX_DIMS);
    ndim++;
  }
  uint64_t id;
  kiln_status_t s = kiln_client_alloc(cli->c, cli->opt[O_DEVICE], d, shape, ndim, &id);
  if (s) return report(cli->name, s, EXIT_SERVER);
  printf("%llu\n", (unsigned long long)id);
  return EXIT_OK;
}

/* The dtype, shape and size of tensor `id` from the `tensors` method; false when the
 * daemon has no such method or does not list the id (then `download` says why). */
static bool tensor_desc(cli_t *cli, uint64_t id, kiln_tensor_desc_t *out) {
  kiln_reply_t *r;
  kiln_status_t s = kiln_client_call(cli->c, "tensors", NULL, NULL, &r);
  if (s) {
    kiln_status_free(s); /* an older kilnd: download alone */
    return false;
  }
  const msgpack_object *list = kiln_reply_result(r);
  bool found = false;
  for (uint32_t i = 0; list->type == MSGPACK_OBJECT_ARRAY && i < list->via.array.size && !found; i++) {
    const msgpack_object *t = &list->via.array.ptr[i], *dt = kiln_object_get(t, "dtype");
    const msgpack_object *shape = kiln_object_get(t, "shape");
    if (u64_field(t, "id") != id || !dt || dt->type != MSGPACK_OBJECT_STR || !shape ||
        shape->type != MSGPACK_OBJECT_ARRAY || shape->via.array.size > KILN_MAX_DIMS)
      continue;
    *out = (kiln_tensor_desc_t){.dtype = kiln_dtype_parse(dt->via.str.ptr, dt->via.str.size),
                                .ndim = shape->via.array.size, .nbytes = u64_field(t, "bytes")};
    for (uint32_t d = 0; d < out->ndim; d++)
      out->shape[d] = shape->via.array.ptr[d].type == MSGPACK_OBJECT_POSITIVE_INTEGER
                          ? shape->via.array.ptr[d].via.u64 : 0;
    found = out->dtype != KILN_DTYPE_INVALID;
  }
  kiln_reply_free(r);
  return found;
}

/* `get`: a tensor under 64 MiB comes in one `download`; a larger one (any size, also past
 * download's 1 GiB) in 32 MiB `read`s with progress on stderr, its dtype and shape from
 * `tensors`. */
static int cmd_get(cli_t *cli, int argc, char **argv) {
  uint64_t id;
  if (!parse_u64(argv[1], 0, UINT64_MAX, &id)) return usage_error(cli, "'%s' is not a tensor id", argv[1]);
  kiln_tensor_desc_t desc;
  kiln_status_t s;
  if (tensor_desc(cli, id, &desc) && desc.nbytes >= (64u << 20)) {
    uint8_t *buf = malloc(desc.nbytes);
    if (!buf) {
      fprintf(stderr, "kiln: get: no memory for %.0f MB\n", (double)desc.nbytes / 1e6);
      return EXIT_FILE;
    }
    progress_t p;
    progress_init(&p, argv[2], desc.nbytes);
    s = KILN_OK;
    for (uint64_t off = 0; !s && off < desc.nbytes; off += 32u << 20) {
      size_t n = (size_t)KILN_MIN(desc.nbytes - off, 32u << 20);
      s = kiln_client_read(cli->c, id, off, buf + off, n);
      progress_show(&p, off + n);
    }
    progress_done(&p);
    if (s) {
      free(buf);
      return report(cli->name, s, EXIT_SERVER);
    }
    s = kiln_npy_write(argv[2], &desc, buf);
    free(buf);
    if (s) return report(cli->name, s, EXIT_FILE);
  } else {
    kiln_reply_t *r;
    s = kiln_client_download(cli->c, id, &r);
    if (s) return report(cli->name, s, EXIT_SERVER);
    const void *data;
    s = kiln_reply_tensor(r, &desc, &data);
    if (!s) s = kiln_npy_write(argv[2], &desc, data);
    kiln_reply_free(r);
    if (s) return report(cli->name, s, EXIT_FILE);
  }
  if (desc.dtype == KILN_BFLOAT16)
    fprintf(stderr, "kiln: note: bfloat16 has no numpy dtype; %s holds its bits as uint16 "
                    "(arr.view(ml_dtypes.bfloat16) restores it)\n", argv[2]);
  return EXIT_OK;
}

static void pack_free_all(msgpack_packer *pk, void *ctx) {
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_bool(&m, "all", true);
  kiln_fields_end(&m);
}

static int cmd_free(cli_t *cli, int argc, char **argv) {
  if (cli->opt[O_ALL]) { /* every tensor of the tenant, whoever made it (docs/protocol.md free) */
    if (argc > 1) return usage_error(cli, "takes ids or --all, not both");
    kiln_reply_t *r;
    kiln_status_t s = kiln_client_call(cli->c, "free", pack_free_all, NULL, &r);
    if (s) return report(cli->name, s, EXIT_SERVER);
    const msgpack_object *n = kiln_object_get(kiln_reply_result(r), "freed");
    fprintf(stderr, "kiln: freed %llu tensor%s\n", n ? (unsigned long long)n->via.u64 : 0ull,
            n && n->via.u64 == 1 ? "" : "s");
    kiln_reply_free(r);
    return EXIT_OK;
  }
  if (argc < 2) return usage_error(cli, "wants ID... or --all");
  for (int i = 1; i < argc; i++) {
    uint64_t id;
    if (!parse_u64(argv[i], 0, UINT64_MAX, &id)) return usage_error(cli, "'%s' is not a tensor id", argv[i]);
  }
  for (int i = 1; i < argc; i++) {
    uint64_t id = strtoull(argv[i], NULL, 10);
    kiln_status_t s = kiln_client_free_tensor(cli->c, id);
    if (s) return report(cli->name, s, EXIT_SERVER);
  }
  return EXIT_OK;
}

/* --- info ---------------------------------------------------------------------------------- */

static void pack_device(msgpack_packer *pk, void *ctx) {
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  if (ctx) kiln_fields_str(&m, "device", ctx);
  kiln_fields_end(&m);
}

static int print_json_reply(kiln_reply_t *r);

/* `kiln tensors`: the tenant's tensors, one line each (docs/protocol.md tensors). */
static int cmd_tensors(cli_t *cli, int argc, char **argv) {
  kiln_reply_t *r;
  kiln_status_t s = kiln_client_call(cli->c, "tensors", pack_device, (void *)cli->opt[O_DEVICE], &r);
  if (s) return report(cli->name, s, EXIT_SERVER);
  if (cli->opt[O_JSON]) return print_json_reply(r);
  const msgpack_object *a = kiln_reply_result(r);
  printf("%-20s %-8s %-9s %-18s %12s %9s  %s\n", "ID", "DEVICE", "DTYPE", "SHAPE", "BYTES", "AGE", "CLIENT");
  for (uint32_t i = 0; a && a->type == MSGPACK_OBJECT_ARRAY && i < a->via.array.size; i++) {
    const msgpack_object *t = &a->via.array.ptr[i];
    const msgpack_object *id = kiln_object_get(t, "id"), *dev = kiln_object_get(t, "device"),
                         *dt = kiln_object_get(t, "dtype"), *sh = kiln_object_get(t, "shape"),
                         *by = kiln_object_get(t, "bytes"), *age = kiln_object_get(t, "age_s"),
                         *cl = kiln_object_get(t, "client"), *se = kiln_object_get(t, "session");
    char shape[64] = "(";
    size_t n = 1;
    for (uint32_t d = 0; sh && sh->type == MSGPACK_OBJECT_ARRAY && d < sh->via.array.size && n < sizeof(shape); d++)
      n += (size_t)snprintf(shape + n, sizeof(shape) - n, "%s%llu", d ? "," : "",
                            (unsigned long long)sh->via.array.ptr[d].via.u64);
    if (n < sizeof(shape)) snprintf(shape + n, sizeof(shape) - n, ")");
    printf("%-20llu %-8.*s %-9.*s %-18s %12llu %8.0fs  %.*s%s\n",
           id ? (unsigned long long)id->via.u64 : 0ull, dev ? (int)dev->via.str.size : 0,
           dev ? dev->via.str.ptr : "", dt ? (int)dt->via.str.size : 0, dt ? dt->via.str.ptr : "", shape,
           by ? (unsigned long long)by->via.u64 : 0ull, age ? age->via.f64 : 0.0,
           cl ? (int)cl->via.str.size : 0, cl ? cl->via.str.ptr : "",
           se && se->via.boolean ? " (session)" : "");
  }
  kiln_reply_free(r);
  return EXIT_OK;
}

static int cmd_ping(cli_t *cli, int argc, char **argv) {
  uint64_t t0 = kiln_now_ns();
  kiln_status_t s = kiln_client_ping(cli->c);
  if (s) return report("ping", s, EXIT_SERVER);
  printf("pong from %s in %.1f us\n", kiln_client_url(cli->c), (double)(kiln_now_ns() - t0) / 1e3);
  return EXIT_OK;
}

static void pack_absent(msgpack_packer *pk, void *ctx) {
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_bool(&m, "absent", true);
  kiln_fields_end(&m);
}

static int print_json_reply(kiln_reply_t *r) {
  kiln_object_print_json(stdout, kiln_reply_result(r), true);
  putchar('\n');
  kiln_reply_free(r);
  return EXIT_OK;
}

static int cmd_devices(cli_t *cli, int argc, char **argv) {
  bool absent = cli->opt[O_ABSENT] != NULL;
  if (cli->opt[O_JSON]) {
    kiln_reply_t *r;
    kiln_status_t s = kiln_client_call(cli->c, "devices", absent ? pack_absent : NULL, NULL, &r);
    return s ? report("devices", s, EXIT_SERVER) : print_json_reply(r);
  }
  kiln_device_info_t devs[64];
  size_t n;
  kiln_status_t s = kiln_client_devices(cli->c, absent, devs, 64, &n);
  if (s) return report("devices", s, EXIT_SERVER);
  printf("%-10s %-5s %-24s %10s %5s  %s\n", "ID", "KIND", "ARCH", "MEMORY", "CUS", "NAME");
  for (size_t i = 0; i < n && i < 64; i++) {
    const kiln_device_info_t *d = &devs[i];
    if (!d->available) {
      printf("%-10s %-5s absent: %s\n", d->id, d->kind, d->reason);
      continue;
    }
    printf("%-10s %-5s %-24s %8.1fGB %5llu  %s\n", d->id, d->kind, d->arch,
           (double)d->memory / 1e9, (unsigned long long)d->compute_units, d->name);
  }
  return EXIT_OK;
}

static int cmd_stats(cli_t *cli, int argc, char **argv) {
  kiln_reply_t *r;
  kiln_status_t s = kiln_client_stats(cli->c, &r);
  if (s) return report("stats", s, EXIT_SERVER);
  if (cli->opt[O_JSON]) return print_json_reply(r);
  kiln_cli_print_stats(stdout, kiln_reply_result(r));
  kiln_reply_free(r);
  return EXIT_OK;
}

static uint64_t u64_field(const msgpack_object *m, const char *key) {
  const msgpack_object *o = m ? kiln_object_get(m, key) : NULL;
  return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

/* `kiln cache [size|list|prune]`: the counters every tenant sees (the `stats` reply), and the
 * operator's cache_list and cache_prune (docs/protocol.md, docs/cache.md "Listing and pruning"). */

typedef struct cache_page {
  const char *after;   /* the previous page's `next` */
  uint64_t limit;
  bool stale;
} cache_page_t;

static void pack_cache_page(msgpack_packer *pk, void *ctx) {
  const cache_page_t *p = ctx;
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_u64(&m, "limit", p->limit);
  if (p->after) kiln_fields_str(&m, "after", p->after);
  if (p->stale) kiln_fields_bool(&m, "stale", true);
  kiln_fields_end(&m);
}

static void print_time(double unix_s) {
  time_t t = (time_t)unix_s;
  struct tm tm;
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
  fputs(buf, stdout);
}

static double f64_field(const msgpack_object *m, const char *key) {
  const msgpack_object *o = m ? kiln_object_get(m, key) : NULL;
  return o && o->type == MSGPACK_OBJECT_FLOAT64 ? o->via.f64 : 0;
}

static void print_cache_size(const msgpack_object *l) {
  const msgpack_object *id = kiln_object_get(l, "identity");
  printf("entries: %llu, %.1f MB of %.1f MB (--cache-max-bytes)\n", (unsigned long long)u64_field(l, "entries"),
         (double)u64_field(l, "bytes") / 1e6, (double)u64_field(l, "max_bytes") / 1e6);
  printf("stale:   %llu entries, %.1f MB, not used by this compiler (`kiln cache prune --stale`)\n",
         (unsigned long long)u64_field(l, "stale_entries"), (double)u64_field(l, "stale_bytes") / 1e6);
  printf("compiler: %.*s, here since ", id && id->type == MSGPACK_OBJECT_STR ? (int)id->via.str.size : 0,
         id && id->type == MSGPACK_OBJECT_STR ? id->via.str.ptr : "");
  print_time(f64_field(l, "identity_since"));
  putchar('\n');
}

/* `kiln cache list`: every page (or --limit entries), a line per entry or one JSON array. */
static int cache_list(cli_t *cli) {
  uint64_t want;
  if (!opt_u64(cli, O_LIMIT, 1, UINT64_MAX, UINT64_MAX, &want)) return EXIT_USAGE;
  char after[80] = "";
  cache_page_t page = {.stale = cli->opt[O_STALE] != NULL};
  bool json = cli->opt[O_JSON] != NULL;
  uint64_t shown = 0;
  if (json) printf("[");
  else printf("%-64s %10s  %-19s  %-7s %s\n", "KEY", "BYTES", "LAST USED", "WHERE", "STALE");
  for (;;) {
    page.after = after[0] ? after : NULL;
    page.limit = KILN_MIN(want - shown, 1000);
    kiln_reply_t *r;
    kiln_status_t s = kiln_client_call(cli->c, "cache_list", pack_cache_page, &page, &r);
    if (s) return report("cache list", s, EXIT_SERVER);
    const msgpack_object *res = kiln_reply_result(r), *items = kiln_object_get(res, "items"),
                         *next = kiln_object_get(res, "next");
    for (uint32_t i = 0; items && items->type == MSGPACK_OBJECT_ARRAY && i < items->via.array.size; i++) {
      const msgpack_object *it = &items->via.array.ptr[i];
      if (json) {
        printf("%s\n", shown ? "," : "");
        kiln_object_print_json(stdout, it, true);
      } else {
        const msgpack_object *k = kiln_object_get(it, "key"), *w = kiln_object_get(it, "where"),
                             *st = kiln_object_get(it, "stale");
        printf("%-64.*s %10llu  ", k ? (int)k->via.str.size : 0, k ? k->via.str.ptr : "",
               (unsigned long long)u64_field(it, "bytes"));
        print_time(f64_field(it, "used"));
        printf("  %-7.*s %s\n", w ? (int)w->via.str.size : 0, w ? w->via.str.ptr : "",
               st && st->type == MSGPACK_OBJECT_BOOLEAN && st->via.boolean ? "stale" : "");
      }
      shown++;
    }
    bool more = next && next->type == MSGPACK_OBJECT_STR && next->via.str.size < sizeof(after) && shown < want;
    if (more) snprintf(after, sizeof(after), "%.*s", (int)next->via.str.size, next->via.str.ptr);
    kiln_reply_free(r);
    if (!more) break;
  }
  if (json) printf("%s]\n", shown ? "\n" : "");
  return EXIT_OK;
}

typedef struct cache_prune {
  bool stale, all, dry_run;
  uint64_t unused_s;
  char **keys;
  int nkeys;
} cache_prune_t;

static void pack_cache_prune(msgpack_packer *pk, void *ctx) {
  const cache_prune_t *p = ctx;
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  if (p->nkeys) {
    kiln_fields_key(&m, "keys");
    msgpack_pack_array(pk, (uint32_t)p->nkeys);
    for (int i = 0; i < p->nkeys; i++) kiln_pack_cstr(pk, p->keys[i]);
  } else if (p->unused_s) {
    kiln_fields_u64(&m, "unused_s", p->unused_s);
  } else {
    kiln_fields_bool(&m, p->all ? "all" : "stale", true);
  }
  if (p->dry_run) kiln_fields_bool(&m, "dry_run", true);
  kiln_fields_end(&m);
}

/* "90", "90s", "15m", "12h", "30d" -> seconds, 1 .. 2^31 - 1. */
static bool parse_age(const char *s, uint64_t *out) {
  char *end;
  if (!s || !isdigit((unsigned char)s[0])) return false;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  uint64_t unit = !*end ? 1 : !strcmp(end, "s") ? 1 : !strcmp(end, "m") ? 60 : !strcmp(end, "h") ? 3600
                : !strcmp(end, "d") ? 86400 : 0;
  if (errno || !unit || v < 1 || v > INT32_MAX / unit) return false;
  *out = v * unit;
  return true;
}

/* `kiln cache prune`: exactly one of --stale, --unused AGE, --all, KEY... (1000 per call). */
static int cache_prune(cli_t *cli, int nkeys, char **keys) {
  cache_prune_t p = {.stale = cli->opt[O_STALE] != NULL, .all = cli->opt[O_ALL] != NULL,
                     .dry_run = cli->opt[O_DRY_RUN] != NULL};
  if (cli->opt[O_UNUSED] && !parse_age(cli->opt[O_UNUSED], &p.unused_s))
    return usage_error(cli, "--unused '%s' is an age like 3600, 90m, 12h or 30d", cli->opt[O_UNUSED]);
  if (p.stale + p.all + (p.unused_s != 0) + (nkeys > 0) != 1)
    return usage_error(cli, "prune wants one of --stale, --unused AGE, --all or KEY...");
  for (int i = 0; i < nkeys; i++)
    if (strlen(keys[i]) != 64 || strspn(keys[i], "0123456789abcdefABCDEF") != 64)
      return usage_error(cli, "'%s' is not a module id (64 hex digits)", keys[i]);
  uint64_t removed = 0, bytes = 0;
  int done = 0;
  do {
    p.keys = keys + done;
    p.nkeys = KILN_MIN(nkeys - done, 1000);
    kiln_reply_t *r;
    kiln_status_t s = kiln_client_call(cli->c, "cache_prune", pack_cache_prune, &p, &r);
    if (s) return report("cache prune", s, EXIT_SERVER);
    removed += u64_field(kiln_reply_result(r), "removed");
    bytes += u64_field(kiln_reply_result(r), "bytes");
    kiln_reply_free(r);
    done += p.nkeys;
  } while (done < nkeys);
  printf("%s %llu entr%s, %.1f MB\n", p.dry_run ? "would remove" : "removed", (unsigned long long)removed,
         removed == 1 ? "y" : "ies", (double)bytes / 1e6);
  return EXIT_OK;
}

static int cmd_cache(cli_t *cli, int argc, char **argv) {
  const char *sub = argc > 1 ? argv[1] : NULL;
  bool prune = sub && !strcmp(sub, "prune"), list = sub && !strcmp(sub, "list");
  if (sub && !prune && !list && strcmp(sub, "size") != 0)
    return usage_error(cli, "the subcommand is size, list or prune, not '%s'", sub);
  if (argc > 2 && !prune) return usage_error(cli, "%s takes no arguments", sub);
  static const struct { int opt; const char *only; } only[] = {
      {O_STALE, "list and prune"}, {O_LIMIT, "list"}, {O_UNUSED, "prune"}, {O_ALL, "prune"}, {O_DRY_RUN, "prune"}};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(only); i++)
    if (cli->opt[only[i].opt] && !(prune && strstr(only[i].only, "prune")) && !(list && strstr(only[i].only, "list")))
      return usage_error(cli, "--%s goes with cache %s", LONG_OPTS[only[i].opt].name, only[i].only);
  if (prune) return cache_prune(cli, argc - 2, argv + 2);
  if (list) return cache_list(cli);
  kiln_reply_t *r;
  kiln_status_t s;
  if (sub) { /* size: the operator's totals */
    cache_page_t one = {.limit = 1};
    if ((s = kiln_client_call(cli->c, "cache_list", pack_cache_page, &one, &r))) return report("cache size", s, EXIT_SERVER);
    if (cli->opt[O_JSON]) return print_json_reply(r);
    print_cache_size(kiln_reply_result(r));
    kiln_reply_free(r);
    return EXIT_OK;
  }
  s = kiln_client_stats(cli->c, &r);
  if (s) return report("cache", s, EXIT_SERVER);
  const msgpack_object *cache = kiln_object_get(kiln_reply_result(r), "cache");
  const msgpack_object *comp = kiln_object_get(kiln_reply_result(r), "compile");
  if (cli->opt[O_JSON]) {
    kiln_object_print_json(stdout, cache, true);
    putchar('\n');
  } else {
    printf("disk:    %llu entries, %.1f MB\n", (unsigned long long)u64_field(cache, "entries_disk"),
           (double)u64_field(cache, "bytes_disk") / 1e6);
    printf("memory:  %.1f MB of artifacts, %llu modules (%.1f MB of kernel tables)\n",
           (double)u64_field(cache, "bytes_memory") / 1e6, (unsigned long long)u64_field(comp, "modules"),
           (double)u64_field(comp, "module_bytes") / 1e6);
    printf("lookups: %llu memory hits, %llu disk hits, %llu misses; %llu evictions, %llu corrupt, "
           "%llu write errors\n",
           (unsigned long long)u64_field(cache, "hits_memory"), (unsigned long long)u64_field(cache, "hits_disk"),
           (unsigned long long)u64_field(cache, "misses"), (unsigned long long)u64_field(cache, "evictions"),
           (unsigned long long)u64_field(cache, "corrupt"), (unsigned long long)u64_field(cache, "write_errors"));
  }
  kiln_reply_free(r);
  return EXIT_OK;
}

/* --- compile ------------------------------------------------------------------------------- */

/* A whole file in memory (a compile payload is at most 256 MiB). */
static int read_file(cli_t *cli, const char *path, char **out, size_t *out_n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "kiln: %s: %s: %s\n", cli->name, path, strerror(errno));
    return EXIT_FILE;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      char *nb = cap < (512u << 20) ? realloc(buf, cap *= 2) : NULL;
      if (!nb) free(buf);
      buf = nb;
    }
  }
  bool bad = ferror(f) || !buf;
  fclose(f);
  if (bad) {
    free(buf);
    fprintf(stderr, "kiln: %s: cannot read %s (or it is over 512 MiB)\n", cli->name, path);
    return EXIT_FILE;
  }
  *out = buf;
  *out_n = n;
  return EXIT_OK;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* kiln/kernel.h's folder: $KILN_INCLUDE, the installed one, else this source tree's. */
static const char *kernel_include(void) {
  static const char *const cands[] = {KILN_INSTALLED_INCLUDE, KILN_SOURCE_INCLUDE};
  const char *e = getenv("KILN_INCLUDE");
  if (e && *e) return e;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(cands); i++) {
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/kiln/kernel.h", cands[i]);
    if (access(p, R_OK) == 0) return cands[i];
  }
  return NULL;
}

/* A C kernel (FILE.c) becomes LLVM bitcode here, as docs/kernels.md does it by hand:
 * `clang -O2 -emit-llvm -c -I INCLUDE` ($KILN_CLANG, else clang-22 .. clang-19, else clang). */
static int compile_c(cli_t *cli, const char *path, char **out, size_t *out_n) {
  const char *inc = kernel_include();
  if (!inc) {
    fprintf(stderr, "kiln: compile: kiln/kernel.h not found; set KILN_INCLUDE to its folder\n");
    return EXIT_FILE;
  }
  static const char *const clangs[] = {"clang-22", "/usr/lib/llvm-22/bin/clang", "clang-21", "clang-20",
                                       "clang-19", "clang"};
  const char *clang = getenv("KILN_CLANG");
  char tmp[] = "/tmp/kiln-cc-XXXXXX";
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fprintf(stderr, "kiln: compile: mkstemp: %s\n", strerror(errno));
    return EXIT_FILE;
  }
  close(fd);
  int status = -1;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(clangs) && status != 0; i++) {
    const char *cc = clang && *clang ? clang : clangs[i];
    pid_t pid = fork();
    if (pid == 0) {
      execlp(cc, cc, "-O2", "-emit-llvm", "-c", "-I", inc, "-o", tmp, path, (char *)NULL);
      _exit(127);
    }
    if (pid < 0 || waitpid(pid, &status, 0) < 0) status = -1;
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 127 && !(clang && *clang)) {
      status = -1; /* not installed under this name: the next one */
      continue;
    }
    break;
  }
  int rc = EXIT_OK;
  if (status != 0) {
    fprintf(stderr, "kiln: compile: clang could not compile %s (set KILN_CLANG to a clang)\n", path);
    rc = EXIT_FILE;
  } else {
    rc = read_file(cli, tmp, out, out_n);
  }
  unlink(tmp);
  return rc;
}

typedef struct compile_ctx {
  const cli_t *cli;
  const char *ir;
  size_t n;
  uint64_t opt_level, max_block;
} compile_ctx_t;

static void pack_compile(msgpack_packer *pk, void *arg) {
  const compile_ctx_t *x = arg;
  const cli_t *cli = x->cli;
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_key(&m, "ir");
  msgpack_pack_bin_with_body(pk, x->ir, x->n);
  if (cli->opt[O_TARGET]) kiln_fields_str(&m, "target", cli->opt[O_TARGET]);
  if (cli->opt[O_FORMAT]) kiln_fields_str(&m, "format", cli->opt[O_FORMAT]);
  if (cli->opt[O_OPT_LEVEL] || cli->opt[O_FAST_MATH] || cli->opt[O_MAX_BLOCK]) {
    kiln_fields_key(&m, "options");
    kiln_fields_t o;
    kiln_fields_begin(&o, pk);
    if (cli->opt[O_OPT_LEVEL]) kiln_fields_u64(&o, "opt_level", x->opt_level);
    if (cli->opt[O_FAST_MATH]) kiln_fields_bool(&o, "fast_math", true);
    if (cli->opt[O_MAX_BLOCK]) kiln_fields_u64(&o, "max_block", x->max_block);
    kiln_fields_end(&o);
  }
  kiln_fields_end(&m);
}

static void print_str(const msgpack_object *o) {
  if (o && o->type == MSGPACK_OBJECT_STR) fwrite(o->via.str.ptr, 1, o->via.str.size, stdout);
}

static int cmd_compile(cli_t *cli, int argc, char **argv) {
  compile_ctx_t x = {.cli = cli};
  if (!opt_u64(cli, O_OPT_LEVEL, 0, 3, 3, &x.opt_level) ||
      !opt_u64(cli, O_MAX_BLOCK, 1, 1u << 20, 0, &x.max_block))
    return EXIT_USAGE;
  char *ir;
  int rc = ends_with(argv[1], ".c") ? compile_c(cli, argv[1], &ir, &x.n) : read_file(cli, argv[1], &ir, &x.n);
  if (rc) return rc;
  x.ir = ir;
  kiln_reply_t *r;
  kiln_status_t s = kiln_client_call(cli->c, "compile", pack_compile, &x, &r);
  free(ir);
  if (s) return report("compile", s, EXIT_SERVER);
  if (cli->opt[O_JSON]) return print_json_reply(r);
  /* line 1: the module id alone (M=$(kiln compile f.ll | head -n 1)); then a kernel a line */
  const msgpack_object *res = kiln_reply_result(r), *kernels = kiln_object_get(res, "kernels");
  print_str(kiln_object_get(res, "module"));
  putchar('\n');
  for (uint32_t i = 0; kernels && kernels->type == MSGPACK_OBJECT_ARRAY && i < kernels->via.array.size; i++) {
    const msgpack_object *k = &kernels->via.array.ptr[i], *args = kiln_object_get(k, "args");
    printf("kernel ");
    print_str(kiln_object_get(k, "name"));
    putchar('(');
    for (uint32_t j = 0; args && args->type == MSGPACK_OBJECT_ARRAY && j < args->via.array.size; j++) {
      if (j) printf(", ");
      print_str(kiln_object_get(&args->via.array.ptr[j], "type"));
      putchar(' ');
      print_str(kiln_object_get(&args->via.array.ptr[j], "name"));
    }
    printf(")\n");
  }
  const msgpack_object *cached = kiln_object_get(res, "cached"), *ms = kiln_object_get(res, "compile_ms");
  const msgpack_object *log = kiln_object_get(res, "log"), *target = kiln_object_get(res, "target");
  fprintf(stderr, "kiln: compile: ");
  if (target && target->type == MSGPACK_OBJECT_STR)
    fprintf(stderr, "%.*s, ", (int)target->via.str.size, target->via.str.ptr);
  if (cached && cached->type == MSGPACK_OBJECT_BOOLEAN && cached->via.boolean) fprintf(stderr, "cached\n");
  else fprintf(stderr, "%.1f ms\n", ms && ms->type == MSGPACK_OBJECT_FLOAT64 ? ms->via.f64 : 0.0);
  if (log && log->type == MSGPACK_OBJECT_STR && log->via.str.size)
    fprintf(stderr, "%.*s\n", (int)log->via.str.size, log->via.str.ptr);
  kiln_reply_free(r);
  return EXIT_OK;
}

typedef struct source_ctx {
  const char *module, *kind;
} source_ctx_t;

static void pack_source(msgpack_packer *pk, void *arg) {
  const source_ctx_t *x = arg;
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_str(&m, "module", x->module);
  kiln_fields_str(&m, "kind", x->kind);
  kiln_fields_end(&m);
}

static int cmd_source(cli_t *cli, int argc, char **argv) {
  source_ctx_t x = {argv[1], cli->opt[O_KIND] ? cli->opt[O_KIND] : "llvm"};
  if (strcmp(x.kind, "llvm") && strcmp(x.kind, "asm") && strcmp(x.kind, "binary"))
    return usage_error(cli, "--kind is llvm, asm or binary, not '%s'", x.kind);
  const char *out = cli->opt[O_OUTPUT];
  if (!strcmp(x.kind, "binary") && !out && isatty(STDOUT_FILENO))
    return usage_error(cli, "a binary goes to a file (--output FILE) or a pipe, not a terminal");
  kiln_reply_t *r;
  kiln_status_t s = kiln_client_call(cli->c, "source", pack_source, &x, &r);
  if (s) return report("source", s, EXIT_SERVER);
  const msgpack_object *o = kiln_reply_result(r);
  const char *p = NULL;
  size_t n = 0;
  if (o->type == MSGPACK_OBJECT_STR) p = o->via.str.ptr, n = o->via.str.size;
  else if (o->type == MSGPACK_OBJECT_BIN) p = o->via.bin.ptr, n = o->via.bin.size;
  FILE *f = out ? fopen(out, "wb") : stdout;
  bool ok = f && fwrite(p ? p : "", 1, n, f) == n;
  if (f && f != stdout) ok = fclose(f) == 0 && ok;
  else if (f) ok = fflush(f) == 0 && ok;
  kiln_reply_free(r);
  if (!ok) {
    fprintf(stderr, "kiln: source: cannot write %s: %s\n", out ? out : "stdout", strerror(errno));
    return EXIT_FILE;
  }
  return EXIT_OK;
}

/* --- launch and time ------------------------------------------------------------------------ */

typedef struct arg {
  enum { ARG_TENSOR, ARG_INT, ARG_UINT, ARG_FLOAT } kind;
  union { uint64_t u; int64_t i; double f; };
} arg_t;

typedef struct run_ctx {
  const cli_t *cli;
  const char *module, *kernel;
  uint64_t grid[3], block[3], shared, timeout_ms, number, repeat, min_repeat_ms, warmup;
  int ngrid, nblock, nargs;
  bool timing;
  arg_t *args;
} run_ctx_t;

static void pack_dims(kiln_fields_t *m, const char *key, const uint64_t *d, int n) {
  kiln_fields_key(m, key);
  msgpack_pack_array(m->pk, (size_t)n);
  for (int i = 0; i < n; i++) msgpack_pack_uint64(m->pk, d[i]);
}

static void pack_run(msgpack_packer *pk, void *arg) {
  const run_ctx_t *x = arg;
  const cli_t *cli = x->cli;
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_str(&m, "module", x->module);
  kiln_fields_str(&m, "kernel", x->kernel);
  pack_dims(&m, "grid", x->grid, x->ngrid);
  pack_dims(&m, "block", x->block, x->nblock);
  if (cli->opt[O_DEVICE]) kiln_fields_str(&m, "device", cli->opt[O_DEVICE]);
  if (cli->opt[O_SHARED]) kiln_fields_u64(&m, "shared", x->shared);
  if (cli->opt[O_LAUNCH_TIMEOUT]) kiln_fields_u64(&m, "timeout_ms", x->timeout_ms);
  if (x->timing) {
    kiln_fields_u64(&m, "number", x->number);
    kiln_fields_u64(&m, "repeat", x->repeat);
    kiln_fields_u64(&m, "min_repeat_ms", x->min_repeat_ms);
    kiln_fields_u64(&m, "warmup", x->warmup);
    kiln_fields_bool(&m, "flush", cli->opt[O_FLUSH] != NULL);
  }
  kiln_fields_key(&m, "args");
  msgpack_pack_array(pk, (size_t)x->nargs);
  for (int i = 0; i < x->nargs; i++) {
    const arg_t *a = &x->args[i];
    switch (a->kind) {
      case ARG_TENSOR: {
        kiln_fields_t t;
        kiln_fields_begin(&t, pk);
        kiln_fields_u64(&t, "tensor", a->u);
        kiln_fields_end(&t);
        break;
      }
      case ARG_INT: msgpack_pack_int64(pk, a->i); break;
      case ARG_UINT: msgpack_pack_uint64(pk, a->u); break;
      case ARG_FLOAT: msgpack_pack_double(pk, a->f); break;
    }
  }
  kiln_fields_end(&m);
}

/* One kernel argument: t:ID (a tensor), @FILE.npy (uploaded now, freed after), an integer, or
 * a number with a point or exponent (a float). */
static int parse_arg(cli_t *cli, const char *s, arg_t *a, uint64_t *uploaded, int *nup) {
  char *end;
  if (s[0] == '@') {
    int rc = upload_npy(cli, s + 1, cli->opt[O_DEVICE], NULL, &a->u);
    if (rc) return rc;
    a->kind = ARG_TENSOR;
    uploaded[(*nup)++] = a->u;
    fprintf(stderr, "kiln: %s: %s is tensor %llu\n", cli->name, s + 1, (unsigned long long)a->u);
    return EXIT_OK;
  }
  if (!strncmp(s, "t:", 2)) {
    a->kind = ARG_TENSOR;
    return parse_u64(s + 2, 0, UINT64_MAX, &a->u) ? EXIT_OK : usage_error(cli, "'%s' is not t:ID", s);
  }
  errno = 0;
  if (strpbrk(s, ".eEnN")) { /* 1.5, 1e3, inf, nan */
    a->kind = ARG_FLOAT;
    a->f = strtod(s, &end);
  } else if (s[0] == '-') {
    a->kind = ARG_INT;
    a->i = strtoll(s, &end, 10);
  } else {
    a->kind = ARG_UINT;
    a->u = strtoull(s, &end, 10);
  }
  if (errno || end == s || *end)
    return usage_error(cli, "argument '%s' is not t:ID, @FILE.npy or a number", s);
  return EXIT_OK;
}

static int run_kernel(cli_t *cli, int argc, char **argv, bool timing) {
  run_ctx_t x = {.cli = cli, .module = argv[1], .kernel = argv[2], .timing = timing};
  if (!parse_dims(cli, O_GRID, x.grid, &x.ngrid) || !parse_dims(cli, O_BLOCK, x.block, &x.nblock) ||
      !opt_u64(cli, O_SHARED, 0, UINT32_MAX, 0, &x.shared) ||
      !opt_u64(cli, O_LAUNCH_TIMEOUT, 1, 7ull * 86400 * 1000, 0, &x.timeout_ms) ||
      !opt_u64(cli, O_NUMBER, 1, UINT32_MAX, 1, &x.number) ||
      !opt_u64(cli, O_REPEAT, 1, UINT32_MAX, 3, &x.repeat) ||
      !opt_u64(cli, O_MIN_REPEAT_MS, 0, UINT32_MAX, 0, &x.min_repeat_ms) ||
      !opt_u64(cli, O_WARMUP, 0, UINT32_MAX, 1, &x.warmup))
    return EXIT_USAGE;
  x.nargs = argc - 3;
  arg_t args[256];
  uint64_t uploaded[256];
  int nup = 0, rc = EXIT_OK;
  if (x.nargs > 256) return usage_error(cli, "at most 256 kernel arguments");
  x.args = args;
  for (int i = 0; i < x.nargs && !rc; i++) rc = parse_arg(cli, argv[3 + i], &args[i], uploaded, &nup);
  if (!rc) {
    kiln_reply_t *r;
    kiln_status_t s = kiln_client_call(cli->c, timing ? "time" : "launch", pack_run, &x, &r);
    if (s) {
      rc = report(cli->name, s, EXIT_SERVER);
    } else if (cli->opt[O_JSON]) {
      rc = print_json_reply(r);
    } else {
      const msgpack_object *res = kiln_reply_result(r);
      double v[4] = {0};
      static const char *const keys[] = {"elapsed", "mean", "median", "min"};
      for (int k = 0; k < 4; k++) {
        const msgpack_object *o = kiln_object_get(res, keys[k]);
        if (o && o->type == MSGPACK_OBJECT_FLOAT64) v[k] = o->via.f64;
      }
      if (timing)
        printf("mean %.6f ms  median %.6f ms  min %.6f ms  (%llu runs x %llu repeats)\n", v[1] * 1e3,
               v[2] * 1e3, v[3] * 1e3, (unsigned long long)u64_field(res, "number"),
               (unsigned long long)u64_field(res, "repeat"));
      else
        printf("elapsed %.6f ms\n", v[0] * 1e3);
      kiln_reply_free(r);
    }
  }
  /* @FILE uploads are the command's own: freed, unless the kernel's results are wanted
   * (then pass t:ID of a tensor made with put or alloc) */
  for (int i = 0; i < nup; i++) kiln_status_free(kiln_client_free_tensor(cli->c, uploaded[i]));
  return rc;
}

static int cmd_launch(cli_t *cli, int argc, char **argv) { return run_kernel(cli, argc, argv, false); }
static int cmd_time(cli_t *cli, int argc, char **argv) { return run_kernel(cli, argc, argv, true); }

/* --- lease ---------------------------------------------------------------------------------- */

typedef struct lease_ctx {
  const cli_t *cli;
  uint64_t seconds;
} lease_ctx_t;

static void pack_lease(msgpack_packer *pk, void *arg) {
  const lease_ctx_t *x = arg;
  const cli_t *cli = x->cli;
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  if (cli->opt[O_DEVICE]) kiln_fields_str(&m, "device", cli->opt[O_DEVICE]);
  kiln_fields_u64(&m, "seconds", x->seconds);
  kiln_fields_bool(&m, "wait", cli->opt[O_NO_WAIT] == NULL);
  kiln_fields_end(&m);
}

static void pack_release(msgpack_packer *pk, void *arg) {
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_u64(&m, "lease", *(const uint64_t *)arg);
  kiln_fields_end(&m);
}

/* `kiln lease [--device D] [--seconds S] [-- CMD ...]`: a lease ends when its connection
 * closes, so the CLI holds it: while CMD runs (its exit status is kiln's), else until the
 * lease runs out or kiln is interrupted. Other connections of the tenant use the device. */
static int cmd_lease(cli_t *cli, int argc, char **argv) {
  lease_ctx_t x = {.cli = cli};
  if (!opt_u64(cli, O_SECONDS, 1, 3600, 60, &x.seconds)) return EXIT_USAGE;
  kiln_reply_t *r;
  kiln_status_t s = kiln_client_call(cli->c, "lease", pack_lease, &x, &r);
  if (s) return report("lease", s, EXIT_SERVER);
  const msgpack_object *res = kiln_reply_result(r), *dev = kiln_object_get(res, "device");
  uint64_t lease = u64_field(res, "lease"), secs = u64_field(res, "seconds");
  fprintf(stderr, "kiln: lease %llu of %.*s for %llu s\n", (unsigned long long)lease,
          dev && dev->type == MSGPACK_OBJECT_STR ? (int)dev->via.str.size : 1,
          dev && dev->type == MSGPACK_OBJECT_STR ? dev->via.str.ptr : "?", (unsigned long long)secs);
  kiln_reply_free(r);
  int rc = EXIT_OK;
  if (argc > 1) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      execvp(argv[1], argv + 1);
      fprintf(stderr, "kiln: lease: %s: %s\n", argv[1], strerror(errno));
      _exit(127);
    }
    int st = 0;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    rc = pid < 0 ? EXIT_FILE : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  } else {
    sleep((unsigned)secs); /* SIGINT/SIGTERM end kiln, and the lease with its connection */
  }
  s = kiln_client_call(cli->c, "release", pack_release, &lease, &r);
  if (s) kiln_status_free(s); /* already over: ran out while the command ran */
  else kiln_reply_free(r);
  return rc;
}

/* --- token --------------------------------------------------------------------------------- */

/* `kiln token new [TENANT ...]`: 32 random bytes as URL-safe base64 behind "kiln_" (48
 * characters, a prefix secret scanners can match), and the line for kilnd's tokens file with
 * the token's BLAKE2b-256, which is all kilnd compares (docs/operations.md). */
static int cmd_token(cli_t *cli, int argc, char **argv) {
  if (strcmp(argv[1], "new") != 0) return usage_error(cli, "the subcommand is `new`, not '%s'", argv[1]);
  kiln_status_t s = kiln_crypto_init();
  if (s) return report("token", s, EXIT_USAGE);
  static const char *const placeholder[] = {"TENANT"};
  const char *const *tenants = argc > 2 ? (const char *const *)argv + 2 : placeholder;
  int n = argc > 2 ? argc - 2 : 1;
  for (int i = 0; i < n; i++) {
    const char *t = tenants[i];
    size_t len = strlen(t);
    bool ok = len > 0 && len < 64;
    for (size_t k = 0; ok && k < len; k++) ok = isalnum((unsigned char)t[k]) || strchr("_-.", t[k]);
    if (!ok) return usage_error(cli, "'%s' is not a tenant name (1-63 of A-Z a-z 0-9 _ - .)", t);
  }
  for (int i = 0; i < n; i++) {
    uint8_t raw[32], hash[KILN_HASH_BYTES];
    char token[64] = "kiln_", hex[2 * KILN_HASH_BYTES + 1];
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2base64(token + 5, sizeof(token) - 5, raw, sizeof(raw), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    kiln_hash(token, strlen(token), hash);
    kiln_hex(hash, sizeof(hash), hex);
    printf("token for %s: %s\nblake2b:%s %s\n", tenants[i], token, hex, tenants[i]);
    sodium_memzero(raw, sizeof(raw));
    sodium_memzero(token, sizeof(token));
  }
  return fflush(stdout) == 0 ? EXIT_OK : EXIT_FILE;
}

/* --- the fleet ------------------------------------------------------------------------------ */

static int cmd_fleet(cli_t *cli, int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : getenv("KILN_FLEET");
  if (!url || !*url) return usage_error(cli, "wants the registry's URL (or $KILN_FLEET)");
  uint64_t timeout_ms;
  if (!opt_u64(cli, O_TIMEOUT, 1, INT_MAX, 5000, &timeout_ms)) return EXIT_USAGE;
  kiln_cli_fleet_opts_t o = {.url = url, .device = cli->opt[O_DEVICE], .json = cli->opt[O_JSON] != NULL,
                             .timeout_ms = (int)timeout_ms,
                             .auth_file = cli->opt[O_AUTH_FILE] ? cli->opt[O_AUTH_FILE] : getenv("KILN_FLEET_AUTH_FILE"),
                             .trusted_keys = cli->opt[O_TRUSTED_KEYS] ? cli->opt[O_TRUSTED_KEYS]
                                                                      : getenv("KILN_FLEET_TRUSTED_KEYS")};
  kiln_status_t s = kiln_cli_fleet_list(&o, stdout, stderr);
  if (!s) return EXIT_OK;
  kiln_code_t code = kiln_status_code(s);
  return report("fleet", s, code == KILN_E_INVALID_ARGUMENT ? EXIT_USAGE
                            : code == KILN_E_NOT_FOUND || code == KILN_E_PERMISSION ? EXIT_FILE : EXIT_CONNECT);
}

static int cmd_fleet_key(cli_t *cli, int argc, char **argv) {
  kiln_status_t s = kiln_cli_fleet_key(argv[1], argc > 2 ? argv[2] : NULL, stdout, stderr);
  return s ? report("fleet-key", s, EXIT_FILE) : EXIT_OK;
}

/* --- the table ------------------------------------------------------------------------------ */

#define RUN_HELP                                                                                   \
  "  --grid X[,Y[,Z]]     work-groups per dimension (required)\n"                                  \
  "  --block X[,Y[,Z]]    work-items per work-group (required)\n"                                  \
  "  --device D           the device (default cpu:0); @FILE uploads go there\n"                   \
  "  --shared BYTES       dynamic work-group memory\n"                                             \
  "  --launch-timeout MS  the kernel's deadline (default: kilnd's)\n"                              \
  "  --json               print the whole reply\n"                                                 \
  "ARGS, one per kernel parameter: t:ID (a tensor, from put or alloc), @FILE.npy (uploaded for\n" \
  "this call and freed after it), an integer, or a float (1.5, 1e-3). Negative numbers after\n"  \
  "`--`.\n"

static const command_t COMMANDS[] = {
    {"ping", "", "Round trip to kilnd; prints the time it took.\n", 0, 0, 0, false, cmd_ping},
    {"devices", "[--absent] [--json]",
     "The devices kilnd serves (--absent: also the backends that found none, and why).\n",
     BIT(O_ABSENT) | BIT(O_JSON), 0, 0, false, cmd_devices},
    {"compile", "FILE [--target T] [--format F] [--opt-level N] [--fast-math] [--max-block N] [--json]",
     "Compiles FILE (LLVM IR text or bitcode, a code object, or C: FILE.c is compiled here with\n"
     "clang and kiln/kernel.h first) and prints the module id on the first line, then one line\n"
     "per kernel with its parameters; the target and compile time (or `cached`) go to stderr.\n"
     "  --target T      cpu (default), gfx942, sm_90, a device id (cuda:0), ...\n"
     "  --format F      auto (default), llvm, hsaco, ptx, cpu-so, te\n"
     "  --opt-level N   0 to 3 (default 3)\n"
     "  --fast-math     fast-math flags and libraries\n"
     "  --max-block N   the largest work-group the kernels will be launched with\n"
     "  --json          print the whole reply\n"
     "Environment: KILN_CLANG (the clang for FILE.c), KILN_INCLUDE (kiln/kernel.h's folder).\n",
     BIT(O_TARGET) | BIT(O_FORMAT) | BIT(O_OPT_LEVEL) | BIT(O_FAST_MATH) | BIT(O_MAX_BLOCK) | BIT(O_JSON), 1, 1,
     false, cmd_compile},
    {"launch", "MODULE KERNEL --grid G --block B [ARGS...]",
     "Launches KERNEL of MODULE and waits; prints the device time.\n" RUN_HELP, RUN_OPTS | BIT(O_JSON), 2, -1,
     false, cmd_launch},
    {"time", "MODULE KERNEL --grid G --block B [--number N] [--repeat R] [ARGS...]",
     "Times KERNEL of MODULE on the device (TVM's time_evaluator); prints mean, median and min.\n"
     "  --number N         runs per repeat (default 1)\n"
     "  --repeat R         repeats (default 3)\n"
     "  --min-repeat-ms MS grow --number until a repeat takes this long\n"
     "  --warmup W         unmeasured runs first (default 1)\n"
     "  --flush            evict caches before each repeat\n" RUN_HELP,
     RUN_OPTS | BIT(O_JSON) | BIT(O_NUMBER) | BIT(O_REPEAT) | BIT(O_MIN_REPEAT_MS) | BIT(O_WARMUP) | BIT(O_FLUSH),
     2, -1, false, cmd_time},
    {"source", "MODULE [--kind llvm|asm|binary] [--output FILE]",
     "Prints what kilnd built for MODULE: the optimised LLVM IR (default), the target assembly,\n"
     "or the code object (binary: to --output FILE or a pipe).\n",
     BIT(O_KIND) | BIT(O_OUTPUT), 1, 1, false, cmd_source},
    {"put", "FILE.npy [--device D] [--dtype T]",
     "Uploads an array; prints the new tensor's id. --dtype reinterprets the data as another\n"
     "dtype of the same size (e.g. bfloat16 bits saved as uint16).\n",
     BIT(O_DEVICE) | BIT(O_DTYPE), 1, 1, false, cmd_put},
    {"alloc", "DTYPE DIM... [--device D]", "Allocates a zero-filled tensor; prints its id.\n", BIT(O_DEVICE), 1, -1,
     false, cmd_alloc},
    {"get", "ID FILE.npy",
     "Downloads tensor ID into FILE.npy (bfloat16 is written as its uint16 bits).\n", 0, 2, 2, false, cmd_get},
    {"free", "ID... | --all",
     "Frees tensors; --all frees every tensor of the tenant (any session's, `kiln tensors`).\n",
     BIT(O_ALL), 0, -1, false, cmd_free},
    {"tensors", "[--device D] [--json]",
     "The tenant's tensors: id, device, dtype, shape, bytes, age and the client that made each.\n",
     BIT(O_DEVICE) | BIT(O_JSON), 0, 0, false, cmd_tensors},
    {"lease", "[--device D] [--seconds S] [--no-wait] [-- CMD [ARGS...]]",
     "Takes the device for the tenant alone (clean timings) and holds the lease while CMD runs\n"
     "(kiln exits with CMD's status), or for --seconds (default 60; up to 3600) without one.\n"
     "--no-wait: fail at once when the device is busy or leased.\n",
     BIT(O_DEVICE) | BIT(O_SECONDS) | BIT(O_NO_WAIT), 0, -1, false, cmd_lease},
    {"stats", "[--json]", "Tenants, queues, devices, compiles and cache as tables.\n", BIT(O_JSON), 0, 0, false,
     cmd_stats},
    {"cache", "[size | list [--stale] [--limit N] | prune (--stale | --unused AGE | --all | KEY...) [--dry-run]]",
     "Without a subcommand: the artifact cache's counters (entries and bytes on disk and in\n"
     "memory, hits, misses, evictions), for every tenant. The operator's (no tokens file, or a\n"
     "tokens line with stats=all; docs/cache.md):\n"
     "  size            entries and bytes, the stale part, the compiler and since when\n"
     "  list            a line per entry: module id, bytes, last use, where, stale\n"
     "    --stale       only the stale entries (not used by this compiler: older ones')\n"
     "    --limit N     at most N entries\n"
     "  prune           removes entries (they are compiled again on next use):\n"
     "    --stale       the stale ones\n"
     "    --unused AGE  those not used for AGE (seconds, or 90m, 12h, 30d)\n"
     "    --all         every one\n"
     "    KEY...        these module ids\n"
     "    --dry-run     only say how many and how large\n"
     "  --json          print the reply (list: a JSON array of entries)\n",
     BIT(O_JSON) | BIT(O_STALE) | BIT(O_LIMIT) | BIT(O_UNUSED) | BIT(O_ALL) | BIT(O_DRY_RUN), 0, -1, false,
     cmd_cache, "size list prune"},
    {"fleet", "[REGISTRY] [--device KIND] [--auth-file FILE] [--trusted-keys FILE] [--json]",
     "The hosts of a fleet, read from its registry on Redis (no kilnd connection): address,\n"
     "version, compiler identity (`*`: not the one most hosts have, so their builds are not\n"
     "shared), the record's age, connections, tenants, compile workers busy/all+queued, and\n"
     "each device with its load. Registry entries that are not kilnd's records are skipped\n"
     "with a note on stderr.\n"
     "  REGISTRY          redis://HOST[:PORT][/DB] or unix:PATH[?db=N] (default $KILN_FLEET)\n"
     "  --device KIND     only hosts serving KIND (cuda, hsa, rocm, gpu, cpu) or a device id\n"
     "  --auth-file FILE  Redis AUTH: PASSWORD or USER PASSWORD on one line, chmod 600\n"
     "                    (default $KILN_FLEET_AUTH_FILE)\n"
     "  --trusted-keys FILE  only records signed by these keys, each for its address\n"
     "                    (lines `ed25519:HEX ADDR`; default $KILN_FLEET_TRUSTED_KEYS)\n"
     "  --timeout MS      connecting and each reply (default 5000)\n"
     "  --json            a JSON array of the hosts\n",
     BIT(O_DEVICE) | BIT(O_AUTH_FILE) | BIT(O_TRUSTED_KEYS) | BIT(O_JSON), 0, 1, true, cmd_fleet},
    {"fleet-key", "FILE [ADDR]",
     "Makes FILE, a new Ed25519 key for kilnd --fleet-key (mode 0600), unless it exists, and\n"
     "prints its line for a trusted-keys file: `ed25519:HEX ADDR` (ADDR: the address the host\n"
     "advertises; default *, any). Connects to nothing.\n",
     0, 1, 2, true, cmd_fleet_key},
    {"token", "new [TENANT...]",
     "Makes a fresh token for each TENANT (no connection): prints `token for TENANT: TOKEN`\n"
     "(give it to the tenant; nothing keeps it) and the tokens-file line `blake2b:HASH TENANT`.\n",
     0, 1, -1, true, cmd_token, "new"},
};

static const char GLOBAL_HELP[] =
    "options (before or after the command):\n"
    "  --url URL       unix:PATH, tcp:HOST:PORT, tls:HOST:PORT (also tcp://HOST:PORT,\n"
    "                  unix:///PATH); default $KILN_URL, else the default socket\n"
    "  --tls-ca FILE   for tls: URLs, the CA (PEM) to trust (default $KILN_TLS_CA)\n"
    "  --tls-cert FILE, --tls-key FILE\n"
    "                  a client certificate and key (default $KILN_TLS_CERT, $KILN_TLS_KEY)\n"
    "  --timeout MS    give up waiting for a reply after MS milliseconds\n"
    "  --token TOKEN   sent with hello (default $KILN_TOKEN; it shows in `ps`: prefer the\n"
    "                  environment)\n"
    "  --help, --version\n"
    "KILN_TOKEN (environment) is sent with hello when set.\n"
    "\n"
    "exit status: 0 success, 1 kilnd answered with an error, 2 usage error, 3 kilnd cannot be\n"
    "reached or the connection broke, 4 a local file could not be read or written.\n";

static void usage_all(FILE *f) {
  fprintf(f, "usage: kiln [OPTIONS] COMMAND [ARGS]\n\ncommands (kiln COMMAND --help for one):\n");
  for (size_t i = 0; i < KILN_ARRAY_SIZE(COMMANDS); i++)
    fprintf(f, "  %-8s %s\n", COMMANDS[i].name, COMMANDS[i].args);
  fprintf(f, "\n%s", GLOBAL_HELP);
}

static void usage_one(FILE *f, const command_t *cmd) {
  fprintf(f, "usage: kiln %s %s\n\n%s\n%s", cmd->name, cmd->args, cmd->help, GLOBAL_HELP);
}

/* `kiln --complete`: a line per command, its name, its subcommands, then its options, for the
 * bash completion (kiln.bash), so a new table entry completes without an edit there. */
static void print_completion(void) {
  for (size_t i = 0; i < KILN_ARRAY_SIZE(COMMANDS); i++) {
    printf("%s", COMMANDS[i].name);
    if (COMMANDS[i].subcommands) printf(" %s", COMMANDS[i].subcommands);
    for (int o = 0; o < O_COUNT_; o++)
      if ((COMMANDS[i].opts | GLOBAL_OPTS) & BIT(o)) printf(" --%s", LONG_OPTS[o].name);
    putchar('\n');
  }
}

/* Accepts the URL spellings of the Python client: tcp://HOST:PORT, tls://..., unix:///PATH. */
static const char *plain_url(const char *url, char *buf, size_t cap) {
  static const char *const schemes[] = {"tcp:", "tls:", "unix:"};
  for (size_t i = 0; url && i < KILN_ARRAY_SIZE(schemes); i++) {
    size_t n = strlen(schemes[i]);
    if (strncmp(url, schemes[i], n) || strncmp(url + n, "//", 2)) continue;
    snprintf(buf, cap, "%s%s", schemes[i], url + n + 2);
    size_t len = strlen(buf);
    if (i < 2 && len > n && buf[len - 1] == '/') buf[len - 1] = 0;
    return buf;
  }
  return url;
}

int main(int argc, char **argv) {
  cli_t cli = {0};
  opterr = 0;
  int o;
  /* GNU getopt_long permutes: options may follow the command, and the positional arguments
   * (the command first) end up at argv[optind..] in their order; after `--` nothing is an
   * option (negative numbers, lease's command line). */
  while ((o = getopt_long(argc, argv, "h", LONG_OPTS, NULL)) != -1) {
    if (o == 'h') o = OPT(O_HELP);
    if (o == '?' || o == ':') {
      if (optopt >= OPT(0) && optopt < OPT(O_COUNT_))
        return usage_error(NULL, "--%s needs a value", LONG_OPTS[optopt - OPT(0)].name);
      return usage_error(NULL, "unknown option %s", argv[optind - 1]);
    }
    cli.opt[o - OPT(0)] = optarg ? optarg : "";
  }
  if (cli.opt[O_VERSION]) {
    printf("kiln %s\n", KILN_VERSION);
    return EXIT_OK;
  }
  if (cli.opt[O_COMPLETE]) {
    print_completion();
    return EXIT_OK;
  }
  if (optind == argc) {
    if (cli.opt[O_HELP]) {
      usage_all(stdout);
      return EXIT_OK;
    }
    return usage_error(NULL, "no command given");
  }
  const command_t *cmd = NULL;
  for (size_t k = 0; k < KILN_ARRAY_SIZE(COMMANDS) && !cmd; k++)
    if (!strcmp(argv[optind], COMMANDS[k].name)) cmd = &COMMANDS[k];
  if (!cmd) return usage_error(NULL, "unknown command '%s'", argv[optind]);
  cli.name = cmd->name;
  if (cli.opt[O_HELP]) {
    usage_one(stdout, cmd);
    return EXIT_OK;
  }
  for (int k = 0; k < O_COUNT_; k++)
    if (cli.opt[k] && !((cmd->opts | GLOBAL_OPTS) & BIT(k)))
      return usage_error(&cli, "takes no --%s", LONG_OPTS[k].name);
  int nargs = argc - optind - 1;
  if (nargs < cmd->min_args || (cmd->max_args >= 0 && nargs > cmd->max_args))
    return usage_error(&cli, "wants %s", *cmd->args ? cmd->args : "no arguments");
  uint64_t timeout_ms;
  if (!opt_u64(&cli, O_TIMEOUT, 0, INT_MAX, 0, &timeout_ms)) return EXIT_USAGE;
  if (cmd->local) return cmd->run(&cli, nargs + 1, argv + optind);

  char urlbuf[4096];
  kiln_client_options_t opts = {.tls_ca = cli.opt[O_TLS_CA], .tls_cert = cli.opt[O_TLS_CERT],
                                .tls_key = cli.opt[O_TLS_KEY]};
  kiln_status_t s = kiln_client_create_with(plain_url(cli.opt[O_URL], urlbuf, sizeof(urlbuf)), &opts, &cli.c);
  if (s) return report("connect", s, EXIT_USAGE);
  kiln_client_set_timeout(cli.c, (int)timeout_ms);
  const char *token = cli.opt[O_TOKEN] ? cli.opt[O_TOKEN] : getenv("KILN_TOKEN");
  if (token && *token && (s = kiln_client_hello(cli.c, token, "kiln-cli", NULL))) {
    kiln_client_destroy(cli.c);
    return report("hello", s, EXIT_SERVER);
  }
  int rc = cmd->run(&cli, nargs + 1, argv + optind);
  kiln_client_destroy(cli.c);
  return rc;
}
