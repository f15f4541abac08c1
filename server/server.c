/* The one server object of this process. A leaf: timers and signal handlers that libuv
 * calls with only their handle reach it here, without naming main.c (which calls
 * everything). */
#include "server/server.h"

static kiln_server_t the_server;

kiln_server_t *kiln_server_get(void) { return &the_server; }
