/* Test helper: te programs written as JSON text (strings may use single quotes, which keeps
 * them readable inside C strings) turned into the MessagePack that kiln reads. Asserts
 * (Criterion) on malformed text. The caller destroys the buffer. */
#ifndef KILN_TESTS_COMPILER_TE_JSON_H
#define KILN_TESTS_COMPILER_TE_JSON_H

#include <msgpack.h>

msgpack_sbuffer te_json_to_msgpack(const char *json);

#endif
