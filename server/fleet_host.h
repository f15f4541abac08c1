/* kilnd in the fleet registry (--fleet URL --advertise URL, server/fleet/registry.h): the
 * record it publishes and its lifetime. Loop thread. */
#ifndef KILN_SERVER_FLEET_HOST_H
#define KILN_SERVER_FLEET_HOST_H

#include "server/server.h"

/* Starts publishing when --fleet is given (else does nothing): E_INVALID_ARGUMENT without a
 * usable --advertise, or as kiln_redis_create for the URL and AUTH file. */
KILN_MUST_USE kiln_status_t kiln_fleet_host_start(kiln_server_t *s);
/* Stops the heartbeat (the record then expires within its TTL). */
void kiln_fleet_host_stop(kiln_server_t *s);

#endif
