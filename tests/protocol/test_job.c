/* protocol/job*.h, the worker seam: every job kind and reply survives its encode/decode pair
 * field for field; a decoder refuses a wrong version, a wrong fd count, a missing field, a
 * value of the wrong type and the wrong kind with E_INTERNAL ("worker job: "); the kind
 * names are the channel's method names. */
#include <criterion/criterion.h>
#include <string.h>

#include "protocol/job_compile.h"
#include "protocol/job_module.h"
#include "protocol/job_tensor.h"
#include "protocol/rpc.h"

typedef struct enc {
  kiln_buf_t buf;
  kiln_mp_doc_t doc;
} enc_t;

/* Reads what the packer wrote back as one value. */
static const msgpack_object *reread(enc_t *e) {
  kiln_status_t st = kiln_mp_doc_read(&e->doc, e->buf.data, e->buf.len, 16, false, &kiln_job_err);
  cr_assert(!st, "%s", kiln_status_message(st));
  return &e->doc.root;
}

static void enc_done(enc_t *e) {
  kiln_mp_doc_deinit(&e->doc);
  kiln_buf_deinit(&e->buf);
}

#define ENCODE(e, fn, v)                   \
  do {                                     \
    kiln_buf_init(&(e)->buf);              \
    kiln_packer_t pk_;                     \
    kiln_packer_init(&pk_, &(e)->buf);     \
    fn(&pk_.pk, v);                        \
    cr_assert(!kiln_packer_status(&pk_));  \
  } while (0)

static void expect_internal(kiln_status_t st, const char *words) {
  cr_assert(st, "accepted; expected a refusal with '%s'", words);
  cr_expect_eq(kiln_status_code(st), KILN_E_INTERNAL, "%s", kiln_status_message(st));
  cr_expect(strncmp(kiln_status_message(st), "worker job: ", 12) == 0, "%s", kiln_status_message(st));
  cr_expect(strstr(kiln_status_message(st), words), "'%s' lacks '%s'", kiln_status_message(st), words);
  kiln_status_free(st);
}

Test(job, names_are_the_channel_methods) {
  for (int k = 1; k < KILN_JOB_KINDS_; k++) {
    const char *n = kiln_job_name((kiln_job_kind_t)k);
    cr_assert(n, "kind %d has no name", k);
    cr_expect_eq(kiln_job_kind_of(n, strlen(n)), k, "%s", n);
  }
  cr_expect_eq(kiln_job_kind_of("launchx", 7), KILN_JOB_NONE);
  cr_expect_eq(kiln_job_kind_of("", 0), KILN_JOB_NONE);
}

Test(job, tensor_jobs_round_trip) {
  for (int k = KILN_JOB_ALLOC; k <= KILN_JOB_SYNC; k++) {
    kiln_tensor_job_t in = {.kind = (kiln_job_kind_t)k, .handle = 1ull << 60, .at = 4096};
    if (k == KILN_JOB_ALLOC || k == KILN_JOB_UPLOAD) in.bytes = 123456789;
    if (k == KILN_JOB_WRITE || k == KILN_JOB_READ) in.offset = 64, in.size = 4000;
    if (k == KILN_JOB_ALLOC || k == KILN_JOB_FREE || k == KILN_JOB_SYNC) in.at = 0;
    if (k == KILN_JOB_SYNC) in.handle = 0;
    enc_t e;
    ENCODE(&e, kiln_tensor_job_encode, &in);
    kiln_tensor_job_t out;
    kiln_status_t st = kiln_tensor_job_decode(in.kind, reread(&e), &out);
    cr_assert(!st, "%s: %s", kiln_job_name(in.kind), kiln_status_message(st));
    cr_expect(out.kind == in.kind && out.handle == in.handle && out.bytes == in.bytes &&
              out.offset == in.offset && out.size == in.size && out.at == in.at,
              "%s changed on the way", kiln_job_name(in.kind));
    /* The same array read as another tensor kind does not fit its schema. */
    if (k == KILN_JOB_ALLOC) expect_internal(kiln_tensor_job_decode(KILN_JOB_UPLOAD, &e.doc.root, &out), "file descriptors");
    expect_internal(kiln_tensor_job_decode(KILN_JOB_LAUNCH, &e.doc.root, &out), "not a tensor job");
    enc_done(&e);
  }
}

Test(job, launch_and_time_round_trip) {
  kiln_launch_job_arg_t args[3] = {{true, 42}, {false, 0xFFFFFFFFFFFFFFFFull}, {false, 0x3F800000}};
  kiln_launch_job_t in = {.kind = KILN_JOB_TIME, .kernel = 2, .grid = {7, 1, 3}, .block = {64, 2, 1},
                          .shared = 4096, .deadline_ms = 5000, .cancel = 99, .nargs = 3, .args = args,
                          .number = 10, .repeat = 3, .min_repeat_ms = 50, .warmup = 2, .flush = true};
  memset(in.module, 0xAB, sizeof(in.module));
  for (int t = 0; t < 2; t++) {
    in.kind = t ? KILN_JOB_TIME : KILN_JOB_LAUNCH;
    enc_t e;
    ENCODE(&e, kiln_launch_job_encode, &in);
    kiln_launch_job_t out;
    kiln_status_t st = kiln_launch_job_decode(in.kind, reread(&e), &out);
    cr_assert(!st, "%s", kiln_status_message(st));
    cr_expect(!memcmp(out.module, in.module, sizeof(in.module)) && out.kernel == 2 && out.shared == 4096);
    cr_expect(!memcmp(out.grid, in.grid, sizeof(in.grid)) && !memcmp(out.block, in.block, sizeof(in.block)));
    cr_expect(out.deadline_ms == 5000 && out.cancel == 99 && out.nargs == 3);
    for (int i = 0; i < 3; i++)
      cr_expect(out.args[i].tensor == args[i].tensor && out.args[i].value == args[i].value, "arg %d", i);
    if (t) cr_expect(out.number == 10 && out.repeat == 3 && out.min_repeat_ms == 50 && out.warmup == 2 && out.flush);
    kiln_launch_job_deinit(&out);
    /* A launch array is one field short of a time job's and the other way round. */
    expect_internal(kiln_launch_job_decode(t ? KILN_JOB_LAUNCH : KILN_JOB_TIME, &e.doc.root, &out), "fields");
    enc_done(&e);
  }
}

/* [1, 0, ...] with field `i` replaced by `bad`: launch's schema refuses it. */
static void expect_launch_refused(int i, const char *bad_hex, const char *words) {
  kiln_launch_job_t in = {.kind = KILN_JOB_LAUNCH, .grid = {1, 1, 1}, .block = {1, 1, 1}};
  enc_t e;
  ENCODE(&e, kiln_launch_job_encode, &in);
  reread(&e);
  msgpack_object bad;
  uint8_t raw[16];
  size_t n = strlen(bad_hex) / 2;
  for (size_t k = 0; k < n; k++) sscanf(bad_hex + 2 * k, "%2hhx", &raw[k]);
  kiln_mp_doc_t bd;
  cr_assert(!kiln_mp_doc_read(&bd, raw, n, 4, false, &kiln_job_err));
  bad = bd.root;
  e.doc.root.via.array.ptr[i] = bad;
  kiln_launch_job_t out;
  expect_internal(kiln_launch_job_decode(KILN_JOB_LAUNCH, &e.doc.root, &out), words);
  kiln_mp_doc_deinit(&bd);
  enc_done(&e);
}

Test(job, launch_schema_refusals) {
  expect_launch_refused(0, "02", "version");          /* version 2 */
  expect_launch_refused(1, "01", "file descriptors"); /* one fd */
  expect_launch_refused(2, "a3616263", "module");     /* "abc" for the key */
  expect_launch_refused(3, "ff", "kernel");           /* -1 */
  expect_launch_refused(4, "93000101", "grid[0] is 0");
  expect_launch_refused(5, "920101", "block");        /* two dimensions */
  expect_launch_refused(6, "cf0000000100000000", "shared"); /* 2^32 */
  expect_launch_refused(9, "91920201", "argument tag");     /* [[2, 1]] */
  expect_launch_refused(9, "c0", "args");
}

Test(job, module_jobs_and_compile_round_trip) {
  kiln_job_kind_t kinds[] = {KILN_JOB_LOAD, KILN_JOB_UNLOAD, KILN_JOB_CANCEL_PAGE};
  for (int i = 0; i < 3; i++) {
    kiln_module_job_t in = {.kind = kinds[i], .size = kinds[i] == KILN_JOB_UNLOAD ? 0 : 777};
    if (kinds[i] != KILN_JOB_CANCEL_PAGE) memset(in.module, i + 1, sizeof(in.module));
    enc_t e;
    ENCODE(&e, kiln_module_job_encode, &in);
    kiln_module_job_t out;
    kiln_status_t st = kiln_module_job_decode(in.kind, reread(&e), &out);
    cr_assert(!st, "%s", kiln_status_message(st));
    cr_expect(out.kind == in.kind && out.size == in.size && !memcmp(out.module, in.module, sizeof(in.module)));
    enc_done(&e);
  }
  kiln_compile_job_t c = {.kind = KILN_PAYLOAD_PTX, .target = "sm_90", .opt_level = 3, .max_block = 1024,
                          .fast_math = true, .size = 1u << 20};
  enc_t e;
  ENCODE(&e, kiln_compile_job_encode, &c);
  kiln_compile_job_t co;
  kiln_status_t st = kiln_compile_job_decode(reread(&e), &co);
  cr_assert(!st, "%s", kiln_status_message(st));
  cr_expect(co.kind == KILN_PAYLOAD_PTX && !strcmp(co.target, "sm_90") && co.opt_level == 3 &&
            co.max_block == 1024 && co.fast_math && co.size == 1u << 20);
  e.doc.root.via.array.ptr[2].via.u64 = KILN_PAYLOAD_KINDS_; /* no such payload kind */
  expect_internal(kiln_compile_job_decode(&e.doc.root, &co), "kind");
  enc_done(&e);
}

Test(job, replies_round_trip_and_refuse_a_wrong_shape) {
  double results[2] = {1e-5, 3e-5};
  kiln_time_reply_t tr = {.repeat = 2, .results = results, .min = 1e-5, .median = 2e-5, .mean = 2e-5,
                          .std = 1e-5, .cv = 0.5, .number = 100};
  enc_t e;
  ENCODE(&e, kiln_time_reply_encode, &tr);
  kiln_time_reply_t out;
  kiln_status_t st = kiln_time_reply_decode(reread(&e), &out);
  cr_assert(!st, "%s", kiln_status_message(st));
  cr_expect(out.repeat == 2 && out.results[1] == 3e-5 && out.median == 2e-5 && out.number == 100);
  kiln_time_reply_deinit(&out);
  /* A launch reply is not a time reply. */
  kiln_launch_reply_t lr;
  expect_internal(kiln_launch_reply_decode(&e.doc.root, &lr), "launch");
  enc_done(&e);
  kiln_compile_reply_t cr = {.size = 19231, .compile_ms = 12.5};
  ENCODE(&e, kiln_compile_reply_encode, &cr);
  kiln_compile_reply_t co;
  st = kiln_compile_reply_decode(reread(&e), &co);
  cr_assert(!st, "%s", kiln_status_message(st));
  cr_expect(co.size == 19231 && co.compile_ms == 12.5);
  expect_internal(kiln_compile_reply_decode(NULL, &co), "compile");
  enc_done(&e);
}
