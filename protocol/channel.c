#include "protocol/channel.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

kiln_status_t kiln_channel_pair(int out_fds[2]) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, out_fds) != 0)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "socketpair: %s", strerror(errno));
  /* Bulk bytes travel in memfds; the socket carries only envelopes, but a compile payload
   * or an artifact can still be megabytes: larger buffers mean fewer wakeups. */
  int sz = 4 << 20;
  setsockopt(out_fds[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  setsockopt(out_fds[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  return KILN_OK;
}

ssize_t kiln_channel_sendv(int fd, const struct iovec *iov, int iovcnt, const int *fds, int nfds) {
  struct msghdr mh = {0};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * KILN_CHANNEL_MAX_FDS)];
  } control;
  mh.msg_iov = (struct iovec *)iov;
  mh.msg_iovlen = (size_t)iovcnt;
  if (nfds > 0) {
    if (nfds > KILN_CHANNEL_MAX_FDS) return -EINVAL;
    memset(&control, 0, sizeof(control));
    mh.msg_control = control.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
  }
  for (;;) {
    ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -errno;
  }
}

ssize_t kiln_channel_recv(int fd, void *buf, size_t cap, int *fds_out, int fds_cap, int *out_nfds,
                          bool *out_truncated) {
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 32)];
  } control;
  struct iovec iov = {buf, cap};
  struct msghdr mh = {0};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control.buf;
  mh.msg_controllen = sizeof(control.buf);
  *out_nfds = 0;
  *out_truncated = false;
  ssize_t n;
  do n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  if (mh.msg_flags & MSG_CTRUNC) *out_truncated = true;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int *p = (int *)CMSG_DATA(c);
    for (size_t i = 0; i < k; i++) {
      int f;
      memcpy(&f, p + i, sizeof(int));
      if (*out_nfds < fds_cap) fds_out[(*out_nfds)++] = f;
      else {
        close(f);
        *out_truncated = true;
      }
    }
  }
  return n;
}

kiln_status_t kiln_channel_send_all(int fd, const void *bytes, size_t len, const int *fds, int nfds) {
  const char *p = bytes;
  bool fds_sent = nfds == 0;
  while (len > 0) {
    struct iovec iov = {(void *)p, len};
    ssize_t n = kiln_channel_sendv(fd, &iov, 1, fds_sent ? NULL : fds, fds_sent ? 0 : nfds);
    if (n < 0) return KILN_STATUS(KILN_E_UNAVAILABLE, "channel send: %s", strerror((int)-n));
    if (n == 0) {
      struct pollfd pfd = {fd, POLLOUT, 0};
      poll(&pfd, 1, 1000);
      continue;
    }
    fds_sent = true;
    p += n;
    len -= (size_t)n;
  }
  return KILN_OK;
}

void kiln_fdq_init(kiln_fdq_t *q) { memset(q, 0, sizeof(*q)); }

void kiln_fdq_deinit(kiln_fdq_t *q) {
  int fd;
  while ((fd = kiln_fdq_pop(q)) >= 0) close(fd);
}

bool kiln_fdq_push(kiln_fdq_t *q, int fd) {
  if (q->count == (sizeof(q->fds) / sizeof(q->fds[0]))) return false;
  q->fds[(q->head + q->count) % (sizeof(q->fds) / sizeof(q->fds[0]))] = fd;
  q->count++;
  return true;
}

int kiln_fdq_pop(kiln_fdq_t *q) {
  if (!q->count) return -1;
  int fd = q->fds[q->head];
  q->head = (q->head + 1) % (sizeof(q->fds) / sizeof(q->fds[0]));
  q->count--;
  return fd;
}

kiln_status_t kiln_shm_create(const char *name, uint64_t size, int *out_fd, void **out_map) {
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "memfd_create: %s", strerror(errno));
  if (ftruncate(fd, (off_t)size) != 0) {
    int e = errno;
    close(fd);
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "shared memory of %llu bytes: %s",
                       (unsigned long long)size, strerror(e));
  }
  /* The peer maps the whole size; it must not be able to shrink it under us (SIGBUS). */
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  void *map = NULL;
  if (out_map && size > 0) {
    map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      int e = errno;
      close(fd);
      return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "mmap of %llu bytes: %s",
                         (unsigned long long)size, strerror(e));
    }
  }
  *out_fd = fd;
  if (out_map) *out_map = map;
  return KILN_OK;
}

kiln_status_t kiln_shm_map(int fd, uint64_t size, bool writable, void **out_map) {
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < size)
    return KILN_STATUS(KILN_E_INTERNAL, "shared memory is smaller than the %llu bytes announced",
                       (unsigned long long)size);
  if (size == 0) {
    *out_map = NULL;
    return KILN_OK;
  }
  void *map = mmap(NULL, size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (map == MAP_FAILED)
    return KILN_STATUS(KILN_E_RESOURCE_EXHAUSTED, "mmap of %llu bytes: %s",
                       (unsigned long long)size, strerror(errno));
  *out_map = map;
  return KILN_OK;
}

void kiln_shm_unmap(void *map, uint64_t size) {
  if (map && size) munmap(map, size);
}
