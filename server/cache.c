/* The cache's index: one node per key known in memory or on disk, two LRU lists, the
 * queue of disk writes and the close barrier. Files themselves are cache_file.c's. */
#include "server/cache.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "server/cache_file.h"

/* Writes running at once on libuv's pool, which has 4 threads by default and serves every
 * other uv_queue_work and uv_fs user too: fsyncs must not take all of it. */
enum { kMaxRunningWrites = 2 };
/* A memory hit refreshes the file's mtime (the recency a restart sees) at most this often,
 * so that hot entries cost one syscall a minute, not one per hit. */
#define TOUCH_INTERVAL_NS (60ull * 1000000000ull)

enum { DISK_NONE, DISK_WRITING, DISK_PRESENT };

/* The clock of file mtimes: what kiln_cache_items reports and the operator compares. */
static int64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct link {
  struct link *prev, *next;
} link_t;

typedef struct node {
  uint8_t key[KILN_CACHE_KEY_BYTES];
  struct node *chain;          /* hash bucket */
  link_t mem_link;             /* in mem_lru while mem != NULL */
  link_t disk_link;            /* in disk_lru while disk != DISK_NONE */
  kiln_cache_entry_t *mem;     /* the cache's reference */
  kiln_cache_entry_t *writing; /* the write job's reference while DISK_WRITING */
  uint64_t file_bytes;         /* header + payload, once a write is queued or a file found */
  uint64_t touched_ns;         /* last time the file's mtime was set */
  int64_t used_ns;             /* wall clock of the last use the file's mtime records */
  uint8_t disk;
  bool doomed; /* removed while its write ran: delete the file when the write lands */
} node_t;

typedef struct write_job {
  uv_work_t req;
  kiln_cache_t *cache;
  node_t *node;
  kiln_cache_entry_t *entry; /* what the pool thread reads; the node is the loop's */
  kiln_status_t status;
  struct write_job *next;
} write_job_t;

struct kiln_cache {
  uv_loop_t *loop;
  uv_thread_t owner;
  kiln_cache_root_t root; /* the directory's descriptors and secret */
  uint64_t max_disk, max_mem;
  int test_write_errno;
  node_t **buckets;
  size_t num_buckets, num_nodes; /* num_buckets: a power of two */
  link_t mem_lru, disk_lru;      /* least recent first; disk_lru holds writes in flight too */
  uint64_t disk_reserved;        /* file bytes of writes not landed yet */
  write_job_t *queue_head, *queue_tail;
  unsigned queued, running;
  bool closing, barrier_pending;
  uv_work_t close_req;
  kiln_cache_close_cb close_cb;
  void *close_arg;
  kiln_cache_stats_t st;
};

/* --- entries ----------------------------------------------------------------------------- */

const uint8_t *kiln_cache_entry_data(const kiln_cache_entry_t *e, size_t *out_len) {
  *out_len = e->len;
  return e->bytes;
}

const uint8_t *kiln_cache_entry_key(const kiln_cache_entry_t *e) { return e->key; }

kiln_cache_entry_t *kiln_cache_entry_retain(kiln_cache_entry_t *e) {
  atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
  return e;
}

void kiln_cache_entry_release(kiln_cache_entry_t *e) {
  if (!e) return;
  /* acq_rel: the thread that frees must see every other thread's last use */
  if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1) {
    if (e->user_free) e->user_free(e->user);
    free(e->block);
    free(e);
  }
}

kiln_cache_entry_t *kiln_cache_entry_new(const uint8_t key[KILN_CACHE_KEY_BYTES], size_t len) {
  return kiln_cache_entry_alloc(key, len);
}

kiln_cache_entry_t *kiln_cache_entry_adopt(const uint8_t key[KILN_CACHE_KEY_BYTES], void *block,
                                           uint8_t *bytes, size_t len) {
  kiln_cache_entry_t *e = kiln_cache_entry_alloc(key, 0);
  if (!e) return NULL;
  e->len = len;
  e->bytes = bytes;
  e->block = block;
  return e;
}

uint8_t *kiln_cache_entry_bytes(kiln_cache_entry_t *e) { return e->bytes; }

void *kiln_cache_entry_user(const kiln_cache_entry_t *e) { return e->user; }

bool kiln_cache_entry_set_user(kiln_cache_entry_t *e, void *user, void (*free_fn)(void *)) {
  if (e->user) return false;
  e->user = user;
  e->user_free = free_fn;
  return true;
}

/* --- lists and the index ----------------------------------------------------------------- */

static void list_init(link_t *h) { h->prev = h->next = h; }

static void list_remove(link_t *l) {
  l->prev->next = l->next;
  l->next->prev = l->prev;
  l->prev = l->next = NULL;
}

static void list_push_mru(link_t *h, link_t *l) {
  l->prev = h->prev;
  l->next = h;
  h->prev->next = l;
  h->prev = l;
}

static void list_move_mru(link_t *h, link_t *l) {
  list_remove(l);
  list_push_mru(h, l);
}

static size_t bucket_of(const kiln_cache_t *c, const uint8_t key[KILN_CACHE_KEY_BYTES]) {
  uint64_t h; /* keys are cryptographic hashes: any 8 of their bytes are uniform */
  memcpy(&h, key, sizeof(h));
  return (size_t)h & (c->num_buckets - 1);
}

static node_t *find(const kiln_cache_t *c, const uint8_t key[KILN_CACHE_KEY_BYTES]) {
  for (node_t *n = c->buckets[bucket_of(c, key)]; n; n = n->chain)
    if (!memcmp(n->key, key, KILN_CACHE_KEY_BYTES)) return n;
  return NULL;
}

/* Doubles the table at load 1; if that allocation fails the chains just grow longer. */
static void maybe_grow(kiln_cache_t *c) {
  if (c->num_nodes < c->num_buckets) return;
  size_t nb = c->num_buckets * 2;
  node_t **b = calloc(nb, sizeof(*b));
  if (!b) return;
  for (size_t i = 0; i < c->num_buckets; i++) {
    for (node_t *n = c->buckets[i], *next; n; n = next) {
      next = n->chain;
      uint64_t h;
      memcpy(&h, n->key, sizeof(h));
      n->chain = b[(size_t)h & (nb - 1)];
      b[(size_t)h & (nb - 1)] = n;
    }
  }
  free(c->buckets);
  c->buckets = b;
  c->num_buckets = nb;
}

static node_t *node_add(kiln_cache_t *c, const uint8_t key[KILN_CACHE_KEY_BYTES]) {
  node_t *n = calloc(1, sizeof(*n));
  if (!n) return NULL;
  memcpy(n->key, key, KILN_CACHE_KEY_BYTES);
  maybe_grow(c);
  size_t b = bucket_of(c, key);
  n->chain = c->buckets[b];
  c->buckets[b] = n;
  c->num_nodes++;
  return n;
}

/* Frees the node once nothing refers to it: not in memory, no file, no write running. */
static void node_maybe_free(kiln_cache_t *c, node_t *n) {
  if (n->mem || n->disk != DISK_NONE) return;
  for (node_t **p = &c->buckets[bucket_of(c, n->key)]; *p; p = &(*p)->chain) {
    if (*p == n) {
      *p = n->chain;
      break;
    }
  }
  c->num_nodes--;
  free(n);
}

static void key_hex(const uint8_t key[KILN_CACHE_KEY_BYTES], char out[2 * KILN_CACHE_KEY_BYTES + 1]) {
  kiln_hex(key, KILN_CACHE_KEY_BYTES, out);
}

/* --- memory LRU -------------------------------------------------------------------------- */

static void mem_drop(kiln_cache_t *c, node_t *n) {
  list_remove(&n->mem_link);
  c->st.entries_mem--;
  c->st.bytes_mem -= n->mem->len;
  kiln_cache_entry_release(n->mem);
  n->mem = NULL;
}

/* Takes over the reference e. An entry larger than the whole budget is not kept: keeping
 * it would evict everything else for one artifact. Never frees n itself. */
static void mem_insert(kiln_cache_t *c, node_t *n, kiln_cache_entry_t *e) {
  assert(!n->mem);
  if (e->len > c->max_mem) {
    kiln_cache_entry_release(e);
    return;
  }
  n->mem = e;
  list_push_mru(&c->mem_lru, &n->mem_link);
  c->st.entries_mem++;
  c->st.bytes_mem += e->len;
  while (c->st.bytes_mem > c->max_mem) {
    node_t *lru = KILN_CONTAINER_OF(c->mem_lru.next, node_t, mem_link);
    mem_drop(c, lru);
    c->st.evictions_mem++;
    if (lru != n) node_maybe_free(c, lru);
  }
}

/* --- disk LRU ---------------------------------------------------------------------------- */

static void disk_forget(kiln_cache_t *c, node_t *n) {
  list_remove(&n->disk_link);
  c->st.entries_disk--;
  c->st.bytes_disk -= n->file_bytes;
  n->disk = DISK_NONE;
}

static void disk_unlink(kiln_cache_t *c, node_t *n) {
  /* unlink on the loop: it only drops a name (the blocks are freed by the kernel later) */
  int err = kiln_cache_file_unlink(&c->root, n->key);
  if (err && err != ENOENT) {
    char hex[2 * KILN_CACHE_KEY_BYTES + 1];
    key_hex(n->key, hex);
    KILN_LOG_WARN("cache_unlink_failed", "key=%s error=%d", hex, err);
  }
}

/* n's file is complete; n is already in disk_lru, where its put or the scan placed it. */
static void disk_add(kiln_cache_t *c, node_t *n) {
  n->disk = DISK_PRESENT;
  c->st.entries_disk++;
  c->st.bytes_disk += n->file_bytes;
}

/* Unlinks least recent files until complete files plus writes in flight fit. Writes in
 * flight keep their place by recency (the order of puts, not of landing, which the pool
 * does not keep) but cannot be evicted yet. */
static void disk_evict(kiln_cache_t *c) {
  link_t *l = c->disk_lru.next;
  while (c->st.bytes_disk + c->disk_reserved > c->max_disk && l != &c->disk_lru) {
    node_t *lru = KILN_CONTAINER_OF(l, node_t, disk_link);
    l = l->next;
    if (lru->disk != DISK_PRESENT) continue;
    disk_unlink(c, lru);
    disk_forget(c, lru);
    c->st.evictions_disk++;
    node_maybe_free(c, lru);
  }
}

/* Marks n as just used in both lists; the file's mtime follows at most once a minute. */
static void touch(kiln_cache_t *c, node_t *n) {
  if (n->mem) list_move_mru(&c->mem_lru, &n->mem_link);
  if (n->disk == DISK_NONE) return;
  list_move_mru(&c->disk_lru, &n->disk_link);
  if (n->disk != DISK_PRESENT) return;
  uint64_t now = kiln_now_ns();
  if (now - n->touched_ns < TOUCH_INTERVAL_NS) return;
  kiln_cache_file_touch(&c->root, n->key);
  n->touched_ns = now;
  n->used_ns = wall_ns();
}

/* --- writes on the thread pool ----------------------------------------------------------- */

static void maybe_finish_close(kiln_cache_t *c);

static void write_work(uv_work_t *req) {
  write_job_t *job = KILN_CONTAINER_OF(req, write_job_t, req);
  job->status = kiln_cache_file_write(&job->cache->root, job->entry, job->cache->test_write_errno);
}

static void pump(kiln_cache_t *c);

static void write_done(uv_work_t *req, int uv_status) {
  write_job_t *job = KILN_CONTAINER_OF(req, write_job_t, req);
  kiln_cache_t *c = job->cache;
  node_t *n = job->node;
  kiln_status_t s = job->status;
  if (!s && uv_status) s = KILN_STATUS(KILN_E_UNAVAILABLE, "cache write: %s", uv_strerror(uv_status));
  c->running--;
  c->disk_reserved -= n->file_bytes;
  n->writing = NULL;
  kiln_cache_entry_release(job->entry);
  free(job);
  if (s) {
    char hex[2 * KILN_CACHE_KEY_BYTES + 1], q[512];
    key_hex(n->key, hex);
    KILN_LOG_WARN("cache_write_failed", "key=%s code=%s message=%s memory_only=%d", hex,
                  kiln_code_name(kiln_status_code(s)),
                  kiln_log_quote(q, sizeof(q), kiln_status_message(s)), n->mem != NULL);
    kiln_status_free(s);
    c->st.write_errors++;
    list_remove(&n->disk_link);
    n->disk = DISK_NONE;
    n->doomed = false;
  } else if (n->doomed) {
    disk_unlink(c, n);
    list_remove(&n->disk_link);
    n->disk = DISK_NONE;
    n->doomed = false;
  } else {
    disk_add(c, n);
    n->touched_ns = kiln_now_ns();
    n->used_ns = wall_ns();
    disk_evict(c); /* over budget while only writes in flight were left to evict */
  }
  node_maybe_free(c, n);
  pump(c);
  maybe_finish_close(c);
}

/* Starts queued writes while fewer than kMaxRunningWrites run. */
static void pump(kiln_cache_t *c) {
  while (c->queue_head && c->running < kMaxRunningWrites) {
    write_job_t *job = c->queue_head;
    c->queue_head = job->next;
    if (!c->queue_head) c->queue_tail = NULL;
    c->queued--;
    c->running++;
    int rc = uv_queue_work(c->loop, &job->req, write_work, write_done);
    if (rc) write_done(&job->req, rc); /* only on misuse; fails the job like any write */
  }
}

/* n has just been created with its entry e in hand; queues e's write. */
static void write_queue(kiln_cache_t *c, node_t *n, kiln_cache_entry_t *e) {
  write_job_t *job = calloc(1, sizeof(*job));
  if (!job) {
    c->st.write_errors++;
    KILN_LOG_WARN("cache_write_failed", "reason=out_of_memory memory_only=1");
    return;
  }
  job->cache = c;
  job->node = n;
  job->entry = kiln_cache_entry_retain(e);
  n->writing = job->entry;
  n->disk = DISK_WRITING;
  list_push_mru(&c->disk_lru, &n->disk_link);
  n->file_bytes = KILN_CACHE_HEADER_BYTES + (uint64_t)e->len;
  c->disk_reserved += n->file_bytes;
  disk_evict(c);
  if (c->queue_tail) c->queue_tail->next = job;
  else c->queue_head = job;
  c->queue_tail = job;
  c->queued++;
}

/* --- open, close -------------------------------------------------------------------------- */

typedef struct scan_item {
  node_t *node;
  int64_t mtime_ns;
} scan_item_t;

typedef struct scan_ctx {
  kiln_cache_t *cache;
  scan_item_t *items;
  size_t count, cap;
  bool oom;
} scan_ctx_t;

static void scan_found(const uint8_t key[KILN_CACHE_KEY_BYTES], uint64_t file_bytes, int64_t mtime_ns,
                       void *arg) {
  scan_ctx_t *ctx = arg;
  if (ctx->oom) return;
  if (ctx->count == ctx->cap) {
    size_t cap = ctx->cap ? ctx->cap * 2 : 256;
    scan_item_t *items = realloc(ctx->items, cap * sizeof(*items));
    if (!items) {
      ctx->oom = true;
      return;
    }
    ctx->items = items;
    ctx->cap = cap;
  }
  node_t *n = node_add(ctx->cache, key);
  if (!n) {
    ctx->oom = true;
    return;
  }
  n->file_bytes = file_bytes;
  ctx->items[ctx->count++] = (scan_item_t){n, mtime_ns};
}

static int by_mtime(const void *a, const void *b) {
  int64_t x = ((const scan_item_t *)a)->mtime_ns, y = ((const scan_item_t *)b)->mtime_ns;
  return (x > y) - (x < y);
}

static void destroy(kiln_cache_t *c) {
  for (size_t i = 0; c->buckets && i < c->num_buckets; i++) {
    for (node_t *n = c->buckets[i], *next; n; n = next) {
      next = n->chain;
      assert(!n->writing);
      kiln_cache_entry_release(n->mem);
      free(n);
    }
  }
  free(c->buckets);
  kiln_cache_root_close(&c->root);
  free(c);
}

static kiln_status_t index_files(kiln_cache_t *c) {
  scan_ctx_t ctx = {.cache = c};
  uint64_t corrupt = 0, leftovers = 0;
  uint64_t t0 = kiln_now_ns();
  kiln_status_t s = kiln_cache_file_scan(&c->root, scan_found, &ctx, &corrupt, &leftovers);
  if (!s && ctx.oom) s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cache index: out of memory");
  if (!s) {
    if (ctx.count) qsort(ctx.items, ctx.count, sizeof(*ctx.items), by_mtime);
    uint64_t now = kiln_now_ns();
    for (size_t i = 0; i < ctx.count; i++) {
      ctx.items[i].node->touched_ns = now;
      ctx.items[i].node->used_ns = ctx.items[i].mtime_ns;
      list_push_mru(&c->disk_lru, &ctx.items[i].node->disk_link);
      disk_add(c, ctx.items[i].node);
    }
    c->st.corrupt = corrupt;
    disk_evict(c); /* the budget may have shrunk since the last run */
    KILN_LOG_INFO("cache_open", "dir=%s entries=%llu bytes=%llu corrupt=%llu leftovers=%llu ms=%.1f",
                  c->root.dir, (unsigned long long)c->st.entries_disk, (unsigned long long)c->st.bytes_disk,
                  (unsigned long long)corrupt, (unsigned long long)leftovers,
                  (double)(kiln_now_ns() - t0) / 1e6);
  }
  free(ctx.items);
  return s;
}

kiln_status_t kiln_cache_open(uv_loop_t *loop, const kiln_cache_config_t *cfg,
                              kiln_cache_t **out_cache) {
  if (!loop || !cfg || !cfg->dir || !cfg->dir[0])
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "cache: a loop and a directory are required");
  if (strlen(cfg->dir) > KILN_CACHE_PATH_MAX - 256)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "cache dir path too long");
  kiln_cache_t *c = calloc(1, sizeof(*c));
  if (!c) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cache: out of memory");
  c->loop = loop;
  c->owner = uv_thread_self();
  c->root.dir_fd = c->root.lock_fd = -1;
  c->max_disk = cfg->max_disk_bytes ? cfg->max_disk_bytes : KILN_CACHE_DEFAULT_MAX_DISK_BYTES;
  c->max_mem = cfg->max_mem_bytes ? cfg->max_mem_bytes : KILN_CACHE_DEFAULT_MAX_MEM_BYTES;
  c->test_write_errno = cfg->test_write_errno;
  list_init(&c->mem_lru);
  list_init(&c->disk_lru);
  c->num_buckets = 1024;
  c->buckets = calloc(c->num_buckets, sizeof(*c->buckets));
  kiln_status_t s = KILN_OK;
  if (!c->buckets) s = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cache: out of memory");
  if (!s) s = kiln_cache_root_open(cfg->dir, &c->root);
  if (!s) s = index_files(c);
  if (s) {
    destroy(c);
    return s;
  }
  *out_cache = c;
  return KILN_OK;
}

static void close_barrier_work(uv_work_t *req) {}

static void close_barrier_done(uv_work_t *req, int status) {
  kiln_cache_t *c = KILN_CONTAINER_OF(req, kiln_cache_t, close_req);
  c->barrier_pending = false;
  maybe_finish_close(c);
}

static void maybe_finish_close(kiln_cache_t *c) {
  if (!c->closing || c->barrier_pending || c->queued || c->running) return;
  kiln_cache_close_cb cb = c->close_cb;
  void *arg = c->close_arg;
  destroy(c);
  if (cb) cb(arg);
}

void kiln_cache_close(kiln_cache_t *c, kiln_cache_close_cb cb, void *arg) {
  assert(!c->closing);
  c->closing = true;
  c->close_cb = cb;
  c->close_arg = arg;
  /* A no-op on the pool so that cb never runs inside this call, also with no writes in
   * flight, as uv_close behaves. */
  c->barrier_pending = true;
  if (uv_queue_work(c->loop, &c->close_req, close_barrier_work, close_barrier_done))
    c->barrier_pending = false; /* cannot happen with both callbacks given */
  maybe_finish_close(c);
}

/* --- get, put, remove, stats ------------------------------------------------------------- */

static bool on_owner_thread(const kiln_cache_t *c) {
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &c->owner);
}

/* The file behind n failed to read: a bad file is deleted, a vanished one forgotten, an
 * I/O error (too many open files) leaves the entry for a later try. */
static void disk_read_failed(kiln_cache_t *c, node_t *n, kiln_status_t s, bool corrupt) {
  char hex[2 * KILN_CACHE_KEY_BYTES + 1], q[512];
  key_hex(n->key, hex);
  KILN_LOG_WARN(corrupt ? "cache_corrupt" : "cache_read_failed", "key=%s message=%s", hex,
                kiln_log_quote(q, sizeof(q), kiln_status_message(s)));
  if (corrupt) {
    c->st.corrupt++;
    disk_unlink(c, n);
    disk_forget(c, n);
  } else if (kiln_status_code(s) == KILN_E_NOT_FOUND) {
    disk_forget(c, n);
  }
  kiln_status_free(s);
  node_maybe_free(c, n);
}

kiln_cache_entry_t *kiln_cache_get(kiln_cache_t *c, const uint8_t key[KILN_CACHE_KEY_BYTES]) {
  assert(on_owner_thread(c) && !c->closing);
  node_t *n = find(c, key);
  if (n && !n->mem && n->writing && !n->doomed) {
    /* evicted from memory while its write runs: the job still holds the bytes */
    kiln_cache_entry_t *e = kiln_cache_entry_retain(n->writing);
    mem_insert(c, n, kiln_cache_entry_retain(e));
    c->st.hits_mem++;
    touch(c, n);
    return e;
  }
  if (n && n->mem) {
    kiln_cache_entry_t *e = kiln_cache_entry_retain(n->mem);
    c->st.hits_mem++;
    touch(c, n);
    return e;
  }
  if (n && n->disk == DISK_PRESENT) {
    kiln_cache_entry_t *e = NULL;
    bool corrupt = false;
    kiln_status_t s = kiln_cache_file_read(&c->root, key, &e, &corrupt);
    if (!s) {
      c->st.hits_disk++;
      n->touched_ns = kiln_now_ns(); /* the read set the mtime */
      n->used_ns = wall_ns();
      list_move_mru(&c->disk_lru, &n->disk_link);
      mem_insert(c, n, kiln_cache_entry_retain(e));
      return e;
    }
    disk_read_failed(c, n, s, corrupt);
  }
  c->st.misses++;
  return NULL;
}

kiln_status_t kiln_cache_put_entry(kiln_cache_t *c, kiln_cache_entry_t *e) {
  assert(on_owner_thread(c) && !c->closing);
  const uint8_t *key = e->key;
  size_t len = e->len;
  node_t *n = find(c, key);
  if (n) {
    /* content-addressed: the same key means the same bytes, so nothing is rewritten; a
     * different length means the caller's key does not cover what it stores */
    uint64_t have = n->mem ? n->mem->len : n->writing ? n->writing->len
                                                     : n->file_bytes - KILN_CACHE_HEADER_BYTES;
    if (have != len)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "cache put: key stored with %llu bytes, given %zu",
                         (unsigned long long)have, len);
    n->doomed = false;
    if (!n->mem) mem_insert(c, n, kiln_cache_entry_retain(n->writing ? n->writing : e));
    touch(c, n);
    return KILN_OK;
  }
  bool fits_mem = len <= c->max_mem;
  bool fits_disk = KILN_CACHE_HEADER_BYTES + (uint64_t)len <= c->max_disk;
  if (!fits_mem && !fits_disk)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cache put: %zu bytes exceed both budgets", len);
  n = node_add(c, key);
  if (!n) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cache put: out of memory for %zu bytes", len);
  n->used_ns = wall_ns();
  if (fits_disk) write_queue(c, n, e);
  mem_insert(c, n, kiln_cache_entry_retain(e));
  node_maybe_free(c, n); /* only when the write could not even be queued and e was too big */
  pump(c);
  return KILN_OK;
}

kiln_status_t kiln_cache_put(kiln_cache_t *c, const uint8_t key[KILN_CACHE_KEY_BYTES],
                             const uint8_t *bytes, size_t len) {
  kiln_cache_entry_t *e = kiln_cache_entry_alloc(key, len);
  if (!e) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cache put: out of memory for %zu bytes", len);
  memcpy(e->data, bytes, len);
  kiln_status_t st = kiln_cache_put_entry(c, e);
  kiln_cache_entry_release(e);
  return st;
}

void kiln_cache_remove(kiln_cache_t *c, const uint8_t key[KILN_CACHE_KEY_BYTES]) {
  assert(on_owner_thread(c) && !c->closing);
  node_t *n = find(c, key);
  if (!n) return;
  if (n->mem) mem_drop(c, n);
  if (n->disk == DISK_PRESENT) {
    disk_unlink(c, n);
    disk_forget(c, n);
  } else if (n->disk == DISK_WRITING) {
    n->doomed = true;
  }
  node_maybe_free(c, n);
}

kiln_status_t kiln_cache_items(const kiln_cache_t *c, kiln_cache_item_t **out_items, size_t *out_count) {
  assert(on_owner_thread(c));
  kiln_cache_item_t *items = malloc((c->num_nodes ? c->num_nodes : 1) * sizeof(*items));
  if (!items) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "cache items: out of memory");
  size_t k = 0;
  for (size_t i = 0; i < c->num_buckets; i++)
    for (const node_t *n = c->buckets[i]; n && k < c->num_nodes; n = n->chain) {
      if (n->doomed) continue; /* removed while its write runs: gone for every caller */
      kiln_cache_item_t *it = &items[k++];
      memcpy(it->key, n->key, KILN_CACHE_KEY_BYTES);
      it->file_bytes = n->disk != DISK_NONE ? n->file_bytes : 0;
      it->mem_bytes = n->mem ? n->mem->len : 0;
      it->used_ns = n->used_ns;
      it->on_disk = n->disk == DISK_PRESENT;
      it->writing = n->disk == DISK_WRITING;
    }
  *out_items = items;
  *out_count = k;
  return KILN_OK;
}

void kiln_cache_stats(const kiln_cache_t *c, kiln_cache_stats_t *out_stats) {
  *out_stats = c->st;
  out_stats->writes_pending = c->queued + c->running;
}
