/* Certificates for the TLS tests, made at test time by tests/server/make_pki.sh (a CA, a
 * server certificate for 127.0.0.1 and localhost, a client certificate, and another CA with
 * a client of its own); nothing is kept in the repository. Needs $KILN_SOURCE_ROOT. */
#ifndef KILN_TESTS_SERVER_PKI_H
#define KILN_TESTS_SERVER_PKI_H

#include <stddef.h>

/* Makes a fresh directory (its path in dir) and the certificates in it. */
void pki_make(char *dir, size_t cap);
/* dir/name, in one of a few rotating static buffers (valid for the next 7 calls). */
const char *pki_path(const char *dir, const char *name);
void pki_remove(const char *dir);

#endif
