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
 * Method "compile": params {kind, target, opt_level, max_block, fast_math, size, fds: 1}
 * with the payload in the memfd; result {"artifact": bin (protocol/artifact.h encoding),
 * "compile_ms": float}. LLVM may end this process on input it cannot handle; kilnd reports
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
#include "protocol/frame.h"
#include "protocol/rpc.h"

static int write_stdout(void *data, const char *buf, size_t len) {
  (void)data;
  return fwrite(buf, 1, len, stdout) == len ? 0 : -1;
}

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
  msgpack_packer pk;
  msgpack_packer_init(&pk, NULL, write_stdout);
  msgpack_pack_map(&pk, 2);
  kiln_pack_kv_str(&pk, "identity", ident);
  kiln_pack_kv_str(&pk, "host", hoststr);
  return fflush(stdout) == 0 ? 0 : 1;
}

static kiln_status_t do_compile(kiln_compiler_t *c, const msgpack_object *params, int fd,
                                msgpack_packer *pk) {
  char kind_name[16] = "auto", target[128] = "";
  const msgpack_object *o;
  if ((o = kiln_params_find(params, "kind")))
    KILN_RETURN_IF_ERROR(kiln_obj_cstr(o, "kind", kind_name, sizeof(kind_name)));
  if (!(o = kiln_params_find(params, "target")))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "missing target");
  KILN_RETURN_IF_ERROR(kiln_obj_cstr(o, "target", target, sizeof(target)));
  kiln_compile_request_t req = {.target = target, .options = kiln_compile_options_default()};
  KILN_RETURN_IF_ERROR(kiln_payload_kind_parse(kind_name, &req.kind));
  uint64_t v = req.options.opt_level, size = 0;
  KILN_RETURN_IF_ERROR(kiln_params_u64(params, "opt_level", false, &v));
  req.options.opt_level = (uint32_t)v;
  v = 0;
  KILN_RETURN_IF_ERROR(kiln_params_u64(params, "max_block", false, &v));
  req.options.max_block = (uint32_t)v;
  KILN_RETURN_IF_ERROR(kiln_params_bool(params, "fast_math", false, &req.options.fast_math));
  KILN_RETURN_IF_ERROR(kiln_params_u64(params, "size", true, &size));
  if (fd < 0) return KILN_STATUS(KILN_E_INTERNAL, "compile request without its payload");
  void *payload = NULL;
  KILN_RETURN_IF_ERROR(kiln_shm_map(fd, size, false, &payload));
  req.payload = payload;
  req.payload_size = size;
  uint64_t t0 = kiln_now_ns();
  kiln_artifact_t art;
  kiln_status_t st = kiln_compiler_compile(c, &req, &art);
  double ms = (double)(kiln_now_ns() - t0) / 1e6;
  kiln_shm_unmap(payload, size);
  if (st) return st;
  uint8_t *bytes = NULL;
  size_t len = 0;
  st = kiln_artifact_encode(&art, &bytes, &len);
  kiln_artifact_deinit(&art);
  if (st) return st;
  msgpack_pack_map(pk, 2);
  kiln_pack_cstr(pk, "artifact");
  msgpack_pack_bin(pk, len);
  msgpack_pack_bin_body(pk, bytes, len);
  kiln_pack_kv_f64(pk, "compile_ms", ms);
  free(bytes);
  return KILN_OK;
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
  kiln_fdq_t fdq;
  kiln_fdq_init(&fdq);
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  lim.max_message = 1ull << 32;
  lim.max_str = 1u << 31;
  kiln_reader_t r;
  kiln_reader_init(&r, &lim, 64 * 1024);
  int rc = 0;
  for (;;) {
    size_t cap;
    void *space = kiln_reader_space(&r, &cap);
    if (!space) return 1;
    int fds[16], nfds;
    bool trunc;
    ssize_t n = kiln_channel_recv(channel, space, cap, fds, 16, &nfds, &trunc);
    for (int i = 0; i < nfds; i++)
      if (!kiln_fdq_push(&fdq, fds[i])) close(fds[i]);
    if (n == 0) break;
    if (n < 0) return 1;
    kiln_reader_commit(&r, (size_t)n);
    const uint8_t *msg;
    size_t len;
    kiln_frame_result_t fr;
    while ((fr = kiln_reader_next(&r, &msg, &len)) == KILN_FRAME_MESSAGE) {
      kiln_rpc_msg_t m;
      bool has;
      st = kiln_rpc_parse(msg, len, &m, &has);
      if (st || m.type != KILN_RPC_REQUEST) {
        kiln_status_free(st);
        kiln_rpc_msg_deinit(&m);
        return 1;
      }
      uint64_t nf = 0;
      kiln_params_u64(m.params, "fds", false, &nf);
      int fd = nf ? kiln_fdq_pop(&fdq) : -1;
      for (uint64_t i = 1; i < nf; i++) close(kiln_fdq_pop(&fdq));
      kiln_buf_t out;
      kiln_buf_init(&out);
      kiln_packer_t pk;
      kiln_packer_init(&pk, &out);
      kiln_rpc_pack_result_head(&pk.pk, m.msgid);
      if (kiln_rpc_method_is(&m, "compile")) st = do_compile(c, m.params, fd, &pk.pk);
      else st = KILN_STATUS(KILN_E_NO_METHOD, "compile worker has no such method");
      if (!st) st = kiln_packer_status(&pk);
      if (fd >= 0) close(fd);
      if (st) {
        out.len = 0;
        kiln_rpc_pack_error(&pk.pk, m.msgid, kiln_status_code(st), kiln_status_message(st));
        kiln_status_free(st);
      }
      kiln_rpc_msg_deinit(&m);
      st = kiln_channel_send_all(channel, out.data, out.len, NULL, 0);
      kiln_buf_deinit(&out);
      if (st) {
        kiln_status_free(st);
        return 1;
      }
    }
    if (fr == KILN_FRAME_ERROR) {
      rc = 1;
      break;
    }
  }
  kiln_reader_deinit(&r);
  kiln_fdq_deinit(&fdq);
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
