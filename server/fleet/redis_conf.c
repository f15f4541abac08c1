/* The Redis URL and AUTH file (redis_conf.h). */
#include "server/fleet/redis_conf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

kiln_status_t kiln_redis_url_parse(const char *url, char *host, size_t host_cap, int *port, int *db,
                                   bool *is_unix) {
  *db = 0;
  *port = 0;
  if (strncmp(url, "unix:", 5) == 0) {
    const char *p = url + 5, *q = strchr(p, '?');
    size_t n = q ? (size_t)(q - p) : strlen(p);
    if (n == 0 || n >= host_cap || n >= 108)
      return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "'%s': unix:PATH wants a path of 1..107 bytes", url);
    memcpy(host, p, n);
    host[n] = 0;
    if (q) {
      char *end;
      if (strncmp(q, "?db=", 4) != 0) goto bad;
      errno = 0;
      long v = strtol(q + 4, &end, 10);
      if (errno || end == q + 4 || *end || v < 0 || v > 1000000) goto bad;
      *db = (int)v;
    }
    *is_unix = true;
    return KILN_OK;
  }
  if (strncmp(url, "redis://", 8) != 0) goto bad;
  const char *h = url + 8;
  if (strchr(h, '@'))
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                       "'%s': no credentials in the URL (they would show in ps and logs); "
                       "put them in --cache-remote-auth-file", "redis://...@...");
  const char *colon, *hend;
  if (h[0] == '[') { /* [IPv6]:port */
    hend = strchr(h, ']');
    if (!hend) goto bad;
    colon = hend[1] == ':' ? hend + 1 : NULL;
    h++;
  } else {
    hend = h + strcspn(h, ":/");
    colon = *hend == ':' ? hend : NULL;
  }
  size_t hn = (size_t)(hend - h);
  if (hn == 0 || hn >= host_cap) goto bad;
  memcpy(host, h, hn);
  host[hn] = 0;
  const char *rest = hend + (h[-1] == '[' ? 1 : 0);
  *port = 6379;
  if (colon) {
    char *end;
    errno = 0;
    long v = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || v < 1 || v > 65535) goto bad;
    *port = (int)v;
    rest = end;
  }
  if (*rest == '/' && rest[1]) {
    char *end;
    errno = 0;
    long v = strtol(rest + 1, &end, 10);
    if (errno || end == rest + 1 || *end || v < 0 || v > 1000000) goto bad;
    *db = (int)v;
  } else if (*rest && strcmp(rest, "/") != 0) {
    goto bad;
  }
  *is_unix = false;
  return KILN_OK;
bad:
  return KILN_STATUS(KILN_E_INVALID_ARGUMENT,
                     "'%s' is not redis://HOST[:PORT][/DB] or unix:PATH[?db=N]", url);
}

kiln_status_t kiln_fleet_private_read(const char *path, const char *what, void *buf, size_t cap,
                                     size_t *out_n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return KILN_STATUS(errno == ENOENT ? KILN_E_NOT_FOUND : KILN_E_PERMISSION, "%s: %s", path,
                       strerror(errno));
  struct stat sb;
  ssize_t n = -1;
  kiln_status_t st = KILN_OK;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    st = KILN_STATUS(KILN_E_PERMISSION, "%s is not a regular file", path);
  else if (sb.st_mode & 077)
    st = KILN_STATUS(KILN_E_PERMISSION, "%s holds %s and must not be readable by group or others (chmod 600)",
                     path, what);
  else if ((n = read(fd, buf, cap)) < 0)
    st = KILN_STATUS(KILN_E_PERMISSION, "%s: %s", path, strerror(errno));
  close(fd);
  if (!st) *out_n = (size_t)n;
  return st;
}

kiln_status_t kiln_redis_auth_read(const char *path, char *out_user, size_t user_cap, char *out_pass,
                                   size_t pass_cap) {
  char buf[800];
  size_t n = 0;
  KILN_RETURN_IF_ERROR(kiln_fleet_private_read(path, "a Redis password", buf, sizeof(buf) - 1, &n));
  if (n >= sizeof(buf) - 1) {
    explicit_bzero(buf, sizeof(buf));
    return KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: one line of at most %zu bytes", path, sizeof(buf) - 2);
  }
  buf[n] = 0;
  buf[strcspn(buf, "\r\n")] = 0;
  char *sp = strchr(buf, ' ');
  const char *user = "", *pass = buf;
  kiln_status_t st = KILN_OK;
  if (sp) {
    *sp = 0;
    user = buf;
    pass = sp + 1;
  }
  if ((sp && strchr(pass, ' ')) || strlen(user) >= user_cap || strlen(pass) >= pass_cap)
    st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s: PASSWORD or USER PASSWORD on one line", path);
  else if (!pass[0])
    st = KILN_STATUS(KILN_E_INVALID_ARGUMENT, "%s holds no password", path);
  else {
    snprintf(out_user, user_cap, "%s", user);
    snprintf(out_pass, pass_cap, "%s", pass);
  }
  explicit_bzero(buf, sizeof(buf));
  return st;
}
