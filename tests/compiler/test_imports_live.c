/* The compiler's refusals through the real kilnd and its compile workers: a kernel that
 * calls a host function, one with inline assembly (which used to end the compile worker)
 * and one reading `environ` each get E_COMPILE naming what they reached for, on the same
 * connection, and the next good kernel compiles. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tests/server/harness.h"

static daemon_t d;
static void start(void) { daemon_start(&d, NULL); }
static void stop(void) {
  if (d.pid) daemon_stop(&d);
}
TestSuite(imports_live, .init = start, .fini = stop, .timeout = 120);

static void expect_refused(client_t *c, const char *ir, const char *needle) {
  client_send_compile(c, 1, ir, "cpu");
  cr_assert(client_recv(c, 60000), "no compile reply");
  char t[2048];
  text_of(c, t, sizeof(t));
  cr_assert_eq(code_of(c), KILN_E_COMPILE, "expected E_COMPILE, got %s: %s", kiln_code_name((kiln_code_t)code_of(c)), t);
  cr_assert(strstr(t, needle), "message lacks '%s': %s", needle, t);
}

Test(imports_live, refusals_cost_only_their_request) {
  client_t c;
  client_connect_unix(&c, &d);
  expect_refused(&c,
                 "declare ptr @popen(ptr, ptr)\n"
                 "define void @k(ptr %p) section \"kiln.kernel\" {\n"
                 "  %f = call ptr @popen(ptr %p, ptr %p)\n  store ptr %f, ptr %p\n  ret void\n}\n",
                 "calls 'popen'");
  expect_refused(&c,
                 "define void @k(ptr %p) section \"kiln.kernel\" {\n"
                 "  %r = call i64 asm sideeffect \"mov $$39, %rax; syscall\", \"={rax},~{rcx},~{r11}\"()\n"
                 "  store i64 %r, ptr %p\n  ret void\n}\n",
                 "inline assembly");
  expect_refused(&c,
                 "@environ = external global ptr\n"
                 "define void @k(ptr %p) section \"kiln.kernel\" {\n"
                 "  %e = load ptr, ptr @environ\n  store ptr %e, ptr %p\n  ret void\n}\n",
                 "'environ'");

  /* The same connection and the same compile workers go on: the next kernel compiles. */
  client_send_compile(&c, 2, "define void @k(ptr %p) section \"kiln.kernel\" {\n  store i32 7, ptr %p\n  ret void\n}\n", "cpu");
  cr_assert(client_recv(&c, 60000));
  char t[512];
  cr_assert_eq(code_of(&c), 0, "%s", text_of(&c, t, sizeof(t)));
  const msgpack_object *m = kiln_params_find(c.msg.result, "module");
  cr_assert(m && m->type == MSGPACK_OBJECT_STR && m->via.str.size == 64);
  client_close(&c);
}
