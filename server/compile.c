/* compile, compile_batch, source, cancel: cache keys, the compile queue, the pool of
 * compile workers, single-flight, and the module table.
 *
 * A build's key is BLAKE2b-256 over every input that can change its output (docs/cache.md):
 * payload bytes, payload kind, the target as resolved (a device id becomes that device's
 * arch), the host CPU for "cpu", the options, and the compiler identity that the compile
 * worker reports (kiln, LLVM and device-library versions). Identical builds in flight at
 * once run once; everyone waiting gets the result. */
#include <ctype.h>
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "protocol/channel.h"
#include "protocol/job_compile.h"
#include "server/cache.h"
#include "server/compile.h"
#include "server/compile_queue.h"
#include "server/fleet/remote.h"
#include "server/modules.h"
#include "server/request.h"

enum { PRIO_INTERACTIVE = KILN_PRIO_INTERACTIVE, PRIO_BATCH = KILN_PRIO_BATCH };

/* An item of a batch waiting for room under its tenant's `compiles` quota: the quota bounds
 * how many of a tenant's items are queued or running at once, not how large a batch is. */
typedef struct deferred {
  uint32_t index;
  kiln_build_params_t b;
  uint8_t *payload; /* b.payload points here: the request's message is gone by then */
} deferred_t;

typedef struct batch {
  kiln_req_t *req;
  kiln_tenant_t *tenant;
  uint32_t n, remaining;
  uint32_t done, failed; /* items answered so far: the `progress` notifications */
  kiln_buf_t *items; /* packed result of each item */
  deferred_t *deferred; /* in item order; [next_deferred, ndeferred) still wait */
  uint32_t ndeferred, next_deferred;
  struct batch *dprev, *dnext; /* the compile state's list while items wait */
} batch_t;

typedef struct waiter {
  struct waiter *next;
  kiln_req_t *req; /* a `compile` request, or NULL for a batch item */
  batch_t *batch;
  uint32_t index;
  kiln_tenant_t *tenant;
  bool on_stack; /* a batch item answered without an allocation (out of memory) */
  kiln_compile_done_fn done; /* an internal build (a graph's program): called instead */
  void *done_ctx;
} waiter_t;

typedef struct job {
  kiln_cq_item_t q; /* first: its place in the compile queue (prio, owner) */
  uint8_t key[KILN_HASH_BYTES];
  char hex[2 * KILN_HASH_BYTES + 1];
  uint64_t key64;
  /* The payload waits in memory while the job is queued and goes into a memfd only when a
   * worker takes it: a queue of thousands of batch items holds no file descriptors. */
  const uint8_t *payload;
  uint64_t size;
  void *block; /* what payload lies in, freed with the job: the request's receive buffer
                  (taken from the reader, no copy) or a copy of the payload alone */
  kiln_compile_job_t cj; /* encoded into params when the build is queued (a miss) */
  kiln_buf_t params; /* the compile job for the worker (protocol/job_compile.h) */
  waiter_t *waiters;
  struct kiln_compile_state *cs;
  bool remote_pending; /* asking the remote tier (server/fleet/remote.h): not in the queue */
  bool cached;         /* answered from the remote tier */
} job_t;

typedef struct slot {
  kiln_worker_t *worker;
  job_t *job;
  uv_timer_t timer;
  uint64_t start_ns;
  struct kiln_compile_state *cs;
} slot_t;

typedef struct kiln_compile_state {
  kiln_server_t *server;
  char identity[256];
  char host[256];
  slot_t *slots;
  uint32_t nslots;
  kiln_cqueue_t queue; /* jobs waiting for a worker (server/compile_queue.h) */
  kiln_map_t inflight; /* key64 -> job (queued or running) */
  batch_t *deferred;   /* batches with items waiting for quota, oldest first */
  bool resuming;       /* inside resume_deferred, or where it must not run */
  kiln_cache_t *cache;
  kiln_remote_t *remote; /* --cache-remote: the fleet's tier behind the disk store, or NULL */
  /* counters */
  uint64_t compiles, compile_errors, crashes, timeouts, hits, joins, cancelled;
  double compile_ms_total;
  uint64_t duration_buckets[12]; /* compile ms histogram: <=1,2,5,10,20,50,100,200,500,1000,5000,+inf */
} kiln_compile_state_t;

static const double bucket_bounds[11] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000};

static kiln_compile_state_t *state(kiln_server_t *s) { return s->compile; }

/* --- startup: the compiler identity ---------------------------------------------------- */

static kiln_status_t read_identity(kiln_server_t *s, kiln_compile_state_t *cs) {
  char path[600];
  KILN_RETURN_IF_ERROR(kiln_worker_find_binary(s, "kiln-compile-worker", path, sizeof(path)));
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_status_t st = kiln_worker_run_print(path, "--identity", 4096, &out);
  if (st) {
    kiln_buf_deinit(&out);
    return st;
  }
  kiln_mp_doc_t doc;
  st = kiln_mp_doc_read(&doc, out.data, out.len, 4, false, &kiln_mp_err_params);
  const msgpack_object *id = st ? NULL : kiln_params_find(&doc.root, "identity");
  const msgpack_object *host = st ? NULL : kiln_params_find(&doc.root, "host");
  if (!st && (!id || !host || kiln_obj_cstr(id, "identity", cs->identity, sizeof(cs->identity)) ||
              kiln_obj_cstr(host, "host", cs->host, sizeof(cs->host))))
    st = KILN_STATUS(KILN_E_UNAVAILABLE, "%s --identity printed no identity", path);
  kiln_mp_doc_deinit(&doc);
  kiln_buf_deinit(&out);
  return st;
}

/* --cache-remote: the fleet's tier (server/fleet/remote.h) with this server's options. */
static kiln_status_t remote_open(kiln_server_t *s, kiln_remote_t **out) {
  const kiln_config_t *c = &s->cfg;
  kiln_remote_config_t rc = {
      .redis = {.url = c->cache_remote, .auth_file = c->cache_remote_auth, .what = "cache_remote",
                .timeout_ms = (uint32_t)(c->cache_remote_timeout_s * 1000)},
      .secret_file = c->fleet_secret_file,
      .max_bytes = c->cache_remote_max_bytes,
      .wait_ms = (uint32_t)(c->cache_remote_wait_s * 1000)};
  KILN_RETURN_IF_ERROR(kiln_remote_create(s->loop, &rc, out));
  KILN_LOG_INFO("cache_remote", "url=%s", kiln_remote_url(*out));
  return KILN_OK;
}

kiln_status_t kiln_compile_init(kiln_server_t *s) {
  kiln_compile_state_t *cs = calloc(1, sizeof(*cs));
  if (!cs) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  cs->server = s;
  s->compile = cs;
  kiln_map_init(&cs->inflight);
  kiln_cq_init(&cs->queue);
  KILN_RETURN_IF_ERROR(read_identity(s, cs));
  kiln_cache_config_t cc = {0};
  cc.dir = s->cfg.cache_dir;
  cc.max_disk_bytes = s->cfg.cache_max_bytes;
  cc.max_mem_bytes = 256ull << 20;
  KILN_RETURN_IF_ERROR(kiln_cache_open(s->loop, &cc, &cs->cache));
  s->cache = cs->cache; /* the module table's store (server/modules.h) */
  if (s->cfg.cache_remote[0]) KILN_RETURN_IF_ERROR(remote_open(s, &cs->remote));
  /* --compile-workers, else one per core: of --pin compile=CPUS, or that kilnd may run on. */
  const char *pin = kiln_pin_of(s, "compile");
  cpu_set_t pinned, all;
  uint32_t npinned = pin ? kiln_pin_set(pin, &pinned) : 0;
  if (!s->cfg.compile_workers) {
    uint32_t n = npinned;
    if (!n && sched_getaffinity(0, sizeof(all), &all) == 0) n = (uint32_t)CPU_COUNT(&all);
    s->cfg.compile_workers = n ? n : 1;
  }
  cs->nslots = s->cfg.compile_workers;
  cs->slots = calloc(cs->nslots, sizeof(slot_t));
  if (!cs->slots) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  char mem[32];
  snprintf(mem, sizeof(mem), "%llu", (unsigned long long)s->cfg.compile_max_memory);
  const char *tail[] = {"--max-memory", mem, NULL};
  for (uint32_t i = 0; i < cs->nslots; i++) {
    slot_t *sl = &cs->slots[i];
    sl->cs = cs;
    KILN_RETURN_IF_ERROR(kiln_worker_create(s, KILN_WORKER_COMPILER, "", tail, &sl->worker));
    if (npinned) kiln_worker_set_cpus(sl->worker, &pinned);
    /* Started now: LLVM's first-use costs are paid before the first request arrives. */
    KILN_RETURN_IF_ERROR(kiln_worker_start(sl->worker));
    uv_timer_init(s->loop, &sl->timer);
    sl->timer.data = sl;
  }
  KILN_LOG_INFO("compiler", "workers=%u cpus=%s identity=\"%s\" cache=%s", cs->nslots, pin ? pin : "all",
                cs->identity, s->cfg.cache_dir);
  return KILN_OK;
}

void kiln_compile_shutdown(kiln_server_t *s) {
  kiln_compile_state_t *cs = state(s);
  if (!cs) return;
  for (uint32_t i = 0; i < cs->nslots; i++)
    if (cs->slots[i].worker) {
      kiln_worker_destroy(cs->slots[i].worker);
      cs->slots[i].worker = NULL;
    }
  kiln_remote_destroy(cs->remote); /* jobs asking it are cancelled with their requests */
  cs->remote = NULL;
  if (cs->cache) {
    kiln_cache_close(cs->cache, NULL, NULL);
    cs->cache = NULL;
    s->cache = NULL;
  }
}

/* --- modules ------------------------------------------------------------------------------ */

static uint64_t key64(const uint8_t key[KILN_HASH_BYTES]) { return kiln_module_key64(key); }

/* --- result packing ----------------------------------------------------------------------- */

static void pack_kernels(msgpack_packer *pk, const kiln_artifact_t *a) {
  msgpack_pack_array(pk, a->num_kernels);
  for (uint32_t i = 0; i < a->num_kernels; i++) {
    const kiln_kernel_t *k = &a->kernels[i];
    kiln_fields_t m, arg;
    kiln_fields_begin(&m, pk);
    kiln_fields_str(&m, "name", k->name);
    kiln_fields_key(&m, "args");
    msgpack_pack_array(pk, k->num_args);
    for (uint32_t j = 0; j < k->num_args; j++) {
      kiln_fields_begin(&arg, pk);
      kiln_fields_str(&arg, "name", k->args[j].name);
      kiln_fields_str(&arg, "type", kiln_arg_type_name(k->args[j].type));
      kiln_fields_end(&arg);
    }
    kiln_fields_u64(&m, "shared", k->group_segment_size);
    kiln_fields_u64(&m, "max_block", k->max_block);
    if (k->launch) { /* te kernels: the recipe's MessagePack as the compiler wrote it */
      kiln_fields_key(&m, "launch");
      pk->callback(pk->data, (const char *)k->launch, k->launch_size);
    }
    kiln_fields_end(&m);
  }
}

static void pack_result(msgpack_packer *pk, const kiln_module_t *m, bool cached, double ms) {
  kiln_fields_t r;
  kiln_fields_begin(&r, pk);
  kiln_fields_str(&r, "module", m->hex);
  kiln_fields_bool(&r, "cached", cached);
  kiln_fields_str(&r, "target", m->art.target);
  kiln_fields_key(&r, "kernels");
  pack_kernels(pk, &m->art);
  kiln_fields_f64(&r, "compile_ms", ms);
  kiln_fields_str(&r, "log", m->art.log ? m->art.log : "");
  kiln_fields_end(&r);
}

/* --- waiters ------------------------------------------------------------------------------ */

static void batch_send(batch_t *b) {
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &out);
  kiln_rpc_pack_result_head(&pk.pk, b->req->msgid);
  msgpack_pack_array(&pk.pk, b->n);
  kiln_status_t app = KILN_OK;
  for (uint32_t i = 0; i < b->n; i++) {
    if (!app) app = kiln_buf_append(&out, b->items[i].data, b->items[i].len);
    kiln_buf_deinit(&b->items[i]);
  }
  free(b->items);
  kiln_status_t st = kiln_packer_status(&pk);
  if (!st) st = app;
  else kiln_status_free(app);
  if (st) {
    kiln_buf_deinit(&out);
    kiln_req_fail(b->req, st);
  } else {
    kiln_req_reply(b->req, &out, NULL, 0, NULL, NULL);
  }
  free(b);
}

/* [2, "progress", [{"msgid", "index", "done", "failed", "total"}]] to the batch's client,
 * one per item as it is answered (docs/protocol.md `compile_batch`). */
static void batch_progress(batch_t *b, uint32_t index) {
  kiln_conn_t *c = b->req->conn;
  if (b->req->answered || c->closing) return;
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &out);
  kiln_rpc_pack_notification_head(&pk.pk, "progress");
  msgpack_pack_array(&pk.pk, 1);
  kiln_fields_t m;
  kiln_fields_begin(&m, &pk.pk);
  kiln_fields_u64(&m, "msgid", b->req->msgid);
  kiln_fields_u64(&m, "index", index);
  kiln_fields_u64(&m, "done", b->done);
  kiln_fields_u64(&m, "failed", b->failed);
  kiln_fields_u64(&m, "total", b->n);
  kiln_fields_end(&m);
  kiln_status_t st = kiln_packer_status(&pk);
  if (st) { /* out of memory: a notification is worth less than the reply */
    kiln_status_free(st);
    kiln_buf_deinit(&out);
    return;
  }
  kiln_conn_send(c, &out, NULL, 0, NULL, NULL);
}

static void batch_item_done(batch_t *b, uint32_t index, kiln_buf_t *item, bool failed) {
  b->items[index] = *item;
  kiln_buf_init(item);
  b->done++;
  b->failed += failed;
  batch_progress(b, index);
  if (--b->remaining == 0) batch_send(b);
}

/* Answers one waiter with a module (st == NULL) or an error (takes st). */
static void waiter_finish(kiln_compile_state_t *cs, waiter_t *w, const kiln_module_t *m,
                          bool cached, double ms, kiln_status_t st) {
  if (w->tenant) {
    w->tenant->compiles--;
    if (!st && m) kiln_grant_module(cs->server, w->tenant, m->key);
  }
  if (w->done) {
    w->done(w->done_ctx, st ? NULL : m, cached, ms, st);
    free(w);
    return;
  }
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &out);
  if (w->req) {
    if (st) {
      kiln_buf_deinit(&out);
      kiln_req_fail(w->req, st);
    } else {
      kiln_rpc_pack_result_head(&pk.pk, w->req->msgid);
      pack_result(&pk.pk, m, cached, ms);
      kiln_req_reply(w->req, &out, NULL, 0, NULL, NULL);
    }
  } else {
    bool failed = st != KILN_OK;
    if (st) {
      kiln_fields_t m;
      kiln_fields_begin(&m, &pk.pk);
      kiln_fields_key(&m, "error");
      msgpack_pack_array(&pk.pk, 2);
      msgpack_pack_uint32(&pk.pk, kiln_status_code(st));
      kiln_pack_cstr(&pk.pk, kiln_status_message(st));
      kiln_fields_end(&m);
      cs->server->errors_by_code[kiln_status_code(st)]++;
      kiln_status_free(st);
    } else {
      pack_result(&pk.pk, m, cached, ms);
    }
    batch_item_done(w->batch, w->index, &out, failed);
    kiln_buf_deinit(&out);
  }
  if (!w->on_stack) free(w);
}

/* --- the queue and the workers ------------------------------------------------------------ */

static void schedule(kiln_compile_state_t *cs);
static void resume_deferred(kiln_compile_state_t *cs);

static void job_free(job_t *j) {
  if (j->cs->remote) kiln_remote_abandon(j->cs->remote, j->key); /* a lock still held */
  free(j->block);
  kiln_buf_deinit(&j->params);
  free(j);
}

static void job_finish(kiln_compile_state_t *cs, job_t *j, const kiln_module_t *m, double ms,
                       kiln_status_t st) {
  kiln_map_remove(&cs->inflight, j->key64);
  for (waiter_t *w = j->waiters; w;) {
    waiter_t *n = w->next;
    waiter_finish(cs, w, m, j->cached, ms,
                  st ? KILN_STATUS(kiln_status_code(st), "%s", kiln_status_message(st)) : KILN_OK);
    w = n;
  }
  j->waiters = NULL;
  kiln_status_free(st);
  job_free(j);
}

/* The artifact's one copy in kilnd: from the worker's memfd into its cache entry (pread, so
 * a file that changes under us cannot fault the loop). */
static kiln_status_t read_artifact(int fd, const uint8_t key[KILN_HASH_BYTES], uint64_t size,
                                   kiln_cache_entry_t **out) {
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size < size ||
      size > KILN_ARTIFACT_MAX)
    return KILN_STATUS(KILN_E_INTERNAL, "the compile worker's artifact memfd does not hold %llu bytes",
                       (unsigned long long)size);
  kiln_cache_entry_t *e = kiln_cache_entry_new(key, (size_t)size);
  if (!e) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory for a %llu-byte artifact",
                             (unsigned long long)size);
  uint8_t *p = kiln_cache_entry_bytes(e);
  for (uint64_t off = 0; off < size;) {
    ssize_t n = pread(fd, p + off, (size_t)(size - off), (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      kiln_cache_entry_release(e);
      return KILN_STATUS(KILN_E_INTERNAL, "reading the compile worker's artifact: %s",
                         n < 0 ? strerror(errno) : "it ended early");
    }
    off += (uint64_t)n;
  }
  *out = e;
  return KILN_OK;
}

static void on_compiled(void *ctx, kiln_status_t st, const msgpack_object *result, int *fds,
                        int nfds) {
  slot_t *sl = ctx;
  kiln_compile_state_t *cs = sl->cs;
  job_t *j = sl->job;
  sl->job = NULL;
  uv_timer_stop(&sl->timer);
  double ms = (double)(kiln_now_ns() - sl->start_ns) / 1e6;
  kiln_module_t *m = NULL;
  if (!st) {
    kiln_compile_reply_t r = {0};
    st = kiln_compile_reply_decode(result, &r);
    if (!st) ms = r.compile_ms;
    /* The module table refers to the entry; only an artifact that decodes enters the cache. */
    kiln_cache_entry_t *e = NULL;
    if (!st) st = read_artifact(nfds ? fds[0] : -1, j->key, r.size, &e);
    if (!st) {
      st = kiln_module_of(e, &m);
      if (st) kiln_cache_entry_release(e);
    }
    if (!st) {
      kiln_status_t cst = kiln_cache_put_entry(cs->cache, e);
      if (cst) {
        KILN_LOG_WARN("cache_put", "message=\"%s\"", kiln_status_message(cst));
        kiln_status_free(cst);
      }
      if (cs->remote) kiln_remote_put(cs->remote, j->key, m->bytes, m->len);
    }
  }
  if (st) {
    kiln_code_t c = kiln_status_code(st);
    if (c == KILN_E_COMPILER_CRASHED) cs->crashes++;
    else if (c == KILN_E_TIMEOUT) cs->timeouts++;
    else cs->compile_errors++;
  } else {
    cs->compiles++;
    cs->compile_ms_total += ms;
    int b = 0;
    while (b < 11 && ms > bucket_bounds[b]) b++;
    cs->duration_buckets[b]++;
  }
  for (int i = 0; i < nfds; i++) close(fds[i]);
  job_finish(cs, j, m, ms, st);
  kiln_module_release(m);
  schedule(cs);
  resume_deferred(cs);
}

static void on_timeout(uv_timer_t *t) {
  slot_t *sl = t->data;
  kiln_server_t *s = sl->cs->server;
  if (!sl->job) return;
  char why[160];
  snprintf(why, sizeof(why),
           "the compile ran past its time limit of %.0f s and was stopped (--compile-timeout)",
           s->cfg.compile_timeout_s);
  kiln_worker_kill(sl->worker, KILN_E_TIMEOUT, why);
}

static void schedule(kiln_compile_state_t *cs) {
  bool failed = false; /* a job that could not start gave its quota back */
  for (uint32_t i = 0; i < cs->nslots; i++) {
    slot_t *sl = &cs->slots[i];
    if (sl->job || !sl->worker) continue;
    job_t *j = (job_t *)kiln_cq_pop(&cs->queue);
    if (!j) break;
    sl->job = j;
    sl->start_ns = kiln_now_ns();
    int fd = -1;
    void *map = NULL;
    kiln_status_t st = kiln_shm_create("kiln-payload", j->size, &fd, &map);
    if (!st) {
      memcpy(map, j->payload, j->size);
      kiln_shm_unmap(map, j->size);
      free(j->block);
      j->block = NULL;
      j->payload = NULL;
      /* kiln_worker_call closes fd */
      st = kiln_worker_call_fds(sl->worker, kiln_job_name(KILN_JOB_COMPILE), &j->params, &fd, 1,
                                KILN_COMPILE_REPLY_FDS, on_compiled, sl);
    }
    if (st) {
      sl->job = NULL;
      job_finish(cs, j, NULL, 0, st);
      failed = true;
      continue;
    }
    uv_timer_start(&sl->timer, on_timeout, (uint64_t)(cs->server->cfg.compile_timeout_s * 1000), 0);
  }
  if (failed) resume_deferred(cs);
}

uint64_t kiln_compile_queued(kiln_server_t *s, const kiln_tenant_t *t, int prio) {
  return kiln_cq_queued(&state(s)->queue, t, prio);
}

/* --- one build request -------------------------------------------------------------------- */

typedef kiln_build_params_t build_t;

/* The params (server/request.c), then the target: a device id names that device's arch. */
static kiln_status_t parse_build(kiln_server_t *s, const msgpack_object *p, const char *what,
                                 build_t *b) {
  KILN_RETURN_IF_ERROR(kiln_build_params_parse(p, what, b));
  const char *target = b->target_arg;
  kiln_device_entry_t *d = kiln_device_find(s, target, (uint32_t)strlen(target));
  if (d) snprintf(b->target, sizeof(b->target), "%s", d->arch);
  else if (strcmp(target, "host") == 0) snprintf(b->target, sizeof(b->target), "cpu");
  else if (strchr(target, ':') && strncmp(target, "gfx", 3) != 0)
    return KILN_STATUS(KILN_E_NOT_FOUND, "target '%s' names no device of this server", target);
  else snprintf(b->target, sizeof(b->target), "%s", target);
  return KILN_OK;
}

static void build_key(const kiln_compile_state_t *cs, const build_t *b, uint8_t out[KILN_HASH_BYTES]) {
  kiln_build_inputs_t in = {.payload = b->payload, .size = b->size, .kind = b->kind,
                            .target = b->target, .host = cs->host, .opt_level = (uint32_t)b->opt_level,
                            .max_block = (uint32_t)b->max_block, .fast_math = b->fast_math,
                            .identity = cs->identity};
  kiln_build_key(&in, out);
}

/* A miss everywhere: job j's compile job, encoded now, into the queue for a worker. */
static kiln_status_t job_enqueue(kiln_compile_state_t *cs, job_t *j) {
  kiln_packer_t pk;
  kiln_packer_init(&pk, &j->params);
  kiln_compile_job_encode(&pk.pk, &j->cj);
  KILN_RETURN_IF_ERROR(kiln_packer_status(&pk));
  return kiln_cq_push(&cs->queue, &j->q);
}

/* Bytes received after a `compile` message that may move so that its buffer can be taken:
 * the start of the next message, not a second large one. */
#define TAKE_MOVE_MAX (64u << 10)

/* Makes job j's payload outlive the request (the reader reuses or frees the message's
 * buffer once the handler returns): the buffer itself when `from`, the reader of a `compile`
 * request, lets it be taken (a large message: no copy, no fresh pages, and a remote hit
 * frees it untouched), else a copy of the payload. */
static kiln_status_t job_hold_payload(job_t *j, const build_t *b, kiln_reader_t *from) {
  size_t cap = 0;
  uint8_t *got = from ? kiln_reader_take(from, TAKE_MOVE_MAX, &cap) : NULL;
  const uint8_t *p = b->payload;
  j->size = b->size;
  bool taken = got && p >= got && b->size <= cap && (size_t)(p - got) <= cap - b->size;
  uint8_t *copy = taken ? NULL : malloc(b->size ? b->size : 1);
  if (copy) memcpy(copy, p, b->size);
  if (!taken) free(got); /* after the copy: the payload may lie in it */
  if (!taken && !copy) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  j->block = taken ? got : copy;
  j->payload = taken ? p : copy;
  KILN_LOG_DEBUG("compile_payload", "module=%.16s bytes=%llu taken=%d", j->hex,
                 (unsigned long long)b->size, (int)taken);
  return KILN_OK;
}

/* The remote tier's answer for job j: the artifact's bytes (a hit: they go into the cache
 * like a compile's, and every waiter is answered cached), or NULL: the build runs here. */
static void on_remote(void *arg, const uint8_t *bytes, size_t len, void *block) {
  job_t *j = arg;
  kiln_compile_state_t *cs = j->cs;
  j->remote_pending = false;
  kiln_module_t *m = NULL;
  /* The entry adopts the reply's buffer (no copy of a MiB, no fresh pages to fault in). */
  kiln_cache_entry_t *e = block ? kiln_cache_entry_adopt(j->key, block, (uint8_t *)bytes, len) : NULL;
  if (!e && block) free(block);
  if (e) {
    kiln_status_t st = kiln_module_of(e, &m);
    if (st) { /* MACed with the fleet secret, yet not an artifact: build it here */
      KILN_LOG_WARN("cache_remote_undecodable", "module=%.16s message=\"%s\"", j->hex,
                    kiln_status_message(st));
      kiln_status_free(st);
      kiln_cache_entry_release(e);
      m = NULL;
    }
  }
  if (m) {
    /* Answer first, then the cache put: the put wakes a pool thread for the disk write (a
     * hash of the whole artifact, a write, an fsync), which on a busy machine takes the core
     * from the loop before the answer goes out. */
    j->cached = true;
    job_finish(cs, j, m, 0, KILN_OK);
    kiln_status_t st = kiln_cache_put_entry(cs->cache, e);
    kiln_status_free(st); /* served all the same; the next look-up asks Redis again */
    kiln_module_release(m);
    resume_deferred(cs);
    return;
  }
  kiln_status_t st = job_enqueue(cs, j);
  if (st) {
    job_finish(cs, j, NULL, 0, st);
    resume_deferred(cs);
    return;
  }
  schedule(cs);
}

/* Starts (or joins, or answers from the cache) one build for waiter `w`. `from`: the reader
 * that received the request, when its message holds this build alone (a `compile`), else
 * NULL; a new job may take its buffer (b borrows it: read b before job_hold_payload). */
static kiln_status_t submit(kiln_compile_state_t *cs, const build_t *b, int prio, waiter_t *w,
                            kiln_reader_t *from) {
  kiln_tenant_t *t = w->tenant;
  /* A prebuilt cpu shared object is native code nobody checked (the compiler vets what it
   * builds itself): only where the operator said so, and then it runs confined. */
  if (kiln_payload_resolve(b->kind, b->payload, b->size) == KILN_PAYLOAD_CPU_SO &&
      !cs->server->cfg.allow_prebuilt_cpu)
    return KILN_STATUS(KILN_E_PERMISSION,
                       "prebuilt cpu shared objects are refused by this server: their code cannot "
                       "be checked; compile from LLVM IR instead, or an operator may start kilnd "
                       "with --allow-prebuilt-cpu");
  KILN_RETURN_IF_ERROR(kiln_quota_check(t, "compiles", t->compiles, 1, t->quotas.compiles));
  t->compiles++; /* from here on waiter_finish gives it back */
  uint8_t key[KILN_HASH_BYTES];
  build_key(cs, b, key);
  kiln_module_t *m = kiln_module_get(cs->cache, key);
  if (m) {
    cs->hits++;
    waiter_finish(cs, w, m, true, 0, KILN_OK);
    kiln_module_release(m);
    return KILN_OK;
  }
  job_t *j = kiln_map_get(&cs->inflight, key64(key));
  if (j && memcmp(j->key, key, KILN_HASH_BYTES) == 0) {
    cs->joins++;
    w->next = j->waiters;
    j->waiters = w;
    if (prio == PRIO_INTERACTIVE && j->q.prio == PRIO_BATCH) {
      if (j->remote_pending) j->q.prio = PRIO_INTERACTIVE; /* not in the queue yet */
      else kiln_cq_promote(&cs->queue, &j->q);
    }
    return KILN_OK;
  }
  j = calloc(1, sizeof(*j));
  if (!j) {
    t->compiles--;
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(j->key, key, KILN_HASH_BYTES);
  j->cs = cs;
  kiln_hex(key, KILN_HASH_BYTES, j->hex);
  j->key64 = key64(key);
  j->q.prio = prio;
  j->q.owner = t; /* whose FIFO it waits in: the tenant that submitted it first */
  kiln_buf_init(&j->params);
  j->cj = (kiln_compile_job_t){.kind = b->kind, .opt_level = (uint32_t)b->opt_level,
                               .max_block = (uint32_t)b->max_block, .fast_math = b->fast_math,
                               .size = b->size};
  snprintf(j->cj.target, sizeof(j->cj.target), "%s", b->target);
  /* Last use of b: the request's buffer may be the job's from here on. */
  kiln_status_t st = job_hold_payload(j, b, from);
  if (!st) st = kiln_map_put(&cs->inflight, j->key64, j);
  if (st) {
    job_free(j);
    t->compiles--;
    return st;
  }
  w->next = NULL;
  j->waiters = w;
  /* Memory and disk missed: the fleet's tier next; on_remote queues the build on a miss.
   * The compile job is encoded only then: a remote hit never needs it. */
  if (cs->remote && (j->remote_pending = kiln_remote_get(cs->remote, key, on_remote, j)))
    return KILN_OK;
  st = job_enqueue(cs, j);
  if (st) {
    kiln_map_remove(&cs->inflight, j->key64);
    job_free(j);
    t->compiles--;
    return st;
  }
  schedule(cs);
  return KILN_OK;
}

kiln_status_t kiln_method_compile(kiln_call_t *call) {
  kiln_compile_state_t *cs = state(call->server);
  build_t b;
  KILN_RETURN_IF_ERROR(parse_build(call->server, call->params, "compile", &b));
  waiter_t *w = calloc(1, sizeof(*w));
  if (!w) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  w->req = call->req;
  w->tenant = call->conn->tenant;
  call->async = true; /* the waiter answers, now (cache hit) or later */
  kiln_status_t st = submit(cs, &b, PRIO_INTERACTIVE, w, &call->conn->reader);
  if (st) {
    call->async = false;
    free(w);
  }
  return st;
}

/* --- batch items waiting for quota --------------------------------------------------------- */

static void deferred_unlink(kiln_compile_state_t *cs, batch_t *b) {
  if (b->dprev) b->dprev->dnext = b->dnext;
  else cs->deferred = b->dnext;
  if (b->dnext) b->dnext->dprev = b->dprev;
  b->dprev = b->dnext = NULL;
}

/* Room for one more of the tenant's items, or a quota of 0 (set by a reload while items
 * waited), which submit() then refuses: either way the item stops waiting. */
static bool has_room(const kiln_tenant_t *t) {
  return t->quotas.compiles == 0 || t->compiles < t->quotas.compiles;
}

/* What a tenant's waiting items may hold (their payloads, copied): a full batch always fits
 * (the message limit bounds one), more than that waits for nobody but the tenant itself. */
#define KILN_DEFER_BYTES (16u << 20)
static uint64_t defer_limit(const kiln_compile_state_t *cs, const kiln_tenant_t *t) {
  uint64_t one_message = KILN_MIN(t->quotas.message, cs->server->cfg.limits.max_message);
  return KILN_MAX(one_message, (uint64_t)KILN_DEFER_BYTES);
}

/* Answers or submits batch item `index` (build b, or the parse error st) through a waiter. */
static void batch_submit(kiln_compile_state_t *cs, batch_t *bt, uint32_t index,
                         const kiln_build_params_t *b, kiln_status_t st) {
  waiter_t stack_w, *w = calloc(1, sizeof(*w));
  if (!w) {
    /* Answer the item through a waiter on the stack: waiter_finish frees only heap ones. */
    memset(&stack_w, 0, sizeof(stack_w));
    stack_w.on_stack = true;
    w = &stack_w;
  }
  w->batch = bt;
  w->index = index;
  w->tenant = w->on_stack ? NULL : bt->tenant;
  if (!st && w == &stack_w) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) st = submit(cs, b, PRIO_BATCH, w, NULL); /* items share one message */
  if (st) {
    w->tenant = NULL; /* submit took no quota when it failed */
    waiter_finish(cs, w, NULL, false, 0, st);
  }
}

/* Submits waiting batch items while their tenants have room, oldest batch first. Runs where
 * no queue walk is in progress (after a build ends, after a cancel, after a batch arrives). */
static void resume_deferred(kiln_compile_state_t *cs) {
  if (cs->resuming) return;
  cs->resuming = true;
  for (bool again = true; again;) {
    again = false;
    for (batch_t *b = cs->deferred, *next; b; b = next) {
      next = b->dnext;
      bool gone = b->req->answered || b->req->conn->closing;
      while (b->next_deferred < b->ndeferred && (gone || has_room(b->tenant))) {
        deferred_t d = b->deferred[b->next_deferred++];
        bool last = b->next_deferred == b->ndeferred;
        if (last) { /* b may be answered and freed by this item: let go of it first */
          deferred_unlink(cs, b);
          free(b->deferred);
          b->deferred = NULL;
        }
        kiln_tenant_t *owner = b->tenant; /* b may be gone after batch_submit */
        batch_submit(cs, b, d.index, &d.b,
                     gone ? KILN_STATUS(KILN_E_CANCELLED, "the client has gone") : KILN_OK);
        owner->deferred_bytes -= d.b.size;
        free(d.payload);
        again = true;
        if (last) break;
      }
    }
  }
  cs->resuming = false;
}

/* Answers the waiting items of request msgid on c with E_CANCELLED; how many. */
static uint64_t cancel_deferred(kiln_compile_state_t *cs, kiln_conn_t *c, uint64_t msgid) {
  for (batch_t *b = cs->deferred; b; b = b->dnext) {
    if (b->req->conn != c || b->req->msgid != msgid) continue;
    uint64_t n = b->ndeferred - b->next_deferred;
    deferred_t *ds = b->deferred;
    uint32_t from = b->next_deferred, to = b->ndeferred;
    deferred_unlink(cs, b);
    b->deferred = NULL;
    b->next_deferred = b->ndeferred = 0;
    kiln_tenant_t *owner = b->tenant;
    for (uint32_t i = from; i < to; i++) {
      batch_submit(cs, b, ds[i].index, NULL, KILN_STATUS(KILN_E_CANCELLED, "cancelled by the client"));
      owner->deferred_bytes -= ds[i].b.size;
      free(ds[i].payload);
    }
    free(ds);
    return n;
  }
  return 0;
}

void kiln_compile_quotas_changed(kiln_server_t *s) {
  if (state(s)) resume_deferred(state(s));
}

/* Keeps item `index` (its build b borrows the request) until its tenant has room. */
static kiln_status_t batch_defer(kiln_compile_state_t *cs, batch_t *bt, uint32_t index,
                                 const kiln_build_params_t *b) {
  kiln_tenant_t *t = bt->tenant;
  if (t->deferred_bytes + b->size > defer_limit(cs, t))
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED,
                       "%llu bytes of tenant \"%s\"'s batch items already wait for its compiles "
                       "quota (%llu at once); this item of %zu bytes would pass the %llu-byte "
                       "limit on waiting items: send fewer at once",
                       (unsigned long long)t->deferred_bytes, t->name,
                       (unsigned long long)t->quotas.compiles, (size_t)b->size,
                       (unsigned long long)defer_limit(cs, t));
  if (!bt->deferred) {
    bt->deferred = calloc(bt->n, sizeof(deferred_t));
    if (!bt->deferred) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
    bt->dnext = NULL;
    bt->dprev = NULL;
    batch_t **tail = &cs->deferred;
    batch_t *prev = NULL;
    while (*tail) {
      prev = *tail;
      tail = &(*tail)->dnext;
    }
    *tail = bt;
    bt->dprev = prev;
  }
  deferred_t *d = &bt->deferred[bt->ndeferred];
  d->payload = malloc(b->size ? b->size : 1);
  if (!d->payload) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(d->payload, b->payload, b->size);
  d->index = index;
  d->b = *b;
  d->b.payload = d->payload;
  bt->ndeferred++;
  t->deferred_bytes += b->size;
  return KILN_OK;
}

kiln_status_t kiln_method_compile_batch(kiln_call_t *call) {
  kiln_compile_state_t *cs = state(call->server);
  static const char *const fields[] = {"items", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "compile_batch", fields));
  const msgpack_object_array *items = NULL;
  KILN_RETURN_IF_ERROR(kiln_params_array(call->params, "items", true, &items));
  if (items->size == 0) {
    msgpack_pack_array(call->pk, 0);
    return KILN_OK;
  }
  if (items->size > 4096)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "a batch holds at most 4096 items; got %u",
                       items->size);
  batch_t *bt = calloc(1, sizeof(*bt));
  kiln_buf_t *slots = calloc(items->size, sizeof(kiln_buf_t));
  if (!bt || !slots) {
    free(bt);
    free(slots);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  bt->req = call->req;
  bt->tenant = call->conn->tenant;
  bt->n = bt->remaining = items->size;
  bt->items = slots;
  call->async = true;
  /* Every item is answered through the batch; the last one sends the reply (which may
   * happen inside this loop when everything is cached). Keep one extra count so it cannot
   * complete before the loop is done. */
  bt->remaining++;
  /* Items past the tenant's `compiles` quota wait in the batch (in order) and go as earlier
   * ones finish; a quota of 0 still refuses them. While this loop runs, no waiting item may
   * start ahead of this batch's own. */
  kiln_tenant_t *t = bt->tenant;
  bool was_resuming = cs->resuming;
  cs->resuming = true;
  for (uint32_t i = 0; i < items->size; i++) {
    build_t b;
    char what[32];
    snprintf(what, sizeof(what), "items[%u]", i);
    kiln_status_t st = items->ptr[i].type == MSGPACK_OBJECT_MAP
                           ? parse_build(call->server, &items->ptr[i], what, &b)
                           : KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s must be a map", what);
    if (!st && t->quotas.compiles > 0 && (bt->ndeferred || !has_room(t))) {
      st = batch_defer(cs, bt, i, &b);
      if (!st) continue;
      /* Refused a place to wait: the item answers the error; later items try again. */
    }
    batch_submit(cs, bt, i, st ? NULL : &b, st);
  }
  cs->resuming = was_resuming;
  /* Drop the extra count: answers now if every item is done. */
  if (--bt->remaining == 0) batch_send(bt);
  else resume_deferred(cs);
  return KILN_OK;
}

kiln_status_t kiln_compile_submit(kiln_server_t *s, kiln_tenant_t *t, const msgpack_object *item,
                                  const char *what, kiln_compile_done_fn done, void *ctx) {
  build_t b;
  KILN_RETURN_IF_ERROR(parse_build(s, item, what, &b));
  waiter_t *w = calloc(1, sizeof(*w));
  if (!w) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  w->tenant = t;
  w->done = done;
  w->done_ctx = ctx;
  kiln_status_t st = submit(state(s), &b, PRIO_BATCH, w, NULL);
  if (st) free(w);
  return st;
}

const char *kiln_compile_identity(kiln_server_t *s) { return state(s)->identity; }

/* module {"module"}: what compile answered for this id (cached: true), if the tenant may use
 * it: a client checks an id it kept (across restarts too, server/grants.c). */
kiln_status_t kiln_method_module(kiln_call_t *call) {
  static const char *const fields[] = {"module", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "module", fields));
  const char *hex;
  uint32_t hlen;
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "module", true, &hex, &hlen));
  kiln_module_t *m;
  KILN_RETURN_IF_ERROR(kiln_module_find(call->server, call->conn->tenant, hex, hlen, &m));
  pack_result(call->pk, m, true, 0);
  kiln_module_release(m);
  return KILN_OK;
}

kiln_status_t kiln_method_source(kiln_call_t *call) {
  static const char *const fields[] = {"module", "kind", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "source", fields));
  const char *hex, *kind = "llvm";
  uint32_t hlen, klen = 4;
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "module", true, &hex, &hlen));
  KILN_RETURN_IF_ERROR(kiln_params_str(call->params, "kind", false, &kind, &klen));
  kiln_module_t *m;
  KILN_RETURN_IF_ERROR(kiln_module_find(call->server, call->conn->tenant, hex, hlen, &m));
  /* The table is all the module table keeps decoded: the texts and code come from its bytes. */
  kiln_artifact_t a;
  kiln_artifact_init(&a);
  kiln_status_t st = kiln_artifact_decode(m->bytes, m->len, &a);
  const char *text = NULL;
  if (st) {
  } else if (klen == 4 && memcmp(kind, "llvm", 4) == 0) {
    text = a.llvm_ir;
  } else if (klen == 3 && memcmp(kind, "asm", 3) == 0) {
    text = a.assembly;
  } else if (klen == 6 && memcmp(kind, "binary", 6) == 0) {
    msgpack_pack_bin(call->pk, a.code_size);
    msgpack_pack_bin_body(call->pk, a.code, a.code_size);
  } else {
    st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "kind must be \"llvm\", \"asm\" or \"binary\"");
  }
  bool binary = klen == 6 && memcmp(kind, "binary", 6) == 0;
  if (!st && !binary && !text)
    st = KILN_STATUS(KILN_E_NOT_FOUND, "module %.16s has no %.*s text (prebuilt code object)",
                     m->hex, (int)klen, kind);
  if (!st && !binary) kiln_pack_cstr(call->pk, text);
  kiln_artifact_deinit(&a);
  kiln_module_release(m);
  return st;
}

/* Drops queued (not running) compile work of request `msgid` on this connection. */
typedef struct cancel {
  kiln_compile_state_t *cs;
  kiln_conn_t *conn;
  uint64_t msgid;
  uint64_t n; /* waiters cancelled */
} cancel_t;

/* Answers the job's waiters of the cancelled request; true when none is left. */
static bool cancel_visit(void *ctx, kiln_cq_item_t *it) {
  cancel_t *c = ctx;
  job_t *j = (job_t *)it;
  waiter_t **wp = &j->waiters;
  while (*wp) {
    waiter_t *w = *wp;
    kiln_req_t *r = w->req ? w->req : w->batch->req;
    if (r->conn == c->conn && r->msgid == c->msgid) {
      *wp = w->next;
      c->n++;
      waiter_finish(c->cs, w, NULL, false, 0, KILN_STATUS(KILN_E_CANCELLED, "cancelled by the client"));
    } else {
      wp = &w->next;
    }
  }
  return !j->waiters;
}

/* A job nobody waits for any more, out of the queue. */
static void cancel_dropped(void *ctx, kiln_cq_item_t *it) {
  cancel_t *c = ctx;
  job_t *j = (job_t *)it;
  kiln_map_remove(&c->cs->inflight, j->key64);
  job_free(j);
}

kiln_status_t kiln_method_cancel(kiln_call_t *call) {
  static const char *const fields[] = {"msgid", NULL};
  KILN_RETURN_IF_ERROR(kiln_params_check(call->params, "cancel", fields));
  uint64_t msgid;
  KILN_RETURN_IF_ERROR(kiln_params_u64(call->params, "msgid", true, &msgid));
  kiln_compile_state_t *cs = state(call->server);
  cancel_t c = {.cs = cs, .conn = call->conn, .msgid = msgid};
  bool was_resuming = cs->resuming;
  cs->resuming = true; /* no waiting item may enter the queue while it is walked */
  c.n += cancel_deferred(cs, call->conn, msgid);
  kiln_cq_filter(&cs->queue, cancel_visit, cancel_dropped, &c);
  cs->resuming = was_resuming;
  resume_deferred(cs);
  uint64_t n = c.n;
  cs->cancelled += n;
  kiln_fields_t r;
  kiln_fields_begin(&r, call->pk);
  kiln_fields_u64(&r, "cancelled", n);
  kiln_fields_end(&r);
  return KILN_OK;
}

void kiln_compile_metrics(kiln_server_t *s, kiln_compile_metrics_t *out) {
  static double bounds_s[KILN_ARRAY_SIZE(bucket_bounds)];
  for (size_t i = 0; i < KILN_ARRAY_SIZE(bucket_bounds); i++) bounds_s[i] = bucket_bounds[i] / 1e3;
  kiln_compile_state_t *cs = state(s);
  memset(out, 0, sizeof(*out));
  out->workers = cs->nslots;
  for (uint32_t i = 0; i < cs->nslots; i++) out->busy += cs->slots[i].job != NULL;
  out->queued[0] = cs->queue.len[0];
  out->queued[1] = cs->queue.len[1];
  out->compiles = cs->compiles;
  out->errors = cs->compile_errors;
  out->crashes = cs->crashes;
  out->timeouts = cs->timeouts;
  out->hits = cs->hits;
  out->joins = cs->joins;
  out->cancelled = cs->cancelled;
  out->seconds_total = cs->compile_ms_total / 1e3;
  out->bucket_le = bounds_s;
  out->nbuckets = KILN_ARRAY_SIZE(bucket_bounds);
  out->buckets = cs->duration_buckets;
  uint64_t table_bytes;
  kiln_modules_stats(&out->modules, &table_bytes);
  if (cs->cache) kiln_cache_stats(cs->cache, &out->cache);
  out->remote_on = cs->remote != NULL;
  if (cs->remote) kiln_remote_stats(cs->remote, &out->remote);
}

void kiln_compile_pack_stats(kiln_server_t *s, kiln_fields_t *r) {
  kiln_compile_state_t *cs = state(s);
  msgpack_packer *pk = r->pk;
  kiln_cache_stats_t c;
  kiln_cache_stats(cs->cache, &c);
  kiln_fields_key(r, "compile");
  uint32_t busy = 0;
  for (uint32_t i = 0; i < cs->nslots; i++) busy += cs->slots[i].job != NULL;
  kiln_fields_t m;
  kiln_fields_begin(&m, pk);
  kiln_fields_u64(&m, "workers", cs->nslots);
  kiln_fields_key(&m, "pids"); /* of the compile workers now running (0 while one restarts) */
  msgpack_pack_array(pk, cs->nslots);
  for (uint32_t i = 0; i < cs->nslots; i++)
    msgpack_pack_uint64(pk, cs->slots[i].worker ? (uint64_t)kiln_worker_pid(cs->slots[i].worker) : 0);
  uint64_t modules, table_bytes;
  kiln_modules_stats(&modules, &table_bytes);
  /* Modules alive (in the cache's entries, or held by work in flight) and the bytes their
   * kernel tables hold; their artifacts' bytes are the cache's (bytes_memory). */
  kiln_fields_u64(&m, "modules", modules);
  kiln_fields_u64(&m, "module_bytes", table_bytes);
  kiln_fields_u64(&m, "workers_busy", busy);
  kiln_fields_u64(&m, "queued_interactive", cs->queue.len[0]);
  kiln_fields_u64(&m, "queued_batch", cs->queue.len[1]);
  kiln_fields_u64(&m, "compiles", cs->compiles);
  kiln_fields_u64(&m, "errors", cs->compile_errors);
  kiln_fields_u64(&m, "crashes", cs->crashes);
  kiln_fields_u64(&m, "timeouts", cs->timeouts);
  kiln_fields_u64(&m, "cache_hits", cs->hits);
  kiln_fields_u64(&m, "single_flight_joins", cs->joins);
  kiln_fields_u64(&m, "cancelled", cs->cancelled);
  kiln_fields_f64(&m, "compile_ms_total", cs->compile_ms_total);
  kiln_fields_end(&m);
  kiln_fields_key(r, "cache");
  kiln_fields_begin(&m, pk);
  kiln_fields_u64(&m, "hits_memory", c.hits_mem);
  kiln_fields_u64(&m, "hits_disk", c.hits_disk);
  kiln_fields_u64(&m, "misses", c.misses);
  kiln_fields_u64(&m, "corrupt", c.corrupt);
  kiln_fields_u64(&m, "write_errors", c.write_errors);
  kiln_fields_u64(&m, "evictions", c.evictions_mem + c.evictions_disk);
  kiln_fields_u64(&m, "entries_disk", c.entries_disk);
  kiln_fields_u64(&m, "bytes_disk", c.bytes_disk);
  kiln_fields_u64(&m, "bytes_memory", c.bytes_mem);
  kiln_fields_end(&m);
  kiln_fields_key(r, "cache_remote"); /* nil without --cache-remote */
  if (cs->remote) kiln_remote_pack_stats(cs->remote, pk);
  else msgpack_pack_nil(pk);
}
