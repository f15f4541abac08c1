/* `kiln fleet`: the registry on Redis as a table (fleet.h). Whoever can write to the fleet's
 * Redis can write anything there, so every reply is bounded before it is buffered (the
 * reader's object hooks), a record is read with GETRANGE (at most MAX_RECORD bytes), and a
 * record that is not what kilnd writes is skipped with a note, its strings cleaned of
 * control bytes before they reach a terminal. */
#include "fleet.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include <hiredis/hiredis.h>

#include "base/buf.h"
#include "base/util.h"
#include "kiln/client.h"
#include "protocol/rpc.h"
#include "server/fleet/record.h"
#include "server/fleet/redis_conf.h"

#define HOSTS_SET "kiln:hosts"
#define HOST_PREFIX "kiln:host:"
#define MAX_RECORD (64u << 10) /* bytes of one record; kilnd's are a few KiB */
#define MAX_HOSTS 4096
#define MAX_DEVICES 64     /* per host; more are counted, not listed */
#define MAX_REPLY (64u << 20) /* bytes of one reply in all (strings and objects) */
#define OBJECT_COST 64
#define MAX_AGE_S 600 /* with trusted keys: a signed record older than this is a replay */

typedef struct fdev {
  char id[64], kind[32], arch[64];
  uint64_t capacity, used, launches;
  bool leased;
} fdev_t;

typedef struct fhost {
  char url[256], host[256], version[64], identity[512];
  uint64_t started, time, ttl_ms, connections, tenants, workers, busy, queued;
  fdev_t devs[MAX_DEVICES];
  uint32_t ndevs, more_devs;
  bool differs, sig;
} fhost_t;

/* --- bounded replies ---------------------------------------------------------------------- */

static redisReplyObjectFunctions defaults, bounded;
static uint64_t reply_cost;

static bool afford(const redisReadTask *task, uint64_t bytes) {
  if (task->parent == NULL) reply_cost = 0;
  reply_cost += OBJECT_COST + bytes;
  return reply_cost <= MAX_REPLY;
}

static void *create_string(const redisReadTask *t, char *s, size_t n) {
  return afford(t, n) ? defaults.createString(t, s, n) : NULL;
}

static void *create_array(const redisReadTask *t, int n) {
  if (t->parent != NULL || n < 0 || n > MAX_HOSTS + 3 + 2 * 16) return NULL; /* members(): head, refused */
  return afford(t, (uint64_t)n * sizeof(void *)) ? defaults.createArray(t, n) : NULL;
}

static void *create_integer(const redisReadTask *t, long long v) {
  return afford(t, 0) ? defaults.createInteger(t, v) : NULL;
}

static void *create_nil(const redisReadTask *t) { return afford(t, 0) ? defaults.createNil(t) : NULL; }

/* --- Redis -------------------------------------------------------------------------------- */

static kiln_status_t connect_redis(const kiln_cli_fleet_opts_t *o, redisContext **out) {
  const char *url = strncmp(o->url, "fleet:", 6) == 0 ? o->url + 6 : o->url;
  char host[512], user[256] = "", pass[512] = "";
  int port, db;
  bool is_unix;
  KILN_RETURN_IF_ERROR(kiln_redis_url_parse(url, host, sizeof(host), &port, &db, &is_unix));
  if (o->auth_file && o->auth_file[0])
    KILN_RETURN_IF_ERROR(kiln_redis_auth_read(o->auth_file, user, sizeof(user), pass, sizeof(pass)));
  int ms = o->timeout_ms > 0 ? o->timeout_ms : 5000;
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  redisContext *c = is_unix ? redisConnectUnixWithTimeout(host, tv) : redisConnectWithTimeout(host, port, tv);
  if (!c || c->err) {
    kiln_status_t st = KILN_STATUS(KILN_E_UNAVAILABLE, "the fleet registry %s cannot be reached: %s", url,
                                   c ? c->errstr : "out of memory");
    redisFree(c);
    return st;
  }
  redisSetTimeout(c, tv);
  if (!defaults.createString) {
    defaults = *c->reader->fn;
    bounded = defaults;
    bounded.createString = create_string;
    bounded.createArray = create_array;
    bounded.createInteger = create_integer;
    bounded.createNil = create_nil;
  }
  c->reader->fn = &bounded;
  kiln_status_t st = KILN_OK;
  char dbs[16];
  snprintf(dbs, sizeof(dbs), "%d", db);
  const char *auth[] = {"AUTH", user, pass}, *auth1[] = {"AUTH", pass}, *sel[] = {"SELECT", dbs};
  for (int step = 0; step < 2 && !st; step++) {
    redisReply *r;
    if (step == 0 && pass[0]) r = redisCommandArgv(c, user[0] ? 3 : 2, user[0] ? auth : auth1, NULL);
    else if (step == 1 && db != 0) r = redisCommandArgv(c, 2, sel, NULL);
    else continue;
    if (!r || r->type == REDIS_REPLY_ERROR)
      st = KILN_STATUS(KILN_E_UNAVAILABLE, "the fleet registry %s refused %s: %s", url, step ? "SELECT" : "AUTH",
                       r ? r->str : c->errstr);
    freeReplyObject(r);
  }
  explicit_bzero(pass, sizeof(pass));
  if (st) {
    redisFree(c);
    return st;
  }
  *out = c;
  return KILN_OK;
}

static kiln_status_t failed(redisContext *c, const char *what) {
  return KILN_STATUS(KILN_E_UNAVAILABLE, "reading the fleet registry: %s: %s", what,
                     c->err ? c->errstr : "no reply");
}

/* --- one record --------------------------------------------------------------------------- */

/* Copies a string field, control bytes made '?'; false when it is absent, not a string or
 * does not fit (a record with a field like that is not kilnd's). */
static bool str_field(const msgpack_object *m, const char *key, char *out, size_t cap, bool required) {
  const msgpack_object *o = kiln_params_find(m, key);
  if (!o) {
    out[0] = 0;
    return !required;
  }
  if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap) return false;
  for (uint32_t i = 0; i < o->via.str.size; i++) {
    unsigned char ch = (unsigned char)o->via.str.ptr[i];
    out[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
  }
  out[o->via.str.size] = 0;
  return true;
}

static bool u64_field(const msgpack_object *m, const char *key, uint64_t *out) {
  const msgpack_object *o = kiln_params_find(m, key);
  *out = 0;
  if (!o) return true;
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return false;
  *out = o->via.u64;
  return true;
}

/* Decodes a record into h; NULL, or why it is not a kiln host record. */
static const char *decode(const char *data, size_t len, const char *member, fhost_t *h) {
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  const char *why = NULL;
  if (msgpack_unpack_next(&u, data, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len) {
    why = "not one MessagePack value";
    goto out;
  }
  const msgpack_object *m = &u.data, *v = m->type == MSGPACK_OBJECT_MAP ? kiln_params_find(m, "v") : NULL;
  if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 != 1) {
    why = "not a version 1 record (a map with v: 1)";
    goto out;
  }
  memset(h, 0, sizeof(*h));
  if (!str_field(m, "url", h->url, sizeof(h->url), true) || strcmp(h->url, member) != 0) {
    why = "its url is not the address it is listed under";
    goto out;
  }
  if (!str_field(m, "host", h->host, sizeof(h->host), false) ||
      !str_field(m, "version", h->version, sizeof(h->version), false) ||
      !str_field(m, "identity", h->identity, sizeof(h->identity), false) ||
      !u64_field(m, "started", &h->started) || !u64_field(m, "time", &h->time) ||
      !u64_field(m, "ttl_ms", &h->ttl_ms) || !u64_field(m, "connections", &h->connections) ||
      !u64_field(m, "tenants", &h->tenants)) {
    why = "a field of the wrong type or too long";
    goto out;
  }
  const msgpack_object *c = kiln_params_find(m, "compile");
  if (c && (c->type != MSGPACK_OBJECT_MAP || !u64_field(c, "workers", &h->workers) ||
            !u64_field(c, "busy", &h->busy) || !u64_field(c, "queued", &h->queued))) {
    why = "its compile map is malformed";
    goto out;
  }
  const msgpack_object *ds = kiln_params_find(m, "devices");
  if (ds && ds->type != MSGPACK_OBJECT_ARRAY) {
    why = "its devices are not an array";
    goto out;
  }
  for (uint32_t i = 0; ds && i < ds->via.array.size; i++) {
    const msgpack_object *d = &ds->via.array.ptr[i];
    fdev_t tmp = {0};
    const msgpack_object *leased = d->type == MSGPACK_OBJECT_MAP ? kiln_params_find(d, "leased") : NULL;
    if (d->type != MSGPACK_OBJECT_MAP || !str_field(d, "id", tmp.id, sizeof(tmp.id), true) ||
        !str_field(d, "kind", tmp.kind, sizeof(tmp.kind), true) ||
        !str_field(d, "arch", tmp.arch, sizeof(tmp.arch), false) || !u64_field(d, "capacity", &tmp.capacity) ||
        !u64_field(d, "used", &tmp.used) || !u64_field(d, "launches", &tmp.launches) ||
        (leased && leased->type != MSGPACK_OBJECT_BOOLEAN)) {
      why = "a device entry is malformed";
      goto out;
    }
    tmp.leased = leased && leased->via.boolean;
    if (h->ndevs < MAX_DEVICES) h->devs[h->ndevs++] = tmp;
    else h->more_devs++;
  }
out:
  msgpack_unpacked_destroy(&u);
  return why;
}

/* --- listing ------------------------------------------------------------------------------ */

static bool kind_matches(const char *want, const fdev_t *d) {
  static const char *const groups[][3] = {{"gpu", "hsa", "cuda"}, {"rocm", "hsa", NULL}, {"llvm", "cpu", NULL}};
  for (size_t g = 0; g < KILN_ARRAY_SIZE(groups); g++)
    if (!strcmp(want, groups[g][0]))
      return !strcmp(d->kind, groups[g][1]) || (groups[g][2] && !strcmp(d->kind, groups[g][2]));
  return !strcmp(want, d->kind) || !strcmp(want, d->id);
}

static bool serves(const fhost_t *h, const char *device) {
  for (uint32_t i = 0; i < h->ndevs; i++)
    if (kind_matches(device, &h->devs[i])) return true;
  return false;
}

static int by_url(const void *a, const void *b) { return strcmp(((const fhost_t *)a)->url, ((const fhost_t *)b)->url); }

/* Marks the hosts whose compiler identity is not the most common one (ties: the first). */
static void mark_identities(fhost_t *hs, size_t n) {
  size_t best = 0, best_n = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    for (size_t j = 0; j < n; j++) k += !strcmp(hs[i].identity, hs[j].identity);
    if (k > best_n) best = i, best_n = k;
  }
  for (size_t i = 0; i < n; i++) hs[i].differs = strcmp(hs[i].identity, hs[best].identity) != 0;
}

static void print_table(FILE *f, const fhost_t *hs, size_t n) {
  uint64_t now = (uint64_t)time(NULL);
  fprintf(f, "%-28s %-10s %-16s %5s %5s %7s %-9s %s\n", "HOST", "VERSION", "IDENTITY", "AGE", "CONNS",
          "TENANTS", "COMPILES", "DEVICES (load: launches running, leased)");
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) {
    const fhost_t *h = &hs[i];
    const char *id = strstr(h->identity, "build ");
    char ident[20], age[16], comp[32];
    snprintf(ident, sizeof(ident), "%.15s%s", id ? id + 6 : h->identity, h->differs ? "*" : "");
    if (h->time && h->time <= now) snprintf(age, sizeof(age), "%" PRIu64 "s", now - h->time);
    else snprintf(age, sizeof(age), "-");
    snprintf(comp, sizeof(comp), "%" PRIu64 "/%" PRIu64 "+%" PRIu64, h->busy, h->workers, h->queued);
    fprintf(f, "%-28s %-10s %-16s %5s %5" PRIu64 " %7" PRIu64 " %-9s", h->url, h->version, ident, age,
            h->connections, h->tenants, comp);
    for (uint32_t d = 0; d < h->ndevs; d++)
      fprintf(f, "%s%s (%s, %" PRIu64 " running%s)", d ? ", " : " ", h->devs[d].id, h->devs[d].arch,
              h->devs[d].launches, h->devs[d].leased ? ", leased" : "");
    if (h->more_devs) fprintf(f, " and %u more", h->more_devs);
    fputc('\n', f);
    differ += h->differs;
  }
  if (!differ) return;
  fprintf(f, "* compiler identity differs from most hosts' (their builds are not shared):\n");
  for (size_t i = 0; i < n; i++)
    if (hs[i].differs) fprintf(f, "  %s: %s\n", hs[i].url, hs[i].identity);
}

static void print_json(FILE *f, const fhost_t *hs, size_t n) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_packer_t p;
  kiln_packer_init(&p, &b);
  msgpack_packer *pk = &p.pk;
  msgpack_pack_array(pk, n);
  for (size_t i = 0; i < n; i++) {
    const fhost_t *h = &hs[i];
    kiln_fields_t m, c;
    kiln_fields_begin(&m, pk);
    kiln_fields_str(&m, "url", h->url);
    kiln_fields_str(&m, "host", h->host);
    kiln_fields_str(&m, "version", h->version);
    kiln_fields_str(&m, "identity", h->identity);
    kiln_fields_bool(&m, "identity_differs", h->differs);
    kiln_fields_bool(&m, "signed", h->sig);
    kiln_fields_u64(&m, "started", h->started);
    kiln_fields_u64(&m, "time", h->time);
    kiln_fields_u64(&m, "ttl_ms", h->ttl_ms);
    kiln_fields_u64(&m, "connections", h->connections);
    kiln_fields_u64(&m, "tenants", h->tenants);
    kiln_fields_key(&m, "compile");
    kiln_fields_begin(&c, pk);
    kiln_fields_u64(&c, "workers", h->workers);
    kiln_fields_u64(&c, "busy", h->busy);
    kiln_fields_u64(&c, "queued", h->queued);
    kiln_fields_end(&c);
    kiln_fields_key(&m, "devices");
    msgpack_pack_array(pk, h->ndevs);
    for (uint32_t d = 0; d < h->ndevs; d++) {
      kiln_fields_t dm;
      kiln_fields_begin(&dm, pk);
      kiln_fields_str(&dm, "id", h->devs[d].id);
      kiln_fields_str(&dm, "kind", h->devs[d].kind);
      kiln_fields_str(&dm, "arch", h->devs[d].arch);
      kiln_fields_u64(&dm, "capacity", h->devs[d].capacity);
      kiln_fields_u64(&dm, "used", h->devs[d].used);
      kiln_fields_u64(&dm, "launches", h->devs[d].launches);
      kiln_fields_bool(&dm, "leased", h->devs[d].leased);
      kiln_fields_end(&dm);
    }
    kiln_fields_end(&m);
  }
  kiln_status_t st = kiln_packer_status(&p);
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  if (!st && msgpack_unpack_next(&u, (const char *)b.data, b.len, &off) == MSGPACK_UNPACK_SUCCESS) {
    kiln_object_print_json(f, &u.data, true);
    fputc('\n', f);
  }
  kiln_status_free(st);
  msgpack_unpacked_destroy(&u);
  kiln_buf_deinit(&b);
}

/* The members of the hosts set, filtered in Redis: a member is a set element of any size
 * (whoever can write to Redis can add one of hundreds of MiB), and SMEMBERS or SSCAN would
 * send it whole, so the script walks the set with SSCAN and returns, flat: the number of
 * members refused (empty or over MAX_MEMBER bytes), whether the walk stopped early, up to
 * MAX_BAD_SHOWN of the refused ones as (length, their first 80 bytes), then at most
 * MAX_HOSTS good ones. The walk stops after MAX_HOSTS good members or MAX_SCANNED members
 * in all, so one call holds Redis for a bounded time. */
#define MAX_MEMBER 255
#define MAX_BAD_SHOWN 16
#define MAX_SCANNED (16 * MAX_HOSTS)
#define MEMBERS_HEAD 3 /* refused, stopped early, refused shown */
static const char members_script[] =
    "local maxlen, maxn, maxbad, maxseen = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), "
    "tonumber(ARGV[4])\n"
    "local good, bad, nbad, seen, cursor = {}, {}, 0, 0, '0'\n"
    "repeat\n"
    "  local r = redis.call('SSCAN', KEYS[1], cursor, 'COUNT', 256)\n"
    "  cursor = r[1]\n"
    "  for _, m in ipairs(r[2]) do\n"
    "    seen = seen + 1\n"
    "    if #m >= 1 and #m <= maxlen then\n"
    "      if #good < maxn then good[#good + 1] = m end\n"
    "    else\n"
    "      nbad = nbad + 1\n"
    "      if #bad < 2 * maxbad then bad[#bad + 1] = #m; bad[#bad + 1] = string.sub(m, 1, 80) end\n"
    "    end\n"
    "  end\n"
    "until cursor == '0' or #good >= maxn or seen >= maxseen\n"
    "local out = {nbad, cursor == '0' and 0 or 1, #bad / 2}\n"
    "for _, v in ipairs(bad) do out[#out + 1] = v end\n"
    "for _, m in ipairs(good) do out[#out + 1] = m end\n"
    "return out\n";

typedef struct members {
  redisReply *r;          /* the script's reply */
  size_t first, n;        /* r->element[first .. first + n): the good members */
  long long refused, n_shown;
  bool partial;           /* the walk stopped before the end of the set */
} members_t;

/* The members of the hosts set as the script returns them (every element checked here too:
 * a Redis that answers something else is refused as a whole). */
static kiln_status_t members(redisContext *c, members_t *out, long long *card) {
  redisReply *r = redisCommand(c, "SCARD %s", HOSTS_SET);
  if (!r) return failed(c, "SCARD " HOSTS_SET);
  if (r->type != REDIS_REPLY_INTEGER) {
    kiln_status_t st = KILN_STATUS(KILN_E_UNAVAILABLE, "%s is not a set of host addresses (%s): is this "
                                   "a kiln fleet's Redis and database?", HOSTS_SET,
                                   r->type == REDIS_REPLY_ERROR ? r->str : "an unexpected reply");
    freeReplyObject(r);
    return st;
  }
  *card = r->integer;
  freeReplyObject(r);
  char a1[16], a2[16], a3[16], a4[16];
  snprintf(a1, sizeof(a1), "%d", MAX_MEMBER);
  snprintf(a2, sizeof(a2), "%d", MAX_HOSTS);
  snprintf(a3, sizeof(a3), "%d", MAX_BAD_SHOWN);
  snprintf(a4, sizeof(a4), "%d", MAX_SCANNED);
  const char *argv[] = {"EVAL", members_script, "1", HOSTS_SET, a1, a2, a3, a4};
  r = redisCommandArgv(c, 8, argv, NULL);
  if (!r) return failed(c, "EVAL (SSCAN of " HOSTS_SET ")");
  bool ok = r->type == REDIS_REPLY_ARRAY && r->elements >= MEMBERS_HEAD;
  for (size_t i = 0; ok && i < MEMBERS_HEAD; i++) ok = r->element[i]->type == REDIS_REPLY_INTEGER;
  long long shown = ok ? r->element[2]->integer : 0;
  ok = ok && shown >= 0 && shown <= MAX_BAD_SHOWN && r->element[0]->integer >= shown &&
       (size_t)(MEMBERS_HEAD + 2 * shown) <= r->elements && r->elements - MEMBERS_HEAD - 2 * shown <= MAX_HOSTS;
  for (long long i = 0; ok && i < shown; i++)
    ok = r->element[MEMBERS_HEAD + 2 * i]->type == REDIS_REPLY_INTEGER &&
         r->element[MEMBERS_HEAD + 2 * i + 1]->type == REDIS_REPLY_STRING &&
         r->element[MEMBERS_HEAD + 2 * i + 1]->len <= 80;
  for (size_t i = MEMBERS_HEAD + 2 * (size_t)shown; ok && i < r->elements; i++)
    ok = r->element[i]->type == REDIS_REPLY_STRING && r->element[i]->len >= 1 && r->element[i]->len <= MAX_MEMBER;
  if (!ok) {
    kiln_status_t st = KILN_STATUS(KILN_E_UNAVAILABLE, "%s: an unexpected reply to the members script (%s)",
                                   HOSTS_SET, r->type == REDIS_REPLY_ERROR ? r->str : "malformed");
    freeReplyObject(r);
    return st;
  }
  out->r = r;
  out->refused = r->element[0]->integer;
  out->partial = r->element[1]->integer != 0;
  out->n_shown = shown;
  out->first = MEMBERS_HEAD + 2 * (size_t)shown;
  out->n = r->elements - out->first;
  return KILN_OK;
}

/* A member as text for a note: at most 80 bytes, control bytes shown as '?'. */
static const char *shown(const char *s, size_t n, char *buf) {
  size_t k = n < 80 ? n : 80;
  for (size_t i = 0; i < k; i++) buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
  snprintf(buf + k, 8, "%s", n > 80 ? "..." : "");
  return buf;
}

kiln_status_t kiln_cli_fleet_list(const kiln_cli_fleet_opts_t *o, FILE *out, FILE *err) {
  kiln_record_key_t *keys = NULL;
  size_t nkeys = 0;
  if (o->trusted_keys && o->trusted_keys[0]) {
    KILN_RETURN_IF_ERROR(kiln_record_keys_read(o->trusted_keys, &keys, &nkeys));
    if (nkeys == 0) {
      free(keys);
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s holds no keys: every record would be refused",
                         o->trusted_keys);
    }
  }
  redisContext *c = NULL;
  kiln_status_t cst = connect_redis(o, &c);
  if (cst) {
    free(keys);
    return cst;
  }
  members_t ms = {0};
  long long card = 0;
  kiln_status_t st = members(c, &ms, &card);
  if (st) {
    redisFree(c);
    free(keys);
    return st;
  }
  if (card > MAX_HOSTS || ms.partial)
    fprintf(err, "kiln: fleet: %s lists %lld members, more than a fleet has: showing %zu of them\n", HOSTS_SET,
            card, ms.n);
  size_t skipped = 0;
  for (long long i = 0; i < ms.n_shown; i++) {
    const redisReply *len = ms.r->element[MEMBERS_HEAD + 2 * i], *head = ms.r->element[MEMBERS_HEAD + 2 * i + 1];
    char name[96];
    fprintf(err, "kiln: fleet: skipped a member of %s of %lld bytes beginning '%s': not a host address "
            "(1 to %d bytes)\n", HOSTS_SET, len->integer, shown(head->str, head->len, name), MAX_MEMBER);
  }
  if (ms.refused > ms.n_shown)
    fprintf(err, "kiln: fleet: skipped %lld more members of %s: not host addresses\n", ms.refused - ms.n_shown,
            HOSTS_SET);
  skipped += (size_t)ms.refused;
  fhost_t *hs = calloc(ms.n ? ms.n : 1, sizeof(*hs));
  if (!hs) st = KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  /* One GETRANGE per member, pipelined: a record longer than MAX_RECORD reads as MAX_RECORD
   * + 1 bytes and is skipped, whatever Redis holds. */
  char last[24];
  snprintf(last, sizeof(last), "%u", MAX_RECORD);
  for (size_t i = 0; !st && i < ms.n; i++) {
    const redisReply *m = ms.r->element[ms.first + i]; /* 1 to MAX_MEMBER bytes: members() checked */
    char key[sizeof(HOST_PREFIX) + MAX_MEMBER];
    memcpy(key, HOST_PREFIX, sizeof(HOST_PREFIX) - 1);
    memcpy(key + sizeof(HOST_PREFIX) - 1, m->str, m->len);
    const char *argv[] = {"GETRANGE", key, "0", last};
    size_t lens[] = {8, sizeof(HOST_PREFIX) - 1 + m->len, 1, strlen(last)};
    if (redisAppendCommandArgv(c, 4, argv, lens) != REDIS_OK) st = failed(c, "GETRANGE");
  }
  size_t n = 0;
  for (size_t i = 0; !st && i < ms.n; i++) {
    const redisReply *m = ms.r->element[ms.first + i];
    char name[96];
    redisReply *r = NULL;
    if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
      st = failed(c, "GETRANGE");
      break;
    }
    char member[MAX_MEMBER + 1];
    memcpy(member, m->str, m->len);
    member[m->len] = 0;
    const char *why = NULL;
    if (r->type == REDIS_REPLY_ERROR) why = "Redis answered an error (a key of another type?)";
    else if (r->type != REDIS_REPLY_STRING) why = "an unexpected reply";
    else if (r->len > MAX_RECORD) why = "larger than 64 KiB";
    else {
      const uint8_t *rec;
      size_t rlen;
      bool sig = false;
      why = kiln_record_open((const uint8_t *)r->str, r->len, member, keys, nkeys, &rec, &rlen, &sig);
      if (!why) why = decode((const char *)rec, rlen, member, &hs[n]);
      uint64_t now = (uint64_t)time(NULL);
      if (!why && nkeys && hs[n].time + MAX_AGE_S < now)
        why = "signed, but its time is over 10 minutes old (a replayed record?)";
      hs[n].sig = sig;
    }
    if (r->type == REDIS_REPLY_STRING && r->len == 0) {
      /* expired between the members script and GETRANGE: that host is gone */
    } else if (why) {
      fprintf(err, "kiln: fleet: skipped %s%s: %s\n", HOST_PREFIX, shown(m->str, m->len, name), why);
      skipped++;
    } else {
      n++;
    }
    freeReplyObject(r);
  }
  freeReplyObject(ms.r);
  redisFree(c);
  if (!st) {
    qsort(hs, n, sizeof(*hs), by_url);
    mark_identities(hs, n); /* among all hosts, before --device leaves some out */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
      if (!o->device || serves(&hs[i], o->device)) hs[kept++] = hs[i];
    n = kept;
    if (o->json) print_json(out, hs, n);
    else print_table(out, hs, n);
    if (skipped && !o->json) fprintf(out, "(%zu registry entries skipped: see the notes above)\n", skipped);
  }
  free(hs);
  free(keys);
  return st;
}

kiln_status_t kiln_cli_fleet_key(const char *path, const char *addr, FILE *out, FILE *err) {
  uint8_t seed[32], pub[32];
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    randombytes_buf(seed, sizeof(seed));
    bool ok = write(fd, seed, sizeof(seed)) == (ssize_t)sizeof(seed) && fsync(fd) == 0;
    close(fd);
    if (!ok) {
      unlink(path);
      sodium_memzero(seed, sizeof(seed));
      return KILN_STATUS(KILN_E_PERMISSION, "%s: cannot write the key", path);
    }
    fprintf(err, "kiln: fleet-key: made %s (a new Ed25519 key, mode 0600): give it to kilnd --fleet-key\n", path);
  } else if (errno != EEXIST) {
    return KILN_STATUS(KILN_E_PERMISSION, "%s: %s", path, strerror(errno));
  } else {
    KILN_RETURN_IF_ERROR(kiln_record_key_read(path, seed));
  }
  char text[80];
  kiln_record_key_public(seed, pub, text);
  sodium_memzero(seed, sizeof(seed));
  fprintf(out, "%s %s\n", text, addr && addr[0] ? addr : "*");
  return KILN_OK;
}
