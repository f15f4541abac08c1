/* The device table. kilnd never loads a GPU runtime itself: it runs the device worker
 * binary in probe mode, which prints what each backend found as one MessagePack map:
 *   {"devices": [{id, kind, name, arch, memory, compute_units, max_block, wave_size,
 *                 max_shared}], "absent": [{kind, reason}]} */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "server/server.h"

/* --devices: "" serves everything found; else a comma-separated list of ids ("cuda:1")
 * or kinds ("hsa"). cpu:0 is always served: it is the default device of every call. */
static bool wanted(const char *filter, const char *id, const char *kind) {
  if (!filter[0] || strcmp(id, "cpu:0") == 0) return true;
  const char *p = filter;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if ((strlen(id) == n && memcmp(id, p, n) == 0) || (strlen(kind) == n && memcmp(kind, p, n) == 0))
      return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

/* The probed devices, served or not, for the start-up checks of --devices and --pin. */
typedef struct probed {
  char ids[KILN_MAX_DEVICES][32];
  char kinds[KILN_MAX_DEVICES][8];
  uint32_t n;
} probed_t;

static void probed_list(const probed_t *p, char *out, size_t cap) {
  size_t n = 0;
  out[0] = 0;
  for (uint32_t i = 0; i < p->n && n < cap; i++)
    n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? ", " : "", p->ids[i]);
}

/* Every entry of --devices names a device or kind the probe found: a typo or a missing GPU
 * refuses the start with the reason instead of a daemon whose every call on it fails. */
static kiln_status_t check_devices_option(const kiln_server_t *s, const probed_t *p) {
  const char *f = s->cfg.devices;
  while (*f) {
    const char *e = strchr(f, ',');
    size_t n = e ? (size_t)(e - f) : strlen(f);
    bool found = n == 0;
    for (uint32_t i = 0; i < p->n && !found; i++)
      found = (strlen(p->ids[i]) == n && memcmp(p->ids[i], f, n) == 0) ||
              (strlen(p->kinds[i]) == n && memcmp(p->kinds[i], f, n) == 0);
    if (!found) {
      char have[512], why[300] = "";
      probed_list(p, have, sizeof(have));
      for (uint32_t i = 0; i < s->num_absent; i++) {
        size_t k = strlen(s->absent[i].kind);
        if (n >= k && memcmp(f, s->absent[i].kind, k) == 0 && (n == k || f[k] == ':'))
          snprintf(why, sizeof(why), "; %s: %s", s->absent[i].kind, s->absent[i].reason);
      }
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                         "--devices names '%.*s', which this machine does not have (found: %s%s)",
                         (int)(n < 64 ? n : 64), f, have, why);
    }
    if (!e) break;
    f = e + 1;
  }
  return KILN_OK;
}

/* A core number: decimal digits only (strtol alone would take "", " 1", "+1" and "0x1"). */
static bool parse_core(const char **c, long *k) {
  const char *p = *c;
  long v = 0;
  if (*p < '0' || *p > '9') return false;
  for (; *p >= '0' && *p <= '9'; p++)
    if ((v = v * 10 + (*p - '0')) > INT32_MAX) return false;
  *k = v;
  *c = p;
  return true;
}

/* "0,2-3" into *set: a comma-separated list of cores and ascending ranges, every part whole
 * ("0-", "-1", "1-0", "0,", "" are not lists). Returns the number of cores, 0 when it does not
 * parse or names a core a cpu_set_t cannot hold (*big, when not NULL, gets the first such). */
static uint32_t parse_cores(const char *cpus, cpu_set_t *set, long *big) {
  CPU_ZERO(set);
  for (const char *c = cpus;; c++) { /* c++ steps over the comma */
    long a, b;
    if (!parse_core(&c, &a)) return 0;
    b = a;
    if (*c == '-' && (c++, !parse_core(&c, &b))) return 0;
    if (b < a || (*c && *c != ',')) return 0;
    if (b >= CPU_SETSIZE) {
      if (big) *big = a < CPU_SETSIZE ? CPU_SETSIZE : a;
      return 0;
    }
    for (long k = a; k <= b; k++) CPU_SET((int)k, set);
    if (!*c) return (uint32_t)CPU_COUNT(set);
  }
}

uint32_t kiln_pin_set(const char *cpus, cpu_set_t *set) {
  return parse_cores(cpus, set, NULL);
}

/* --pin DEVICE=CPUS: DEVICE is served (or is "compile", the compile workers), and CPUS
 * ("0,2-3") are cores kilnd may run on. */
static kiln_status_t check_pin(kiln_server_t *s, const char *pin) {
  const char *eq = strchr(pin, '=');
  bool compile = eq - pin == 7 && memcmp(pin, "compile", 7) == 0;
  if (!compile && !kiln_device_find(s, pin, (uint32_t)(eq - pin)))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "--pin %s: kilnd serves no device '%.*s' (`kiln devices` lists them)", pin,
                       (int)(eq - pin), pin);
  cpu_set_t want, allowed;
  long big = -1;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) CPU_ZERO(&allowed);
  if (!parse_cores(eq + 1, &want, &big) && big < 0)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "--pin %s: '%s' is not a list of cores (0,2-3)",
                       pin, eq + 1);
  for (long k = 0; k < CPU_SETSIZE && big < 0; k++)
    if (CPU_ISSET((int)k, &want) && !CPU_ISSET((int)k, &allowed)) big = k;
  if (big >= 0)
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "--pin %s: core %ld is not one kilnd may run on (it may use %d cores; "
                       "see `taskset -cp %d`)",
                       pin, big, CPU_COUNT(&allowed), (int)getpid());
  return KILN_OK;
}

const char *kiln_pin_of(const kiln_server_t *s, const char *id) {
  const char *cpus = NULL;
  size_t n = strlen(id);
  for (int i = 0; i < s->cfg.num_pins; i++)
    if (strncmp(s->cfg.pins[i], id, n) == 0 && s->cfg.pins[i][n] == '=') cpus = s->cfg.pins[i] + n + 1;
  return cpus;
}

/* Whether the compile workers may run on cores a host device's kernels run on: unless both
 * are pinned, to cores that do not meet, they share kilnd's (`devices`: shares_compile_cores). */
static bool shares_compile_cores(const kiln_server_t *s, const char *device_pin) {
  const char *compile = kiln_pin_of(s, "compile");
  cpu_set_t a, b, both;
  if (!device_pin || !compile || !kiln_pin_set(device_pin, &a) || !kiln_pin_set(compile, &b))
    return true;
  CPU_AND(&both, &a, &b);
  return CPU_COUNT(&both) > 0;
}

/* cpu:0's capacity: --cpu-memory, else the default of memory.c (half of what kilnd may use). */
static uint64_t host_capacity(const kiln_server_t *s) {
  uint64_t usable;
  uint64_t def = kiln_memory_host_default(&usable);
  if (!s->cfg.cpu_memory) return def;
  if (s->cfg.cpu_memory > usable)
    KILN_LOG_WARN("cpu_memory_overcommit", "cpu_memory=%llu usable=%llu",
                  (unsigned long long)s->cfg.cpu_memory, (unsigned long long)usable);
  return s->cfg.cpu_memory;
}

kiln_status_t kiln_devices_probe(kiln_server_t *s) {
  char path[600];
  KILN_RETURN_IF_ERROR(kiln_worker_find_binary(s, "kiln-device-worker", path, sizeof(path)));
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_status_t st = kiln_worker_run_print(path, "--probe", 16u << 20, &out);
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  probed_t probed = {.n = 0};
  if (!st && msgpack_unpack_next(&u, (const char *)out.data, out.len, &off) != MSGPACK_UNPACK_SUCCESS)
    st = KILN_STATUS(KILN_E_INTERNAL, "device probe output is not MessagePack");
  const msgpack_object *root = &u.data;
  if (!st && root->type != MSGPACK_OBJECT_MAP)
    st = KILN_STATUS(KILN_E_INTERNAL, "device probe output is not a map");
  const msgpack_object *devs = st ? NULL : kiln_params_find(root, "devices");
  const msgpack_object *absent = st ? NULL : kiln_params_find(root, "absent");
  for (uint32_t i = 0; devs && devs->type == MSGPACK_OBJECT_ARRAY && i < devs->via.array.size; i++) {
    const msgpack_object *d = &devs->via.array.ptr[i];
    if (d->type != MSGPACK_OBJECT_MAP || s->num_devices == KILN_MAX_DEVICES) continue;
    kiln_device_entry_t *e = &s->devices[s->num_devices];
    memset(e, 0, sizeof(*e));
    const msgpack_object *id = kiln_params_find(d, "id"), *kind = kiln_params_find(d, "kind");
    if (!id || !kind || kiln_obj_cstr(id, "id", e->id, sizeof(e->id)) ||
        kiln_obj_cstr(kind, "kind", e->kind, sizeof(e->kind)))
      continue;
    const msgpack_object *arch = kiln_params_find(d, "arch");
    if (arch && kiln_obj_cstr(arch, "arch", e->arch, sizeof(e->arch))) continue;
    const char *colon = strchr(e->id, ':');
    e->index = colon ? (uint32_t)strtoul(colon + 1, NULL, 10) : 0;
    if (probed.n < KILN_MAX_DEVICES) {
      snprintf(probed.ids[probed.n], sizeof(probed.ids[0]), "%s", e->id);
      snprintf(probed.kinds[probed.n++], sizeof(probed.kinds[0]), "%s", e->kind);
    }
    if (!wanted(s->cfg.devices, e->id, e->kind)) continue;
    /* The capacity kilnd accounts tensors against (memory.c): a GPU's memory as its probe
     * reports it; for the host, what --cpu-memory grants, which `devices` then reports. */
    const msgpack_object *mem = kiln_params_find(d, "memory");
    bool host = strcmp(e->kind, "cpu") == 0;
    e->capacity = mem && mem->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? mem->via.u64 : 0;
    if (host) e->capacity = host_capacity(s);
    /* Keep the probe's map and add "available": true for the `devices` reply. The probe ran
     * on all of kilnd's cores: a pinned cpu device works on its pinned ones. */
    const char *pin = host ? kiln_pin_of(s, e->id) : NULL;
    cpu_set_t pinset;
    uint32_t pinned = pin ? kiln_pin_set(pin, &pinset) : 0;
    kiln_buf_init(&e->info);
    kiln_packer_t pk;
    kiln_packer_init(&pk, &e->info);
    kiln_fields_t m;
    kiln_fields_begin(&m, &pk.pk);
    for (uint32_t k = 0; k < d->via.map.size; k++) {
      kiln_fields_key_object(&m, &d->via.map.ptr[k].key);
      if (host && kiln_obj_str_eq(&d->via.map.ptr[k].key, "memory"))
        msgpack_pack_uint64(&pk.pk, e->capacity);
      else if (pinned && kiln_obj_str_eq(&d->via.map.ptr[k].key, "compute_units"))
        msgpack_pack_uint32(&pk.pk, pinned);
      else msgpack_pack_object(&pk.pk, d->via.map.ptr[k].val);
    }
    if (host) kiln_fields_bool(&m, "shares_compile_cores", shares_compile_cores(s, pin));
    kiln_fields_bool(&m, "available", true);
    kiln_fields_end(&m);
    s->num_devices++;
    KILN_LOG_INFO("device", "id=%s kind=%s capacity=%llu", e->id, e->kind,
                  (unsigned long long)e->capacity);
  }
  for (uint32_t i = 0; absent && absent->type == MSGPACK_OBJECT_ARRAY && i < absent->via.array.size;
       i++) {
    const msgpack_object *a = &absent->via.array.ptr[i];
    if (a->type != MSGPACK_OBJECT_MAP || s->num_absent == KILN_ARRAY_SIZE(s->absent)) continue;
    kiln_absent_backend_t *ab = &s->absent[s->num_absent];
    const msgpack_object *kind = kiln_params_find(a, "kind"), *reason = kiln_params_find(a, "reason");
    if (!kind || !reason || kiln_obj_cstr(kind, "kind", ab->kind, sizeof(ab->kind))) continue;
    if (reason->type == MSGPACK_OBJECT_STR)
      snprintf(ab->reason, sizeof(ab->reason), "%.*s", (int)reason->via.str.size,
               reason->via.str.ptr);
    s->num_absent++;
    char q[300];
    KILN_LOG_INFO("device_absent", "kind=%s reason=%s", ab->kind,
                  kiln_log_quote(q, sizeof(q), ab->reason));
  }
  msgpack_unpacked_destroy(&u);
  kiln_buf_deinit(&out);
  if (!st && (s->num_devices == 0 || strcmp(s->devices[0].id, "cpu:0") != 0))
    st = KILN_STATUS(KILN_E_INTERNAL, "the device probe did not report cpu:0 first");
  if (!st) st = check_devices_option(s, &probed);
  for (int i = 0; !st && i < s->cfg.num_pins; i++) st = check_pin(s, s->cfg.pins[i]);
  for (uint32_t i = 0; !st && i < s->num_devices; i++) {
    kiln_map_init(&s->devices[i].slots);
    uv_timer_init(s->loop, &s->devices[i].lease_timer);
    s->devices[i].lease_timer.data = &s->devices[i];
    uv_timer_init(s->loop, &s->devices[i].held_timer);
    s->devices[i].held_timer.data = &s->devices[i];
  }
  return st;
}

void kiln_devices_watchdog(kiln_server_t *s) {
  uint64_t now = kiln_now_ns();
  for (uint32_t i = 0; i < s->num_devices; i++) {
    size_t it = 0;
    void *v;
    while (kiln_map_next(&s->devices[i].slots, &it, NULL, &v)) kiln_worker_watchdog(((kiln_dslot_t *)v)->worker, now);
  }
}

kiln_status_t kiln_device_slot(kiln_server_t *s, kiln_device_entry_t *d, kiln_tenant_t *t,
                               kiln_dslot_t **out) {
  kiln_dslot_t *sl = kiln_map_get(&d->slots, t->index);
  if (sl) {
    *out = sl;
    return KILN_OK;
  }
  sl = calloc(1, sizeof(*sl));
  if (!sl) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "out of memory");
  sl->device = d;
  sl->tenant = t;
  kiln_map_init(&sl->loaded);
  char label[128];
  snprintf(label, sizeof(label), "%s/%s", d->id, t->name);
  const char *cpus = kiln_pin_of(s, d->id);
  const char *tail[] = {"--device", d->id, cpus ? "--cpus" : NULL, cpus, NULL};
  kiln_status_t st = kiln_worker_create(s, KILN_WORKER_DEVICE, label, tail, &sl->worker);
  if (!st) kiln_worker_set_tenant(sl->worker, d, t);
  if (!st) st = kiln_map_put(&d->slots, t->index, sl);
  if (st) {
    if (sl->worker) kiln_worker_destroy(sl->worker);
    kiln_map_deinit(&sl->loaded);
    free(sl);
    return st;
  }
  *out = sl;
  return KILN_OK;
}

kiln_status_t kiln_device_permit(const kiln_device_entry_t *d, const kiln_tenant_t *t) {
  if (kiln_tenant_may_use(t, d->id, d->kind)) return KILN_OK;
  return KILN_STATUS(KILN_E_PERMISSION, "tenant '%s' may not use device %s (tokens file)", t->name,
                     d->id);
}

kiln_device_entry_t *kiln_device_find(kiln_server_t *s, const char *id, uint32_t len) {
  if (!id) return &s->devices[0];
  for (uint32_t i = 0; i < s->num_devices; i++)
    if (strlen(s->devices[i].id) == len && memcmp(s->devices[i].id, id, len) == 0)
      return &s->devices[i];
  return NULL;
}
