/* Tensors through libkiln: every dtype round trip, alloc, write/read at offsets, free, and
 * uploads larger than one message. */
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

TestSuite(tensors, .init = fixture_up, .fini = fixture_down, .timeout = 120);

static void fill(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (uint8_t)(seed >> 16);
  }
}

static kiln_tensor_desc_t desc_of(kiln_dtype_t dt, uint32_t ndim, const uint64_t *shape) {
  kiln_tensor_desc_t d = {.dtype = dt, .ndim = ndim};
  uint64_t n = kiln_dtype_size(dt);
  for (uint32_t i = 0; i < ndim; i++) {
    d.shape[i] = shape[i];
    n *= shape[i];
  }
  d.nbytes = n;
  return d;
}

static void round_trip(const kiln_tensor_desc_t *d, uint32_t seed) {
  uint8_t *data = malloc(d->nbytes + 1);
  fill(data, (size_t)d->nbytes, seed);
  if (d->dtype == KILN_BOOL) /* numpy bools are 0 or 1 */
    for (size_t i = 0; i < d->nbytes; i++) data[i] &= 1;
  uint64_t id;
  ASSERT_OK(kiln_client_upload(g_client, "cpu:0", d, data, &id));
  kiln_reply_t *r;
  ASSERT_OK(kiln_client_download(g_client, id, &r));
  kiln_tensor_desc_t got;
  const void *p;
  ASSERT_OK(kiln_reply_tensor(r, &got, &p));
  cr_assert_eq(got.dtype, d->dtype, "dtype %s came back as %s", kiln_dtype_name(d->dtype),
               kiln_dtype_name(got.dtype));
  cr_assert_eq(got.ndim, d->ndim);
  for (uint32_t i = 0; i < d->ndim; i++) cr_assert_eq(got.shape[i], d->shape[i]);
  cr_assert_eq(got.nbytes, d->nbytes);
  cr_assert(d->nbytes == 0 || memcmp(p, data, d->nbytes) == 0, "%s data differs",
            kiln_dtype_name(d->dtype));
  kiln_reply_free(r);
  ASSERT_OK(kiln_client_free_tensor(g_client, id));
  free(data);
}

Test(tensors, every_dtype_round_trips) {
  static const uint64_t s2[] = {3, 5}, s1[] = {17}, s3[] = {2, 3, 4}, szero[] = {4, 0, 2};
  for (int dt = KILN_FLOAT16; dt < KILN_DTYPE_COUNT_; dt++) {
    kiln_tensor_desc_t shapes[] = {desc_of(dt, 2, s2), desc_of(dt, 1, s1), desc_of(dt, 3, s3),
                                   desc_of(dt, 0, NULL) /* 0-d: one element */,
                                   desc_of(dt, 3, szero) /* no data */};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
      round_trip(&shapes[i], (uint32_t)(dt * 10 + i));
  }
}

Test(tensors, alloc_is_zero_filled) {
  static const uint64_t shape[] = {1000};
  uint64_t id;
  ASSERT_OK(kiln_client_alloc(g_client, NULL, KILN_INT32, shape, 1, &id));
  int32_t got[1000];
  memset(got, 0xff, sizeof(got));
  kiln_tensor_desc_t d;
  ASSERT_OK(kiln_client_download_into(g_client, id, got, sizeof(got), &d));
  cr_assert_eq(d.dtype, KILN_INT32);
  cr_assert_eq(d.nbytes, sizeof(got));
  for (int i = 0; i < 1000; i++) cr_assert_eq(got[i], 0, "element %d is %d", i, got[i]);
  uint8_t small[16];
  ASSERT_CODE(kiln_client_download_into(g_client, id, small, sizeof(small), &d),
              KILN_E_RESOURCE_EXHAUSTED);
  ASSERT_OK(kiln_client_free_tensor(g_client, id));
}

Test(tensors, write_and_read_at_offsets) {
  static const uint64_t shape[] = {256};
  uint64_t id;
  ASSERT_OK(kiln_client_alloc(g_client, NULL, KILN_UINT8, shape, 1, &id));
  uint8_t chunk[64];
  for (int i = 0; i < 64; i++) chunk[i] = (uint8_t)(i + 1);
  ASSERT_OK(kiln_client_write(g_client, id, 100, chunk, sizeof(chunk)));
  uint8_t all[256];
  ASSERT_OK(kiln_client_read(g_client, id, 0, all, sizeof(all)));
  for (int i = 0; i < 256; i++)
    cr_assert_eq(all[i], i >= 100 && i < 164 ? (uint8_t)(i - 99) : 0, "byte %d", i);
  uint8_t part[10];
  ASSERT_OK(kiln_client_read(g_client, id, 110, part, sizeof(part)));
  cr_assert_eq(part[0], 11);
  /* Past the end: an error, and the tensor is unchanged. */
  ASSERT_CODE(kiln_client_write(g_client, id, 200, chunk, sizeof(chunk)), KILN_E_INVALID_ARGUMENT);
  ASSERT_CODE(kiln_client_read(g_client, id, 250, part, sizeof(part)), KILN_E_INVALID_ARGUMENT);
  ASSERT_OK(kiln_client_read(g_client, id, 0, all, sizeof(all)));
  cr_assert_eq(all[255], 0);
  ASSERT_OK(kiln_client_free_tensor(g_client, id));
}

Test(tensors, free_then_not_found) {
  float v[4] = {1, 2, 3, 4};
  kiln_tensor_desc_t d = {.dtype = KILN_FLOAT32, .ndim = 1, .shape = {4}, .nbytes = 16};
  uint64_t id;
  ASSERT_OK(kiln_client_upload(g_client, NULL, &d, v, &id));
  cr_assert_lt(id, 1ull << 63);
  ASSERT_OK(kiln_client_free_tensor(g_client, id));
  kiln_reply_t *r;
  ASSERT_CODE(kiln_client_download(g_client, id, &r), KILN_E_NOT_FOUND);
  ASSERT_CODE(kiln_client_free_tensor(g_client, id), KILN_E_NOT_FOUND);
}

Test(tensors, tensors_belong_to_the_tenant_not_the_connection) {
  float v[2] = {5, 6};
  kiln_tensor_desc_t d = {.dtype = KILN_FLOAT32, .ndim = 1, .shape = {2}, .nbytes = 8};
  uint64_t id;
  kiln_client_t *other = fixture_connect(g_kilnd.unix_url);
  ASSERT_OK(kiln_client_upload(other, NULL, &d, v, &id));
  kiln_client_destroy(other);
  float got[2];
  ASSERT_OK(kiln_client_download_into(g_client, id, got, sizeof(got), NULL));
  cr_assert(got[0] == 5 && got[1] == 6);
  ASSERT_OK(kiln_client_free_tensor(g_client, id));
}

Test(tensors, large_tensor_round_trip) {
  static const uint64_t shape[] = {16u << 20}; /* 64 MiB of float32 */
  kiln_tensor_desc_t d = desc_of(KILN_FLOAT32, 1, shape);
  uint8_t *data = malloc(d.nbytes);
  fill(data, d.nbytes, 7);
  uint64_t id;
  ASSERT_OK(kiln_client_upload(g_client, NULL, &d, data, &id));
  kiln_reply_t *r;
  ASSERT_OK(kiln_client_download(g_client, id, &r));
  kiln_tensor_desc_t got;
  const void *p;
  ASSERT_OK(kiln_reply_tensor(r, &got, &p));
  cr_assert_eq(got.nbytes, d.nbytes);
  cr_assert(memcmp(p, data, d.nbytes) == 0);
  kiln_reply_free(r);
  ASSERT_OK(kiln_client_free_tensor(g_client, id));
  free(data);
}

/* A daemon whose messages are at most 4 MiB: kiln_client_upload learns the limit from hello
 * and sends a 10 MiB tensor as alloc + write chunks. */
static void small_messages_up(void) {
  static const char *const args[] = {"--max-message", "4194304", NULL};
  fixture_up_with(args);
}

TestSuite(chunked, .init = small_messages_up, .fini = fixture_down, .timeout = 60);

Test(chunked, upload_splits_into_writes) {
  kiln_hello_t h;
  ASSERT_OK(kiln_client_hello(g_client, NULL, NULL, &h));
  cr_assert_eq(h.max_message, 4194304);
  static const uint64_t shape[] = {10u << 20};
  kiln_tensor_desc_t d = desc_of(KILN_UINT8, 1, shape);
  uint8_t *data = malloc(d.nbytes), *back = malloc(d.nbytes);
  fill(data, d.nbytes, 3);
  uint64_t id;
  ASSERT_OK(kiln_client_upload(g_client, NULL, &d, data, &id));
  for (size_t off = 0; off < d.nbytes; off += 1u << 20)
    ASSERT_OK(kiln_client_read(g_client, id, off, back + off, 1u << 20));
  cr_assert(memcmp(back, data, d.nbytes) == 0);
  /* One message over the limit is refused and the connection closed; the daemon lives. */
  uint32_t msgid;
  ASSERT_OK(kiln_client_submit_upload(g_client, NULL, &d, data, &msgid));
  kiln_reply_t *r = NULL;
  kiln_status_t s = kiln_client_wait(g_client, msgid, &r);
  if (!s) s = kiln_reply_status(r);
  cr_assert_not_null(s, "a 10 MiB message passed a 4 MiB limit");
  cr_expect_eq(kiln_status_code(s), KILN_E_RESOURCE_EXHAUSTED, "%s", kiln_status_message(s));
  kiln_status_free(s);
  kiln_reply_free(r);
  kiln_client_t *c = fixture_connect(g_kilnd.tcp_url);
  ASSERT_OK(kiln_client_free_tensor(c, id));
  kiln_client_destroy(c);
  free(data);
  free(back);
}
