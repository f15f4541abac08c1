/* `kiln stats` as tables for people: the server line, tenants, queues, devices, compiles and
 * the cache, from the `stats` reply (docs/protocol.md). Fields a server does not send are
 * shown as "-", so an older kilnd still prints. */
#include "stats.h"

#include <inttypes.h>
#include <string.h>

#include "protocol/rpc.h"

static const msgpack_object *field(const msgpack_object *map, const char *name) {
  return map && map->type == MSGPACK_OBJECT_MAP ? kiln_params_find(map, name) : NULL;
}

/* An unsigned field as text ("-" when absent). */
static const char *num(const msgpack_object *map, const char *name, char *buf, size_t cap) {
  const msgpack_object *o = field(map, name);
  if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) snprintf(buf, cap, "%" PRIu64, o->via.u64);
  else snprintf(buf, cap, "-");
  return buf;
}

static uint64_t u64(const msgpack_object *map, const char *name) {
  const msgpack_object *o = field(map, name);
  return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

/* Bytes with a binary unit ("-" when absent). */
static const char *bytes(const msgpack_object *map, const char *name, char *buf, size_t cap) {
  const msgpack_object *o = field(map, name);
  if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return snprintf(buf, cap, "-"), buf;
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)o->via.u64;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  if (u == 0) snprintf(buf, cap, "%" PRIu64 " B", o->via.u64);
  else snprintf(buf, cap, "%.1f %s", v, units[u]);
  return buf;
}

static const char *str(const msgpack_object *map, const char *name, char *buf, size_t cap) {
  const msgpack_object *o = field(map, name);
  if (o && o->type == MSGPACK_OBJECT_STR && o->via.str.size)
    snprintf(buf, cap, "%.*s", (int)o->via.str.size, o->via.str.ptr);
  else snprintf(buf, cap, "-");
  return buf;
}

static uint64_t sum_map(const msgpack_object *map) {
  uint64_t n = 0;
  for (uint32_t i = 0; map && map->type == MSGPACK_OBJECT_MAP && i < map->via.map.size; i++)
    if (map->via.map.ptr[i].val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
      n += map->via.map.ptr[i].val.via.u64;
  return n;
}

static void print_server(FILE *f, const msgpack_object *st) {
  char a[64], b[32];
  const msgpack_object *up = field(st, "uptime_s");
  uint64_t s = up && up->type == MSGPACK_OBJECT_FLOAT64 ? (uint64_t)up->via.f64 : 0;
  fprintf(f, "%s, up %" PRIu64 "d %02" PRIu64 ":%02" PRIu64 ":%02" PRIu64
             ", %s connections, %" PRIu64 " requests answered (%" PRIu64 " errors)\n",
          str(st, "server", a, sizeof(a)), s / 86400, s / 3600 % 24, s / 60 % 60, s % 60,
          num(st, "connections", b, sizeof(b)), sum_map(field(st, "requests")),
          sum_map(field(st, "errors")));
}

static void print_tenants(FILE *f, const msgpack_object *st) {
  const msgpack_object *ts = field(st, "tenants");
  if (!ts || ts->type != MSGPACK_OBJECT_ARRAY) return;
  fprintf(f, "\n%-20s %6s %8s %11s %9s %9s %7s %8s %9s %7s\n", "TENANT", "CONNS", "TENSORS",
          "MEMORY", "LAUNCHES", "COMPILES", "QUEUED", "MODULES", "REQUESTS", "ERRORS");
  for (uint32_t i = 0; i < ts->via.array.size; i++) {
    const msgpack_object *t = &ts->via.array.ptr[i];
    char c[10][32];
    fprintf(f, "%-20s %6s %8s %11s %9s %9s %7s %8s %9s %7s\n", str(t, "name", c[0], 32),
            num(t, "connections", c[1], 32), num(t, "tensors", c[2], 32),
            bytes(t, "memory", c[3], 32), num(t, "launches", c[4], 32),
            num(t, "compiles", c[5], 32), num(t, "compiles_queued", c[6], 32),
            num(t, "modules", c[7], 32), num(t, "requests", c[8], 32), num(t, "errors", c[9], 32));
  }
}

static void print_queues(FILE *f, const msgpack_object *st) {
  const msgpack_object *cp = field(st, "compile");
  char a[32], b[32];
  fprintf(f, "\n%-28s %s\n", "QUEUE", "WAITING");
  fprintf(f, "%-28s %s\n", "compile interactive", num(cp, "queued_interactive", a, sizeof(a)));
  fprintf(f, "%-28s %s\n", "compile batch", num(cp, "queued_batch", a, sizeof(a)));
  fprintf(f, "%-28s %s busy of %s\n", "compile workers", num(cp, "workers_busy", a, sizeof(a)),
          num(cp, "workers", b, sizeof(b)));
}

static void print_devices(FILE *f, const msgpack_object *st) {
  const msgpack_object *ds = field(st, "devices");
  if (!ds || ds->type != MSGPACK_OBJECT_ARRAY) return;
  fprintf(f, "\n%-12s %9s %-20s %8s %11s\n", "DEVICE", "LAUNCHES", "LEASED BY", "TENSORS", "MEMORY");
  for (uint32_t i = 0; i < ds->via.array.size; i++) {
    const msgpack_object *d = &ds->via.array.ptr[i];
    char c[5][40];
    fprintf(f, "%-12s %9s %-20s %8s %11s\n", str(d, "id", c[0], 40), num(d, "launches", c[1], 40),
            str(d, "lease", c[2], 40), num(d, "tensors", c[3], 40), bytes(d, "memory", c[4], 40));
  }
  const msgpack_object *ws = field(st, "workers");
  if (!ws || ws->type != MSGPACK_OBJECT_ARRAY || ws->via.array.size == 0) return;
  fprintf(f, "\n%-12s %-20s %8s %9s %9s\n", "WORKER", "TENANT", "PID", "RESTARTS", "IN FLIGHT");
  for (uint32_t i = 0; i < ws->via.array.size; i++) {
    const msgpack_object *w = &ws->via.array.ptr[i];
    char c[5][40];
    fprintf(f, "%-12s %-20s %8s %9s %9s\n", str(w, "device", c[0], 40), str(w, "tenant", c[1], 40),
            num(w, "pid", c[2], 40), num(w, "restarts", c[3], 40), num(w, "inflight", c[4], 40));
  }
}

static void print_compile_cache(FILE *f, const msgpack_object *st) {
  const msgpack_object *cp = field(st, "compile"), *ca = field(st, "cache");
  char c[8][32];
  if (cp)
    fprintf(f, "\ncompiles: %s built, %s errors, %s crashed, %s timed out, %s answered from "
               "modules, %s joined, %s cancelled\n",
            num(cp, "compiles", c[0], 32), num(cp, "errors", c[1], 32), num(cp, "crashes", c[2], 32),
            num(cp, "timeouts", c[3], 32), num(cp, "cache_hits", c[4], 32),
            num(cp, "single_flight_joins", c[5], 32), num(cp, "cancelled", c[6], 32));
  if (ca)
    fprintf(f, "cache: %" PRIu64 " hits (%s memory, %s disk), %s misses, %s evictions; "
               "%s in memory, %s entries (%s) on disk\n",
            u64(ca, "hits_memory") + u64(ca, "hits_disk"), num(ca, "hits_memory", c[0], 32),
            num(ca, "hits_disk", c[1], 32), num(ca, "misses", c[2], 32),
            num(ca, "evictions", c[3], 32), bytes(ca, "bytes_memory", c[4], 32),
            num(ca, "entries_disk", c[5], 32), bytes(ca, "bytes_disk", c[6], 32));
}

void kiln_cli_print_stats(FILE *f, const msgpack_object *stats) {
  print_server(f, stats);
  print_tenants(f, stats);
  print_queues(f, stats);
  print_devices(f, stats);
  print_compile_cache(f, stats);
}
