/* Backend lookup and device id parsing. */
#include <criterion/criterion.h>
#include <string.h>

#include "device/registry.h"

static void expect_invalid(const char *id, const char *needle) {
  const kiln_backend_t *b = NULL;
  uint32_t i = 77;
  kiln_status_t s = kiln_device_id_parse(id, &b, &i);
  cr_assert(s != KILN_OK, "\"%s\" should be rejected", id);
  cr_expect_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  cr_expect(strstr(kiln_status_message(s), needle), "message \"%s\" lacks \"%s\"",
            kiln_status_message(s), needle);
  cr_expect_null(b, "outputs are set on success only");
  cr_expect_eq(i, 77);
  kiln_status_free(s);
}

Test(registry, lists_three_backends_in_order) {
  cr_assert_eq(kiln_device_backend_count(), 3);
  cr_expect_str_eq(kiln_device_backend_at(0)->kind, "cpu");
  cr_expect_str_eq(kiln_device_backend_at(1)->kind, "hsa");
  cr_expect_str_eq(kiln_device_backend_at(2)->kind, "cuda");
  cr_expect_null(kiln_device_backend_at(3));
  cr_expect_eq(kiln_device_backend_find("cuda"), &kiln_backend_cuda);
  cr_expect_null(kiln_device_backend_find("rocm"));
}

Test(registry, every_backend_fills_its_table) {
  for (size_t i = 0; i < kiln_device_backend_count(); i++) {
    const kiln_backend_t *b = kiln_device_backend_at(i);
    cr_expect(b->probe && b->open, "%s", b->kind);
  }
  const kiln_backend_t *c = &kiln_backend_cpu;
  cr_expect(c->close && c->info && c->mem_alloc && c->mem_free && c->mem_address &&
            c->mem_host_ptr && c->copy_in && c->copy_out && c->module_load &&
            c->module_unload && c->launch && c->flush_caches);
}

Test(registry, parses_ids) {
  const kiln_backend_t *b;
  uint32_t i;
  cr_assert_eq(kiln_device_id_parse("cpu:0", &b, &i), KILN_OK);
  cr_expect_eq(b, &kiln_backend_cpu);
  cr_expect_eq(i, 0);
  cr_assert_eq(kiln_device_id_parse("hsa:1", &b, &i), KILN_OK);
  cr_expect_eq(b, &kiln_backend_hsa);
  cr_expect_eq(i, 1);
  cr_assert_eq(kiln_device_id_parse("cuda:12", &b, &i), KILN_OK);
  cr_expect_eq(b, &kiln_backend_cuda);
  cr_expect_eq(i, 12);
  cr_assert_eq(kiln_device_id_parse("cuda", &b, &i), KILN_OK, "a bare kind means index 0");
  cr_expect_eq(i, 0);
}

Test(registry, rejects_bad_ids) {
  expect_invalid("", "empty");
  expect_invalid("gpu:0", "unknown kind");
  expect_invalid("cpux:0", "unknown kind");
  expect_invalid("cpu:", "missing index");
  expect_invalid("cpu:01", "leading zero");
  expect_invalid("cpu:-1", "decimal");
  expect_invalid("cpu:+1", "decimal");
  expect_invalid("cpu:1x", "decimal");
  expect_invalid("hsa:0:1", "decimal");
  expect_invalid("cuda:99999999999999999999", "too large");
  expect_invalid(":0", "unknown kind");
}

Test(registry, formats_ids) {
  char buf[32];
  cr_expect_str_eq(kiln_device_id_format(buf, sizeof buf, "hsa", 3), "hsa:3");
}
