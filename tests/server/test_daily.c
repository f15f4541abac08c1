/* Daily use (issue 16), the daemon's side: start-up options that name what does not exist
 * refuse to start with the reason; the tenant's tensors listed and freed; session-bound
 * tensors; module ids (and CPU kernels' parameter names) across restarts; the unix socket's
 * mode and group; a tokens file others can read; workers reaped and their folders removed
 * before kilnd exits. */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/server/harness.h"

/* --- --devices and --pin name what exists ------------------------------------------------ */

static void refused(const char *const *args, const char *needle) {
  char log[4096];
  int rc = daemon_start_fails(args, log, sizeof(log));
  cr_assert_eq(rc, 1, "kilnd %s %s: exit status %d, expected a refusal (1)\n%s", args[0], args[1],
               rc, log);
  cr_assert(strstr(log, needle), "the refusal does not say '%s':\n%s", needle, log);
}

static void accepted(const char *const *args) {
  char log[4096];
  int rc = daemon_start_fails(args, log, sizeof(log));
  cr_assert_eq(rc, 0, "kilnd %s %s did not start (%d):\n%s", args[0], args[1], rc, log);
}

Test(start, devices_that_do_not_exist_are_refused) {
  refused((const char *const[]){"--devices", "cuda:7", NULL}, "--devices names 'cuda:7'");
  refused((const char *const[]){"--devices", "cpu:1", NULL}, "does not have");
  refused((const char *const[]){"--devices", "cpu,nosuch", NULL}, "'nosuch'");
  /* A backend with no device here is named with the probe's reason. */
  refused((const char *const[]){"--devices", "cuda", NULL}, "cuda: ");
  accepted((const char *const[]){"--devices", "cpu", NULL});
  accepted((const char *const[]){"--devices", "cpu:0", NULL});
}

Test(start, pins_of_absent_cores_or_devices_are_refused) {
  refused((const char *const[]){"--pin", "cpu:0=4095", NULL}, "core 4095 is not one kilnd may run on");
  refused((const char *const[]){"--pin", "cpu:0=0,9999", NULL}, "core 9999");
  refused((const char *const[]){"--pin", "cuda:3=0", NULL}, "serves no device 'cuda:3'");
  refused((const char *const[]){"--pin", "cpu=0", NULL}, "serves no device 'cpu'");
  refused((const char *const[]){"--pin", "cpu:0=2-1", NULL}, "not a list of cores");
  refused((const char *const[]){"--pin", "cpu:0=0,", NULL}, "not a list of cores");
  /* Every part whole (strtol read "0-" as 0-0); characters other than digits, ',' and '-' are
   * refused by the option parser itself (exit 2). */
  const char *partial[] = {"cpu:0=0-", "cpu:0=-1", "cpu:0=-", "cpu:0=0,,0", "cpu:0=,0", "cpu:0=0--1",
                           "cpu:0=0-0-0", "cpu:0=1-0,"};
  for (size_t i = 0; i < sizeof(partial) / sizeof(partial[0]); i++)
    refused((const char *const[]){"--pin", partial[i], NULL}, "not a list of cores");
  refused((const char *const[]){"--pin", "cpu:0=0-99999999999999999999", NULL}, "not a list of cores");
  refused((const char *const[]){"--pin", "cpu:0=0-4095", NULL}, "is not one kilnd may run on");
  accepted((const char *const[]){"--pin", "cpu:0=0", NULL});
  accepted((const char *const[]){"--pin", "cpu:0=0-0,0", NULL});
}

/* --pin compile=CPUS: the compile workers' cores, checked as a device's are. */
Test(start, compile_pins_outside_the_affinity_mask_are_refused) {
  refused((const char *const[]){"--pin", "compile=4095", NULL}, "core 4095 is not one kilnd may run on");
  refused((const char *const[]){"--pin", "compile=1-0", NULL}, "not a list of cores");
  refused((const char *const[]){"--pin", "compiler=0", NULL}, "serves no device 'compiler'");
  cpu_set_t all, one;
  cr_assert_eq(sched_getaffinity(0, sizeof(all), &all), 0);
  int first = -1, other = -1;
  for (int k = 0; k < CPU_SETSIZE && other < 0; k++)
    if (CPU_ISSET(k, &all)) {
      if (first < 0) first = k;
      else other = k;
    }
  char pin[32];
  snprintf(pin, sizeof(pin), "compile=%d", first);
  accepted((const char *const[]){"--pin", pin, NULL});
  if (other < 0) return; /* one core: no core outside a narrower mask to name */
  /* kilnd started on `first` alone (it inherits this test's mask) may not pin to `other`. */
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
  snprintf(pin, sizeof(pin), "compile=%d", other);
  char want[64];
  snprintf(want, sizeof(want), "core %d is not one kilnd may run on", other);
  refused((const char *const[]){"--pin", pin, NULL}, want);
  cr_assert_eq(sched_setaffinity(0, sizeof(all), &all), 0);
}

/* --- tensors, free of many, session-bound tensors ---------------------------------------- */

enum { E_INVALID_ARGUMENT = 1, E_NOT_FOUND = 5 };
#define TOK_A "alpha-token-0123456789"
#define TOK_B "bravo-token-0123456789"

static daemon_t d;
static char tokens_path[128];

static void start(void) {
  snprintf(tokens_path, sizeof(tokens_path), "/tmp/kiln-daily-tokens-%d", (int)getpid());
  write_text_file(tokens_path, TOK_A " alpha\n" TOK_B " bravo\n");
  daemon_start(&d, (const char *const[]){"--tokens", tokens_path, NULL});
}

static void stop(void) {
  if (d.pid) daemon_stop(&d);
  unlink(tokens_path);
}

TestSuite(tensors, .init = start, .fini = stop, .timeout = 120);

static const char *err(const client_t *c) {
  static char buf[512];
  return text_of(c, buf, sizeof(buf));
}

/* hello with a token, a client name and (when not NULL) the tensors' lifetime. */
static void connect_as(client_t *c, const char *token, const char *name, const char *life) {
  client_connect_tcp(c, &d);
  pbuild_t b;
  pb_begin(&b, life ? 3 : 2);
  kiln_pack_kv_str(&b.p.pk, "token", token);
  kiln_pack_kv_str(&b.p.pk, "client", name);
  if (life) kiln_pack_kv_str(&b.p.pk, "tensors", life);
  client_call(c, "hello", &b);
  cr_assert_eq(code_of(c), 0, "hello: %s", err(c));
  const msgpack_object *l = obj_path(c->msg.result, "tensors");
  cr_assert(l && kiln_obj_str_eq(l, life ? life : "tenant"), "hello does not echo the lifetime");
}

static uint64_t alloc_f32(client_t *c, uint32_t n) {
  pbuild_t b;
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "dtype", "float32");
  kiln_pack_cstr(&b.p.pk, "shape");
  msgpack_pack_array(&b.p.pk, 2);
  msgpack_pack_uint32(&b.p.pk, 2);
  msgpack_pack_uint32(&b.p.pk, n);
  client_call(c, "alloc", &b);
  cr_assert_eq(code_of(c), 0, "alloc: %s", err(c));
  return obj_path(c->msg.result, "id")->via.u64;
}

/* The ids `tensors` lists (at most cap); the reply stays in c->msg. */
static uint32_t list(client_t *c, uint64_t *ids, uint32_t cap) {
  client_call(c, "tensors", NULL);
  cr_assert_eq(code_of(c), 0, "tensors: %s", err(c));
  cr_assert_eq(c->msg.result->type, MSGPACK_OBJECT_ARRAY);
  uint32_t n = c->msg.result->via.array.size;
  for (uint32_t i = 0; i < n && i < cap; i++)
    ids[i] = obj_path(&c->msg.result->via.array.ptr[i], "id")->via.u64;
  return n;
}

static void free_ids(client_t *c, const uint64_t *ids, uint32_t n) {
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_cstr(&b.p.pk, "ids");
  msgpack_pack_array(&b.p.pk, n);
  for (uint32_t i = 0; i < n; i++) msgpack_pack_uint64(&b.p.pk, ids[i]);
  client_call(c, "free", &b);
}

Test(tensors, lists_the_tenants_own_and_frees_many) {
  client_t a, b;
  connect_as(&a, TOK_A, "notebook-1", NULL);
  connect_as(&b, TOK_B, "other", NULL);
  uint64_t t1 = alloc_f32(&a, 3), t2 = alloc_f32(&a, 5), tb = alloc_f32(&b, 1);
  uint64_t ids[8];
  cr_assert_eq(list(&a, ids, 8), 2);
  const msgpack_object *e = &a.msg.result->via.array.ptr[ids[0] == t1 ? 0 : 1];
  cr_assert(kiln_obj_str_eq(obj_path(e, "device"), "cpu:0"));
  cr_assert(kiln_obj_str_eq(obj_path(e, "dtype"), "float32"));
  cr_assert(kiln_obj_str_eq(obj_path(e, "client"), "notebook-1"));
  cr_assert_eq(obj_path(e, "bytes")->via.u64, 24);
  const msgpack_object *shape = obj_path(e, "shape");
  cr_assert(shape->type == MSGPACK_OBJECT_ARRAY && shape->via.array.size == 2 &&
            shape->via.array.ptr[1].via.u64 == 3);
  cr_assert(obj_path(e, "age_s")->via.f64 >= 0);
  cr_assert_eq(obj_path(e, "session")->via.boolean, false);
  /* Another tenant's id is unknown to free, and a wrong id frees nothing. */
  uint64_t mixed[] = {t1, tb};
  free_ids(&a, mixed, 2);
  cr_assert_eq(code_of(&a), E_NOT_FOUND, "%s", err(&a));
  cr_assert_eq(list(&a, ids, 8), 2, "a refused free of many freed some");
  uint64_t both[] = {t1, t2, t1};
  free_ids(&a, both, 3);
  cr_assert_eq(code_of(&a), 0, "%s", err(&a));
  cr_assert_eq(obj_path(a.msg.result, "freed")->via.u64, 2);
  cr_assert_eq(list(&a, ids, 8), 0);
  client_send_id(&a, 9, "download", t1);
  cr_assert(client_recv(&a, 5000));
  cr_assert_eq(code_of(&a), E_NOT_FOUND);
  /* all: only the caller's. */
  alloc_f32(&a, 2);
  pbuild_t p;
  pb_begin(&p, 1);
  kiln_pack_kv_bool(&p.p.pk, "all", true);
  client_call(&a, "free", &p);
  cr_assert_eq(obj_path(a.msg.result, "freed")->via.u64, 1);
  cr_assert_eq(list(&b, ids, 8), 1);
  cr_assert_eq(ids[0], tb);
  client_close(&a);
  client_close(&b);
}

Test(tensors, session_tensors_end_with_their_connection) {
  client_t s1, other;
  connect_as(&s1, TOK_A, "private", "session");
  connect_as(&other, TOK_A, "watcher", NULL);
  uint64_t kept = alloc_f32(&other, 4);
  alloc_f32(&s1, 4);
  alloc_f32(&s1, 8);
  uint64_t ids[8];
  cr_assert_eq(list(&other, ids, 8), 3, "the tenant sees its session tensors too");
  client_close(&s1);
  int tries = 0;
  while (list(&other, ids, 8) != 1 && tries++ < 500) usleep(10000);
  cr_assert_eq(list(&other, ids, 8), 1, "the session's tensors outlived it");
  cr_assert_eq(ids[0], kept);
  /* Their bytes went back: stats counts the one tensor left. */
  client_call(&other, "stats", NULL);
  cr_assert_eq(obj_path(other.msg.result, "tensors")->via.u64, 1);
  cr_assert_eq(obj_path(other.msg.result, "tensor_bytes")->via.u64, 32);
  free_ids(&other, ids, 1);
  client_close(&other);
}

/* Hostile params: each answers E_INVALID_ARGUMENT (or E_NOT_FOUND) and the connection stays. */
Test(tensors, bad_params_are_refused) {
  client_t a;
  connect_as(&a, TOK_A, "x", NULL);
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_kv_str(&b.p.pk, "ids", "1,2");
  client_call(&a, "free", &b);
  cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "%s", err(&a));
  pb_begin(&b, 1);
  kiln_pack_cstr(&b.p.pk, "ids");
  msgpack_pack_array(&b.p.pk, 2);
  msgpack_pack_uint32(&b.p.pk, 1);
  msgpack_pack_int32(&b.p.pk, -1);
  client_call(&a, "free", &b);
  cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "%s", err(&a));
  pb_begin(&b, 1);
  kiln_pack_kv_bool(&b.p.pk, "all", false);
  client_call(&a, "free", &b);
  cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "%s", err(&a));
  pb_begin(&b, 2);
  kiln_pack_kv_u64(&b.p.pk, "id", 1);
  kiln_pack_kv_bool(&b.p.pk, "all", true);
  client_call(&a, "free", &b);
  cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "%s", err(&a));
  client_call(&a, "free", NULL);
  cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "%s", err(&a));
  pb_begin(&b, 1);
  kiln_pack_cstr(&b.p.pk, "ids");
  msgpack_pack_array(&b.p.pk, 0);
  client_call(&a, "free", &b);
  cr_assert_eq(code_of(&a), 0, "%s", err(&a));
  cr_assert_eq(obj_path(a.msg.result, "freed")->via.u64, 0);
  pb_begin(&b, 1);
  kiln_pack_kv_str(&b.p.pk, "device", "cuda:9");
  client_call(&a, "tensors", &b);
  cr_assert_eq(code_of(&a), E_NOT_FOUND, "%s", err(&a));
  pb_begin(&b, 1);
  kiln_pack_kv_u64(&b.p.pk, "limit", 3);
  client_call(&a, "tensors", &b);
  cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "%s", err(&a));
  static const char *const lives[] = {"forever", "Session", ""};
  for (int i = 0; i < 3; i++) {
    pb_begin(&b, 2);
    kiln_pack_kv_str(&b.p.pk, "token", TOK_A);
    kiln_pack_kv_str(&b.p.pk, "tensors", lives[i]);
    client_call(&a, "hello", &b);
    cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "'%s': %s", lives[i], err(&a));
  }
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "token", TOK_A);
  kiln_pack_kv_u64(&b.p.pk, "tensors", 1);
  client_call(&a, "hello", &b);
  cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "%s", err(&a));
  client_call(&a, "ping", NULL);
  cr_assert_eq(code_of(&a), 0);
  client_close(&a);
}

/* Before hello on a tokens server `tensors` is refused like every other method. */
Test(tensors, needs_hello) {
  client_t a;
  client_connect_tcp(&a, &d);
  client_call(&a, "tensors", NULL);
  cr_assert_eq(code_of(&a), 3, "%s", err(&a));
  client_close(&a);
}

/* --- module ids across restarts ---------------------------------------------------------- */

static const char fill_ir[] =
    "define void @fill(ptr %p, float %v) section \"kiln.kernel\" {\n"
    "  store float %v, ptr %p\n"
    "  ret void\n"
    "}\n";

static void module_call(client_t *c, const char *id) {
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_kv_str(&b.p.pk, "module", id);
  client_call(c, "module", &b);
}

/* Starts kilnd on the given cache and tokens (d's directory is its own, removed at stop). */
static void start_on(daemon_t *dd, const char *cache) {
  daemon_start(dd, (const char *const[]){"--tokens", tokens_path, "--cache-dir", cache, NULL});
}

static void connect_to(client_t *c, const daemon_t *dd, const char *token) {
  client_connect_tcp(c, dd);
  client_send_hello(c, 1, token);
  cr_assert(client_recv(c, 5000));
  cr_assert_eq(code_of(c), 0, "hello: %s", err(c));
}

Test(modules, ids_survive_a_restart_with_the_same_cache, .timeout = 180) {
  char cache[] = "/tmp/kiln-daily-cache-XXXXXX";
  cr_assert(mkdtemp(cache));
  snprintf(tokens_path, sizeof(tokens_path), "/tmp/kiln-daily-tokens-m-%d", (int)getpid());
  write_text_file(tokens_path, TOK_A " alpha\n" TOK_B " bravo\n");
  daemon_t d1, d2;
  start_on(&d1, cache);
  client_t a;
  connect_to(&a, &d1, TOK_A);
  char id[65];
  compile_module(&a, 2, fill_ir, id);
  client_close(&a);
  daemon_stop(&d1);

  start_on(&d2, cache);
  connect_to(&a, &d2, TOK_A);
  module_call(&a, id);
  cr_assert_eq(code_of(&a), 0, "a module id of the last run: %s", err(&a));
  cr_assert(kiln_obj_str_eq(obj_path(a.msg.result, "module"), id));
  cr_assert_eq(obj_path(a.msg.result, "cached")->via.boolean, true);
  const msgpack_object *ks = obj_path(a.msg.result, "kernels");
  cr_assert(ks && ks->type == MSGPACK_OBJECT_ARRAY && ks->via.array.size == 1);
  cr_assert(kiln_obj_str_eq(obj_path(&ks->via.array.ptr[0], "name"), "fill"));
  /* A CPU kernel's table keeps the IR's parameter names. */
  const msgpack_object *args = obj_path(&ks->via.array.ptr[0], "args");
  cr_assert(args && args->type == MSGPACK_OBJECT_ARRAY && args->via.array.size == 2);
  cr_assert(kiln_obj_str_eq(obj_path(&args->via.array.ptr[0], "name"), "p"));
  cr_assert(kiln_obj_str_eq(obj_path(&args->via.array.ptr[1], "name"), "v"));
  /* It launches, without being compiled again. */
  uint64_t t = alloc_f32(&a, 1);
  pbuild_t b;
  pb_begin(&b, 5);
  pack_launch_geometry(&b.p.pk, id, "fill", 1, 1);
  kiln_pack_cstr(&b.p.pk, "args");
  msgpack_pack_array(&b.p.pk, 2);
  msgpack_pack_map(&b.p.pk, 1);
  kiln_pack_kv_u64(&b.p.pk, "tensor", t);
  msgpack_pack_float(&b.p.pk, 2.5f);
  client_call(&a, "launch", &b);
  cr_assert_eq(code_of(&a), 0, "launch after the restart: %s", err(&a));
  client_send_id(&a, 3, "download", t);
  cr_assert(client_recv(&a, 5000));
  const msgpack_object *data = obj_path(a.msg.result, "data");
  float got;
  memcpy(&got, data->via.bin.ptr, 4);
  cr_assert_eq(got, 2.5f);
  client_call(&a, "stats", NULL);
  cr_assert_eq(obj_path(a.msg.result, "compile.compiles")->via.u64, 0, "it was compiled again");
  /* Another tenant never built it: unknown to it, across the restart as before. */
  client_t bv;
  connect_to(&bv, &d2, TOK_B);
  module_call(&bv, id);
  cr_assert_eq(code_of(&bv), E_NOT_FOUND, "%s", err(&bv));
  client_close(&bv);
  client_close(&a);
  daemon_stop(&d2);

  /* The entry gone from the disk store: the id is unknown, and its grant is dropped. */
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s/objects/*/ && printf 'not a key\\n' >> %s/grants/alpha.modules",
           cache, cache);
  cr_assert_eq(system(cmd), 0);
  start_on(&d2, cache);
  connect_to(&a, &d2, TOK_A);
  module_call(&a, id);
  cr_assert_eq(code_of(&a), E_NOT_FOUND, "%s", err(&a));
  client_close(&a);
  daemon_stop(&d2);
  char path[128];
  snprintf(path, sizeof(path), "%s/grants/alpha.modules", cache);
  FILE *f = fopen(path, "r");
  cr_assert(f);
  cr_assert_eq(fgetc(f), EOF, "the grants file kept lines of entries that are gone");
  fclose(f);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", cache);
  cr_assert_eq(system(cmd), 0);
  unlink(tokens_path);
}

Test(modules, module_params_are_checked, .init = start, .fini = stop) {
  client_t a;
  connect_as(&a, TOK_A, "x", NULL);
  static const char *const bad[] = {"zz", "", "0123", NULL};
  for (int i = 0; bad[i]; i++) {
    module_call(&a, bad[i]);
    cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "'%s': %s", bad[i], err(&a));
  }
  char unknown[65];
  memset(unknown, 'a', 64);
  unknown[64] = 0;
  module_call(&a, unknown);
  cr_assert_eq(code_of(&a), E_NOT_FOUND, "%s", err(&a));
  pbuild_t b;
  pb_begin(&b, 1);
  kiln_pack_kv_u64(&b.p.pk, "module", 7);
  client_call(&a, "module", &b);
  cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "%s", err(&a));
  client_call(&a, "module", NULL);
  cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "%s", err(&a));
  pb_begin(&b, 2);
  kiln_pack_kv_str(&b.p.pk, "module", unknown);
  kiln_pack_kv_u64(&b.p.pk, "kind", 1);
  client_call(&a, "module", &b);
  cr_assert_eq(code_of(&a), E_INVALID_ARGUMENT, "%s", err(&a));
  client_close(&a);
}

/* --- the unix socket's mode and group ---------------------------------------------------- */

static struct stat socket_stat(const char *const *extra) {
  daemon_t dd;
  daemon_start(&dd, extra);
  struct stat st;
  cr_assert_eq(stat(dd.unix_path, &st), 0);
  daemon_stop(&dd);
  return st;
}

Test(start, unix_socket_mode_and_group) {
  /* Without options only kilnd's user may connect, whatever the umask. */
  mode_t um = umask(0);
  struct stat st = socket_stat(NULL);
  umask(um);
  cr_assert(S_ISSOCK(st.st_mode));
  cr_assert_eq(st.st_mode & 07777, 0600, "default mode %o under umask 0", st.st_mode & 07777);
  st = socket_stat((const char *const[]){"--socket-mode", "0660", NULL});
  cr_assert_eq(st.st_mode & 07777, 0660);
  st = socket_stat((const char *const[]){"--socket-group", "nogroup", NULL});
  cr_assert_eq(st.st_mode & 07777, 0660, "mode with a group %o", st.st_mode & 07777);
  cr_assert_eq(st.st_gid, getgrnam("nogroup")->gr_gid);
  st = socket_stat((const char *const[]){"--socket-mode", "0666", "--socket-group", "4321", NULL});
  cr_assert_eq(st.st_mode & 07777, 0666);
  cr_assert_eq(st.st_gid, 4321);
  static const char *const bad_modes[] = {"888", "01777", "rw", "", "-1", NULL};
  char log[2048];
  for (int i = 0; bad_modes[i]; i++)
    cr_assert_eq(daemon_start_fails((const char *const[]){"--socket-mode", bad_modes[i], NULL}, log, sizeof(log)),
                 2, "--socket-mode '%s' was accepted", bad_modes[i]);
  cr_assert_eq(daemon_start_fails((const char *const[]){"--socket-group", "no-such-group-kiln", NULL}, log,
                                  sizeof(log)), 2);
  cr_assert(strstr(log, "socket-group"), "%s", log);
}

/* --- a tokens file others can read is warned about ---------------------------------------- */

static bool warned_about(const char *mode_path, mode_t mode) {
  chmod(mode_path, mode);
  daemon_t dd;
  daemon_start(&dd, (const char *const[]){"--tokens", mode_path, NULL});
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "grep -q 'event=tokens_file_mode path=%s mode=%04o' %s/kilnd.log", mode_path,
           (unsigned)mode, dd.dir);
  bool w = system(cmd) == 0;
  daemon_stop(&dd);
  return w;
}

Test(start, a_tokens_file_others_can_read_is_warned_about) {
  char path[128];
  snprintf(path, sizeof(path), "/tmp/kiln-daily-mode-tokens-%d", (int)getpid());
  write_text_file(path, TOK_A " alpha\n");
  cr_assert(warned_about(path, 0644), "no warning for a world-readable tokens file");
  cr_assert(warned_about(path, 0620), "no warning for a group-writable tokens file");
  cr_assert_not(warned_about(path, 0600), "a warning for a private tokens file");
  unlink(path);
}

/* --- workers are reaped and their folders removed before kilnd exits ---------------------- */

static bool dir_is_empty(const char *path) {
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s)\"", path);
  return system(cmd) == 0;
}

Test(start, workers_are_reaped_and_their_folders_removed) {
  char tmp[] = "/tmp/kiln-daily-tmpdir-XXXXXX";
  cr_assert(mkdtemp(tmp));
  chmod(tmp, 0755); /* compile workers of a root kilnd run as nobody */
  setenv("TMPDIR", tmp, 1);
  daemon_t dd;
  daemon_start(&dd, (const char *const[]){"--compile-workers", "2", NULL});
  pid_t kids[8];
  int n = children_of(dd.pid, kids, 8);
  cr_assert(n >= 2, "no compile workers");
  cr_assert_not(dir_is_empty(tmp), "the compile workers have no folders in $TMPDIR");
  cr_assert_eq(daemon_stop(&dd), 0);
  for (int i = 0; i < n; i++)
    cr_assert(kill(kids[i], 0) != 0 && errno == ESRCH, "worker %d outlived kilnd", (int)kids[i]);
  cr_assert(dir_is_empty(tmp), "compile worker folders outlived kilnd");
  /* A start refused after the compile workers started (a port in use) leaves nothing either. */
  daemon_start(&dd, NULL);
  char port[160], log[2048];
  snprintf(port, sizeof(port), "tcp:%s", dd.tcp);
  cr_assert_eq(daemon_start_fails((const char *const[]){"--listen", port, NULL}, log, sizeof(log)), 1, "%s", log);
  daemon_stop(&dd);
  cr_assert(dir_is_empty(tmp), "a refused start left compile worker folders");
  unsetenv("TMPDIR");
  rmdir(tmp);
}
