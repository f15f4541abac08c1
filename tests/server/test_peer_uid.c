/* server/peer_uid.c on its own, against the kernel's socket table: the owner of the other end
 * of a loopback connection, by netlink and by /proc alike, for IPv4, IPv6 and IPv4-mapped
 * addresses; and no owner at all for an end that was closed (TIME_WAIT, reset, or orphaned
 * with its data still in flight: sockets the kernel may report as root's). Another user is
 * played by a child that takes uid 65534, which needs root. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/peer_uid.h"

#define NOBODY 65534

typedef enum { HOLD, CLOSE, RESET, ORPHAN_FULL } peer_end_t;

typedef struct peer {
  pid_t pid;
  int ctl;                      /* the parent's end: closing it lets the child exit */
  struct sockaddr_storage mine; /* the child's end (the peer) and the far end (the listener) */
  struct sockaddr_storage far;
} peer_t;

static int listen_on(int family, const char *ip, struct sockaddr_storage *out) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert(fd >= 0);
  struct sockaddr_storage a;
  memset(&a, 0, sizeof(a));
  socklen_t len;
  if (family == AF_INET) {
    struct sockaddr_in *v4 = (struct sockaddr_in *)&a;
    v4->sin_family = AF_INET;
    cr_assert(inet_pton(AF_INET, ip, &v4->sin_addr) == 1);
    len = sizeof(*v4);
  } else {
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&a;
    v6->sin6_family = AF_INET6;
    cr_assert(inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1);
    int off = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)); /* [::] takes IPv4 too */
    len = sizeof(*v6);
  }
  if (bind(fd, (struct sockaddr *)&a, len) != 0 && errno == EADDRNOTAVAIL)
    cr_skip_test("no %s on this machine", ip);
  cr_assert(listen(fd, 16) == 0);
  len = sizeof(*out);
  cr_assert(getsockname(fd, (struct sockaddr *)out, &len) == 0);
  return fd;
}

/* A child (as uid when >= 0) connects to `to` (a listener's address; `ip` overrides its
 * address), ends its socket as `end` says, reports both addresses, and exits once the
 * parent closes p->ctl. */
static void peer_start(peer_t *p, const struct sockaddr_storage *to, const char *ip, int uid,
                       peer_end_t end) {
  if (uid >= 0 && geteuid() != 0) cr_skip_test("playing another user takes root");
  int rep[2], ctl[2];
  cr_assert(pipe(rep) == 0 && pipe(ctl) == 0);
  struct sockaddr_storage dst = *to;
  if (ip) { /* an IPv4 client of a dual-stack listener */
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = ((struct sockaddr_in6 *)to)->sin6_port};
    cr_assert(inet_pton(AF_INET, ip, &v4.sin_addr) == 1);
    memset(&dst, 0, sizeof(dst));
    memcpy(&dst, &v4, sizeof(v4));
  }
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    close(rep[0]);
    close(ctl[1]);
    if (uid >= 0 && (setgroups(0, NULL) || setresgid((gid_t)uid, (gid_t)uid, (gid_t)uid) ||
                     setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid)))
      _exit(2);
    int fd = socket(dst.ss_family, SOCK_STREAM, 0);
    socklen_t dl = dst.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (fd < 0 || connect(fd, (struct sockaddr *)&dst, dl) != 0) _exit(3);
    struct sockaddr_storage both[2];
    socklen_t l0 = sizeof(both[0]), l1 = sizeof(both[1]);
    getsockname(fd, (struct sockaddr *)&both[0], &l0);
    getpeername(fd, (struct sockaddr *)&both[1], &l1);
    if (end == CLOSE) {
      if (write(fd, "\x94\x00\x01\xa4ping\x90", 9) != 9) _exit(4); /* a request, then the FIN */
      close(fd);
    } else if (end == RESET) {
      struct linger lg = {.l_onoff = 1, .l_linger = 0};
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
      close(fd);
    } else if (end == ORPHAN_FULL) {
      /* More than the listener's side takes before it reads: the close leaves a socket no
       * process holds, with data and its FIN still to send. */
      fcntl(fd, F_SETFL, O_NONBLOCK);
      static char junk[1 << 16];
      while (write(fd, junk, sizeof(junk)) > 0) {}
      close(fd);
    }
    if (write(rep[1], both, sizeof(both)) != (ssize_t)sizeof(both)) _exit(5);
    char c;
    while (read(ctl[0], &c, 1) > 0) {}
    _exit(0);
  }
  close(rep[1]);
  close(ctl[0]);
  struct sockaddr_storage both[2];
  ssize_t n = read(rep[0], both, sizeof(both));
  close(rep[0]);
  cr_assert_eq(n, (ssize_t)sizeof(both), "the child did not connect");
  p->pid = pid;
  p->ctl = ctl[1];
  p->mine = both[0];
  p->far = both[1];
}

static void peer_stop(peer_t *p) {
  close(p->ctl);
  int ws;
  cr_assert_eq(waitpid(p->pid, &ws, 0), p->pid);
  cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the child failed (%d)", ws);
}

static const kiln_peer_uid_via_t both_ways[] = {KILN_PEER_UID_NETLINK, KILN_PEER_UID_PROC,
                                                KILN_PEER_UID_ANY};

/* The uid both ways find for the peer (-1: none, with the reason in why). */
static long uid_of(const peer_t *p, kiln_peer_uid_via_t via, char *why, size_t cap) {
  uint32_t uid = 12345;
  kiln_status_t st = kiln_peer_uid((const struct sockaddr *)&p->far, (const struct sockaddr *)&p->mine,
                                   via, 1000, &uid);
  if (!st) return uid;
  cr_assert_eq(kiln_status_code(st), KILN_E_UNAUTHENTICATED);
  snprintf(why, cap, "%s", kiln_status_message(st));
  cr_assert_eq(uid, 12345u, "the uid was set on failure");
  kiln_status_free(st);
  return -1;
}

static void expect_owner(int family, const char *listen_ip, const char *client_ip, int as) {
  struct sockaddr_storage at;
  int lfd = listen_on(family, listen_ip, &at);
  peer_t p;
  peer_start(&p, &at, client_ip, as, HOLD);
  char why[512] = "";
  long want = as >= 0 ? as : (long)geteuid();
  for (size_t i = 0; i < sizeof(both_ways) / sizeof(both_ways[0]); i++)
    cr_assert_eq(uid_of(&p, both_ways[i], why, sizeof(why)), want, "via %zu: %s", i, why);
  if (client_ip) {
    /* as kilnd sees it: its accepted socket's addresses are IPv4-mapped IPv6 ones */
    int c = accept(lfd, NULL, NULL);
    cr_assert(c >= 0);
    struct sockaddr_storage mine, theirs;
    socklen_t a = sizeof(mine), b = sizeof(theirs);
    cr_assert(getsockname(c, (struct sockaddr *)&mine, &a) == 0 &&
              getpeername(c, (struct sockaddr *)&theirs, &b) == 0);
    cr_assert_eq(mine.ss_family, AF_INET6);
    uint32_t uid = 0;
    kiln_status_t st = kiln_peer_uid((struct sockaddr *)&mine, (struct sockaddr *)&theirs,
                                     KILN_PEER_UID_ANY, 1000, &uid);
    cr_assert_null(st, "%s", kiln_status_message(st));
    cr_assert_eq(uid, (uint32_t)want);
    close(c);
  }
  peer_stop(&p);
  close(lfd);
}

Test(peer_uid, the_owner_of_an_ipv4_peer) {
  expect_owner(AF_INET, "127.0.0.1", NULL, -1);
  expect_owner(AF_INET, "127.0.0.1", NULL, NOBODY);
}

Test(peer_uid, the_owner_of_an_ipv6_peer) {
  expect_owner(AF_INET6, "::1", NULL, -1);
  expect_owner(AF_INET6, "::1", NULL, NOBODY);
}

Test(peer_uid, the_owner_of_an_ipv4_peer_of_a_dual_stack_listener) {
  expect_owner(AF_INET6, "::", "127.0.0.1", NOBODY);
}

/* An end its process closed tells no owner: TIME_WAIT and orphaned sockets are reported with
 * uid 0 by some kernels, so a peer that wrote its requests and closed would pass for root. */
static void expect_no_owner(peer_end_t end, const char *reason) {
  struct sockaddr_storage at;
  int lfd = listen_on(AF_INET, "127.0.0.1", &at);
  peer_t p;
  peer_start(&p, &at, NULL, geteuid() == 0 ? NOBODY : -1, end);
  char why[512];
  for (size_t i = 0; i < sizeof(both_ways) / sizeof(both_ways[0]); i++) {
    why[0] = 0;
    cr_assert_eq(uid_of(&p, both_ways[i], why, sizeof(why)), -1, "via %zu: an owner was found", i);
    cr_assert(strstr(why, reason), "via %zu: '%s' does not say '%s'", i, why, reason);
  }
  peer_stop(&p);
  close(lfd);
}

Test(peer_uid, a_peer_that_closed_has_no_owner) {
  expect_no_owner(CLOSE, "no user can be told");
}

Test(peer_uid, a_peer_that_reset_is_gone) {
  expect_no_owner(RESET, "it is gone");
}

Test(peer_uid, an_orphaned_peer_with_data_in_flight_has_no_owner) {
  expect_no_owner(ORPHAN_FULL, "no user can be told");
}

Test(peer_uid, addresses_of_different_families_are_refused) {
  struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons(1)};
  struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = htons(2)};
  v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  v6.sin6_addr = in6addr_loopback;
  uint32_t uid = 7;
  kiln_status_t st = kiln_peer_uid((struct sockaddr *)&v4, (struct sockaddr *)&v6, KILN_PEER_UID_ANY,
                                   100, &uid);
  cr_assert(st && uid == 7);
  kiln_status_free(st);
  /* no connection at all between two addresses: nobody owns it */
  v6.sin6_port = htons(1);
  struct sockaddr_in6 other = v6;
  other.sin6_port = htons(3);
  st = kiln_peer_uid((struct sockaddr *)&v6, (struct sockaddr *)&other, KILN_PEER_UID_ANY, 100, &uid);
  cr_assert(st && strstr(kiln_status_message(st), "it is gone"), "%s", st ? kiln_status_message(st) : "");
  kiln_status_free(st);
}
