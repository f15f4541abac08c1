/* Every method of docs/protocol.md §4 through libkiln, and its error cases. */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fixture.h"
#include "protocol/rpc.h"

TestSuite(methods, .init = fixture_up, .fini = fixture_down, .timeout = 60);

Test(methods, hello) {
  kiln_hello_t h;
  ASSERT_OK(kiln_client_hello(g_client, NULL, "test_methods", &h));
  cr_expect_eq(h.version, 1);
  cr_expect_str_eq(h.tenant, "default");
  cr_expect(strncmp(h.server, "kilnd", 5) == 0, "server is '%s'", h.server);
  cr_expect_eq(h.max_message, (1ull << 30) + (1ull << 20));
  cr_expect_eq(h.max_depth, 32);
  cr_expect_eq(h.max_items, 1u << 20);
  cr_expect_eq(h.max_str, h.max_message); /* a str is bounded like a bin */
  cr_expect_gt(h.max_inflight, 0);
}

static void pack_version(msgpack_packer *pk, void *ctx) {
  msgpack_pack_map(pk, 1);
  kiln_pack_kv_u64(pk, "version", *(uint64_t *)ctx);
}

Test(methods, hello_rejects_other_versions) {
  uint64_t v = 2;
  kiln_reply_t *r = NULL;
  ASSERT_CODE(kiln_client_call(g_client, "hello", pack_version, &v, &r), KILN_E_INVALID_ARGUMENT);
  cr_assert_null(r);
  ASSERT_OK(kiln_client_ping(g_client)); /* the connection stays usable */
}

Test(methods, ping_over_tcp_and_unix) {
  ASSERT_OK(kiln_client_ping(g_client));
  kiln_client_t *u = fixture_connect(g_kilnd.unix_url);
  for (int i = 0; i < 100; i++) ASSERT_OK(kiln_client_ping(u));
  kiln_reply_t *r;
  ASSERT_OK(kiln_client_call(u, "ping", NULL, NULL, &r));
  cr_assert(kiln_obj_str_eq(kiln_reply_result(r), "pong"));
  kiln_reply_free(r);
  kiln_client_destroy(u);
}

Test(methods, default_url_comes_from_the_environment) {
  setenv("KILN_URL", g_kilnd.unix_url, 1);
  kiln_client_t *c = fixture_connect(NULL);
  cr_expect_str_eq(kiln_client_url(c), g_kilnd.unix_url);
  ASSERT_OK(kiln_client_ping(c));
  kiln_client_destroy(c);
}

Test(methods, devices) {
  kiln_device_info_t d[16];
  size_t n;
  ASSERT_OK(kiln_client_devices(g_client, false, d, 16, &n));
  cr_assert_geq(n, 1);
  bool cpu = false;
  for (size_t i = 0; i < n && i < 16; i++) {
    cr_expect(d[i].available, "%s listed without absent=true but not available", d[i].id);
    if (strcmp(d[i].id, "cpu:0") != 0) continue;
    cpu = true;
    cr_expect_str_eq(d[i].kind, "cpu");
    cr_expect_str_eq(d[i].arch, "cpu");
    cr_expect_gt(d[i].memory, 0);
    cr_expect_gt(d[i].compute_units, 0);
    cr_expect_gt(d[i].max_block, 0);
    cr_expect_eq(d[i].wave_size, 1);
  }
  cr_assert(cpu, "cpu:0 is not among the devices");

  size_t all;
  ASSERT_OK(kiln_client_devices(g_client, true, d, 16, &all));
  cr_assert_geq(all, n);
  for (size_t i = 0; i < all && i < 16; i++)
    if (!d[i].available) cr_expect_neq(d[i].reason[0], 0, "absent %s has no reason", d[i].id);
}

Test(methods, stats) {
  ASSERT_OK(kiln_client_ping(g_client));
  kiln_reply_t *r;
  ASSERT_OK(kiln_client_stats(g_client, &r));
  const msgpack_object *m = kiln_reply_result(r);
  cr_assert_eq(m->type, MSGPACK_OBJECT_MAP);
  static const char *const fields[] = {"server", "uptime_s", "connections", "requests", "errors",
                                       "tensors", "tensor_bytes", "workers"};
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
    cr_expect_not_null(kiln_object_get(m, fields[i]), "stats lacks '%s'", fields[i]);
  const msgpack_object *conns = kiln_object_get(m, "connections");
  cr_expect(conns && conns->type == MSGPACK_OBJECT_POSITIVE_INTEGER && conns->via.u64 == 1);
  const msgpack_object *ping = kiln_object_get(kiln_object_get(m, "requests"), "ping");
  cr_expect(ping && ping->via.u64 >= 1, "requests.ping not counted");
  kiln_reply_free(r);
}

Test(methods, unknown_method) {
  kiln_reply_t *r = NULL;
  ASSERT_CODE(kiln_client_call(g_client, "no_such_method", NULL, NULL, &r), KILN_E_NO_METHOD);
  ASSERT_OK(kiln_client_ping(g_client));
}

static void pack_unknown_field(msgpack_packer *pk, void *ctx) {
  msgpack_pack_map(pk, 1);
  kiln_pack_kv_u64(pk, "bogus", 1);
}

Test(methods, unknown_field_is_named) {
  kiln_reply_t *r = NULL;
  kiln_status_t s = kiln_client_call(g_client, "ping", pack_unknown_field, NULL, &r);
  cr_assert_not_null(s);
  cr_expect_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  cr_expect(strstr(kiln_status_message(s), "bogus") != NULL, "message: %s",
            kiln_status_message(s));
  kiln_status_free(s);
}

typedef struct alloc_args {
  const char *dtype, *device;
} alloc_args_t;

static void pack_alloc(msgpack_packer *pk, void *ctx) {
  const alloc_args_t *a = ctx;
  msgpack_pack_map(pk, a->device ? 3 : 2);
  kiln_pack_kv_str(pk, "dtype", a->dtype);
  kiln_pack_cstr(pk, "shape");
  msgpack_pack_array(pk, 1);
  msgpack_pack_uint64(pk, 4);
  if (a->device) kiln_pack_kv_str(pk, "device", a->device);
}

Test(methods, bad_dtype_and_unknown_device) {
  kiln_reply_t *r = NULL;
  alloc_args_t bad = {"float128", NULL};
  ASSERT_CODE(kiln_client_call(g_client, "alloc", pack_alloc, &bad, &r), KILN_E_INVALID_ARGUMENT);
  alloc_args_t nodev = {"float32", "cpu:7"};
  ASSERT_CODE(kiln_client_call(g_client, "alloc", pack_alloc, &nodev, &r), KILN_E_NOT_FOUND);
  alloc_args_t ok = {"float32", "cpu:0"};
  ASSERT_OK(kiln_client_call(g_client, "alloc", pack_alloc, &ok, &r));
  uint64_t id;
  ASSERT_OK(kiln_reply_id(r, &id));
  kiln_reply_free(r);
  ASSERT_OK(kiln_client_free_tensor(g_client, id));
}

Test(methods, unknown_ids_are_not_found) {
  uint64_t missing = 12345;
  uint8_t b[4];
  kiln_reply_t *r = NULL;
  ASSERT_CODE(kiln_client_download(g_client, missing, &r), KILN_E_NOT_FOUND);
  ASSERT_CODE(kiln_client_read(g_client, missing, 0, b, 4), KILN_E_NOT_FOUND);
  ASSERT_CODE(kiln_client_write(g_client, missing, 0, b, 4), KILN_E_NOT_FOUND);
  ASSERT_CODE(kiln_client_free_tensor(g_client, missing), KILN_E_NOT_FOUND);
}

Test(methods, mismatched_data_length) {
  float data[3] = {1, 2, 3};
  kiln_tensor_desc_t d = {.dtype = KILN_FLOAT32, .ndim = 1, .shape = {4}, .nbytes = 12};
  uint64_t id;
  ASSERT_CODE(kiln_client_upload(g_client, NULL, &d, data, &id), KILN_E_INVALID_ARGUMENT);
  ASSERT_OK(kiln_client_ping(g_client));
}

Test(methods, wait_on_unknown_msgid) {
  kiln_reply_t *r;
  ASSERT_CODE(kiln_client_wait(g_client, 777, &r), KILN_E_NOT_FOUND);
  ASSERT_OK(kiln_client_wait_any(g_client, &r));
  cr_assert_null(r, "nothing in flight, yet wait_any returned a reply");
}

Test(methods, garbage_ends_the_connection_with_the_daemons_reason) {
  /* 0xc1 starts no MessagePack object: kilnd answers with an error notification and closes
   * the connection; libkiln reports that reason on every later call. */
  static const uint8_t garbage[] = {0xc1, 0xc1, 0xc1};
  cr_assert_eq(send(kiln_client_fd(g_client), garbage, sizeof(garbage), MSG_NOSIGNAL), 3);
  kiln_status_t s = kiln_client_ping(g_client);
  cr_assert_not_null(s);
  cr_expect_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT, "%s: %s",
               kiln_code_name(kiln_status_code(s)), kiln_status_message(s));
  kiln_status_free(s);
  ASSERT_CODE(kiln_client_ping(g_client), KILN_E_INVALID_ARGUMENT); /* sticky */
  kiln_client_t *c = fixture_connect(g_kilnd.tcp_url);
  ASSERT_OK(kiln_client_ping(c)); /* the daemon lives */
  kiln_client_destroy(c);
}

/* A listener that never answers: the client's timeout, without a daemon. */
Test(local, timeout_without_reply, .timeout = 20) {
  char dir[] = "/tmp/kiln-timeout-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s", dir);
  int l = socket(AF_UNIX, SOCK_STREAM, 0);
  cr_assert_eq(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
  cr_assert_eq(listen(l, 4), 0);
  char url[128];
  snprintf(url, sizeof(url), "unix:%s", sa.sun_path);
  kiln_client_t *c;
  ASSERT_OK(kiln_client_create(url, &c));
  kiln_client_set_timeout(c, 100);
  ASSERT_CODE(kiln_client_ping(c), KILN_E_TIMEOUT);
  cr_expect_eq(kiln_client_inflight(c), 1, "the request stays in flight");
  kiln_client_destroy(c);
  close(l);
  unlink(sa.sun_path);
  rmdir(dir);
}

Test(local, malformed_urls) {
  kiln_client_t *c = NULL;
  ASSERT_CODE(kiln_client_create("http://x", &c), KILN_E_INVALID_ARGUMENT);
  ASSERT_CODE(kiln_client_create("tcp:127.0.0.1", &c), KILN_E_INVALID_ARGUMENT);
  ASSERT_CODE(kiln_client_create("tcp:127.0.0.1:port", &c), KILN_E_INVALID_ARGUMENT);
  ASSERT_CODE(kiln_client_create("tcp:[::1:7070", &c), KILN_E_INVALID_ARGUMENT);
  ASSERT_CODE(kiln_client_create("unix:", &c), KILN_E_INVALID_ARGUMENT);
  cr_assert_null(c);
}
