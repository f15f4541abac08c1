/* Shared by the vector-ALU files: source fetch with modifiers (abs/neg, SDWA selects, input
 * denormal flush) and destination writes under EXEC (SDWA dst_sel, omod, clamp, output flush). */
#ifndef KILN_SOFTGPU_ISA_VALU_H
#define KILN_SOFTGPU_ISA_VALU_H

#include "device/softgpu/isa/internal.h"

#define FOR_LANES for (int l = 0; l < SG_LANES; l++)

/* Denormal modes of the kernel descriptor: 0 flush in and out, 1 flush out, 2 flush in, 3 none. */
static inline bool flush_in32(const sg_wave_t *w) { return (w->g->job->kd.denorm32 & 1) == 0; }
static inline bool flush_out32(const sg_wave_t *w) { return w->g->job->kd.denorm32 < 2; }
static inline bool flush_in64(const sg_wave_t *w) { return (w->g->job->kd.denorm64 & 1) == 0; }
static inline bool flush_out64(const sg_wave_t *w) { return w->g->job->kd.denorm64 < 2; }
static inline bool ieee_mode(const sg_wave_t *w) { return w->g->job->kd.ieee; }

/* Integer source i (SDWA select applied). */
const uint32_t *vi32(sg_wave_t *w, const sg_inst_t *in, int i, uint32_t buf[SG_LANES]);
/* f32 source i: SDWA select, abs, neg, input flush. */
const uint32_t *vf32(sg_wave_t *w, const sg_inst_t *in, int i, uint32_t buf[SG_LANES]);
/* f16 source i in the low 16 bits (op_sel picks the high half in VOP3), abs, neg, flush. */
const uint32_t *vf16(sg_wave_t *w, const sg_inst_t *in, int i, uint32_t buf[SG_LANES]);
/* f64 source i: abs, neg, input flush. */
void vf64(sg_wave_t *w, const sg_inst_t *in, int i, uint64_t out[SG_LANES]);
void vi64(sg_wave_t *w, const sg_inst_t *in, int i, uint64_t out[SG_LANES]);

/* Writes d to the destination VGPR for active lanes (SDWA dst_sel/dst_unused applied). */
void vwrite32(sg_wave_t *w, const sg_inst_t *in, const uint32_t d[SG_LANES]);
/* f32 result: omod, clamp, output flush, then vwrite32. */
void vwrite_f32(sg_wave_t *w, const sg_inst_t *in, uint32_t d[SG_LANES]);
void vwrite64(sg_wave_t *w, const sg_inst_t *in, const uint64_t d[SG_LANES]);
void vwrite_f64(sg_wave_t *w, const sg_inst_t *in, uint64_t d[SG_LANES]);
/* 16-bit result: low half, high zeroed (gfx9), or the high half kept/written per op_sel[3]. */
void vwrite16(sg_wave_t *w, const sg_inst_t *in, const uint32_t d[SG_LANES]);
/* A lane mask to an SGPR pair (VCC for e32). */
void vwrite_mask(sg_wave_t *w, unsigned sdst, uint64_t m);

/* Refuses modifiers a handler does not model (integer ops with clamp, omod on integers). */
int valu_no_mods(sg_wave_t *w, const sg_inst_t *in);

int valu_f32(sg_wave_t *w, const sg_inst_t *in);
int valu_i32(sg_wave_t *w, const sg_inst_t *in);
int valu_64(sg_wave_t *w, const sg_inst_t *in);
int valu_16(sg_wave_t *w, const sg_inst_t *in);
int valu_cmp(sg_wave_t *w, const sg_inst_t *in);
int valu_vop3p(sg_wave_t *w, const sg_inst_t *in);
int valu_lane(sg_wave_t *w, const sg_inst_t *in);

#endif
