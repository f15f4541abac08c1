/* The `kiln stats` tables (stats.c). */
#ifndef KILN_CLIENTS_C_STATS_H
#define KILN_CLIENTS_C_STATS_H

#include <msgpack.h>
#include <stdio.h>

/* Prints the result of the `stats` method as readable tables. */
void kiln_cli_print_stats(FILE *f, const msgpack_object *stats);

#endif
