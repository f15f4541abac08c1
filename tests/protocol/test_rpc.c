/* The RPC codec: every message kind decodes, every wrong shape is an E_INVALID_ARGUMENT that
 * says what is wrong (with the msgid when it could be read), named-field getters, packers. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/buf.h"
#include "helpers.h"
#include "protocol/frame.h"
#include "protocol/rpc.h"

#define CORPUS_CAP 64

static kiln_status_t parse(const bytes_t *b, kiln_rpc_msg_t *m, bool *has_msgid) {
  return kiln_rpc_parse(b->p, b->n, m, has_msgid);
}

static const corpus_entry_t *find_entry(const corpus_entry_t *c, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(c[i].name, name) == 0) return &c[i];
  cr_assert_fail("no corpus entry '%s'", name);
  return NULL;
}

/* Every valid message, cut by the framer from a one-byte-at-a-time feed, decodes. */
Test(rpc, every_valid_message_decodes_after_framing) {
  corpus_entry_t c[CORPUS_CAP];
  size_t n = valid_corpus(c, CORPUS_CAP);
  for (size_t i = 0; i < n; i++) {
    kiln_limits_t lim;
    kiln_limits_default(&lim);
    kiln_reader_t r;
    kiln_reader_init(&r, &lim, 0);
    feed_result_t fr;
    feed(&r, c[i].bytes.p, c[i].bytes.n, chunk_one, NULL, &fr);
    cr_assert_eq(fr.count, 1, "%s", c[i].name);
    kiln_rpc_msg_t m;
    bool has_msgid;
    kiln_status_t s = parse(&fr.msgs[0], &m, &has_msgid);
    cr_assert_null(s, "%s: %s", c[i].name, kiln_status_message(s));
    cr_assert_eq(has_msgid, m.type != KILN_RPC_NOTIFICATION, "%s", c[i].name);
    kiln_rpc_msg_deinit(&m);
    feed_result_free(&fr);
    kiln_reader_deinit(&r);
  }
  corpus_free(c, n);
}

Test(rpc, message_kinds) {
  corpus_entry_t c[CORPUS_CAP];
  size_t n = valid_corpus(c, CORPUS_CAP);
  kiln_rpc_msg_t m;
  bool has;

  const corpus_entry_t *e = find_entry(c, n, "request, [] params");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert_eq(m.type, KILN_RPC_REQUEST);
  cr_assert_eq(m.msgid, 1);
  cr_assert(kiln_rpc_method_is(&m, "ping"));
  cr_assert_null(m.params);
  /* Decoded strings point into the message bytes: no copy. */
  cr_assert((const uint8_t *)m.method > e->bytes.p &&
            (const uint8_t *)m.method < e->bytes.p + e->bytes.n);
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "request, [map] params");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert_eq(m.msgid, 2);
  cr_assert(kiln_rpc_method_is(&m, "hello"));
  cr_assert_not_null(m.params);
  cr_assert_eq(m.params->type, MSGPACK_OBJECT_MAP);
  uint64_t version = 0;
  cr_assert_null(kiln_params_u64(m.params, "version", true, &version));
  cr_assert_eq(version, 1);
  const char *client;
  uint32_t client_len;
  cr_assert_null(kiln_params_str(m.params, "client", true, &client, &client_len));
  cr_assert_eq(client_len, 5);
  cr_assert_arr_eq(client, "tests", 5);
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "request, bin method");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert(kiln_rpc_method_is(&m, "ping"));
  cr_assert_not(kiln_rpc_method_is(&m, "pin"));
  cr_assert_not(kiln_rpc_method_is(&m, "pings"));
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "request, nil params");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert_null(m.params);
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "request, bare map params");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert_not_null(m.params);
  cr_assert_eq(m.params->via.map.size, 2);
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "response, result");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert_eq(m.type, KILN_RPC_RESPONSE);
  cr_assert(has);
  cr_assert_eq(m.msgid, 7);
  cr_assert_eq(m.error->type, MSGPACK_OBJECT_NIL);
  cr_assert_null(kiln_rpc_error_to_status(m.error));
  cr_assert(kiln_obj_str_eq(m.result, "pong"));
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "response, error");
  cr_assert_null(parse(&e->bytes, &m, &has));
  kiln_status_t s = kiln_rpc_error_to_status(m.error);
  cr_assert_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  cr_assert_str_eq(kiln_status_message(s), "field 'x' is bad");
  cr_assert_eq(m.result->type, MSGPACK_OBJECT_NIL);
  kiln_status_free(s);
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "notification, [map] params");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert_eq(m.type, KILN_RPC_NOTIFICATION);
  cr_assert_not(has);
  cr_assert(kiln_rpc_method_is(&m, "error"));
  uint64_t code = 0;
  cr_assert_null(kiln_params_u64(m.params, "code", true, &code));
  cr_assert_eq(code, 1);
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "notification, [] params");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert_null(m.params);
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "request, msgid 2^32-1");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert_eq(m.msgid, UINT32_MAX);
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "request, wide encodings");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert_eq(m.msgid, 256);
  cr_assert(kiln_rpc_method_is(&m, "ping"));
  const uint8_t *k;
  size_t klen;
  cr_assert_null(kiln_params_bytes(m.params, "k", true, &k, &klen));
  cr_assert_eq(klen, 2);
  cr_assert_eq(k[0], 0xff);
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "notification, bin method, nil params");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert(kiln_rpc_method_is(&m, "x"));
  cr_assert_null(m.params);
  kiln_rpc_msg_deinit(&m);

  e = find_entry(c, n, "response, error with uint16 msgid");
  cr_assert_null(parse(&e->bytes, &m, &has));
  cr_assert_eq(m.msgid, 0x1234);
  s = kiln_rpc_error_to_status(m.error);
  cr_assert_eq(kiln_status_code(s), KILN_E_NOT_FOUND);
  cr_assert_str_eq(kiln_status_message(s), "no!");
  kiln_status_free(s);
  kiln_rpc_msg_deinit(&m);

  corpus_free(c, n);
}

/* --- The malformed corpus ---------------------------------------------------------------- */

typedef struct bad_case {
  const char *name;
  const uint8_t *bytes;
  size_t n;
  bool frames;     /* the framer cuts it as one whole object (else: framing error or partial) */
  bool has_msgid;  /* kiln_rpc_parse recovers the msgid */
  uint32_t msgid;
  const char *needle; /* in the error message */
} bad_case_t;

#define B(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

static const bad_case_t bad_cases[] = {
    {"nil", B(0xc0), true, false, 0, "must be an array"},
    {"int", B(0x05), true, false, 0, "must be an array"},
    {"string", B(0xa2, 'h', 'i'), true, false, 0, "must be an array"},
    {"map", B(0x81, 0x00, 0x01), true, false, 0, "must be an array"},
    {"empty array", B(0x90), true, false, 0, "must be an array"},
    {"[0]", B(0x91, 0x00), true, false, 0, "must be an array"},
    {"[0, msgid]", B(0x92, 0x00, 0x07), true, false, 0, "must be an array"},
    {"five elements", B(0x95, 0x00, 0x07, 0xa1, 'm', 0x90, 0xc0), true, false, 0,
     "must be an array"},
    {"request of 3", B(0x93, 0x00, 0x07, 0xa1, 'm'), true, false, 0, "have 4 elements"},
    {"response of 3", B(0x93, 0x01, 0x07, 0xc0), true, false, 0, "have 4 elements"},
    {"type 3", B(0x94, 0x03, 0x07, 0xa1, 'm', 0x90), true, false, 0, "type must be 0, 1 or 2"},
    {"type -1", B(0x94, 0xff, 0x07, 0xa1, 'm', 0x90), true, false, 0, "type must be"},
    {"type str", B(0x94, 0xa1, '0', 0x07, 0xa1, 'm', 0x90), true, false, 0, "type must be"},
    {"type 256", B(0x94, 0xcd, 0x01, 0x00, 0x07, 0xa1, 'm', 0x90), true, false, 0, "type must be"},
    {"msgid -1", B(0x94, 0x00, 0xff, 0xa1, 'm', 0x90), true, false, 0, "msgid must be"},
    {"msgid int64 -2^40", B(0x94, 0x00, 0xd3, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0xa1, 'm', 0x90),
     true, false, 0, "msgid must be"},
    {"msgid 2^32", B(0x94, 0x00, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0, 0xa1, 'm', 0x90), true, false, 0,
     "unsigned 32-bit"},
    {"msgid float", B(0x94, 0x00, 0xca, 0x3f, 0x80, 0, 0, 0xa1, 'm', 0x90), true, false, 0,
     "msgid must be"},
    {"msgid str", B(0x94, 0x00, 0xa1, '1', 0xa1, 'm', 0x90), true, false, 0, "msgid must be"},
    {"method int", B(0x94, 0x00, 0x07, 0x05, 0x90), true, true, 7, "method must be a string"},
    {"method nil", B(0x94, 0x00, 0xcc, 0xc8, 0xc0, 0x90), true, true, 200, "method must be"},
    {"method array", B(0x94, 0x00, 0xcd, 0x01, 0x00, 0x91, 0xa1, 'm', 0x90), true, true, 256,
     "method must be"},
    {"params int", B(0x94, 0x00, 0x07, 0xa1, 'm', 0x05), true, true, 7, "params must be an array"},
    {"params str", B(0x94, 0x00, 0x07, 0xa1, 'm', 0xa1, 'x'), true, true, 7, "params must be"},
    {"params true", B(0x94, 0x00, 0x07, 0xa1, 'm', 0xc3), true, true, 7, "params must be"},
    {"params [1]", B(0x94, 0x00, 0x07, 0xa1, 'm', 0x91, 0x01), true, true, 7, "not one map"},
    {"params [[]]", B(0x94, 0x00, 0x07, 0xa1, 'm', 0x91, 0x90), true, true, 7, "not one map"},
    {"params [{}, {}]", B(0x94, 0x00, 0xce, 0, 1, 0, 0, 0xa1, 'm', 0x92, 0x80, 0x80), true, true,
     65536, "array of 2 elements"},
    {"notification of 4", B(0x94, 0x02, 0xa1, 'm', 0x90, 0xc0), true, false, 0,
     "a notification has 3 elements"},
    {"notification of 2", B(0x92, 0x02, 0xa1, 'm'), true, false, 0, "must be an array"},
    /* Not framed as one message: parse sees them only if a caller hands it bad bytes. */
    {"empty", B(0), false, false, 0, "malformed"},
    {"0xc1", B(0xc1), false, false, 0, "malformed"},
    {"0xc1 inside", B(0x94, 0x00, 0x07, 0xc1, 0x90), false, false, 0, "malformed"},
    {"truncated request", B(0x94, 0x00, 0x07, 0xa4, 'p', 'i'), false, false, 0, "malformed"},
    {"trailing bytes", B(0x94, 0x00, 0x07, 0xa1, 'm', 0x90, 0xc0), false, false, 0, "malformed"},
};

Test(rpc, malformed_corpus) {
  for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
    const bad_case_t *c = &bad_cases[i];
    size_t n = strcmp(c->name, "empty") == 0 ? 0 : c->n;

    /* Through the framer, one byte at a time. */
    kiln_limits_t lim;
    kiln_limits_default(&lim);
    kiln_reader_t r;
    kiln_reader_init(&r, &lim, 0);
    feed_result_t fr;
    feed(&r, c->bytes, n, chunk_one, NULL, &fr);
    if (c->frames) {
      cr_assert_eq(fr.count, 1, "%s: framed as %zu messages", c->name, fr.count);
      cr_assert_eq(fr.msgs[0].n, n, "%s", c->name);
    } else {
      /* Trailing bytes frame as a message plus the start of another. */
      cr_assert(fr.count == 0 || strcmp(c->name, "trailing bytes") == 0, "%s", c->name);
    }
    feed_result_free(&fr);
    kiln_reader_deinit(&r);

    kiln_rpc_msg_t m;
    bool has = true;
    kiln_status_t s = kiln_rpc_parse(c->bytes, n, &m, &has);
    cr_assert_not_null(s, "%s parsed", c->name);
    cr_assert_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT, "%s", c->name);
    cr_assert(strstr(kiln_status_message(s), c->needle), "%s: '%s' lacks '%s'", c->name,
              kiln_status_message(s), c->needle);
    cr_assert_eq(has, c->has_msgid, "%s", c->name);
    if (c->has_msgid) cr_assert_eq(m.msgid, c->msgid, "%s", c->name);
    kiln_status_free(s);
    kiln_rpc_msg_deinit(&m);

    /* Whatever parse recovered, the peek from the raw bytes agrees. */
    uint32_t peeked = 0;
    if (c->has_msgid) {
      cr_assert(kiln_rpc_peek_msgid(c->bytes, n, &peeked), "%s", c->name);
      cr_assert_eq(peeked, c->msgid, "%s", c->name);
    }
  }
}

/* Notifications get no answer, so kilnd ignores them whatever they hold: they always decode
 * (issue 11 §5), with what cannot be read left NULL and flagged `odd`. */
Test(rpc, notifications_of_any_method_and_params_decode) {
  const struct {
    const char *name;
    const uint8_t *bytes;
    size_t n;
    bool odd, has_method, has_params;
  } cases[] = {
      {"method int", B(0x93, 0x02, 0x05, 0x90), true, false, false},
      {"method nil, params nil", B(0x93, 0x02, 0xc0, 0xc0), true, false, false},
      {"params int", B(0x93, 0x02, 0xa1, 'm', 0x07), true, true, false},
      {"params [1, 2]", B(0x93, 0x02, 0xa1, 'm', 0x92, 0x01, 0x02), true, true, false},
      {"params of 5 items (neovim's nvim_set_client_info)",
       B(0x93, 0x02, 0xa4, 'n', 'v', 'i', 'm', 0x95, 0xa1, 'c', 0x80, 0xa6, 'r', 'e', 'm', 'o',
         't', 'e', 0x80, 0x80),
       true, true, false},
      {"params [map]", B(0x93, 0x02, 0xc4, 0x01, 'm', 0x91, 0x80), false, true, true},
      {"params []", B(0x93, 0x02, 0xa1, 'm', 0x90), false, true, false},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    kiln_rpc_msg_t m;
    bool has = true;
    kiln_status_t s = kiln_rpc_parse(cases[i].bytes, cases[i].n, &m, &has);
    cr_assert_null(s, "%s: %s", cases[i].name, kiln_status_message(s));
    cr_assert_eq(m.type, KILN_RPC_NOTIFICATION, "%s", cases[i].name);
    cr_assert_not(has, "%s", cases[i].name);
    cr_assert_eq(m.odd, cases[i].odd, "%s", cases[i].name);
    cr_assert_eq(m.method != NULL, cases[i].has_method, "%s", cases[i].name);
    cr_assert_eq(m.params != NULL, cases[i].has_params, "%s", cases[i].name);
    kiln_rpc_msg_deinit(&m);
  }
}

Test(rpc, peek_msgid) {
  uint32_t id = 0;
  cr_assert(kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x00, 0x05}, 3, &id));
  cr_assert_eq(id, 5);
  cr_assert(kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x00, 0xcc, 0xfe}, 4, &id));
  cr_assert_eq(id, 0xfe);
  cr_assert(kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x00, 0xcd, 0x12, 0x34}, 5, &id));
  cr_assert_eq(id, 0x1234);
  cr_assert(kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x00, 0xce, 0xff, 0xff, 0xff, 0xff, 0xc1},
                                8, &id));
  cr_assert_eq(id, UINT32_MAX);
  id = 99;
  /* Too short, not a request, or a msgid that is not a u32. */
  cr_assert_not(kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x00}, 2, &id));
  cr_assert_not(kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x00, 0xce, 0, 0, 0}, 6, &id));
  cr_assert_not(kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x00, 0xcd, 0}, 4, &id));
  cr_assert_not(kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x01, 0x05}, 3, &id));
  cr_assert_not(kiln_rpc_peek_msgid((const uint8_t[]){0x93, 0x00, 0x05}, 3, &id));
  cr_assert_not(kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x00, 0xff}, 3, &id));
  cr_assert_not(kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x00, 0xd0, 0x05}, 4, &id));
  cr_assert_not(
      kiln_rpc_peek_msgid((const uint8_t[]){0x94, 0x00, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1}, 11, &id));
  cr_assert_eq(id, 99, "a failed peek must leave the msgid alone");
}

/* --- Named-field parameters -------------------------------------------------------------- */

typedef struct params_fixture {
  bytes_t bytes;
  msgpack_unpacked u;
  const msgpack_object *params;
} params_fixture_t;

static params_fixture_t fx;

static void params_setup(void) {
  packer_t p;
  packer_init(&p);
  msgpack_packer *pk = &p.pk;
  msgpack_pack_map(pk, 11);
  pack_str(pk, "s"); pack_str(pk, "str");
  pack_str(pk, "b"); pack_bin(pk, "\x00\x01\x02", 3);
  pack_str(pk, "u"); msgpack_pack_uint64(pk, 5);
  pack_str(pk, "n"); msgpack_pack_int64(pk, -3);
  pack_str(pk, "bigu"); msgpack_pack_uint64(pk, UINT64_MAX);
  pack_str(pk, "f"); msgpack_pack_double(pk, 1.5);
  pack_str(pk, "f32"); msgpack_pack_float(pk, 0.25f);
  pack_str(pk, "t"); msgpack_pack_true(pk);
  pack_str(pk, "a"); msgpack_pack_array(pk, 2); msgpack_pack_uint8(pk, 1); msgpack_pack_uint8(pk, 2);
  pack_str(pk, "m"); msgpack_pack_map(pk, 0);
  pack_str(pk, "z"); msgpack_pack_nil(pk);
  fx.bytes = packer_take(&p);
  msgpack_sbuffer_destroy(&p.sb);
  msgpack_unpacked_init(&fx.u);
  size_t off = 0;
  cr_assert_eq(msgpack_unpack_next(&fx.u, (const char *)fx.bytes.p, fx.bytes.n, &off),
               MSGPACK_UNPACK_SUCCESS);
  fx.params = &fx.u.data;
}

static void params_teardown(void) {
  msgpack_unpacked_destroy(&fx.u);
  bytes_free(&fx.bytes);
}

/* An E_INVALID_ARGUMENT whose message holds `needle`; frees it. */
static void expect_invalid(kiln_status_t s, const char *needle) {
  cr_assert_not_null(s, "expected an error with '%s'", needle);
  cr_assert_eq(kiln_status_code(s), KILN_E_INVALID_ARGUMENT);
  cr_assert(strstr(kiln_status_message(s), needle), "'%s' lacks '%s'", kiln_status_message(s),
            needle);
  kiln_status_free(s);
}

TestSuite(params, .init = params_setup, .fini = params_teardown);

Test(params, strings_and_bytes) {
  const char *s = NULL;
  uint32_t sn = 0;
  cr_assert_null(kiln_params_str(fx.params, "s", true, &s, &sn));
  cr_assert_eq(sn, 3);
  cr_assert_arr_eq(s, "str", 3);
  cr_assert_null(kiln_params_str(fx.params, "b", true, &s, &sn)); /* a bin is accepted */
  cr_assert_eq(sn, 3);
  expect_invalid(kiln_params_str(fx.params, "u", true, &s, &sn), "field 'u' must be a string");
  const uint8_t *b = NULL;
  size_t bn = 0;
  cr_assert_null(kiln_params_bytes(fx.params, "b", true, &b, &bn));
  cr_assert_eq(bn, 3);
  cr_assert_eq(b[2], 2);
  cr_assert_null(kiln_params_bytes(fx.params, "s", true, &b, &bn));
  cr_assert_eq(bn, 3);
  expect_invalid(kiln_params_bytes(fx.params, "a", true, &b, &bn), "field 'a' must be bytes");
}

Test(params, integers) {
  uint64_t u = 0;
  cr_assert_null(kiln_params_u64(fx.params, "u", true, &u));
  cr_assert_eq(u, 5);
  cr_assert_null(kiln_params_u64(fx.params, "bigu", true, &u));
  cr_assert_eq(u, UINT64_MAX);
  expect_invalid(kiln_params_u64(fx.params, "n", true, &u), "field 'n' must be a non-negative");
  expect_invalid(kiln_params_u64(fx.params, "f", true, &u), "field 'f'");
  expect_invalid(kiln_params_u64(fx.params, "s", true, &u), "field 's'");
  int64_t i = 0;
  cr_assert_null(kiln_params_i64(fx.params, "n", true, &i));
  cr_assert_eq(i, -3);
  cr_assert_null(kiln_params_i64(fx.params, "u", true, &i));
  cr_assert_eq(i, 5);
  expect_invalid(kiln_params_i64(fx.params, "bigu", true, &i), "field 'bigu' must be a 64-bit");
  expect_invalid(kiln_params_i64(fx.params, "t", true, &i), "field 't'");
}

Test(params, floats_bools_arrays_maps) {
  double d = 0;
  cr_assert_null(kiln_params_f64(fx.params, "f", true, &d));
  cr_assert_eq(d, 1.5);
  cr_assert_null(kiln_params_f64(fx.params, "f32", true, &d));
  cr_assert_eq(d, 0.25);
  cr_assert_null(kiln_params_f64(fx.params, "u", true, &d));
  cr_assert_eq(d, 5.0);
  cr_assert_null(kiln_params_f64(fx.params, "n", true, &d));
  cr_assert_eq(d, -3.0);
  expect_invalid(kiln_params_f64(fx.params, "s", true, &d), "field 's' must be a number");
  bool t = false;
  cr_assert_null(kiln_params_bool(fx.params, "t", true, &t));
  cr_assert(t);
  expect_invalid(kiln_params_bool(fx.params, "u", true, &t), "field 'u' must be true or false");
  const msgpack_object_array *a = NULL;
  cr_assert_null(kiln_params_array(fx.params, "a", true, &a));
  cr_assert_eq(a->size, 2);
  expect_invalid(kiln_params_array(fx.params, "m", true, &a), "field 'm' must be an array");
  const msgpack_object *m = NULL;
  cr_assert_null(kiln_params_map(fx.params, "m", true, &m));
  cr_assert_eq(m->type, MSGPACK_OBJECT_MAP);
  expect_invalid(kiln_params_map(fx.params, "a", true, &m), "field 'a' must be a map");
}

/* Missing (or nil) and required: an error naming the field. Missing and optional: OK, and the
 * output keeps its default. */
Test(params, missing_fields) {
  uint64_t u = 42;
  expect_invalid(kiln_params_u64(fx.params, "nope", true, &u), "missing required field 'nope'");
  cr_assert_null(kiln_params_u64(fx.params, "nope", false, &u));
  cr_assert_eq(u, 42);
  expect_invalid(kiln_params_u64(fx.params, "z", true, &u), "missing required field 'z'");
  cr_assert_null(kiln_params_u64(fx.params, "z", false, &u));
  cr_assert_eq(u, 42);
  /* [] params decode to NULL: every field is absent. */
  const char *s = "default";
  uint32_t sn = 7;
  cr_assert_null(kiln_params_str(NULL, "device", false, &s, &sn));
  cr_assert_str_eq(s, "default");
  expect_invalid(kiln_params_str(NULL, "device", true, &s, &sn), "'device'");
  bool b = true;
  cr_assert_null(kiln_params_bool(NULL, "absent", false, &b));
  cr_assert(b);
  double d = 3;
  cr_assert_null(kiln_params_f64(fx.params, "nope", false, &d));
  cr_assert_eq(d, 3);
  cr_assert_null(kiln_params_find(NULL, "x"));
  cr_assert_null(kiln_params_find(fx.params, "x"));
  cr_assert_not_null(kiln_params_find(fx.params, "z"));
}

static msgpack_object *unpack_into(msgpack_unpacked *u, const bytes_t *b) {
  msgpack_unpacked_init(u);
  size_t off = 0;
  cr_assert_eq(msgpack_unpack_next(u, (const char *)b->p, b->n, &off), MSGPACK_UNPACK_SUCCESS);
  return &u->data;
}

Test(params, check_unknown_duplicate_and_non_string_fields) {
  static const char *const allowed[] = {"id", "offset", "size", NULL};
  static const char *const none[] = {NULL};
  msgpack_unpacked u;
  bytes_t b;

  cr_assert_null(kiln_params_check(NULL, "read", allowed));

  b = BYTES_LIT(0x82, 0xa2, 'i', 'd', 0x01, 0xa6, 'o', 'f', 'f', 's', 'e', 't', 0x00);
  cr_assert_null(kiln_params_check(unpack_into(&u, &b), "read", allowed));
  msgpack_unpacked_destroy(&u);
  bytes_free(&b);

  b = BYTES_LIT(0x82, 0xa2, 'i', 'd', 0x01, 0xa4, 's', 'i', 'z', 'z', 0x00);
  expect_invalid(kiln_params_check(unpack_into(&u, &b), "read", allowed),
                 "read: unknown field 'sizz'; known fields: id, offset, size");
  msgpack_unpacked_destroy(&u);
  bytes_free(&b);

  b = BYTES_LIT(0x81, 0xa1, 'x', 0x01);
  expect_invalid(kiln_params_check(unpack_into(&u, &b), "ping", none),
                 "ping: unknown field 'x'; known fields: (none)");
  msgpack_unpacked_destroy(&u);
  bytes_free(&b);

  b = BYTES_LIT(0x83, 0xa2, 'i', 'd', 0x01, 0xa4, 's', 'i', 'z', 'e', 0x00, 0xa2, 'i', 'd', 0x02);
  expect_invalid(kiln_params_check(unpack_into(&u, &b), "read", allowed),
                 "read: field 'id' appears twice");
  msgpack_unpacked_destroy(&u);
  bytes_free(&b);

  /* The same name once as bin and once as str is the same field given twice, in either order. */
  b = BYTES_LIT(0x82, 0xc4, 0x02, 'i', 'd', 0x01, 0xa2, 'i', 'd', 0x02);
  expect_invalid(kiln_params_check(unpack_into(&u, &b), "read", allowed), "appears twice");
  msgpack_unpacked_destroy(&u);
  bytes_free(&b);
  b = BYTES_LIT(0x82, 0xa2, 'i', 'd', 0x01, 0xc4, 0x02, 'i', 'd', 0x02);
  expect_invalid(kiln_params_check(unpack_into(&u, &b), "read", allowed), "appears twice");
  msgpack_unpacked_destroy(&u);
  bytes_free(&b);

  b = BYTES_LIT(0x81, 0x01, 0x02);
  expect_invalid(kiln_params_check(unpack_into(&u, &b), "read", allowed),
                 "read: field names must be strings");
  msgpack_unpacked_destroy(&u);
  bytes_free(&b);

  /* A long unknown name is cut in the message; a long list of known names does not overflow. */
  char name[300];
  memset(name, 'q', sizeof(name));
  packer_t p;
  packer_init(&p);
  msgpack_pack_map(&p.pk, 1);
  msgpack_pack_str(&p.pk, sizeof(name));
  msgpack_pack_str_body(&p.pk, name, sizeof(name));
  msgpack_pack_nil(&p.pk);
  b = packer_take(&p);
  msgpack_sbuffer_destroy(&p.sb);
  static const char *const many[] = {
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
      "ccccccccccccccccccccccccccccccccccccccccccc", "dddddddddddddddddddddddddddddddddddddddddddddd",
      "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", "ffffffffffffffffffffffffffffffffffffffffffffff",
      "ggggggggggggggggggggggggggggggggggggggggggg", "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh",
      NULL};
  kiln_status_t s = kiln_params_check(unpack_into(&u, &b), "m", many);
  cr_assert_not_null(s);
  cr_assert_lt(strlen(kiln_status_message(s)), 400);
  cr_assert_not(strstr(kiln_status_message(s), "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"));
  kiln_status_free(s);
  msgpack_unpacked_destroy(&u);
  bytes_free(&b);
}

Test(params, obj_cstr_and_str_eq) {
  msgpack_unpacked u;
  bytes_t b = BYTES_LIT(0x94, 0xa3, 'a', 'b', 'c', 0xa3, 'a', 0x00, 'c', 0xc4, 0x03, 'a', 'b', 'c',
                        0x07);
  msgpack_object *o = unpack_into(&u, &b);
  msgpack_object *abc = &o->via.array.ptr[0], *nul = &o->via.array.ptr[1],
                 *bin = &o->via.array.ptr[2], *num = &o->via.array.ptr[3];
  char out[4];
  cr_assert_null(kiln_obj_cstr(abc, "device", out, sizeof(out)));
  cr_assert_str_eq(out, "abc");
  expect_invalid(kiln_obj_cstr(abc, "device", out, 3), "device is too long (3 bytes, at most 2)");
  expect_invalid(kiln_obj_cstr(nul, "device", out, sizeof(out)), "device contains a NUL byte");
  expect_invalid(kiln_obj_cstr(num, "device", out, sizeof(out)), "device must be a string");
  expect_invalid(kiln_obj_cstr(bin, "device", out, sizeof(out)), "device must be a string");
  cr_assert(kiln_obj_str_eq(abc, "abc"));
  cr_assert(kiln_obj_str_eq(bin, "abc"));
  cr_assert_not(kiln_obj_str_eq(abc, "ab"));
  cr_assert_not(kiln_obj_str_eq(abc, "abcd"));
  cr_assert_not(kiln_obj_str_eq(num, "7"));
  msgpack_unpacked_destroy(&u);
  bytes_free(&b);
}

/* msgpack-c decodes an empty str with a NULL pointer; kiln hands out "" instead, so that
 * callers may memcpy/memcmp/memchr what they get (UBSan flags those on NULL even for 0 bytes). */
Test(params, empty_strings_are_never_null) {
  bytes_t b = BYTES_LIT(0x94, 0x00, 0x07, 0xa0, 0x91, 0x82, 0xa1, 'd', 0xa0, 0xa0, 0x01);
  kiln_rpc_msg_t m;
  bool has;
  cr_assert_null(kiln_rpc_parse(b.p, b.n, &m, &has));
  cr_assert_eq(m.method_len, 0);
  cr_assert_not_null(m.method);
  cr_assert(kiln_rpc_method_is(&m, ""));
  cr_assert_not(kiln_rpc_method_is(&m, "ping"));
  const char *s = NULL;
  uint32_t sn = 9;
  cr_assert_null(kiln_params_str(m.params, "d", true, &s, &sn));
  cr_assert_not_null(s);
  cr_assert_eq(sn, 0);
  const uint8_t *bytes = NULL;
  size_t bn = 9;
  cr_assert_null(kiln_params_bytes(m.params, "d", true, &bytes, &bn));
  cr_assert_not_null(bytes);
  cr_assert_eq(bn, 0);
  const msgpack_object *d = kiln_params_find(m.params, "d");
  cr_assert(kiln_obj_str_eq(d, ""));
  char out[4] = "xyz";
  cr_assert_null(kiln_obj_cstr(d, "device", out, sizeof(out)));
  cr_assert_str_eq(out, "");
  /* An empty key is an unknown field, named as ''. */
  static const char *const allowed[] = {"d", NULL};
  expect_invalid(kiln_params_check(m.params, "m", allowed), "unknown field ''");
  kiln_rpc_msg_deinit(&m);
  bytes_free(&b);
}

/* --- Encoding ---------------------------------------------------------------------------- */

static void frame_and_parse(kiln_buf_t *buf, kiln_rpc_msg_t *m, bytes_t *keep) {
  /* The packed bytes must be exactly one message to the framer. */
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  kiln_reader_t r;
  kiln_reader_init(&r, &lim, 0);
  feed_result_t fr;
  feed(&r, buf->data, buf->len, chunk_one, NULL, &fr);
  cr_assert_eq(fr.count, 1);
  cr_assert_eq(fr.msgs[0].n, buf->len);
  *keep = fr.msgs[0];
  kiln_reader_deinit(&r);
  bool has;
  kiln_status_t s = kiln_rpc_parse(keep->p, keep->n, m, &has);
  cr_assert_null(s, "%s", kiln_status_message(s));
}

Test(rpc, packers_round_trip) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  kiln_packer_t p;
  kiln_packer_init(&p, &buf);
  kiln_rpc_pack_request_head(&p.pk, 0xdeadbeef, "alloc");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_map(&p.pk, 5);
  kiln_pack_kv_str(&p.pk, "dtype", "float32");
  kiln_pack_kv_u64(&p.pk, "big", UINT64_MAX);
  kiln_pack_kv_i64(&p.pk, "neg", INT64_MIN);
  kiln_pack_kv_f64(&p.pk, "pi", 3.25);
  kiln_pack_kv_bool(&p.pk, "no", false);
  cr_assert_null(kiln_packer_status(&p));

  kiln_rpc_msg_t m;
  bytes_t keep;
  frame_and_parse(&buf, &m, &keep);
  cr_assert_eq(m.type, KILN_RPC_REQUEST);
  cr_assert_eq(m.msgid, 0xdeadbeef);
  cr_assert(kiln_rpc_method_is(&m, "alloc"));
  static const char *const fields[] = {"dtype", "big", "neg", "pi", "no", NULL};
  cr_assert_null(kiln_params_check(m.params, "alloc", fields));
  const char *s;
  uint32_t sn;
  cr_assert_null(kiln_params_str(m.params, "dtype", true, &s, &sn));
  cr_assert_eq(sn, 7);
  uint64_t u;
  cr_assert_null(kiln_params_u64(m.params, "big", true, &u));
  cr_assert_eq(u, UINT64_MAX);
  int64_t i;
  cr_assert_null(kiln_params_i64(m.params, "neg", true, &i));
  cr_assert_eq(i, INT64_MIN);
  double d;
  cr_assert_null(kiln_params_f64(m.params, "pi", true, &d));
  cr_assert_eq(d, 3.25);
  bool b = true;
  cr_assert_null(kiln_params_bool(m.params, "no", true, &b));
  cr_assert_not(b);
  kiln_rpc_msg_deinit(&m);
  bytes_free(&keep);

  buf.len = 0;
  kiln_rpc_pack_result_head(&p.pk, 9);
  kiln_pack_cstr(&p.pk, "pong");
  frame_and_parse(&buf, &m, &keep);
  cr_assert_eq(m.type, KILN_RPC_RESPONSE);
  cr_assert_eq(m.msgid, 9);
  cr_assert_null(kiln_rpc_error_to_status(m.error));
  cr_assert(kiln_obj_str_eq(m.result, "pong"));
  kiln_rpc_msg_deinit(&m);
  bytes_free(&keep);

  buf.len = 0;
  kiln_rpc_pack_error(&p.pk, 10, KILN_E_NOT_FOUND, "no tensor 5");
  frame_and_parse(&buf, &m, &keep);
  cr_assert_eq(m.msgid, 10);
  cr_assert_eq(m.result->type, MSGPACK_OBJECT_NIL);
  kiln_status_t st = kiln_rpc_error_to_status(m.error);
  cr_assert_eq(kiln_status_code(st), KILN_E_NOT_FOUND);
  cr_assert_str_eq(kiln_status_message(st), "no tensor 5");
  cr_assert_str_eq(kiln_status_where(st), "remote:0");
  kiln_status_free(st);
  kiln_rpc_msg_deinit(&m);
  bytes_free(&keep);

  buf.len = 0;
  kiln_rpc_pack_notification_head(&p.pk, "error");
  msgpack_pack_array(&p.pk, 0);
  frame_and_parse(&buf, &m, &keep);
  cr_assert_eq(m.type, KILN_RPC_NOTIFICATION);
  cr_assert(kiln_rpc_method_is(&m, "error"));
  cr_assert_null(m.params);
  kiln_rpc_msg_deinit(&m);
  bytes_free(&keep);

  kiln_buf_deinit(&buf);
}

Test(rpc, error_objects) {
  cr_assert_null(kiln_rpc_error_to_status(NULL));
  struct {
    bytes_t b;
    kiln_code_t code;
    const char *msg;
  } cases[] = {
      {BYTES_LIT(0xc0), KILN_E_OK, NULL},
      {BYTES_LIT(0x92, 0x02, 0xc4, 0x02, 'n', 'm'), KILN_E_NO_METHOD, "nm"},
      {BYTES_LIT(0x92, 0x0e, 0xa0), KILN_E_INTERNAL, ""},
      {BYTES_LIT(0x92, 0x03, 0x05), KILN_E_UNAUTHENTICATED, ""},
      /* Codes outside the table and 0 become E_INTERNAL, keeping the message. */
      {BYTES_LIT(0x92, 0x63, 0xa1, 'x'), KILN_E_INTERNAL, "x"},
      {BYTES_LIT(0x92, 0x00, 0xa1, 'x'), KILN_E_INTERNAL, "x"},
      {BYTES_LIT(0x92, 0xff, 0xa1, 'x'), KILN_E_INTERNAL, "not [code, message]"},
      {BYTES_LIT(0x91, 0x01), KILN_E_INTERNAL, "not [code, message]"},
      {BYTES_LIT(0xa3, 'b', 'a', 'd'), KILN_E_INTERNAL, "not [code, message]"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    msgpack_unpacked u;
    kiln_status_t s = kiln_rpc_error_to_status(unpack_into(&u, &cases[i].b));
    if (cases[i].code == KILN_E_OK) {
      cr_assert_null(s);
    } else {
      cr_assert_eq(kiln_status_code(s), cases[i].code, "case %zu", i);
      cr_assert(strstr(kiln_status_message(s), cases[i].msg), "case %zu: %s", i,
                kiln_status_message(s));
    }
    kiln_status_free(s);
    msgpack_unpacked_destroy(&u);
    bytes_free(&cases[i].b);
  }
}
