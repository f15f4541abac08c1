/* kiln-device-worker: `--probe` prints what every backend finds (MessagePack on stdout);
 * `--channel-fd N --device ID` serves one device for kilnd until the channel closes, confined
 * (base/sandbox.h) from the moment the device is open:
 *   --uid N --gid N     the tenant's uid when kilnd runs as root
 *   --max-memory BYTES  the tenant's memory quota: sizes RLIMIT_AS on the cpu device */
#include <dirent.h>
#include <link.h>
#include <errno.h>
#include <libgen.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sandbox.h"
#include "base/util.h"
#include "device/registry.h"
#include "device/worker/worker.h"
#include "protocol/rpc.h"

static void pack_info(msgpack_packer *pk, const kiln_device_info_t *d) {
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_str(&m, "id", d->id);
  kiln_fields_str(&m, "kind", d->kind);
  kiln_fields_str(&m, "name", d->name);
  kiln_fields_str(&m, "arch", d->arch);
  kiln_fields_u64(&m, "memory", d->memory);
  kiln_fields_u64(&m, "compute_units", d->compute_units);
  kiln_fields_u64(&m, "max_block", d->max_block);
  kiln_fields_u64(&m, "wave_size", d->wave_size);
  kiln_fields_u64(&m, "max_shared", d->max_shared);
  kiln_fields_end(&m);
}

/* Every backend's probe; absence is reported with its reason, never as a failure. */
static int probe_all(void) {
  enum { CAP = 32 };
  kiln_device_info_t found[CAP];
  size_t nfound = 0;
  struct { char kind[8]; char reason[256]; } absent[8];
  size_t nabsent = 0;
  for (size_t i = 0; i < kiln_device_backend_count(); i++) {
    const kiln_backend_t *b = kiln_device_backend_at(i);
    size_t n = 0;
    char reason[256] = "";
    kiln_status_t st = b->probe(found + nfound, CAP - nfound, &n, reason, sizeof(reason));
    if (st) {
      snprintf(reason, sizeof(reason), "%s", kiln_status_message(st));
      kiln_status_free(st);
      n = 0;
    }
    if (n == 0 && nabsent < 8) {
      snprintf(absent[nabsent].kind, sizeof(absent[nabsent].kind), "%s", b->kind);
      snprintf(absent[nabsent].reason, sizeof(absent[nabsent].reason), "%s",
               reason[0] ? reason : "no device found");
      nabsent++;
    }
    nfound += n;
  }
  /* Packed whole, then written: the maps' headers are set once their fields are counted. */
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_packer_t p;
  kiln_packer_init(&p, &out);
  msgpack_packer *pk = &p.pk;
  kiln_fields_t r, m;
  kiln_fields_begin(&r, pk);
  kiln_fields_key(&r, "devices");
  msgpack_pack_array(pk, nfound);
  for (size_t i = 0; i < nfound; i++) pack_info(pk, &found[i]);
  kiln_fields_key(&r, "absent");
  msgpack_pack_array(pk, nabsent);
  for (size_t i = 0; i < nabsent; i++) {
    kiln_fields_begin(&m, pk);
    kiln_fields_str(&m, "kind", absent[i].kind);
    kiln_fields_str(&m, "reason", absent[i].reason);
    kiln_fields_end(&m);
  }
  kiln_fields_end(&r);
  bool ok = kiln_packer_write(&p, stdout);
  kiln_buf_deinit(&out);
  return ok ? 0 : 1;
}

/* One job: each family in turn (tensors.c, modules.c); a new family adds its line. */
static kiln_status_t handle(void *ctx, kiln_job_call_t *call) {
  kiln_dworker_t *w = ctx;
  bool found = false;
  kiln_status_t st = kiln_dworker_tensor_job(w, call, &found);
  if (!st && !found) st = kiln_dworker_module_job(w, call, &found);
  if (!st && !found) st = kiln_dworker_graph_job(w, call, &found);
  if (!st && !found)
    st = KILN_STATUS(KILN_E_NO_METHOD, "device worker has no job '%s'", kiln_job_name(call->kind));
  return st;
}

/* A device fault leaves the context unusable (ROCr evicts the queues, CUDA's context is
 * dead): the loop answers, then the worker exits so that kilnd starts a clean one. */
static bool fatal(kiln_code_t code) { return code == KILN_E_DEVICE_FAULT || code == KILN_E_TIMEOUT; }

/* "0,2-3" -> {0, 2, 3}; returns the count, or -1 if malformed. */
static int parse_cpus(const char *s, int *out, int cap) {
  int n = 0;
  while (*s) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s || a < 0 || a > 4095) return -1;
    if (*end == '-') {
      s = end + 1;
      b = strtol(s, &end, 10);
      if (end == s || b < a || b > 4095) return -1;
    }
    for (long c = a; c <= b; c++) {
      if (n == cap) return -1;
      out[n++] = (int)c;
    }
    if (*end == ',') end++;
    else if (*end) return -1;
    s = end;
  }
  return n;
}

typedef struct options {
  uid_t uid;
  gid_t gid;
  uint64_t max_memory; /* 0: no quota */
} options_t;

/* Pages of address space the process has mapped now (its code, libraries, pool stacks). */
static uint64_t mapped_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long pages = 0;
  if (f) {
    if (fscanf(f, "%llu", &pages) != 1) pages = 0;
    fclose(f);
  }
  return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Confines this worker now that its device is open (docs/operations.md "Security model").
 * The cpu device runs tenants' native code: no files at all. A GPU worker keeps its
 * driver's device files and libraries. */
/* The folders of the shared objects loaded now (the driver's among them): drivers load their
 * siblings late (libcuda loads libnvidia-ptxjitcompiler at the first PTX load), and a
 * container runtime may put them outside the usual folders (/usr/local/nvidia/lib64 on the
 * lent H200 host), where a fixed list of folders misses them. */
typedef struct loaded_dirs {
  const char **exec;
  int *n;
  int cap;
  char dirs[12][256];
  int ndirs;
} loaded_dirs_t;

static int add_loaded_dir(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  loaded_dirs_t *l = arg;
  const char *name = info->dlpi_name;
  if (!name || name[0] != '/') return 0; /* the executable itself, the vDSO */
  char dir[256];
  snprintf(dir, sizeof(dir), "%s", name);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return 0;
  *slash = 0;
  for (int i = 0; i < *l->n; i++) {
    size_t k = strlen(l->exec[i]);
    if (strncmp(dir, l->exec[i], k) == 0 && (dir[k] == 0 || dir[k] == '/')) return 0;
  }
  if (*l->n >= l->cap || l->ndirs >= 12) {
    KILN_LOG_WARN("sandbox_library_dir_skipped", "dir=%s", dir);
    return 0;
  }
  snprintf(l->dirs[l->ndirs], sizeof(l->dirs[0]), "%s", dir);
  l->exec[(*l->n)++] = l->dirs[l->ndirs++];
  return 0;
}

static kiln_status_t confine(int channel, const kiln_backend_t *backend, const options_t *o) {
  kiln_sandbox_config_t cfg = {.channel_fd = channel, .uid = o->uid, .gid = o->gid, .max_files = 4096};
  bool cpu = strcmp(backend->kind, "cpu") == 0;
  cfg.profile = cpu ? KILN_SANDBOX_CPU_DEVICE : KILN_SANDBOX_GPU_DEVICE;
  if (cpu && o->max_memory) {
    /* The tenant's tensors, the same again for a transfer's shared-memory mapping while it
     * is copied, freed buffers kept for reuse (up to 1 GiB) and the cache-flush buffer. */
    cfg.max_address_space = mapped_bytes() + 2 * o->max_memory + (3ull << 29);
  }
  static char self_proc[32], lib_dir[512];
  if (!cpu) {
    int d = 0, x = 0, r = 0;
    static char nvidia[8][300];
    cfg.devices[d++] = "/dev/kfd";
    cfg.devices[d++] = "/dev/dri";
    int nn = 0;
    DIR *dir = opendir("/dev");
    for (struct dirent *e; dir && (e = readdir(dir)) && nn < 8;)
      if (strncmp(e->d_name, "nvidia", 6) == 0) {
        snprintf(nvidia[nn], sizeof(nvidia[nn]), "/dev/%s", e->d_name);
        cfg.devices[d++] = nvidia[nn++];
      }
    if (dir) closedir(dir);
    /* Drivers load parts of themselves late (CUDA's PTX JIT library, ROCr's tools). */
    const char *libs[] = {"/usr/lib", "/lib", "/usr/lib64", "/lib64", "/opt/rocm", "/usr/local/cuda",
                          "/etc/ld.so.cache"};
    for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) cfg.exec[x++] = libs[i];
    const char *lib = getenv("KILN_HSA_LIBRARY");
    if (!lib) lib = getenv("KILN_CUDA_LIBRARY");
    if (lib && lib[0] == '/') {
      snprintf(lib_dir, sizeof(lib_dir), "%s", lib);
      cfg.exec[x++] = dirname(lib_dir);
    }
    static loaded_dirs_t loaded;
    loaded = (loaded_dirs_t){.exec = cfg.exec, .n = &x, .cap = KILN_SANDBOX_MAX_PATHS};
    dl_iterate_phdr(add_loaded_dir, &loaded);
    snprintf(self_proc, sizeof(self_proc), "/proc/%d", (int)getpid());
    const char *reads[] = {"/sys", self_proc, "/proc/cpuinfo", "/proc/meminfo", "/proc/stat",
                           "/proc/driver"};
    for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) cfg.read[r++] = reads[i];
  }
  kiln_sandbox_report_t rep;
  KILN_RETURN_IF_ERROR(kiln_sandbox_enter(&cfg, &rep));
  KILN_LOG_INFO("sandbox", "profile=%s uid=%u landlock_abi=%d threads=%u landlock_threads=%u "
                "cwd_removed=%d max_address_space=%llu",
                cpu ? "cpu" : "gpu", (unsigned)rep.uid, rep.landlock_abi, rep.threads,
                rep.landlock_threads, rep.cwd_removed, (unsigned long long)cfg.max_address_space);
  return KILN_OK;
}

static int serve(int channel, const char *device_id, const int *cpus, int ncpus,
                 const options_t *opts) {
  kiln_dworker_t w = {.channel = channel};
  snprintf(w.device_id, sizeof(w.device_id), "%s", device_id);
  uint32_t index;
  kiln_status_t st = kiln_device_id_parse(device_id, &w.backend, &index);
  if (!st && ncpus > 0) {
    /* The whole worker (the driver's threads included) stays on its cores; the cpu backend
     * additionally pins one pool thread per core. */
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < ncpus; i++) CPU_SET(cpus[i], &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
      KILN_LOG_WARN("pin_failed", "device=%s cpus=%d", device_id, ncpus);
  }
  if (!st) st = w.backend->open(index, ncpus > 0 ? cpus : NULL, (size_t)ncpus, &w.dev);
  if (st) {
    KILN_LOG_ERROR("open_failed", "device=%s message=\"%s\"", device_id, kiln_status_message(st));
    kiln_status_free(st);
    return 2;
  }
  st = confine(channel, w.backend, opts);
  if (st) {
    KILN_LOG_ERROR("sandbox_failed", "device=%s message=\"%s\"", device_id, kiln_status_message(st));
    kiln_status_free(st);
    return 2;
  }
  kiln_map_init(&w.buffers);
  kiln_map_init(&w.modules);
  kiln_map_init(&w.graphs);
  kiln_job_server_t server = {.channel = channel, .handle = handle, .fatal = fatal, .ctx = &w};
  int rc = kiln_job_serve(&server);
  size_t it = 0;
  void *v;
  while (kiln_map_next(&w.buffers, &it, NULL, &v)) {
    kiln_dworker_buffer_t *b = v;
    w.backend->mem_free(w.dev, b->mem);
    free(b);
  }
  kiln_map_deinit(&w.buffers);
  kiln_dworker_graphs_deinit(&w);
  kiln_dworker_modules_deinit(&w);
  w.backend->close(w.dev);
  return rc;
}

int main(int argc, char **argv) {
  int channel = -1;
  const char *device = "cpu:0";
  bool probe = false;
  static int cpus[256];
  int ncpus = 0;
  options_t opts = {0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--probe") == 0) probe = true;
    else if (strcmp(argv[i], "--channel-fd") == 0 && i + 1 < argc) channel = atoi(argv[++i]);
    else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = argv[++i];
    else if (strcmp(argv[i], "--uid") == 0 && i + 1 < argc) opts.uid = (uid_t)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--gid") == 0 && i + 1 < argc) opts.gid = (gid_t)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--max-memory") == 0 && i + 1 < argc)
      opts.max_memory = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--cpus") == 0 && i + 1 < argc) {
      ncpus = parse_cpus(argv[++i], cpus, 256);
      if (ncpus < 0) {
        fprintf(stderr, "kiln-device-worker: bad --cpus list '%s'\n", argv[i]);
        return 2;
      }
    }
    else {
      fprintf(stderr,
              "usage: kiln-device-worker --probe | --channel-fd N --device ID [--cpus LIST]\n"
              "       [--uid N --gid N] [--max-memory BYTES]\n"
              "(started by kilnd; not meant to be run by hand)\n");
      return 2;
    }
  }
  kiln_status_t st = kiln_crypto_init();
  if (st) return 1;
  if (probe) return probe_all();
  if (channel < 0) {
    fprintf(stderr, "kiln-device-worker: --channel-fd is required\n");
    return 2;
  }
  kiln_sandbox_close_inherited(channel);
  char name[48];
  snprintf(name, sizeof(name), "device-worker/%s", device);
  kiln_log_set_process(name);
  /* kilnd handles SIGINT for the process group; the worker ends when its channel closes. */
  signal(SIGINT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  return serve(channel, device, cpus, ncpus, &opts);
}
