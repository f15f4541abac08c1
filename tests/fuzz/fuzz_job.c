/* libFuzzer target: every decoder of the worker seam (protocol/job*.h) on arbitrary bytes:
 * the first byte picks a job kind, the rest is one MessagePack value read by the bounded
 * reader (protocol/mp.h) as the workers and kilnd read it, and handed to that kind's job
 * decoder and to the three reply decoders. Besides memory errors it checks that:
 *   - a rejection has a code and a message, and leaves nothing to free;
 *   - an accepted job or reply re-encodes to bytes that decode to the same struct, and that
 *     encoding is canonical (encoding the re-decoded struct gives the same bytes). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/job_compile.h"
#include "protocol/job_graph.h"
#include "protocol/job_module.h"
#include "protocol/job_tensor.h"
#include "protocol/rpc.h"
#include "tests/fuzz/fuzz_check.h"

/* Encodes with `enc`, reads the bytes back into *doc (the caller deinits it). */
#define ENCODE(buf, enc, ...)                          \
  do {                                                 \
    kiln_buf_init(&(buf));                             \
    kiln_packer_t pk_;                                 \
    kiln_packer_init(&pk_, &(buf));                    \
    enc(&pk_.pk, __VA_ARGS__);                         \
    CHECK(kiln_packer_status(&pk_) == KILN_OK);        \
  } while (0)

static void reread(const kiln_buf_t *b, kiln_mp_doc_t *doc) {
  kiln_status_t st = kiln_mp_doc_read(doc, b->data, b->len, 16, false, &kiln_job_err);
  CHECK(st == KILN_OK);
}

static void same_bytes(const kiln_buf_t *a, const kiln_buf_t *b) {
  CHECK(a->len == b->len && (a->len == 0 || !memcmp(a->data, b->data, a->len)));
}

static bool rejected(kiln_status_t st) {
  if (!st) return false;
  CHECK(kiln_status_code(st) != 0 && kiln_status_message(st)[0] != 0);
  kiln_status_free(st);
  return true;
}

static void tensor(kiln_job_kind_t kind, const msgpack_object *o) {
  kiln_tensor_job_t a, b;
  if (rejected(kiln_tensor_job_decode(kind, o, &a))) return;
  kiln_buf_t x, y;
  kiln_mp_doc_t d;
  ENCODE(x, kiln_tensor_job_encode, &a);
  reread(&x, &d);
  CHECK(kiln_tensor_job_decode(kind, &d.root, &b) == KILN_OK);
  CHECK(a.kind == b.kind && a.handle == b.handle && a.bytes == b.bytes);
  CHECK(a.offset == b.offset && a.size == b.size && a.at == b.at);
  ENCODE(y, kiln_tensor_job_encode, &b);
  same_bytes(&x, &y);
  kiln_mp_doc_deinit(&d);
  kiln_buf_deinit(&x);
  kiln_buf_deinit(&y);
}

static void module(kiln_job_kind_t kind, const msgpack_object *o) {
  kiln_module_job_t a, b;
  if (rejected(kiln_module_job_decode(kind, o, &a))) return;
  kiln_buf_t x, y;
  kiln_mp_doc_t d;
  ENCODE(x, kiln_module_job_encode, &a);
  reread(&x, &d);
  CHECK(kiln_module_job_decode(kind, &d.root, &b) == KILN_OK);
  CHECK(a.kind == b.kind && a.size == b.size && !memcmp(a.module, b.module, sizeof(a.module)));
  ENCODE(y, kiln_module_job_encode, &b);
  same_bytes(&x, &y);
  kiln_mp_doc_deinit(&d);
  kiln_buf_deinit(&x);
  kiln_buf_deinit(&y);
}

static void launch(kiln_job_kind_t kind, const msgpack_object *o) {
  kiln_launch_job_t a, b;
  if (rejected(kiln_launch_job_decode(kind, o, &a))) return;
  kiln_buf_t x, y;
  kiln_mp_doc_t d;
  ENCODE(x, kiln_launch_job_encode, &a);
  reread(&x, &d);
  CHECK(kiln_launch_job_decode(kind, &d.root, &b) == KILN_OK);
  CHECK(a.nargs == b.nargs && !memcmp(a.module, b.module, sizeof(a.module)));
  CHECK(a.kernel == b.kernel && a.shared == b.shared && a.deadline_ms == b.deadline_ms);
  CHECK(!memcmp(a.grid, b.grid, sizeof(a.grid)) && !memcmp(a.block, b.block, sizeof(a.block)));
  for (uint32_t i = 0; i < a.nargs; i++)
    CHECK(a.args[i].tensor == b.args[i].tensor && a.args[i].value == b.args[i].value);
  for (int i = 0; i < 3; i++) CHECK(a.grid[i] >= 1 && a.block[i] >= 1);
  ENCODE(y, kiln_launch_job_encode, &b);
  same_bytes(&x, &y);
  kiln_mp_doc_deinit(&d);
  kiln_buf_deinit(&x);
  kiln_buf_deinit(&y);
  kiln_launch_job_deinit(&a);
  kiln_launch_job_deinit(&b);
}

static void compile(const msgpack_object *o) {
  kiln_compile_job_t a, b;
  if (rejected(kiln_compile_job_decode(o, &a))) return;
  CHECK(a.kind < KILN_PAYLOAD_KINDS_ && strnlen(a.target, sizeof(a.target)) < sizeof(a.target));
  kiln_buf_t x, y;
  kiln_mp_doc_t d;
  ENCODE(x, kiln_compile_job_encode, &a);
  reread(&x, &d);
  CHECK(kiln_compile_job_decode(&d.root, &b) == KILN_OK);
  CHECK(a.kind == b.kind && !strcmp(a.target, b.target) && a.opt_level == b.opt_level);
  CHECK(a.max_block == b.max_block && a.fast_math == b.fast_math && a.size == b.size);
  ENCODE(y, kiln_compile_job_encode, &b);
  same_bytes(&x, &y);
  kiln_mp_doc_deinit(&d);
  kiln_buf_deinit(&x);
  kiln_buf_deinit(&y);
}

static void graph_load(const msgpack_object *o) {
  kiln_graph_load_job_t a, b;
  if (rejected(kiln_graph_load_job_decode(o, &a))) return;
  kiln_buf_t x, y;
  kiln_mp_doc_t d;
  ENCODE(x, kiln_graph_load_job_encode, &a);
  reread(&x, &d);
  CHECK(kiln_graph_load_job_decode(&d.root, &b) == KILN_OK);
  CHECK(a.handle == b.handle && !memcmp(a.bytes, b.bytes, sizeof(a.bytes)));
  CHECK(a.num_nodes == b.num_nodes && a.num_launches == b.num_launches);
  for (uint32_t i = 0; i < a.num_nodes; i++)
    CHECK(a.node_lens[i] == b.node_lens[i] && !memcmp(a.nodes[i], b.nodes[i], a.node_lens[i]));
  for (uint32_t i = 0; i < a.num_launches; i++) {
    const kiln_graph_job_launch_t *p = &a.launches[i], *q = &b.launches[i];
    CHECK(p->node < a.num_nodes && p->node == q->node && p->kernel == q->kernel && p->nargs == q->nargs);
    for (int k = 0; k < 3; k++) CHECK(p->grid[k] >= 1 && p->block[k] >= 1);
    for (uint32_t k = 0; k < p->nargs; k++)
      CHECK(p->args[k].tag <= KILN_GRAPH_BLOCKS && p->args[k].tag == q->args[k].tag &&
            p->args[k].value == q->args[k].value);
  }
  CHECK(a.num_copies == b.num_copies);
  for (uint32_t i = 0; i < a.num_copies; i++) CHECK(!memcmp(&a.copies[i], &b.copies[i], sizeof(a.copies[i])));
  ENCODE(y, kiln_graph_load_job_encode, &b);
  same_bytes(&x, &y);
  kiln_mp_doc_deinit(&d);
  kiln_buf_deinit(&x);
  kiln_buf_deinit(&y);
  kiln_graph_load_job_deinit(&a);
  kiln_graph_load_job_deinit(&b);
}

static void graph(kiln_job_kind_t kind, const msgpack_object *o) {
  kiln_graph_job_t a, b;
  if (rejected(kiln_graph_job_decode(kind, o, &a))) return;
  kiln_buf_t x, y;
  kiln_mp_doc_t d;
  ENCODE(x, kiln_graph_job_encode, &a);
  reread(&x, &d);
  CHECK(kiln_graph_job_decode(kind, &d.root, &b) == KILN_OK);
  CHECK(a.handle == b.handle && a.size == b.size && a.deadline_ms == b.deadline_ms && a.cancel == b.cancel);
  CHECK(a.num_outputs == b.num_outputs && a.number == b.number && a.repeat == b.repeat);
  CHECK(a.num_inputs == b.num_inputs);
  for (uint32_t i = 0; i < a.num_inputs; i++) CHECK(!memcmp(&a.inputs[i], &b.inputs[i], sizeof(a.inputs[i])));
  for (uint32_t i = 0; i < a.num_outputs; i++)
    CHECK(a.outputs[i].block < KILN_GRAPH_BLOCKS && !memcmp(&a.outputs[i], &b.outputs[i], sizeof(a.outputs[i])));
  ENCODE(y, kiln_graph_job_encode, &b);
  same_bytes(&x, &y);
  kiln_mp_doc_deinit(&d);
  kiln_buf_deinit(&x);
  kiln_buf_deinit(&y);
  kiln_graph_job_deinit(&a);
  kiln_graph_job_deinit(&b);
}

/* The replies, whatever kind the first byte picked. */
static void replies(const msgpack_object *o) {
  kiln_launch_reply_t lr;
  if (!rejected(kiln_launch_reply_decode(o, &lr))) {
    kiln_buf_t x;
    kiln_mp_doc_t d;
    kiln_launch_reply_t lr2;
    ENCODE(x, kiln_launch_reply_encode, &lr);
    reread(&x, &d);
    CHECK(kiln_launch_reply_decode(&d.root, &lr2) == KILN_OK);
    CHECK(!memcmp(&lr.elapsed, &lr2.elapsed, sizeof(double)) || lr.elapsed == lr2.elapsed);
    kiln_mp_doc_deinit(&d);
    kiln_buf_deinit(&x);
  }
  kiln_time_reply_t tr;
  if (!rejected(kiln_time_reply_decode(o, &tr))) {
    kiln_buf_t x, y;
    kiln_mp_doc_t d;
    kiln_time_reply_t tr2;
    ENCODE(x, kiln_time_reply_encode, &tr);
    reread(&x, &d);
    CHECK(kiln_time_reply_decode(&d.root, &tr2) == KILN_OK);
    CHECK(tr.repeat == tr2.repeat && tr.number == tr2.number);
    ENCODE(y, kiln_time_reply_encode, &tr2);
    same_bytes(&x, &y);
    kiln_time_reply_deinit(&tr);
    kiln_time_reply_deinit(&tr2);
    kiln_mp_doc_deinit(&d);
    kiln_buf_deinit(&x);
    kiln_buf_deinit(&y);
  }
  kiln_compile_reply_t cr;
  if (!rejected(kiln_compile_reply_decode(o, &cr))) {
    kiln_buf_t x;
    kiln_mp_doc_t d;
    kiln_compile_reply_t cr2;
    ENCODE(x, kiln_compile_reply_encode, &cr);
    reread(&x, &d);
    CHECK(kiln_compile_reply_decode(&d.root, &cr2) == KILN_OK);
    CHECK(cr.size == cr2.size && !memcmp(&cr.compile_ms, &cr2.compile_ms, sizeof(double)));
    kiln_mp_doc_deinit(&d);
    kiln_buf_deinit(&x);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  kiln_job_kind_t kind = (kiln_job_kind_t)(data[0] % KILN_JOB_KINDS_);
  kiln_mp_doc_t doc;
  kiln_status_t st = kiln_mp_doc_read(&doc, data + 1, size - 1, 16, false, &kiln_job_err);
  if (!rejected(st)) {
    if (kiln_job_is_tensor(kind)) tensor(kind, &doc.root);
    else if (kind == KILN_JOB_LOAD || kind == KILN_JOB_UNLOAD || kind == KILN_JOB_CANCEL_PAGE)
      module(kind, &doc.root);
    else if (kind == KILN_JOB_LAUNCH || kind == KILN_JOB_TIME) launch(kind, &doc.root);
    else if (kind == KILN_JOB_COMPILE) compile(&doc.root);
    else if (kind == KILN_JOB_GRAPH_LOAD) graph_load(&doc.root);
    else if (kind == KILN_JOB_GRAPH_RUN || kind == KILN_JOB_GRAPH_TIME || kind == KILN_JOB_GRAPH_FREE)
      graph(kind, &doc.root);
    replies(&doc.root);
    /* A decoder handed the wrong kind refuses it. */
    kiln_tensor_job_t t;
    if (!kiln_job_is_tensor(kind)) CHECK(rejected(kiln_tensor_job_decode(kind, &doc.root, &t)));
  }
  kiln_mp_doc_deinit(&doc);
  return 0;
}
