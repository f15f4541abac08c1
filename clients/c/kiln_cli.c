/* kiln: the command-line client of kilnd. `kiln --help` documents commands and exit codes. */
#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kiln/client.h"
#include "npy.h"
#include "stats.h"
#include "protocol/rpc.h"

enum {
  EXIT_OK = 0,
  EXIT_SERVER = 1, /* kilnd answered with an error */
  EXIT_USAGE = 2,
  EXIT_CONNECT = 3, /* kilnd unreachable, or the connection broke */
  EXIT_FILE = 4,    /* a local file could not be read or written */
};

static const char USAGE[] =
    "usage: kiln [--url URL] [--tls-ca FILE] [--timeout MS] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  ping                          round trip to kilnd; prints the time it took\n"
    "  devices [--absent] [--json]   the devices kilnd serves (--absent: and missing backends)\n"
    "  put FILE.npy [--device D] [--dtype T]\n"
    "                                upload an array; prints the new tensor's id. --dtype\n"
    "                                reinterprets the data as another dtype of the same size\n"
    "                                (e.g. bfloat16 bits saved as uint16)\n"
    "  get ID FILE.npy               download tensor ID into FILE.npy (bfloat16 is written as\n"
    "                                its uint16 bits)\n"
    "  free ID                       free tensor ID\n"
    "  stats [--json]                tenants, queues, devices, compiles and cache as tables\n"
    "                                (--json: the whole `stats` reply as JSON)\n"
    "  token new [TENANT ...]        make a fresh token for each TENANT (no connection): prints\n"
    "                                `token for TENANT: TOKEN` (give it to the tenant; nothing\n"
    "                                keeps it) and the tokens-file line `blake2b:HASH TENANT`\n"
    "\n"
    "options:\n"
    "  --url URL      tcp:HOST:PORT, tls:HOST:PORT or unix:PATH (default: $KILN_URL, else\n"
    "                 the default socket)\n"
    "  --tls-ca FILE  for tls: URLs, the CA (PEM) to trust instead of the system's\n"
    "                 (default: $KILN_TLS_CA)\n"
    "  --tls-cert FILE, --tls-key FILE\n"
    "                 client certificate and key (PEM) for a daemon that requires one\n"
    "                 (default: $KILN_TLS_CERT, $KILN_TLS_KEY)\n"
    "  --timeout MS   give up waiting for a reply after MS milliseconds\n"
    "  KILN_TOKEN     (environment) sent with hello when set\n"
    "\n"
    ".npy files: little-endian, C-order arrays of float16 float32 float64 int8 int16 int32\n"
    "int64 uint8 uint16 uint32 uint64 bool.\n"
    "\n"
    "exit status: 0 success, 1 kilnd answered with an error, 2 usage error, 3 kilnd cannot be\n"
    "reached or the connection broke, 4 a local file could not be read or written.\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "kiln: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nrun `kiln --help` for usage\n");
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

static bool parse_id(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-') return false;
  *out = v;
  return true;
}

static int cmd_ping(kiln_client_t *c, int argc, char **argv) {
  if (argc != 1) return usage_error("ping takes no arguments%s", "");
  uint64_t t0 = kiln_now_ns();
  kiln_status_t s = kiln_client_ping(c);
  if (s) return report("ping", s, EXIT_SERVER);
  printf("pong from %s in %.1f us\n", kiln_client_url(c), (double)(kiln_now_ns() - t0) / 1e3);
  return EXIT_OK;
}

static void pack_absent(msgpack_packer *pk, void *ctx) {
  msgpack_pack_map(pk, 1);
  kiln_pack_kv_bool(pk, "absent", true);
}

static int cmd_devices(kiln_client_t *c, int argc, char **argv) {
  bool absent = false, json = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--absent")) absent = true;
    else if (!strcmp(argv[i], "--json")) json = true;
    else return usage_error("devices: unknown option %s", argv[i]);
  }
  if (json) {
    kiln_reply_t *r;
    kiln_status_t s = kiln_client_call(c, "devices", absent ? pack_absent : NULL, NULL, &r);
    if (s) return report("devices", s, EXIT_SERVER);
    kiln_object_print_json(stdout, kiln_reply_result(r), true);
    putchar('\n');
    kiln_reply_free(r);
    return EXIT_OK;
  }
  kiln_device_info_t devs[64];
  size_t n;
  kiln_status_t s = kiln_client_devices(c, absent, devs, 64, &n);
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

static int cmd_put(kiln_client_t *c, int argc, char **argv) {
  const char *file = NULL, *device = NULL, *dtype = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dtype = argv[++i];
    else if (argv[i][0] == '-' && argv[i][1]) return usage_error("put: unknown option %s", argv[i]);
    else if (!file) file = argv[i];
    else return usage_error("put: unexpected argument %s", argv[i]);
  }
  if (!file) return usage_error("put needs a FILE.npy%s", "");
  kiln_npy_t npy;
  kiln_status_t s = kiln_npy_open(file, &npy);
  if (s) return report("put", s, EXIT_FILE);
  if (dtype) {
    kiln_dtype_t d = kiln_dtype_parse(dtype, strlen(dtype));
    if (!d || kiln_dtype_size(d) != kiln_dtype_size(npy.desc.dtype)) {
      kiln_npy_close(&npy);
      return usage_error("put: --dtype %s is not a dtype of the file's element size", dtype);
    }
    npy.desc.dtype = d;
  }
  uint64_t id;
  s = kiln_client_upload(c, device, &npy.desc, npy.data, &id);
  kiln_npy_close(&npy);
  if (s) return report("put", s, EXIT_SERVER);
  printf("%llu\n", (unsigned long long)id);
  return EXIT_OK;
}

static int cmd_get(kiln_client_t *c, int argc, char **argv) {
  if (argc != 3) return usage_error("get needs ID and FILE.npy%s", "");
  uint64_t id;
  if (!parse_id(argv[1], &id)) return usage_error("get: '%s' is not a tensor id", argv[1]);
  kiln_reply_t *r;
  kiln_status_t s = kiln_client_download(c, id, &r);
  if (s) return report("get", s, EXIT_SERVER);
  kiln_tensor_desc_t desc;
  const void *data;
  s = kiln_reply_tensor(r, &desc, &data);
  if (!s) s = kiln_npy_write(argv[2], &desc, data);
  kiln_reply_free(r);
  if (s) return report("get", s, EXIT_FILE);
  if (desc.dtype == KILN_BFLOAT16)
    fprintf(stderr, "kiln: note: bfloat16 has no numpy dtype; %s holds its bits as uint16 "
                    "(arr.view(ml_dtypes.bfloat16) restores it)\n", argv[2]);
  return EXIT_OK;
}

static int cmd_free(kiln_client_t *c, int argc, char **argv) {
  uint64_t id;
  if (argc != 2 || !parse_id(argv[1], &id)) return usage_error("free needs one tensor ID%s", "");
  kiln_status_t s = kiln_client_free_tensor(c, id);
  return s ? report("free", s, EXIT_SERVER) : EXIT_OK;
}

static int cmd_stats(kiln_client_t *c, int argc, char **argv) {
  bool json = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else return usage_error("stats: unknown option %s", argv[i]);
  }
  kiln_reply_t *r;
  kiln_status_t s = kiln_client_stats(c, &r);
  if (s) return report("stats", s, EXIT_SERVER);
  if (json) {
    kiln_object_print_json(stdout, kiln_reply_result(r), true);
    putchar('\n');
  } else {
    kiln_cli_print_stats(stdout, kiln_reply_result(r));
  }
  kiln_reply_free(r);
  return EXIT_OK;
}

/* `kiln token new [TENANT ...]`: 32 random bytes as URL-safe base64 behind "kiln_" (48
 * characters, a prefix secret scanners can match), and the line for kilnd's tokens file with
 * the token's BLAKE2b-256, which is all kilnd compares (docs/operations.md). */
static int cmd_token(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "new") != 0) return usage_error("token: the subcommand is `new`%s", "");
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
    if (!ok) return usage_error("token new: '%s' is not a tenant name (1-63 of A-Z a-z 0-9 _ - .)", t);
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

static const struct {
  const char *name;
  int (*run)(kiln_client_t *c, int argc, char **argv);
} COMMANDS[] = {
    {"ping", cmd_ping}, {"devices", cmd_devices}, {"put", cmd_put},
    {"get", cmd_get},   {"free", cmd_free},       {"stats", cmd_stats},
};

int main(int argc, char **argv) {
  const char *url = NULL;
  kiln_client_options_t opts = {0};
  int timeout_ms = 0;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(USAGE, stdout);
      return EXIT_OK;
    }
    if (!strcmp(argv[i], "--url") && i + 1 < argc) url = argv[++i];
    else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout_ms = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tls-ca") && i + 1 < argc) opts.tls_ca = argv[++i];
    else if (!strcmp(argv[i], "--tls-cert") && i + 1 < argc) opts.tls_cert = argv[++i];
    else if (!strcmp(argv[i], "--tls-key") && i + 1 < argc) opts.tls_key = argv[++i];
    else return usage_error("unknown option %s", argv[i]);
  }
  if (i == argc) return usage_error("no command given%s", "");
  if (!strcmp(argv[i], "token")) return cmd_token(argc - i, argv + i); /* local: no connection */
  for (size_t k = 0; k < KILN_ARRAY_SIZE(COMMANDS); k++) {
    if (strcmp(argv[i], COMMANDS[k].name) != 0) continue;
    kiln_client_t *c;
    kiln_status_t s = kiln_client_create_with(url, &opts, &c);
    if (s) return report("connect", s, EXIT_USAGE);
    kiln_client_set_timeout(c, timeout_ms);
    const char *token = getenv("KILN_TOKEN");
    if (token && *token && (s = kiln_client_hello(c, token, "kiln-cli", NULL))) {
      kiln_client_destroy(c);
      return report("hello", s, EXIT_SERVER);
    }
    int rc = COMMANDS[k].run(c, argc - i, argv + i);
    kiln_client_destroy(c);
    return rc;
  }
  return usage_error("unknown command '%s'", argv[i]);
}
