/* `kiln fleet` (fleet.c): the hosts of a fleet, read from its registry on Redis (the records
 * kilnd --fleet publishes; docs/operations.md "A fleet"), as a table or JSON. Uses hiredis's
 * blocking API; nothing of libuv or of the client library.
 *
 * Threads: the CLI's one. */
#ifndef KILN_CLIENTS_C_FLEET_H
#define KILN_CLIENTS_C_FLEET_H

#include <stdbool.h>
#include <stdio.h>

#include "base/status.h"

typedef struct kiln_cli_fleet_opts {
  const char *url;       /* redis://HOST[:PORT][/DB] or unix:PATH[?db=N], "fleet:" before it allowed */
  const char *auth_file; /* NULL, or PASSWORD or USER PASSWORD on one line (chmod 600) */
  const char *device;    /* NULL, or only hosts serving this kind ("cuda", "gpu") or id ("cuda:1") */
  const char *trusted_keys; /* NULL, or a trusted-keys file: only records signed by its keys count */
  bool json;
  int timeout_ms; /* connect and each reply (0: 5000) */
} kiln_cli_fleet_opts_t;

/* Reads the registry and prints the hosts to out, a note per skipped entry (garbage, too
 * large, of another type, naming another host, and with trusted_keys: unsigned, badly signed,
 * signed by a key not trusted for its address, or older than MAX_AGE_S) to err. E_INVALID_ARGUMENT for a URL that
 * does not parse, E_NOT_FOUND/E_PERMISSION for the AUTH file, E_UNAVAILABLE when Redis cannot
 * be reached or refuses (AUTH, a registry set of another type, a reply past the bounds). */
KILN_MUST_USE kiln_status_t kiln_cli_fleet_list(const kiln_cli_fleet_opts_t *o, FILE *out, FILE *err);

/* `kiln fleet-key FILE [ADDR]`: makes FILE (a new Ed25519 seed, mode 0600) unless it exists,
 * and prints the line of a trusted-keys file for it: "ed25519:<hex> ADDR" (ADDR default *). */
KILN_MUST_USE kiln_status_t kiln_cli_fleet_key(const char *path, const char *addr, FILE *out, FILE *err);

#endif
