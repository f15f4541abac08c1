/* kiln-compile-worker: one compile at a time for kilnd, over the channel.
 *
 *   --identity               print {"identity": str, "host": str} (MessagePack) and exit:
 *                            what kilnd folds into every cache key
 *   --channel-fd N           serve kilnd until the channel closes
 *   --max-memory BYTES       address-space limit of this process (RLIMIT_AS), so that a
 *                            payload that makes LLVM balloon kills this worker, not the box
 *   --tmp-dir DIR            the private directory in-process lld links in (kilnd makes it
 *                            and removes it when this process ends)
 *   --uid N --gid N          the uid to run as when kilnd runs as root
 *
 * Once LLVM is set up the worker confines itself (base/sandbox.h, profile "compiler"): the
 * file system is the device libraries, libc and libm (link inputs) and --tmp-dir.
 *
 * It serves one job kind, compile (protocol/job_compile.h, docs/worker_jobs.md): the payload
 * in the job's memfd; the reply holds the compiler's time and carries the artifact
 * (protocol/artifact.h encoding) in a memfd. LLVM may end this process on input it cannot handle; kilnd reports
 * that job as E_COMPILER_CRASHED and starts a new worker. */
#include <errno.h>
#include <link.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sandbox.h"
#include "base/util.h"
#include "compiler/compiler.h"
#include "compiler/internal.h"
#include "protocol/channel.h"
#include "protocol/job_compile.h"
#include "protocol/job_serve.h"
#include "protocol/rpc.h"

static int print_identity(void) {
  kiln_target_t host;
  kiln_status_t st = kiln_compiler_target_parse("cpu", &host);
  if (st) {
    fprintf(stderr, "kiln-compile-worker: %s\n", kiln_status_message(st));
    return 1;
  }
  /* The host CPU and its features decide what "cpu" code is: a cache shared between
   * machines must not hand one machine's AVX-512 code to another. */
  uint8_t h[KILN_HASH_BYTES];
  kiln_hasher_t hs;
  kiln_hasher_init(&hs);
  kiln_hasher_field(&hs, host.triple, strlen(host.triple));
  kiln_hasher_field(&hs, host.cpu, strlen(host.cpu));
  kiln_hasher_field(&hs, host.features, strlen(host.features));
  kiln_hasher_final(&hs, h);
  char hex[2 * KILN_HASH_BYTES + 1];
  kiln_hex(h, KILN_HASH_BYTES, hex);
  char hoststr[200];
  snprintf(hoststr, sizeof(hoststr), "%s %s %.16s", host.triple, host.cpu, hex);
  /* The build of this compiler: a changed lowering must not be served old artifacts from a
   * cache written by an earlier build of the same version, so the identity (part of every
   * cache key) carries a hash of this executable. */
  char build[17] = "unknown";
  FILE *exe = fopen("/proc/self/exe", "rb");
  if (exe) {
    kiln_hasher_t bh;
    kiln_hasher_init(&bh);
    static uint8_t chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), exe)) > 0) kiln_hasher_update(&bh, chunk, n);
    bool ok = !ferror(exe);
    fclose(exe);
    uint8_t bhash[KILN_HASH_BYTES];
    kiln_hasher_final(&bh, bhash);
    char bhex[2 * KILN_HASH_BYTES + 1];
    kiln_hex(bhash, KILN_HASH_BYTES, bhex);
    if (ok) snprintf(build, sizeof(build), "%.16s", bhex);
  }
  char ident[512];
  snprintf(ident, sizeof(ident), "%s; build %s", kiln_compiler_identity(), build);
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_packer_t p;
  kiln_packer_init(&p, &out);
  kiln_fields_t m;
  kiln_fields_begin(&m, &p.pk);
  kiln_fields_str(&m, "identity", ident);
  kiln_fields_str(&m, "host", hoststr);
  kiln_fields_end(&m);
  bool ok = kiln_packer_write(&p, stdout);
  kiln_buf_deinit(&out);
  return ok ? 0 : 1;
}

/* The compile job (protocol/job_compile.h): its payload in the job's fd. */
static kiln_status_t do_compile(void *ctx, kiln_job_call_t *call) {
  kiln_compiler_t *c = ctx;
  if (call->kind != KILN_JOB_COMPILE)
    return KILN_STATUS(KILN_E_NO_METHOD, "compile worker has no job '%s'", kiln_job_name(call->kind));
  kiln_compile_job_t j;
  KILN_RETURN_IF_ERROR(kiln_compile_job_decode(call->job, &j));
  kiln_compile_request_t req = {.target = j.target, .kind = j.kind,
                                .options = kiln_compile_options_default()};
  req.options.opt_level = j.opt_level;
  req.options.max_block = j.max_block;
  req.options.fast_math = j.fast_math;
  void *payload = NULL;
  KILN_RETURN_IF_ERROR(kiln_shm_map(call->fds[0], j.size, false, &payload));
  req.payload = payload;
  req.payload_size = j.size;
  uint64_t t0 = kiln_now_ns();
  kiln_artifact_t art;
  kiln_status_t st = kiln_compiler_compile(c, &req, &art);
  double ms = (double)(kiln_now_ns() - t0) / 1e6;
  kiln_shm_unmap(payload, j.size);
  if (st) return st;
  uint8_t *bytes = NULL;
  size_t len = 0;
  st = kiln_artifact_encode(&art, &bytes, &len);
  kiln_artifact_deinit(&art);
  if (st) return st;
  /* The artifact goes back in a memfd, as the payload came. */
  int fd;
  void *map = NULL;
  st = kiln_shm_create("kiln-artifact", len, &fd, &map);
  if (!st) {
    if (len) memcpy(map, bytes, len);
    kiln_shm_unmap(map, len);
    call->reply_fds[call->reply_nfds++] = fd;
    kiln_compile_reply_encode(call->reply, &(kiln_compile_reply_t){.size = len, .compile_ms = ms});
  }
  free(bytes);
  return st;
}

typedef struct options {
  uint64_t max_memory;
  const char *tmp_dir;
  uid_t uid;
  gid_t gid;
} options_t;

/* The files of libc and libm as this process loaded them: lld reads them as link inputs of
 * cpu modules (compiler/cpu.c names the same objects). */
static int note_libc(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char **out = data;
  const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  if (!slash) return 0;
  if (strcmp(slash, "/libc.so.6") == 0) out[0] = info->dlpi_name;
  else if (strcmp(slash, "/libm.so.6") == 0) out[1] = info->dlpi_name;
  return 0;
}

static kiln_status_t confine(int channel, const options_t *o) {
  kiln_sandbox_config_t cfg = {.profile = KILN_SANDBOX_COMPILER, .channel_fd = channel,
                               .uid = o->uid, .gid = o->gid, .max_files = 1024};
  cfg.max_address_space = o->max_memory;
  const char *dir = getenv("KILN_DEVICE_LIBS");
  const char *libs[2] = {NULL, NULL};
  dl_iterate_phdr(note_libc, libs);
  int r = 0;
  cfg.read[r++] = dir && dir[0] ? dir : kc_devlibs_default_dir();
  for (int i = 0; i < 2; i++)
    if (libs[i]) cfg.read[r++] = libs[i];
  if (o->tmp_dir) cfg.write[0] = o->tmp_dir;
  kiln_sandbox_report_t rep;
  KILN_RETURN_IF_ERROR(kiln_sandbox_enter(&cfg, &rep));
  KILN_LOG_INFO("sandbox", "profile=compiler uid=%u landlock_abi=%d threads=%u landlock_threads=%u "
                "cwd_removed=%d tmp_dir=%s",
                (unsigned)rep.uid, rep.landlock_abi, rep.threads, rep.landlock_threads,
                rep.cwd_removed, o->tmp_dir ? o->tmp_dir : "");
  return KILN_OK;
}

static int serve(int channel, const options_t *o) {
  kiln_compiler_t *c;
  kiln_status_t st = kiln_compiler_create(NULL, &c);
  if (!st) st = confine(channel, o);
  if (st) {
    KILN_LOG_ERROR("compiler_create", "message=\"%s\"", kiln_status_message(st));
    return 2;
  }
  kiln_job_server_t server = {.channel = channel, .handle = do_compile, .ctx = c};
  int rc = kiln_job_serve(&server);
  kiln_compiler_destroy(c);
  return rc;
}

int main(int argc, char **argv) {
  int channel = -1;
  bool identity = false;
  options_t o = {0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--identity") == 0) identity = true;
    else if (strcmp(argv[i], "--channel-fd") == 0 && i + 1 < argc) channel = atoi(argv[++i]);
    else if (strcmp(argv[i], "--max-memory") == 0 && i + 1 < argc)
      o.max_memory = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--tmp-dir") == 0 && i + 1 < argc) o.tmp_dir = argv[++i];
    else if (strcmp(argv[i], "--uid") == 0 && i + 1 < argc) o.uid = (uid_t)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--gid") == 0 && i + 1 < argc) o.gid = (gid_t)strtoul(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: kiln-compile-worker --identity | --channel-fd N [--max-memory B]\n"
                      "       [--tmp-dir DIR] [--uid N --gid N]\n"
                      "(started by kilnd; not meant to be run by hand)\n");
      return 2;
    }
  }
  if (kiln_crypto_init()) return 1;
  if (identity) return print_identity();
  if (channel < 0) return 2;
  kiln_sandbox_close_inherited(channel);
  kiln_log_set_process("compile-worker");
  signal(SIGINT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  /* In-process lld writes its two files of a link under $TMPDIR (compiler/link.c). */
  if (o.tmp_dir) setenv("TMPDIR", o.tmp_dir, 1);
  /* Compiling is throughput work: as SCHED_BATCH at a lower priority it yields the cores to
   * kilnd's event loop (cache hits, pings, launches), so a busy compile pool (or the warm-up
   * of a fresh one) does not delay the requests that need no compiler. */
  struct sched_param sp = {0};
  sched_setscheduler(0, SCHED_BATCH, &sp);
  setpriority(PRIO_PROCESS, 0, 5);
  return serve(channel, &o);
}
