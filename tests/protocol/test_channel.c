/* The worker channel: framed messages over a socketpair with memfds passed alongside
 * (SCM_RIGHTS), the fd queue that keeps them in step with the messages, shared memory. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/buf.h"
#include "helpers.h"
#include "protocol/channel.h"
#include "protocol/frame.h"
#include "protocol/rpc.h"

static int open_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  cr_assert_not_null(d);
  struct dirent *e;
  while ((e = readdir(d))) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the DIR's own fd */
}

static bool fd_is_open(int fd) { return fcntl(fd, F_GETFD) >= 0 || errno != EBADF; }

static bool cloexec(int fd) { return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0; }

/* [2, "put", [{"tag": tag, "fds": nfds, "size": size}]] */
static void pack_put(kiln_buf_t *buf, uint64_t tag, uint64_t nfds, uint64_t size) {
  kiln_packer_t p;
  kiln_packer_init(&p, buf);
  kiln_rpc_pack_notification_head(&p.pk, "put");
  msgpack_pack_array(&p.pk, 1);
  msgpack_pack_map(&p.pk, 3);
  kiln_pack_kv_u64(&p.pk, "tag", tag);
  kiln_pack_kv_u64(&p.pk, "fds", nfds);
  kiln_pack_kv_u64(&p.pk, "size", size);
  cr_assert_null(kiln_packer_status(&p));
}

/* A receiving end: the framer plus the fd queue, read `max_read` bytes at a time. */
typedef struct receiver {
  int fd;
  kiln_reader_t reader;
  kiln_fdq_t fdq;
  size_t max_read;
} receiver_t;

static void receiver_init(receiver_t *rx, int fd, size_t max_read) {
  kiln_limits_t lim;
  kiln_limits_default(&lim);
  rx->fd = fd;
  kiln_reader_init(&rx->reader, &lim, 0);
  kiln_fdq_init(&rx->fdq);
  rx->max_read = max_read;
}

static void receiver_deinit(receiver_t *rx) {
  kiln_reader_deinit(&rx->reader);
  kiln_fdq_deinit(&rx->fdq);
}

/* Blocks until one whole message is framed; decodes it into m. */
static void receive_one(receiver_t *rx, kiln_rpc_msg_t *m) {
  for (;;) {
    const uint8_t *msg;
    size_t len;
    kiln_frame_result_t res = kiln_reader_next(&rx->reader, &msg, &len);
    cr_assert_neq(res, KILN_FRAME_ERROR);
    if (res == KILN_FRAME_MESSAGE) {
      bool has;
      kiln_status_t s = kiln_rpc_parse(msg, len, m, &has);
      cr_assert_null(s, "%s", kiln_status_message(s));
      return;
    }
    size_t space;
    void *p = kiln_reader_space(&rx->reader, &space);
    cr_assert_not_null(p);
    if (space > rx->max_read) space = rx->max_read;
    int fds[KILN_CHANNEL_MAX_FDS];
    int nfds = 0;
    bool truncated = false;
    ssize_t n = kiln_channel_recv(rx->fd, p, space, fds, KILN_CHANNEL_MAX_FDS, &nfds, &truncated);
    cr_assert_gt(n, 0, "recv: %zd", n);
    cr_assert_not(truncated);
    for (int i = 0; i < nfds; i++) {
      cr_assert(cloexec(fds[i]), "received fds are close-on-exec");
      cr_assert(kiln_fdq_push(&rx->fdq, fds[i]));
    }
    kiln_reader_commit(&rx->reader, (size_t)n);
  }
}

Test(channel, pair_is_cloexec) {
  int sv[2];
  cr_assert_null(kiln_channel_pair(sv));
  cr_assert(cloexec(sv[0]) && cloexec(sv[1]));
  close(sv[0]);
  close(sv[1]);
}

Test(channel, memfd_across_a_socketpair) {
  int baseline = open_fds();
  int sv[2];
  cr_assert_null(kiln_channel_pair(sv));
  size_t size = 3u << 20;
  int shm;
  uint8_t *map;
  cr_assert_null(kiln_shm_create("kiln-test", size, &shm, (void **)&map));
  cr_assert(cloexec(shm));
  for (size_t i = 0; i < size; i++) map[i] = (uint8_t)(i * 7 + 1);

  kiln_buf_t buf;
  kiln_buf_init(&buf);
  pack_put(&buf, 1, 1, size);
  cr_assert_null(kiln_channel_send_all(sv[0], buf.data, buf.len, &shm, 1));

  receiver_t rx;
  receiver_init(&rx, sv[1], 1 << 20);
  kiln_rpc_msg_t m;
  receive_one(&rx, &m);
  uint64_t nfds = 0, got_size = 0;
  cr_assert_null(kiln_params_u64(m.params, "fds", true, &nfds));
  cr_assert_null(kiln_params_u64(m.params, "size", true, &got_size));
  cr_assert_eq(nfds, 1);
  cr_assert_eq(got_size, size);
  kiln_rpc_msg_deinit(&m);
  int fd = kiln_fdq_pop(&rx.fdq);
  cr_assert_geq(fd, 0);
  cr_assert_neq(fd, shm, "a new descriptor for the same memory");
  uint8_t *peer;
  cr_assert_null(kiln_shm_map(fd, size, true, (void **)&peer));
  cr_assert_arr_eq(peer, map, size);
  /* Shared, not copied: writes show on both sides. */
  peer[12345] = 0xee;
  cr_assert_eq(map[12345], 0xee);
  map[size - 1] = 0x11;
  cr_assert_eq(peer[size - 1], 0x11);
  /* Sealed: the peer cannot shrink it under the sender (SIGBUS) or grow it. */
  cr_assert_neq(ftruncate(fd, 4096), 0);
  cr_assert_eq(errno, EPERM);
  cr_assert_neq(ftruncate(fd, size * 2), 0);
  /* Larger than the file: refused, not a mapping that faults. */
  void *too_big = NULL;
  kiln_status_t s = kiln_shm_map(fd, size + 1, false, &too_big);
  cr_assert_not_null(s);
  cr_assert(strstr(kiln_status_message(s), "smaller"));
  cr_assert_null(too_big);
  kiln_status_free(s);

  kiln_shm_unmap(peer, size);
  kiln_shm_unmap(map, size);
  close(fd);
  close(shm);
  receiver_deinit(&rx);
  kiln_buf_deinit(&buf);
  close(sv[0]);
  close(sv[1]);
  cr_assert_eq(open_fds(), baseline, "fds leaked");
}

/* Many messages back to back, each with its own fds, read a few bytes at a time: the fds
 * queue up in arrival order and each message takes its own from the front. */
Test(channel, several_messages_each_carrying_fds) {
  int baseline = open_fds();
  int sv[2];
  cr_assert_null(kiln_channel_pair(sv));
  enum { NMSG = 12 };
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  for (int i = 0; i < NMSG; i++) {
    int nfds = i % 4 == 3 ? 0 : 1 + i % KILN_CHANNEL_MAX_FDS;
    int fds[KILN_CHANNEL_MAX_FDS];
    for (int k = 0; k < nfds; k++) {
      char tag[32];
      int len = snprintf(tag, sizeof(tag), "msg %d fd %d", i, k);
      char *map;
      cr_assert_null(kiln_shm_create("tag", (uint64_t)len, &fds[k], (void **)&map));
      memcpy(map, tag, (size_t)len);
      kiln_shm_unmap(map, (uint64_t)len);
    }
    buf.len = 0;
    pack_put(&buf, (uint64_t)i, (uint64_t)nfds, 0);
    cr_assert_null(kiln_channel_send_all(sv[0], buf.data, buf.len, fds, nfds));
    for (int k = 0; k < nfds; k++) close(fds[k]); /* in flight, the kernel holds them */
  }

  receiver_t rx;
  receiver_init(&rx, sv[1], 5);
  for (int i = 0; i < NMSG; i++) {
    kiln_rpc_msg_t m;
    receive_one(&rx, &m);
    uint64_t tag = 99, nfds = 99;
    cr_assert_null(kiln_params_u64(m.params, "tag", true, &tag));
    cr_assert_null(kiln_params_u64(m.params, "fds", true, &nfds));
    kiln_rpc_msg_deinit(&m);
    cr_assert_eq(tag, (uint64_t)i);
    cr_assert_geq(rx.fdq.count, nfds, "message %d: its fds arrived with its first byte", i);
    for (uint64_t k = 0; k < nfds; k++) {
      int fd = kiln_fdq_pop(&rx.fdq);
      cr_assert_geq(fd, 0);
      char want[32], got[32] = {0};
      int len = snprintf(want, sizeof(want), "msg %d fd %d", i, (int)k);
      cr_assert_eq(pread(fd, got, sizeof(got), 0), len);
      cr_assert_str_eq(got, want);
      close(fd);
    }
  }
  cr_assert_eq(rx.fdq.count, 0);
  cr_assert_not(kiln_reader_partial(&rx.reader));
  receiver_deinit(&rx);
  kiln_buf_deinit(&buf);
  close(sv[0]);
  close(sv[1]);
  cr_assert_eq(open_fds(), baseline, "fds leaked");
}

Test(channel, extra_fds_are_closed_and_reported) {
  int baseline = open_fds();
  int sv[2];
  cr_assert_null(kiln_channel_pair(sv));
  int fds[KILN_CHANNEL_MAX_FDS];
  for (int i = 0; i < KILN_CHANNEL_MAX_FDS; i++) fds[i] = dup(STDERR_FILENO);
  struct iovec iov = {"x", 1};
  cr_assert_eq(kiln_channel_sendv(sv[0], &iov, 1, fds, KILN_CHANNEL_MAX_FDS), 1);
  for (int i = 0; i < KILN_CHANNEL_MAX_FDS; i++) close(fds[i]);

  char c;
  int got[3];
  int n = 0;
  bool truncated = false;
  cr_assert_eq(kiln_channel_recv(sv[1], &c, 1, got, 3, &n, &truncated), 1);
  cr_assert_eq(n, 3);
  cr_assert(truncated);
  for (int i = 0; i < n; i++) close(got[i]);
  close(sv[0]);
  close(sv[1]);
  cr_assert_eq(open_fds(), baseline, "the fds beyond fds_cap must be closed");
}

Test(channel, send_errors_and_end_of_stream) {
  int sv[2];
  cr_assert_null(kiln_channel_pair(sv));
  int fds[KILN_CHANNEL_MAX_FDS + 1];
  for (int i = 0; i <= KILN_CHANNEL_MAX_FDS; i++) fds[i] = STDERR_FILENO;
  struct iovec iov = {"x", 1};
  cr_assert_eq(kiln_channel_sendv(sv[0], &iov, 1, fds, KILN_CHANNEL_MAX_FDS + 1), -EINVAL);

  /* Non-blocking and full: 0, nothing sent. */
  cr_assert_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
  static char chunk[1 << 16];
  struct iovec big = {chunk, sizeof(chunk)};
  ssize_t n;
  size_t total = 0;
  while ((n = kiln_channel_sendv(sv[0], &big, 1, NULL, 0)) > 0) total += (size_t)n;
  cr_assert_eq(n, 0);
  cr_assert_gt(total, 0);

  /* Peer gone: an error, not SIGPIPE. */
  close(sv[1]);
  cr_assert_eq(kiln_channel_sendv(sv[0], &iov, 1, NULL, 0), -EPIPE);
  kiln_status_t s = kiln_channel_send_all(sv[0], "abc", 3, NULL, 0);
  cr_assert_eq(kiln_status_code(s), KILN_E_UNAVAILABLE);
  kiln_status_free(s);
  close(sv[0]);

  cr_assert_null(kiln_channel_pair(sv));
  close(sv[0]);
  char c;
  int got[1], nfds = 5;
  bool truncated = true;
  cr_assert_eq(kiln_channel_recv(sv[1], &c, 1, got, 1, &nfds, &truncated), 0);
  cr_assert_eq(nfds, 0);
  cr_assert_not(truncated);
  close(sv[1]);
}

Test(fdq, fifo_capacity_and_wraparound) {
  kiln_fdq_t q;
  kiln_fdq_init(&q);
  cr_assert_eq(kiln_fdq_pop(&q), -1);
  /* Plain integers stand in for fds while nothing is closed. */
  for (int round = 0; round < 5; round++) {
    for (int i = 0; i < 64; i++) cr_assert(kiln_fdq_push(&q, 1000 + i));
    cr_assert_not(kiln_fdq_push(&q, 5000), "the queue holds 64");
    for (int i = 0; i < 40; i++) cr_assert_eq(kiln_fdq_pop(&q), 1000 + i);
    for (int i = 0; i < 40; i++) cr_assert(kiln_fdq_push(&q, 2000 + i));
    for (int i = 40; i < 64; i++) cr_assert_eq(kiln_fdq_pop(&q), 1000 + i);
    for (int i = 0; i < 40; i++) cr_assert_eq(kiln_fdq_pop(&q), 2000 + i);
    cr_assert_eq(kiln_fdq_pop(&q), -1);
  }
  for (int i = 0; i < 1000; i++) {
    cr_assert(kiln_fdq_push(&q, i));
    cr_assert_eq(kiln_fdq_pop(&q), i);
  }
}

Test(fdq, deinit_closes_what_is_queued) {
  int baseline = open_fds();
  kiln_fdq_t q;
  kiln_fdq_init(&q);
  int fds[5];
  for (int i = 0; i < 5; i++) {
    fds[i] = dup(STDERR_FILENO);
    cr_assert(kiln_fdq_push(&q, fds[i]));
  }
  cr_assert_eq(kiln_fdq_pop(&q), fds[0]);
  kiln_fdq_deinit(&q);
  cr_assert(fd_is_open(fds[0]), "a popped fd belongs to the caller");
  for (int i = 1; i < 5; i++) cr_assert_not(fd_is_open(fds[i]), "fd %d still open", fds[i]);
  close(fds[0]);
  cr_assert_eq(q.count, 0);
  cr_assert_eq(open_fds(), baseline);
}

Test(shm, zero_size_and_no_map) {
  int fd = -1;
  void *map = (void *)1;
  cr_assert_null(kiln_shm_create("zero", 0, &fd, &map));
  cr_assert_geq(fd, 0);
  cr_assert_null(map);
  void *m2 = (void *)1;
  cr_assert_null(kiln_shm_map(fd, 0, true, &m2));
  cr_assert_null(m2);
  kiln_shm_unmap(NULL, 0);
  close(fd);

  cr_assert_null(kiln_shm_create("nomap", 4096, &fd, NULL));
  cr_assert_eq(lseek(fd, 0, SEEK_END), 4096);
  void *ro;
  cr_assert_null(kiln_shm_map(fd, 4096, false, &ro));
  cr_assert_eq(((uint8_t *)ro)[4095], 0, "zero-filled");
  kiln_shm_unmap(ro, 4096);
  close(fd);

  kiln_status_t s = kiln_shm_map(-1, 16, false, &ro);
  cr_assert_not_null(s);
  kiln_status_free(s);
}
