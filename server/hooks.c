/* Lifecycle events and their hooks (server.h "lifecycle events"). */
#include <stdio.h>
#include <stdlib.h>

#include "server/server.h"

void kiln_hook_add(kiln_server_t *s, kiln_event_t ev, kiln_hook_fn fn) {
  if (s->num_hooks[ev] == KILN_HOOKS_MAX) {
    /* A build-time mistake (more handlers than the table holds), found at start. */
    fprintf(stderr, "kilnd: more than %d hooks for event %d\n", KILN_HOOKS_MAX, (int)ev);
    abort();
  }
  s->hooks[ev][s->num_hooks[ev]++] = fn;
}

void kiln_hooks_fire(kiln_server_t *s, kiln_event_t ev, void *arg) {
  for (uint8_t i = 0; i < s->num_hooks[ev]; i++) s->hooks[ev][i](s, arg);
}
