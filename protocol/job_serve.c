/* The workers' serve loop (protocol/job_serve.h). */
#include "protocol/job_serve.h"

#include <stdio.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "protocol/frame.h"
#include "protocol/rpc.h"

/* [0, msgid, kind, job] */
static kiln_status_t open_request(const msgpack_object *m, uint32_t *msgid, kiln_job_kind_t *kind,
                                  const msgpack_object **job) {
  if (m->type != MSGPACK_OBJECT_ARRAY || m->via.array.size != 4 ||
      m->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || m->via.array.ptr[0].via.u64 != 0)
    return KILN_STATUS(KILN_E_INTERNAL, "worker job: not a request [0, msgid, kind, job]");
  uint64_t id;
  KILN_RETURN_IF_ERROR(kiln_job_u64(&m->via.array.ptr[1], "msgid", UINT32_MAX, &id));
  const char *name;
  uint32_t len;
  if (!kiln_mp_text(&m->via.array.ptr[2], &name, &len) ||
      (*kind = kiln_job_kind_of(name, len)) == KILN_JOB_NONE)
    return KILN_STATUS(KILN_E_INTERNAL, "worker job: unknown kind");
  *msgid = (uint32_t)id;
  *job = &m->via.array.ptr[3];
  return KILN_OK;
}

typedef struct serve {
  const kiln_job_server_t *s;
  kiln_fdq_t fdq;
} serve_t;

/* Runs one message; false when the worker must stop (not a job, or the channel broke). */
static bool handle(serve_t *sv, const uint8_t *bytes, size_t len) {
  const kiln_job_server_t *s = sv->s;
  kiln_mp_doc_t doc;
  uint32_t msgid = 0;
  kiln_job_call_t call = {0};
  kiln_status_t st = kiln_mp_doc_read(&doc, bytes, len, 16, false, &kiln_job_err);
  if (!st) st = open_request(&doc.root, &msgid, &call.kind, &call.job);
  if (!st) st = kiln_job_nfds(call.job, KILN_CHANNEL_MAX_FDS, &call.nfds);
  if (st) {
    /* The fd queue can no longer be trusted to match the messages: stop. */
    KILN_LOG_ERROR("bad_job", "message=\"%s\"", kiln_status_message(st));
    kiln_status_free(st);
    kiln_mp_doc_deinit(&doc);
    return false;
  }
  for (uint32_t i = 0; i < call.nfds; i++) {
    call.fds[i] = kiln_fdq_pop(&sv->fdq);
    if (call.fds[i] < 0 && !st)
      st = KILN_STATUS(KILN_E_INTERNAL, "worker job: %u fds announced, fewer arrived", call.nfds);
  }
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &out);
  kiln_rpc_pack_result_head(&pk.pk, msgid);
  call.reply = &pk.pk;
  if (!st) st = s->handle(s->ctx, &call);
  if (!st) st = kiln_packer_status(&pk);
  for (uint32_t i = 0; i < call.nfds; i++)
    if (call.fds[i] >= 0) close(call.fds[i]);
  kiln_mp_doc_deinit(&doc);
  bool fatal = false, failed = st != KILN_OK;
  if (st) {
    out.len = 0;
    kiln_code_t code = kiln_status_code(st);
    kiln_rpc_pack_error(&pk.pk, msgid, code, kiln_status_message(st));
    fatal = s->fatal && s->fatal(code);
    kiln_status_free(st);
  }
  uint32_t nreply = failed ? 0 : call.reply_nfds; /* an error reply carries none */
  st = kiln_channel_send_all(s->channel, out.data, out.len, call.reply_fds, (int)nreply);
  for (uint32_t i = 0; i < call.reply_nfds; i++) close(call.reply_fds[i]);
  kiln_buf_deinit(&out);
  if (fatal) _exit(3);
  if (st) {
    kiln_status_free(st);
    return false;
  }
  return true;
}

kiln_status_t kiln_job_send_alive(int channel) {
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_packer_t pk;
  kiln_packer_init(&pk, &out);
  kiln_rpc_pack_notification_head(&pk.pk, KILN_WORKER_ALIVE);
  msgpack_pack_array(&pk.pk, 0);
  kiln_status_t st = kiln_packer_status(&pk);
  if (!st) st = kiln_channel_send_all(channel, out.data, out.len, NULL, 0);
  kiln_buf_deinit(&out);
  return st;
}

int kiln_job_serve(const kiln_job_server_t *s) {
  serve_t sv = {.s = s};
  kiln_fdq_init(&sv.fdq);
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  lim.max_message = 1ull << 32; /* kilnd is trusted; bulk bytes ride in memfds anyway */
  lim.max_str = 1u << 31;
  kiln_reader_t r;
  kiln_reader_init(&r, &lim, 64 * 1024);
  int rc = 0;
  for (;;) {
    size_t cap;
    void *space = kiln_reader_space(&r, &cap);
    if (!space) {
      rc = 1;
      break;
    }
    int fds[16], nfds;
    bool trunc;
    ssize_t n = kiln_channel_recv(s->channel, space, cap, fds, 16, &nfds, &trunc);
    for (int i = 0; i < nfds; i++)
      if (!kiln_fdq_push(&sv.fdq, fds[i])) close(fds[i]);
    if (n == 0) break; /* kilnd closed the channel: exit quietly */
    if (n < 0) {
      rc = 1;
      break;
    }
    kiln_reader_commit(&r, (size_t)n);
    const uint8_t *msg;
    size_t len;
    kiln_frame_result_t fr;
    while ((fr = kiln_reader_next(&r, &msg, &len)) == KILN_FRAME_MESSAGE)
      if (!handle(&sv, msg, len)) {
        rc = 1;
        goto done;
      }
    if (fr == KILN_FRAME_ERROR) {
      rc = 1;
      break;
    }
  }
done:
  kiln_reader_deinit(&r);
  kiln_fdq_deinit(&sv.fdq);
  return rc;
}
