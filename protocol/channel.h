/* The daemon <-> worker channel: the same MessagePack-RPC framing as clients use, over a
 * unix stream socketpair, with file descriptors (memfds holding tensor bytes, payloads and
 * artifacts) passed alongside with SCM_RIGHTS.
 *
 * File descriptors ride on the first byte of the message they belong to, and the receiver
 * queues them in arrival order; a message that carries fds says how many in its "fds"
 * field, and the receiver takes that many from the front of the queue. Both ends handle
 * messages in order, so the queue and the messages stay in step.
 *
 * These are plain syscalls wrappers usable from the libuv side (non-blocking socket, poll
 * handle) and from the blocking worker loops. */
#ifndef KILN_PROTOCOL_CHANNEL_H
#define KILN_PROTOCOL_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "base/status.h"

#define KILN_CHANNEL_MAX_FDS 8 /* per message */

/* A socketpair with CLOEXEC on both ends. */
KILN_MUST_USE kiln_status_t kiln_channel_pair(int out_fds[2]);

/* Sends what it can of iov (fds attached to the first byte) without blocking when the
 * socket is non-blocking. Returns bytes sent (0 when it would block before anything went
 * out), or -errno. When it returns > 0, the fds have been sent. */
ssize_t kiln_channel_sendv(int fd, const struct iovec *iov, int iovcnt, const int *fds, int nfds);

/* Receives up to cap bytes; received fds are appended to fds_out (cap fds_cap; extra fds
 * are closed and *out_truncated set). Returns bytes read, 0 at end of stream, or -errno. */
ssize_t kiln_channel_recv(int fd, void *buf, size_t cap, int *fds_out, int fds_cap, int *out_nfds,
                          bool *out_truncated);

/* Blocking: sends everything (retrying on EINTR/EAGAIN with poll). */
KILN_MUST_USE kiln_status_t kiln_channel_send_all(int fd, const void *bytes, size_t len, const int *fds, int nfds);

/* A FIFO of received file descriptors. */
typedef struct kiln_fdq {
  int fds[64];
  uint32_t head, count;
} kiln_fdq_t;

void kiln_fdq_init(kiln_fdq_t *q);
/* Closes every queued fd. */
void kiln_fdq_deinit(kiln_fdq_t *q);
bool kiln_fdq_push(kiln_fdq_t *q, int fd);
/* -1 when empty. */
int kiln_fdq_pop(kiln_fdq_t *q);

/* Shared memory for bulk bytes: an anonymous memfd of `size` bytes (sealed against
 * shrinking), mapped read-write. Either out pointer may be NULL-mapped when size is 0. */
KILN_MUST_USE kiln_status_t kiln_shm_create(const char *name, uint64_t size, int *out_fd, void **out_map);
/* Maps an fd received from the peer; checks that it is at least `size` bytes. */
KILN_MUST_USE kiln_status_t kiln_shm_map(int fd, uint64_t size, bool writable, void **out_map);
void kiln_shm_unmap(void *map, uint64_t size);

#endif
