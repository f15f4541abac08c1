/* Daily use (issue 16), the clients' side of the daemon's answers: a URL that names another
 * service (kilnd's own metrics port) is reported as "not a kilnd RPC port" (E_UNAVAILABLE;
 * the CLI's exit code 3), never as a bug of kiln's; a tokens server without a token says
 * how to give one. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

static char tokens_path[128];

static void up(void) {
  snprintf(tokens_path, sizeof(tokens_path), "/tmp/kiln-daily-cli-tokens-%d", (int)getpid());
  FILE *f = fopen(tokens_path, "w");
  cr_assert(f);
  fprintf(f, "daily-token-0123456789 alpha\n");
  fclose(f);
  fixture_up_with((const char *const[]){"--metrics", "tcp:127.0.0.1:0", "--tokens", tokens_path, NULL});
}

static void down(void) {
  fixture_down();
  unlink(tokens_path);
}

TestSuite(daily, .init = up, .fini = down, .timeout = 120);

/* Runs $KILN_CLI with args; returns its exit code, its stdout and stderr in err. */
static int cli(char *err, size_t cap, const char *const *args) {
  const char *exe = getenv("KILN_CLI");
  cr_assert(exe && *exe);
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    dup2(p[1], 2);
    close(p[0]);
    const char *argv[16] = {exe};
    int n = 1;
    for (; *args && n < 15; args++) argv[n++] = *args;
    argv[n] = NULL;
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  size_t len = 0;
  ssize_t r;
  while ((r = read(p[0], err + len, cap - 1 - len)) > 0 || (r < 0 && errno == EINTR))
    if (r > 0) len += (size_t)r;
  err[len] = 0;
  close(p[0]);
  int st;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st));
  return WEXITSTATUS(st);
}

Test(daily, the_metrics_port_is_not_an_rpc_port) {
  cr_assert(g_kilnd.metrics_url[0], "kilnd reported no metrics address");
  kiln_client_t *c = fixture_connect(g_kilnd.metrics_url);
  kiln_status_t s = kiln_client_ping(c);
  cr_assert(s, "ping through the metrics port succeeded");
  cr_assert_eq(kiln_status_code(s), KILN_E_UNAVAILABLE, "%s: %s", kiln_code_name(kiln_status_code(s)),
               kiln_status_message(s));
  cr_assert(strstr(kiln_status_message(s), "is not a kilnd RPC port"), "%s", kiln_status_message(s));
  kiln_status_free(s);
  kiln_client_destroy(c);
  char err[2048];
  cr_assert_eq(cli(err, sizeof(err), (const char *const[]){"--url", g_kilnd.metrics_url, "ping", NULL}), 3,
               "%s", err);
  cr_assert(strstr(err, "is not a kilnd RPC port"), "%s", err);
}

Test(daily, a_missing_token_says_how_to_give_one) {
  char err[2048];
  unsetenv("KILN_TOKEN");
  cr_assert_eq(cli(err, sizeof(err), (const char *const[]){"--url", g_kilnd.tcp_url, "devices", NULL}), 1,
               "%s", err);
  cr_assert(strstr(err, "set KILN_TOKEN or --token"), "%s", err);
}

/* Without a URL: $KILN_URL, else the places a daemon is looked for, in order; when none
 * answers, the error says why for each. */
Test(daily, without_a_url_the_search_list_is_tried_in_order) {
  unsetenv("KILN_URL");
  char list[600];
  snprintf(list, sizeof(list), "unix:/nonexistent/kiln-a.sock %s", g_kilnd.unix_url);
  setenv("KILN_SEARCH", list, 1);
  kiln_client_t *c;
  ASSERT_OK(kiln_client_create(NULL, &c));
  cr_assert_str_eq(kiln_client_url(c), g_kilnd.unix_url);
  ASSERT_OK(kiln_client_ping(c));
  kiln_client_destroy(c);
  setenv("KILN_SEARCH", "unix:/nonexistent/kiln-a.sock tcp:127.0.0.1:1", 1);
  kiln_status_t s = kiln_client_create(NULL, &c);
  cr_assert(s);
  const char *m = kiln_status_message(s);
  cr_assert_eq(kiln_status_code(s), KILN_E_UNAVAILABLE);
  cr_assert(strstr(m, "no kilnd found") && strstr(m, "unix:/nonexistent/kiln-a.sock") &&
                strstr(m, "tcp:127.0.0.1:1"),
            "%s", m);
  kiln_status_free(s);
  /* The default list: the user socket, the system socket, the usual TCP port. */
  unsetenv("KILN_SEARCH");
  setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
  kiln_client_search_list(list, sizeof(list));
  cr_assert_str_eq(list, "unix:/run/user/4242/kiln.sock unix:/run/kiln/kiln.sock tcp:127.0.0.1:7070");
  /* $KILN_URL wins over the search. */
  setenv("KILN_URL", g_kilnd.tcp_url, 1);
  ASSERT_OK(kiln_client_create(NULL, &c));
  cr_assert_str_eq(kiln_client_url(c), g_kilnd.tcp_url);
  kiln_client_destroy(c);
  unsetenv("KILN_URL");
}

/* A daemon another user runs where the search looks (anyone may listen first on a loopback
 * port) is not used, and gets no byte: its owner is checked first (docs/protocol.md §1). */
Test(daily, the_search_skips_a_daemon_another_user_runs) {
  if (geteuid() != 0) cr_skip_test("playing another user (nobody) takes root");
  int port_pipe[2], got_pipe[2];
  cr_assert_eq(pipe(port_pipe), 0);
  cr_assert_eq(pipe(got_pipe), 0);
  pid_t pid = fork();
  if (pid == 0) { /* the squatter: nobody's socket (its owner is fixed when it is made) */
    if (setgid(65534) || setuid(65534)) _exit(1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 4) ||
        getsockname(fd, (struct sockaddr *)&a, &len))
      _exit(1);
    unsigned short port = ntohs(a.sin_port);
    if (write(port_pipe[1], &port, sizeof(port)) != sizeof(port)) _exit(1);
    int c = accept(fd, NULL, NULL);
    char buf[256];
    long total = 0;
    ssize_t n;
    while ((n = read(c, buf, sizeof(buf))) > 0) total += n;
    if (write(got_pipe[1], &total, sizeof(total)) != sizeof(total)) _exit(1);
    _exit(0);
  }
  unsigned short port = 0;
  cr_assert_eq(read(port_pipe[0], &port, sizeof(port)), (ssize_t)sizeof(port));
  char url[64];
  snprintf(url, sizeof(url), "tcp:127.0.0.1:%u", port);
  unsetenv("KILN_URL");
  setenv("KILN_SEARCH", url, 1);
  kiln_client_t *c;
  kiln_status_t s = kiln_client_create(NULL, &c);
  unsetenv("KILN_SEARCH");
  cr_assert(s, "another user's daemon was used");
  const char *m = kiln_status_message(s);
  cr_assert_eq(kiln_status_code(s), KILN_E_UNAVAILABLE);
  cr_assert(strstr(m, "not used: it runs as uid 65534") && strstr(m, "set KILN_URL="), "%s", m);
  kiln_status_free(s);
  long got = -1;
  cr_assert_eq(read(got_pipe[0], &got, sizeof(got)), (ssize_t)sizeof(got));
  cr_assert_eq(got, 0, "the squatter received %ld bytes", got);
  int status;
  waitpid(pid, &status, 0);
  for (int i = 0; i < 2; i++) close(port_pipe[i]), close(got_pipe[i]);
}

/* kiln tensors lists what the tenant holds; free --all frees it whoever made it. */
Test(daily, the_cli_lists_and_frees_the_tenants_tensors) {
  char out[4096];
  const char *url = g_kilnd.tcp_url, *tok = "daily-token-0123456789";
  unsetenv("KILN_TOKEN");
  cr_assert_eq(cli(out, sizeof(out), (const char *const[]){"--url", url, "--token", tok, "alloc", "float32", "2", "3", NULL}),
               0, "%s", out);
  char id[32];
  snprintf(id, sizeof(id), "%llu", strtoull(out, NULL, 10));
  cr_assert_eq(cli(out, sizeof(out), (const char *const[]){"tensors", "--url", url, "--token", tok, NULL}), 0, "%s", out);
  cr_assert(strstr(out, id) && strstr(out, "float32") && strstr(out, "(2,3)") && strstr(out, "kiln-cli"), "%s", out);
  cr_assert_eq(cli(out, sizeof(out), (const char *const[]){"free", "--all", "--url", url, "--token", tok, NULL}), 0, "%s", out);
  cr_assert(strstr(out, "freed 1 tensor"), "%s", out);
  cr_assert_eq(cli(out, sizeof(out), (const char *const[]){"tensors", "--url", url, "--token", tok, NULL}), 0, "%s", out);
  cr_assert_null(strstr(out, id), "%s", out);
  cr_assert_eq(cli(out, sizeof(out), (const char *const[]){"free", "--url", url, NULL}), 2, "%s", out);
  cr_assert_eq(cli(out, sizeof(out), (const char *const[]){"free", "5", "--all", "--url", url, NULL}), 2, "%s", out);
  cr_assert_eq(cli(out, sizeof(out), (const char *const[]){"tensors", "--all", "--url", url, NULL}), 2, "%s", out);
}
