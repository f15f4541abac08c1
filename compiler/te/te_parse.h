/* The te payload parser (docs/te.md §2-5): MessagePack -> program model, names resolved,
 * expression dtypes checked, schedule primitives applied in order. Every refusal is
 * E_COMPILE naming the place. te_parse.c reads the program map, te_parse_expr.c the
 * expression nodes, te_parse_prim.c the schedule primitives. */
#ifndef KILN_COMPILER_TE_TE_PARSE_H
#define KILN_COMPILER_TE_TE_PARSE_H

#include <msgpack.h>

#include "compiler/te/te_program.h"
#include "compiler/te/te_sched.h"

/* Fills the empty program p (te_program_create) from the payload bytes. */
KILN_MUST_USE kiln_status_t te_parse(const uint8_t *bytes, size_t len, te_program_t *p);

/* ---- shared by the parser's files -------------------------------------------------- */

typedef struct te_parse_ctx {
  te_program_t *p;
  const msgpack_object *tensors; /* the payload's tensor array: names of tensors not yet read */
  int stage;                     /* the compute being parsed (its shape too), -1 for none */
  bool allow_reduce;
  bool in_shape; /* only shape vars may appear */
  int depth;
} te_parse_ctx_t;

KILN_MUST_USE kiln_status_t te_parse_expr(te_parse_ctx_t *c, const msgpack_object *o, te_expr_t **out);
/* An integer expression; a weak literal becomes the index dtype. `what` names it in errors. */
KILN_MUST_USE kiln_status_t te_parse_index(te_parse_ctx_t *c, const msgpack_object *o, const char *what, te_expr_t **out);
/* Gives weak literals (and operations on them) the dtype dt; false if it cannot. */
bool te_settle(te_expr_t *e, int dt);
/* TE_BOOL..TE_F64 for a dtype string, else 0. */
int te_parse_dtype(const msgpack_object *o);

/* One schedule primitive map into *out (fields read and typed, names not resolved). */
KILN_MUST_USE kiln_status_t te_parse_prim(const msgpack_object *o, te_prim_t *out);

#endif
