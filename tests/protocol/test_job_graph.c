/* protocol/job_graph.h: the graph jobs survive their encode/decode pair field for field; the
 * decoders refuse a launch of a node that does not exist, an argument tag beyond the blocks,
 * an output block beyond them and a wrong fd count, with E_INTERNAL ("worker job: "). */
#include <criterion/criterion.h>
#include <string.h>

#include "protocol/job_graph.h"
#include "protocol/rpc.h"

static kiln_mp_doc_t doc;
static kiln_buf_t buf;

static const msgpack_object *encode_load(const kiln_graph_load_job_t *j) {
  kiln_buf_init(&buf);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &buf);
  kiln_graph_load_job_encode(&pk.pk, j);
  cr_assert(!kiln_packer_status(&pk));
  cr_assert(!kiln_mp_doc_read(&doc, buf.data, buf.len, 16, false, &kiln_job_err));
  return &doc.root;
}

static const msgpack_object *encode_job(const kiln_graph_job_t *j) {
  kiln_buf_init(&buf);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &buf);
  kiln_graph_job_encode(&pk.pk, j);
  cr_assert(!kiln_packer_status(&pk));
  cr_assert(!kiln_mp_doc_read(&doc, buf.data, buf.len, 16, false, &kiln_job_err));
  return &doc.root;
}

static void done(void) {
  kiln_mp_doc_deinit(&doc);
  kiln_buf_deinit(&buf);
}

static void expect_internal(kiln_status_t st, const char *words) {
  cr_assert(st, "accepted; expected a refusal with '%s'", words);
  cr_expect_eq(kiln_status_code(st), KILN_E_INTERNAL, "%s", kiln_status_message(st));
  cr_expect(strncmp(kiln_status_message(st), "worker job: ", 12) == 0, "%s", kiln_status_message(st));
  cr_expect(strstr(kiln_status_message(st), words), "'%s' lacks '%s'", kiln_status_message(st), words);
  kiln_status_free(st);
}

static kiln_graph_job_arg_t args[3] = {{1 + KILN_GRAPH_INPUTS, 0}, {1 + KILN_GRAPH_ARENA, 256}, {0, 0x3F800000}};
static const char *nodes[2] = {"add0 (Add add0)", "add1"};
static uint32_t lens[2] = {15, 4};

static kiln_graph_copy_t copies[2] = {{0x1234567890ull, 256, 64}, {7, 0, 256}};

static kiln_graph_load_job_t sample_load(kiln_graph_job_launch_t *l) {
  memset(l, 0, sizeof(*l));
  for (int i = 0; i < KILN_HASH_BYTES; i++) l->module[i] = (uint8_t)i;
  l->kernel = 2;
  l->node = 1;
  l->grid[0] = 7, l->grid[1] = l->grid[2] = 1;
  l->block[0] = 64, l->block[1] = l->block[2] = 1;
  l->shared = 16;
  l->nargs = 3;
  l->args = args;
  return (kiln_graph_load_job_t){.handle = 1ull << 40, .bytes = {512, 256, 768}, .num_nodes = 2,
                                 .nodes = nodes, .node_lens = lens, .num_launches = 1, .launches = l,
                                 .num_copies = 2, .copies = copies};
}

Test(job_graph, load_round_trips) {
  kiln_graph_job_launch_t l;
  kiln_graph_load_job_t in = sample_load(&l), out;
  cr_assert(!kiln_graph_load_job_decode(encode_load(&in), &out));
  cr_expect_eq(out.handle, in.handle);
  cr_expect(!memcmp(out.bytes, in.bytes, sizeof(in.bytes)));
  cr_assert_eq(out.num_nodes, 2);
  cr_expect_str_eq(out.nodes[0], "add0 (Add add0)");
  cr_assert_eq(out.num_launches, 1);
  const kiln_graph_job_launch_t *o = &out.launches[0];
  cr_expect(!memcmp(o->module, l.module, KILN_HASH_BYTES));
  cr_expect(o->kernel == 2 && o->node == 1 && o->grid[0] == 7 && o->block[0] == 64 && o->shared == 16);
  cr_assert_eq(o->nargs, 3);
  for (int i = 0; i < 3; i++) cr_expect(o->args[i].tag == args[i].tag && o->args[i].value == args[i].value);
  cr_assert_eq(out.num_copies, 2);
  for (int i = 0; i < 2; i++) cr_expect(!memcmp(&out.copies[i], &copies[i], sizeof(copies[i])));
  kiln_graph_load_job_deinit(&out);
  done();
}

Test(job_graph, load_refusals) {
  kiln_graph_job_launch_t l;
  kiln_graph_load_job_t in = sample_load(&l), out;
  l.node = 2; /* only two nodes */
  expect_internal(kiln_graph_load_job_decode(encode_load(&in), &out), "node 2 of 2");
  done();
  l.node = 0;
  kiln_graph_job_arg_t bad[1] = {{1 + KILN_GRAPH_BLOCKS, 0}};
  l.args = bad;
  l.nargs = 1;
  expect_internal(kiln_graph_load_job_decode(encode_load(&in), &out), "argument tag");
  done();
}

Test(job_graph, run_time_free_round_trip) {
  kiln_graph_output_t outs[2] = {{KILN_GRAPH_ARENA, 256, 64, 512, 0}, {KILN_GRAPH_INPUTS, 0, 8, 0, 1ull << 50}};
  kiln_graph_job_t run = {.kind = KILN_JOB_GRAPH_RUN, .handle = 9, .size = 1024, .deadline_ms = 5000,
                          .cancel = 12, .num_inputs = 2, .inputs = copies, .num_outputs = 2, .outputs = outs}, out;
  cr_assert(!kiln_graph_job_decode(KILN_JOB_GRAPH_RUN, encode_job(&run), &out));
  cr_expect(out.handle == 9 && out.size == 1024 && out.deadline_ms == 5000 && out.num_outputs == 2);
  cr_expect(out.cancel == 12 && out.num_inputs == 2 && out.inputs[0].handle == copies[0].handle &&
            out.inputs[1].bytes == 256);
  for (int i = 0; i < 2; i++)
    cr_expect(out.outputs[i].block == outs[i].block && out.outputs[i].offset == outs[i].offset &&
              out.outputs[i].bytes == outs[i].bytes && out.outputs[i].at == outs[i].at &&
              out.outputs[i].keep == outs[i].keep);
  kiln_graph_job_deinit(&out);
  /* the same bytes are not a graph_time job, nor a graph_free one */
  expect_internal(kiln_graph_job_decode(KILN_JOB_GRAPH_TIME, &doc.root, &out), "");
  expect_internal(kiln_graph_job_decode(KILN_JOB_GRAPH_FREE, &doc.root, &out), "");
  done();
  kiln_graph_job_t tm = {.kind = KILN_JOB_GRAPH_TIME, .handle = 9, .size = 512, .number = 10, .repeat = 3,
                         .min_repeat_ms = 1, .warmup = 2, .flush = true};
  cr_assert(!kiln_graph_job_decode(KILN_JOB_GRAPH_TIME, encode_job(&tm), &out));
  cr_expect(out.number == 10 && out.repeat == 3 && out.min_repeat_ms == 1 && out.warmup == 2 && out.flush);
  kiln_graph_job_deinit(&out);
  done();
  kiln_graph_job_t fr = {.kind = KILN_JOB_GRAPH_FREE, .handle = 77};
  cr_assert(!kiln_graph_job_decode(KILN_JOB_GRAPH_FREE, encode_job(&fr), &out));
  cr_expect_eq(out.handle, 77);
  done();
  outs[1].block = KILN_GRAPH_BLOCKS;
  expect_internal(kiln_graph_job_decode(KILN_JOB_GRAPH_RUN, encode_job(&run), &out), "output block");
  done();
}
