/* Graphs (docs/graph.md): the payload checked and its memory planned (graph_plan.c, no server
 * state), and the methods graph_create, graph_run, graph_time, graph_free (graph.c). */
#ifndef KILN_SERVER_GRAPH_H
#define KILN_SERVER_GRAPH_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/map.h"
#include "base/status.h"
#include "protocol/tensor.h"

#define KILN_GRAPH_MAX_NODES 65536u
#define KILN_GRAPH_MAX_LAUNCHES 65536u
#define KILN_GRAPH_MAX_NAMES 65536u
#define KILN_GRAPH_MAX_PROGRAMS 4096u

typedef enum kiln_gkind { KILN_GINPUT = 1, KILN_GCONST, KILN_GVALUE, KILN_GVIEW } kiln_gkind_t;

/* Where a name's bytes live in the device worker: one block each. */
typedef enum kiln_gregion {
  KILN_GREGION_ARENA = 0,
  KILN_GREGION_CONSTANTS = 1,
  KILN_GREGION_INPUTS = 2,
} kiln_gregion_t;

typedef struct kiln_gname {
  const char *s; /* borrows the payload */
  uint32_t len;
  kiln_gkind_t kind;
  kiln_tensor_desc_t desc;
  const uint8_t *data; /* inline constants: the bytes (borrowed) */
  uint64_t tensor;     /* constants given by id: the tenant's tensor id (else 0) */
  uint32_t base;       /* the name whose bytes these are (itself unless a view) */
  int64_t next;        /* the next name with the same 64-bit hash, or -1 */
  int32_t writer;      /* values: the node that writes it, -1 if none */
  int32_t last_use;    /* bases: the last node that passes it (or a view of it), -1 if none */
  bool output;
  uint64_t offset; /* in its region (views: the base's) */
} kiln_gname_t;

typedef enum kiln_garg_kind { KILN_GARG_NAME = 1, KILN_GARG_UINT, KILN_GARG_INT, KILN_GARG_FLOAT } kiln_garg_kind_t;

typedef struct kiln_garg {
  kiln_garg_kind_t kind;
  uint32_t name;
  uint64_t u;
  int64_t i;
  double f;
} kiln_garg_t;

typedef struct kiln_glaunch {
  char kernel[128];
  kiln_garg_t *args; /* into the plan's args */
  uint32_t num_args;
  uint32_t grid[3], block[3]; /* given (llvm, module) or from the recipe (te) */
  uint32_t shared;
} kiln_glaunch_t;

typedef struct kiln_gnode {
  const char *name, *label; /* borrowed; label may be NULL */
  uint32_t name_len, label_len;
  uint32_t program;
  kiln_glaunch_t *launches;
  uint32_t num_launches;
} kiln_gnode_t;

typedef enum kiln_gprog_kind { KILN_GPROG_TE = 1, KILN_GPROG_LLVM, KILN_GPROG_MODULE } kiln_gprog_kind_t;

typedef struct kiln_gprogram {
  kiln_gprog_kind_t kind;
  const msgpack_object *item; /* the program map */
} kiln_gprogram_t;

typedef struct kiln_gplan {
  char name[256];
  kiln_gname_t *names;
  uint32_t num_names, num_inputs; /* inputs are names[0 .. num_inputs) */
  kiln_map_t index;               /* hash of a name -> its index + 1 (chained by `next`) */
  kiln_gprogram_t *programs;
  uint32_t num_programs;
  kiln_gnode_t *nodes;
  uint32_t num_nodes;
  kiln_garg_t *args;
  uint32_t *outputs; /* name indexes */
  uint32_t num_outputs;
  uint32_t num_id_constants; /* constants given by tensor id */
  uint64_t input_bytes, constant_bytes, arena_bytes; /* after kiln_gplan_memory */
} kiln_gplan_t;

/* Checks the decoded payload map against docs/graph.md §1 (everything that needs no program
 * compiled): E_INVALID_ARGUMENT or E_RESOURCE_EXHAUSTED naming the key, node or name. The plan
 * borrows `g`. Deinit it either way. */
KILN_MUST_USE kiln_status_t kiln_gplan_decode(const msgpack_object *g, kiln_gplan_t *p);
/* §4: offsets of the inputs and constants in their blocks, and of the values in the arena
 * (liveness-based reuse, 256-byte alignment, outputs kept). */
KILN_MUST_USE kiln_status_t kiln_gplan_memory(kiln_gplan_t *p);
kiln_gregion_t kiln_gname_region(const kiln_gplan_t *p, uint32_t name);
void kiln_gplan_deinit(kiln_gplan_t *p);

#endif
