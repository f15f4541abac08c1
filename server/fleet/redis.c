/* One connection to Redis on the loop: connect, AUTH, SELECT, deadlines, reconnects, bounds
 * (redis.h says what and why). hiredis 0.14 has no command timeouts, no connect timeout
 * and no bound on a reply's size, and resolves host names with a blocking getaddrinfo, so
 * this file adds each of them around it: names are resolved with uv_getaddrinfo (the thread
 * pool) and hiredis is handed an address; one timer watches the oldest command's deadline
 * (replies come in order, so a late oldest one means Redis stopped answering); a check
 * handle after every poll phase drops a connection whose unparsed input passed the bound, and
 * reads a large reply on: a GETRANGE's bulk reply is read once, into the buffer its caller
 * keeps (take_bulk), its length checked strictly on the way (report_progress), and where a
 * spare receive buffer is ready that buffer is the spare, its pages touched on the thread pool
 * beforehand (spare_adopt). */
#include "server/fleet/redis.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/sds.h>

#include "base/log.h"
#include "base/util.h"

#define MAX_ARRAY 4096 /* elements of one reply array: no command of ours gets more */
#define BACKOFF_MIN_MS 100
#define READER_KEEP (4u << 20) /* reader buffer kept between replies */
#define BACKOFF_MAX_MS 5000

typedef enum { ST_DOWN, ST_RESOLVING, ST_CONNECTING, ST_UP } state_t;

typedef struct op {
  struct op *prev, *next;
  kiln_redis_t *r;
  kiln_redis_cb cb; /* NULL: a handshake command (AUTH, SELECT, PING) */
  kiln_redis_progress_cb progress; /* NULL, or told of its bulk reply's bytes as they arrive */
  bool reserved;    /* progress: the reader's buffer has room for its whole bulk reply */
  char *bulk_block; /* progress: its bulk reply's buffer, taken from the reader (take_bulk) */
  char *bulk_str;   /* ... the reply's bytes in it */
  size_t bulk_len;
  void *arg;
  uint64_t deadline_ns;
  int step; /* handshake: 1 AUTH, 2 SELECT, 3 PING */
} op_t;

struct kiln_redis {
  uv_loop_t *loop;
  char what[32];
  char url[600]; /* without secrets */
  char host[512];
  int port, db;
  bool is_unix;
  char user[256], pass[512];
  bool have_auth, have_user;
  uint32_t timeout_ms;
  uint64_t max_reply;
  uint64_t spare_max;          /* 0: no spare receive buffer (redis.h) */
  sds spare;                   /* the spare, ready: empty, every page touched; NULL while none */
  struct spare_job *spare_job; /* the one being made on the thread pool (then spare is NULL) */
  size_t spare_want;           /* the room the next spare is made with (0: no large bulk seen) */
  void (*on_up)(void *arg);
  void *up_arg;
  state_t state;
  redisAsyncContext *ac;
  uint64_t connect_deadline_ns;
  uv_timer_t tick;  /* deadlines, while anything is pending */
  uv_timer_t retry; /* the next connect attempt */
  uv_check_t check; /* the bound on buffered reply bytes */
  uv_getaddrinfo_t gai;
  bool gai_busy;
  bool destroying;
  uint32_t backoff_ms;
  bool logged_down; /* the current outage has been logged */
  op_t *head, *tail;
  uint32_t npending; /* commands sent whose reply has not come */
  uint64_t reply_bytes; /* what the reply being parsed has cost so far (the create_* hooks) */
  redisReplyObjectFunctions fns;
  kiln_redis_stats_t st;
  int handles_open;
};

static void connect_now(kiln_redis_t *r);
static void spare_make(kiln_redis_t *r, sds old);

/* Frees r once kiln_redis_destroy has run and nothing that points at it is left: its three
 * handles closed, no name resolution and no spare being made on the thread pool. */
static void free_if_done(kiln_redis_t *r) {
  if (!r->destroying || r->handles_open != 0 || r->gai_busy || r->spare_job) return;
  explicit_bzero(r->pass, sizeof(r->pass));
  free(r);
}

/* The AUTH file (redis_conf.c): PASSWORD or USER PASSWORD, private to kilnd's user. */
static kiln_status_t read_auth(kiln_redis_t *r, const char *path) {
  KILN_RETURN_IF_ERROR(kiln_redis_auth_read(path, r->user, sizeof(r->user), r->pass, sizeof(r->pass)));
  r->have_user = r->user[0] != 0;
  r->have_auth = true;
  return KILN_OK;
}

/* --- the operations list ------------------------------------------------------------------ */

static void op_link(kiln_redis_t *r, op_t *o) {
  o->prev = r->tail;
  o->next = NULL;
  if (r->tail) r->tail->next = o;
  else r->head = o;
  r->tail = o;
  r->npending++;
}

static void op_unlink(kiln_redis_t *r, op_t *o) {
  if (o->prev) o->prev->next = o->next;
  else r->head = o->next;
  if (o->next) o->next->prev = o->prev;
  else r->tail = o->prev;
  r->npending--;
}

/* --- connection state --------------------------------------------------------------------- */

static void on_retry(uv_timer_t *t) { connect_now(t->data); }

static void schedule_retry(kiln_redis_t *r) {
  if (r->destroying) return;
  r->state = ST_DOWN;
  r->st.up = false;
  uv_timer_start(&r->retry, on_retry, r->backoff_ms, 0);
  r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
}

static void went_down(kiln_redis_t *r, const char *why) {
  bool was_up = r->state == ST_UP;
  if (was_up) r->st.disconnects++;
  if (was_up || !r->logged_down) {
    char q[300];
    KILN_LOG_WARN("redis_down", "what=%s url=%s reason=%s action=%s", r->what, r->url,
                  kiln_log_quote(q, sizeof(q), why),
                  was_up ? "local_only_until_back" : "local_only_retrying");
    r->logged_down = true;
  }
}

/* Ends the connection this side (a deadline passed, a reply too large, AUTH refused): every
 * pending command fails (hiredis calls them with NULL) and a new attempt is scheduled. */
static void drop(kiln_redis_t *r, const char *why) {
  redisAsyncContext *ac = r->ac;
  went_down(r, why);
  r->ac = NULL;
  schedule_retry(r);
  if (ac) redisAsyncFree(ac);
}

/* A reply whose bytes were taken from the reader (take_bulk), during its callback: the reply
 * shows them, and kiln_redis_take_str hands over their buffer. One at a time: callbacks run on
 * the loop thread, one after another. */
static _Thread_local struct {
  redisReply *reply;
  char *block;
  char *own; /* the reply's own (empty) string, given back before hiredis frees the reply */
} lent;

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata) {
  op_t *o = privdata;
  kiln_redis_t *r = o->r;
  op_unlink(r, o);
  redisReply *rep = reply;
  if (rep && rep->type == REDIS_REPLY_ERROR) r->st.errors++;
  if (r->destroying) {
    free(o->bulk_block);
    free(o);
    return;
  }
  if (o->cb) {
    bool lending = o->bulk_block && rep && rep->type == REDIS_REPLY_STRING;
    if (lending) {
      lent.reply = rep;
      lent.block = o->bulk_block;
      lent.own = rep->str;
      rep->str = o->bulk_str;
      rep->len = o->bulk_len;
      o->bulk_block = NULL;
    }
    o->cb(o->arg, rep);
    if (lending && lent.reply == rep) { /* not taken */
      free(lent.block);
      lent.reply->str = lent.own;
      lent.reply->len = 0;
      lent.reply = NULL;
    }
    free(o->bulk_block);
    free(o);
    return;
  }
  /* The handshake: AUTH, SELECT, then PING; the PING's PONG means up. */
  int step = o->step;
  free(o);
  if (!rep || ac != r->ac) return; /* this connection is already gone */
  if (rep->type == REDIS_REPLY_ERROR) {
    char why[300];
    snprintf(why, sizeof(why), "%s refused: %.*s", step == 1 ? "AUTH" : step == 2 ? "SELECT" : "PING",
             (int)(rep->len > 200 ? 200 : rep->len), rep->str);
    if (step == 1) {
      r->st.auth_failures++;
      r->backoff_ms = BACKOFF_MAX_MS; /* a wrong password does not get right by retrying fast */
    }
    drop(r, why);
    return;
  }
  if (step == 3) {
    r->state = ST_UP;
    r->st.up = true;
    r->st.connects++;
    r->backoff_ms = BACKOFF_MIN_MS;
    KILN_LOG_INFO("redis_up", "what=%s url=%s", r->what, r->url);
    r->logged_down = false;
    if (r->spare_want && !r->spare && !r->spare_job) spare_make(r, NULL); /* sized before an outage */
    if (r->on_up) r->on_up(r->up_arg);
  }
}

static void on_connect(const redisAsyncContext *ac, int status) {
  kiln_redis_t *r = ac->data;
  if (r->ac != ac || status == REDIS_OK) return;
  /* hiredis frees the context after this callback */
  r->ac = NULL;
  went_down(r, ac->errstr[0] ? ac->errstr : "connect failed");
  schedule_retry(r);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  kiln_redis_t *r = ac->data;
  if (r->ac != ac) return; /* we dropped it ourselves */
  r->ac = NULL;
  went_down(r, status == REDIS_OK ? "closed" : ac->errstr[0] ? ac->errstr : "connection lost");
  schedule_retry(r);
}

/* The reply constructors hiredis's reader calls (its default table is static in hiredis.c,
 * so ours wrap the pointers taken from the first context's reader). hiredis frees consumed
 * input as it builds the reply tree, so the bound on buffered input (over_bound) does not bound
 * the tree: ours refuse, before anything is allocated, any reply that arrives while no command
 * of ours waits for one (hiredis 0.14 asserts, aborting kilnd, on such a spontaneous reply), an
 * array inside an array (no command of ours gets one), an array of more than MAX_ARRAY
 * elements, and a reply whose strings plus OBJECT_COST per object pass max_reply in all. A
 * refusal makes the reader fail ("out of memory"), and hiredis drops the connection like any
 * other broken one. */
#define OBJECT_COST 64 /* a redisReply and its allocation overhead, rounded up */
static redisReplyObjectFunctions defaults;

static bool expected(const redisReadTask *task) {
  const kiln_redis_t *r = task->privdata;
  return task->parent != NULL || (r && r->npending > 0);
}

/* Charges one object of `bytes` to the reply it belongs to; a root object starts a new reply. */
static bool afford(const redisReadTask *task, uint64_t bytes) {
  kiln_redis_t *r = task->privdata;
  if (!r) return expected(task);
  if (!expected(task)) return false;
  if (task->parent == NULL) r->reply_bytes = 0;
  r->reply_bytes += OBJECT_COST + bytes;
  return r->reply_bytes <= r->max_reply;
}

/* A bulk reply to a command with a progress callback (GETRANGE) is checked here: its bytes
 * must end with CRLF (hiredis 0.14 skips the two bytes unread, so a wrong length would pass).
 * One of TAKE_MIN bytes or more is not copied: the reader's buffer, where on_check read it
 * once from the socket (report_progress made room for all of it), becomes the reply's
 * (take_bulk). */
#define TAKE_MIN (64u << 10)
static void *take_bulk(const redisReadTask *task, kiln_redis_t *r, char *str, size_t len);

static void bad_reply(kiln_redis_t *r, const char *why) {
  r->st.errors++;
  KILN_LOG_WARN("redis_bad_reply", "what=%s url=%s reason=\"%s\" action=dropped", r->what, r->url, why);
}

static void *create_string(const redisReadTask *task, char *str, size_t len) {
  kiln_redis_t *r = task->privdata;
  if (!afford(task, len)) {
    if (r && len > r->max_reply) bad_reply(r, "a reply longer than the bound");
    return NULL;
  }
  if (r && task->parent == NULL && task->type == REDIS_REPLY_STRING && r->head && r->head->progress && r->ac) {
    redisReader *rd = r->ac->c.reader;
    size_t at = (size_t)(str - rd->buf);
    if (at + len + 2 > rd->len || str[len] != '\r' || str[len + 1] != '\n') {
      bad_reply(r, "a bulk reply whose length is wrong (no CRLF after it)");
      return NULL; /* the reader fails: hiredis drops the connection */
    }
    if (len >= TAKE_MIN) return take_bulk(task, r, str, len);
  }
  return defaults.createString(task, str, len);
}

static void *create_array(const redisReadTask *task, int elements) {
  if (task->parent != NULL || elements < 0 || elements > MAX_ARRAY) return NULL;
  return afford(task, (uint64_t)elements * sizeof(void *)) ? defaults.createArray(task, elements) : NULL;
}

static void *create_integer(const redisReadTask *task, long long v) {
  return afford(task, 0) ? defaults.createInteger(task, v) : NULL;
}

/* hiredis 0.14 reads any length that does not parse, or is negative, as nil: for the bulk
 * reply of a command with a progress callback, only "$-1" is (the reader's position is still
 * at the length here), anything else fails the reader and the connection. */
static void *create_nil(const redisReadTask *task) {
  kiln_redis_t *r = task->privdata;
  if (r && task->parent == NULL && task->type == REDIS_REPLY_STRING && r->head && r->head->progress && r->ac) {
    redisReader *rd = r->ac->c.reader;
    if (rd->len - rd->pos < 4 || memcmp(rd->buf + rd->pos, "-1\r\n", 4) != 0) {
      bad_reply(r, "a bulk reply whose length does not parse or is negative");
      return NULL;
    }
  }
  return afford(task, 0) ? defaults.createNil(task) : NULL;
}

/* The allocation an sds string lives in (sds.h: its header precedes it). */
static char *sds_block(sds s) {
  switch ((unsigned char)s[-1] & SDS_TYPE_MASK) {
  case SDS_TYPE_5: return s - sizeof(struct sdshdr5);
  case SDS_TYPE_8: return s - sizeof(struct sdshdr8);
  case SDS_TYPE_16: return s - sizeof(struct sdshdr16);
  case SDS_TYPE_32: return s - sizeof(struct sdshdr32);
  default: return s - sizeof(struct sdshdr64);
  }
}

/* The head command's whole bulk reply, str[0, len) in the reader's buffer followed by CRLF
 * (checked): that buffer becomes the command's (bulk_block, freed with free(): hiredis 0.14's
 * sds allocates with malloc), the reader gets a new one holding what follows the reply, and
 * hiredis gets an empty string reply in its place, which on_reply swaps for these bytes
 * (lend). hiredis 0.14's processBulkItem adds the bulk's size to the reader's position right
 * after this call returns, and nothing else reads the buffer in between: the position is set
 * so that the sum is 0, the start of the new buffer. */
#if HIREDIS_MAJOR != 0 || HIREDIS_MINOR != 14
#error "take_bulk relies on hiredis 0.14's reader (read.c processBulkItem): check it against this version"
#endif
static void *take_bulk(const redisReadTask *task, kiln_redis_t *r, char *str, size_t len) {
  redisReader *rd = r->ac->c.reader;
  op_t *o = r->head;
  size_t end = (size_t)(str - rd->buf) + len + 2, bulk = end - rd->pos;
  sds rest = sdsnewlen(rd->buf + end, rd->len - end);
  void *reply = rest ? defaults.createString(task, "", 0) : NULL;
  if (!reply || o->bulk_block) {
    if (reply) defaults.freeObject(reply);
    sdsfree(rest);
    return NULL;
  }
  char *block = sds_block(rd->buf);
  size_t off = (size_t)(str - block);
  rd->buf = rest;
  rd->len = sdslen(rest);
  rd->pos = (size_t)0 - bulk; /* processBulkItem's r->pos += bytelen makes it 0 */
  char *fit = realloc(block, off + len + 1); /* the room report_progress made past the reply */
  if (fit) block = fit;
  block[off + len] = 0;
  r->st.taken++;
  o->bulk_block = block;
  o->bulk_str = block + off;
  o->bulk_len = len;
  return reply;
}

static bool queue_handshake(kiln_redis_t *r, int step, int argc, const char **argv) {
  op_t *o = calloc(1, sizeof(*o));
  if (!o) return false;
  o->r = r;
  o->step = step;
  o->deadline_ns = r->connect_deadline_ns;
  op_link(r, o);
  if (redisAsyncCommandArgv(r->ac, on_reply, o, argc, argv, NULL) != REDIS_OK) {
    op_unlink(r, o);
    free(o);
    return false;
  }
  return true;
}

static void start_tick(kiln_redis_t *r);

static void connect_to(kiln_redis_t *r, const char *addr) {
  redisAsyncContext *ac = r->is_unix ? redisAsyncConnectUnix(r->host) : redisAsyncConnect(addr, r->port);
  if (!ac || ac->err) {
    went_down(r, ac ? ac->errstr : "out of memory");
    if (ac) redisAsyncFree(ac);
    schedule_retry(r);
    return;
  }
  ac->data = r;
  if (redisLibuvAttach(ac, r->loop) != REDIS_OK) {
    redisAsyncFree(ac);
    went_down(r, "attaching to the loop failed");
    schedule_retry(r);
    return;
  }
  /* Bounded and expected replies only (see create_string). */
  if (!defaults.createString) defaults = *ac->c.reader->fn;
  r->fns = defaults;
  r->fns.createString = create_string;
  r->fns.createArray = create_array;
  r->fns.createInteger = create_integer;
  r->fns.createNil = create_nil;
  ac->c.reader->fn = &r->fns;
  ac->c.reader->privdata = r;
  /* Keep the reader's buffer between large replies (hiredis frees one over 16 KiB after each
   * reply, so every 1 MiB entry would grow it again through reallocs and page faults). */
  ac->c.reader->maxbuf = READER_KEEP;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  r->ac = ac;
  r->state = ST_CONNECTING;
  r->connect_deadline_ns = kiln_now_ns() + (uint64_t)r->timeout_ms * 1000000ull;
  bool ok = true;
  if (r->have_auth) {
    const char *a3[] = {"AUTH", r->user, r->pass};
    const char *a2[] = {"AUTH", r->pass};
    ok = r->have_user ? queue_handshake(r, 1, 3, a3) : queue_handshake(r, 1, 2, a2);
  }
  char dbs[16];
  snprintf(dbs, sizeof(dbs), "%d", r->db);
  const char *sel[] = {"SELECT", dbs};
  if (ok && r->db) ok = queue_handshake(r, 2, 2, sel);
  const char *ping[] = {"PING"};
  if (ok) ok = queue_handshake(r, 3, 1, ping);
  if (!ok) {
    drop(r, "out of memory");
    return;
  }
  start_tick(r);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  kiln_redis_t *r = req->data;
  r->gai_busy = false;
  if (r->destroying) {
    uv_freeaddrinfo(res);
    free_if_done(r);
    return;
  }
  char addr[INET6_ADDRSTRLEN] = "";
  for (struct addrinfo *a = status == 0 ? res : NULL; a && !addr[0]; a = a->ai_next) {
    if (a->ai_family == AF_INET)
      inet_ntop(AF_INET, &((struct sockaddr_in *)a->ai_addr)->sin_addr, addr, sizeof(addr));
    else if (a->ai_family == AF_INET6)
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *)a->ai_addr)->sin6_addr, addr, sizeof(addr));
  }
  uv_freeaddrinfo(res);
  if (!addr[0]) {
    char why[300];
    snprintf(why, sizeof(why), "cannot resolve %.200s: %s", r->host, status ? uv_strerror(status) : "no address");
    went_down(r, why);
    schedule_retry(r);
    return;
  }
  connect_to(r, addr);
}

static void connect_now(kiln_redis_t *r) {
  if (r->destroying || r->ac || r->gai_busy) return;
  if (r->is_unix) {
    connect_to(r, NULL);
    return;
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
  r->state = ST_RESOLVING;
  r->gai.data = r;
  if (uv_getaddrinfo(r->loop, &r->gai, on_resolved, r->host, NULL, &hints) != 0) {
    went_down(r, "uv_getaddrinfo failed");
    schedule_retry(r);
    return;
  }
  r->gai_busy = true;
}

/* --- deadlines and bounds ----------------------------------------------------------------- */

static void on_tick(uv_timer_t *t) {
  kiln_redis_t *r = t->data;
  uint64_t now = kiln_now_ns();
  if (r->ac && r->state == ST_CONNECTING && now > r->connect_deadline_ns) {
    r->st.timeouts++;
    drop(r, "connect or handshake timed out");
  } else if (r->ac && r->head && now > r->head->deadline_ns) {
    r->st.timeouts++;
    drop(r, "a command timed out");
  }
  if (!r->ac || !r->head) uv_timer_stop(&r->tick);
}

static void start_tick(kiln_redis_t *r) {
  if (uv_is_active((uv_handle_t *)&r->tick)) return;
  uint64_t every = r->timeout_ms / 4 ? r->timeout_ms / 4 : 1;
  uv_timer_start(&r->tick, on_tick, every, every);
}

static bool over_bound(kiln_redis_t *r) {
  if (!r->ac || !r->ac->c.reader || r->ac->c.reader->len <= r->max_reply) return false;
  char why[120];
  snprintf(why, sizeof(why), "a reply passed %llu bytes", (unsigned long long)r->max_reply);
  r->st.errors++;
  drop(r, why);
  return true;
}

/* --- the spare receive buffer ------------------------------------------------------------ */

/* A large bulk reply read into a buffer grown for it (sdsMakeRoomFor: a fresh malloc, over
 * 128 KiB a fresh mmap) has the kernel fault in a fresh page for every 4 KiB it copies from
 * the socket, on the loop thread (bench/results/fleet.md). The spare is such a buffer made
 * beforehand on libuv's thread pool with every page touched there: one block at a time, ready
 * (r->spare) or being made (r->spare_job), never both, of at most spare_max bytes; it is what
 * the tier holds beside its bounded reply (max_reply) and its bounded queue of puts. It is an
 * sds allocation like hiredis's own (one malloc: header, bytes, NUL), so the reader grows or
 * frees it as its own and take_bulk hands it on to be freed with free(). */
#define SPARE_ROUND (64u << 10)
#define PAGE_STEP 4096u /* touching one byte every 4 KiB touches every page, of any size */

typedef struct spare_job {
  uv_work_t req;
  kiln_redis_t *r;
  sds old;     /* a spare of the wrong size, freed here off the loop first (or NULL) */
  sds made;    /* the new spare (NULL: out of memory) */
  size_t room; /* its room, past the header */
} spare_job_t;

static void spare_work(uv_work_t *req) {
  spare_job_t *j = KILN_CONTAINER_OF(req, spare_job_t, req);
  sdsfree(j->old);
  j->old = NULL;
  struct sdshdr32 *h = malloc(sizeof(*h) + j->room + 1); /* room <= KILN_REDIS_SPARE_MAX < 4 GiB */
  if (!h) return;
  h->len = 0;
  h->alloc = (uint32_t)j->room;
  h->flags = SDS_TYPE_32;
  volatile char *b = h->buf;
  for (size_t at = 0; at < j->room; at += PAGE_STEP) b[at] = 0;
  b[j->room] = 0;
  j->made = h->buf;
}

static void spare_done(uv_work_t *req, int status) {
  spare_job_t *j = KILN_CONTAINER_OF(req, spare_job_t, req);
  kiln_redis_t *r = j->r;
  r->spare_job = NULL;
  sdsfree(j->old); /* not run: cancelled at kiln_redis_destroy */
  if (status != 0 || r->destroying || !j->made) {
    sdsfree(j->made);
    r->st.spare_bytes = 0;
  } else {
    r->spare = j->made;
  }
  free(j);
  free_if_done(r);
}

/* Starts making a spare of spare_want bytes on the pool; `old` (the spare that was ready, of
 * the wrong size, or NULL) is freed there first, so the tier holds one block at a time. */
static void spare_make(kiln_redis_t *r, sds old) {
  spare_job_t *j = r->destroying || r->spare_job ? NULL : calloc(1, sizeof(*j));
  if (j) {
    j->r = r;
    j->old = old;
    j->room = r->spare_want;
    if (uv_queue_work(r->loop, &j->req, spare_work, spare_done) == 0) {
      r->spare_job = j;
      r->st.spare_bytes = j->room;
      return;
    }
    free(j);
  }
  sdsfree(old); /* out of memory, or kilnd is exiting: on the loop, as without a spare */
  r->st.spare_bytes = 0;
}

/* A large bulk reply starts, needing `whole` bytes of room from the reader's position (its
 * length line, its bytes, CRLF), and the reader's buffer would have to grow for it. When the
 * spare has that room (and not more than twice it: a spare much too large is made again, not
 * adopted and mostly given back), the reader's unparsed bytes (the length line and the first
 * bytes) move into it, it becomes the reader's buffer, and the next spare is started. hiredis
 * 0.14 keeps no pointer into its buffer between reads, only the position (it moves the bytes
 * to the start itself, redisReaderGetReply's sdsrange), so the position becomes 0. Otherwise
 * false: the caller grows the buffer as before; a spare of the wrong size is made again for
 * this size. Never waits: a spare still being made is not there. */
static bool spare_adopt(kiln_redis_t *r, redisReader *rd, size_t whole) {
  size_t n = rd->len - rd->pos;
  if (!r->spare_max || sdsavail(rd->buf) + n >= whole) return false;
  size_t need = whole > n ? whole : n;
  bool sized = need <= r->spare_max;
  if (sized) {
    size_t want = need + need / 16;
    want = (want + SPARE_ROUND - 1) / SPARE_ROUND * SPARE_ROUND;
    r->spare_want = want < r->spare_max ? want : (size_t)r->spare_max;
  }
  sds s = r->spare;
  if (!s || sdsalloc(s) < need || sdsalloc(s) / 2 > need) {
    r->st.spare_missed++;
    if (sized && !r->spare_job) {
      r->spare = NULL;
      spare_make(r, s); /* the first, or one of the right size in place of this one */
    }
    return false;
  }
  memcpy(s, rd->buf + rd->pos, n);
  sdssetlen(s, n);
  s[n] = 0;
  sdsfree(rd->buf);
  rd->buf = s;
  rd->len = n;
  rd->pos = 0;
  r->spare = NULL;
  r->st.spare_used++;
  spare_make(r, NULL);
  return true;
}

/* The head command's bulk-string reply, while hiredis 0.14's reader waits for the rest of it:
 * its root task is a string whose type byte is consumed (pos is past the '$'), and the buffer
 * from pos holds "<length>\r\n" and the payload so far (read.c processBulkItem: the reader
 * leaves the buffer as it is until the whole bulk is there). The head of our list is the
 * command whose reply this is: replies come in order. The length is parsed here, strictly
 * (digits, at most max_reply, or -1 for nil; anything else drops the connection: false), the
 * reader's buffer is given room for the whole reply at once (the spare, or grown: so the rest
 * is read straight into the buffer take_bulk hands on, with no realloc on the way), and the
 * command is told of its bytes so far. */
#define LENGTH_DIGITS 19 /* at most: 10^19 - 1 fits in 64 bits */
static bool report_progress(kiln_redis_t *r) {
  redisReader *rd = r->ac ? r->ac->c.reader : NULL;
  op_t *o = r->head;
  if (!rd || rd->err || !o || !o->progress || rd->ridx != 0 || rd->rstack[0].type != REDIS_REPLY_STRING)
    return true;
  const char *p = rd->buf + rd->pos;
  size_t n = rd->len - rd->pos, i = 0;
  uint64_t total = 0;
  if (n > 0 && p[0] == '-') { /* nil ("-1\r\n": hiredis makes it), or on its way to it */
    if (memcmp(p, "-1\r\n", n < 4 ? n : 4) == 0) return true;
    bad_reply(r, "a bulk reply of a negative length");
    drop(r, "a malformed reply");
    return false;
  }
  for (; i < n && i < LENGTH_DIGITS && p[i] >= '0' && p[i] <= '9'; i++) total = total * 10 + (uint64_t)(p[i] - '0');
  if (i == n) return true; /* more digits may come */
  if (i == 0 || p[i] != '\r' || total > r->max_reply) {
    bad_reply(r, i > 0 && p[i] == '\r' ? "a bulk reply longer than the bound" : "a bulk reply whose length does not parse");
    drop(r, "a malformed reply");
    return false;
  }
  if (i + 2 > n) return true; /* the LF */
  if (p[i + 1] != '\n') {
    bad_reply(r, "a bulk reply whose length does not parse");
    drop(r, "a malformed reply");
    return false;
  }
  if (!o->reserved && total >= TAKE_MIN) {
    size_t whole = i + 2 + (size_t)total + 2;
    if (whole > n && !spare_adopt(r, rd, whole)) {
      sds buf = sdsMakeRoomFor(rd->buf, whole - n);
      if (buf) rd->buf = buf;
    }
    o->reserved = true;
  }
  p = rd->buf + rd->pos;
  size_t have = n - i - 2 < total ? n - i - 2 : (size_t)total;
  o->progress(o->arg, (const uint8_t *)p + i + 2, have, (size_t)total);
  return true;
}

/* After each poll phase: the bound on buffered input, then the rest of what the socket holds.
 * hiredis 0.14 reads 16 KiB per read(2) (a 1 MiB entry would take 64 reads and 64 turns of
 * the loop); while a reply is incomplete, what waits in the socket is read here straight into
 * the reader's buffer (up to READ_CHUNK a read; the reader's redisReaderFeed would copy it
 * there; for a progress command's bulk reply that buffer is the one take_bulk hands on), the
 * head command is told of its bytes so far (report_progress), and
 * redisAsyncHandleRead then parses it and answers (its own read finds the socket empty or
 * takes the tail). At most 4 MiB per turn, so one connection cannot hold the loop. */
#define READ_CHUNK (1u << 20)
#define READ_TURN (4u << 20)
static void on_check(uv_check_t *h) {
  kiln_redis_t *r = h->data;
  size_t taken = 0;
  while (taken < READ_TURN && !over_bound(r) && r->ac && r->head) {
    redisAsyncContext *ac = r->ac;
    redisReader *rd = ac->c.reader;
    int avail = 0;
    if (!report_progress(r)) break; /* what hiredis's own read brought; false: dropped */
    if (rd->err || rd->len == rd->pos || ioctl(ac->c.fd, FIONREAD, &avail) != 0 || avail <= 0) break;
    size_t want = (size_t)avail < READ_CHUNK ? (size_t)avail : READ_CHUNK;
    sds buf = sdsMakeRoomFor(rd->buf, want);
    if (!buf) break;
    rd->buf = buf;
    ssize_t n = read(ac->c.fd, buf + sdslen(buf), want);
    /* A read error or EOF is left to hiredis's own read below, which sees it and drops. */
    if (n > 0) {
      sdsIncrLen(buf, (int)n);
      rd->len = sdslen(buf);
      if (!report_progress(r)) break;
    }
    taken += n > 0 ? (size_t)n : READ_TURN;
    redisAsyncHandleRead(ac); /* may answer commands, or free ac (then r->ac is NULL) */
  }
}

/* --- public ------------------------------------------------------------------------------- */

kiln_status_t kiln_redis_create(uv_loop_t *loop, const kiln_redis_config_t *cfg, kiln_redis_t **out) {
  kiln_redis_t *r = calloc(1, sizeof(*r));
  if (!r) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  kiln_status_t st = kiln_redis_url_parse(cfg->url, r->host, sizeof(r->host), &r->port, &r->db, &r->is_unix);
  if (!st && cfg->auth_file && cfg->auth_file[0]) st = read_auth(r, cfg->auth_file);
  if (st) {
    explicit_bzero(r, sizeof(*r));
    free(r);
    return st;
  }
  r->loop = loop;
  snprintf(r->what, sizeof(r->what), "%s", cfg->what ? cfg->what : "redis");
  snprintf(r->url, sizeof(r->url), "%s", cfg->url);
  r->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 2000;
  r->max_reply = cfg->max_reply ? cfg->max_reply : (65ull << 20);
  r->spare_max = cfg->spare_max < KILN_REDIS_SPARE_MAX ? cfg->spare_max : KILN_REDIS_SPARE_MAX;
  if (r->spare_max > r->max_reply) r->spare_max = r->max_reply;
  r->on_up = cfg->on_up;
  r->up_arg = cfg->up_arg;
  r->backoff_ms = BACKOFF_MIN_MS;
  uv_timer_init(loop, &r->tick);
  uv_timer_init(loop, &r->retry);
  uv_check_init(loop, &r->check);
  r->tick.data = r->retry.data = r->check.data = r;
  uv_check_start(&r->check, on_check);
  /* None of these keeps the loop alive: kilnd's drain ends the loop by closing handles. */
  uv_unref((uv_handle_t *)&r->check);
  uv_unref((uv_handle_t *)&r->retry);
  uv_unref((uv_handle_t *)&r->tick);
  connect_now(r);
  *out = r;
  return KILN_OK;
}

static void on_handle_closed(uv_handle_t *h) {
  kiln_redis_t *r = h->data;
  r->handles_open--;
  free_if_done(r); /* or on_resolved, or spare_done, when they come later */
}

void kiln_redis_destroy(kiln_redis_t *r) {
  if (!r) return;
  r->destroying = true;
  if (r->ac) {
    redisAsyncContext *ac = r->ac;
    r->ac = NULL;
    redisAsyncFree(ac); /* pending callbacks run with NULL and see `destroying` */
  }
  if (r->gai_busy) uv_cancel((uv_req_t *)&r->gai);
  sdsfree(r->spare);
  r->spare = NULL;
  r->st.spare_bytes = 0;
  if (r->spare_job) uv_cancel((uv_req_t *)&r->spare_job->req); /* or spare_done frees what it made */
  r->handles_open = 3;
  uv_close((uv_handle_t *)&r->tick, on_handle_closed);
  uv_close((uv_handle_t *)&r->retry, on_handle_closed);
  uv_close((uv_handle_t *)&r->check, on_handle_closed);
}

bool kiln_redis_up(const kiln_redis_t *r) { return r && r->state == ST_UP && r->ac; }

bool kiln_redis_command(kiln_redis_t *r, kiln_redis_cb cb, void *arg, int argc, const char **argv,
                        const size_t *lens) {
  return kiln_redis_command_progress(r, cb, NULL, arg, argc, argv, lens);
}

char *kiln_redis_take_str(const redisReply *reply) {
  if (!reply || reply->type != REDIS_REPLY_STRING) return NULL;
  redisReply *mut = (redisReply *)reply; /* ours to change in the callback: hiredis frees it after */
  if (reply == lent.reply) { /* taken from the reader: its buffer, the bytes inside it */
    char *b = lent.block;
    mut->str = lent.own;
    mut->len = 0;
    lent.reply = NULL;
    return b;
  }
  char *s = mut->str;
  mut->str = NULL; /* freeReplyObject frees str with free(): NULL is fine */
  mut->len = 0;
  return s;
}

bool kiln_redis_command_progress(kiln_redis_t *r, kiln_redis_cb cb, kiln_redis_progress_cb progress, void *arg,
                                 int argc, const char **argv, const size_t *lens) {
  if (!kiln_redis_up(r)) return false;
  op_t *o = calloc(1, sizeof(*o));
  if (!o) return false;
  o->r = r;
  o->cb = cb;
  o->progress = progress;
  o->arg = arg;
  o->deadline_ns = kiln_now_ns() + (uint64_t)r->timeout_ms * 1000000ull;
  op_link(r, o);
  if (redisAsyncCommandArgv(r->ac, on_reply, o, argc, argv, lens) != REDIS_OK) {
    op_unlink(r, o);
    free(o);
    return false;
  }
  start_tick(r);
  return true;
}

void kiln_redis_stats(const kiln_redis_t *r, kiln_redis_stats_t *out) {
  *out = r->st;
  out->up = kiln_redis_up(r);
  out->spare_ready = r->spare != NULL;
}

const char *kiln_redis_url(const kiln_redis_t *r) { return r->url; }
