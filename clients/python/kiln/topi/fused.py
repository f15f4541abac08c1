"""Schedules for fused kernels: one "anchor" reduction (a convolution or a matrix product)
followed by element-wise work in the same kernel (bias, activation, residual add), and a
generic schedule for everything else (reductions, softmax, pooling, injective ops).

    conv = topi.conv2d_nchw(X, W, 1, 1)
    out = te.compute(conv.shape, lambda n, f, y, x: te.max(conv[n, f, y, x] + B[f], 0.0))
    s = topi.schedule_fused(out, "cpu")

The anchor is computed inside the output stage's tile (its accumulators stay in registers,
as cache_write does for the unfused schedules) and the element-wise stages between the two
are inlined, so the epilogue costs no memory traffic.
"""

from .. import te
from ..te.expr import IntImm
from ..te.tensor import ComputeOp
from .schedules import is_gpu, _knobs, _computes, _injective_stage, KNOBS
from . import conv_gpu, gemv_gpu

__all__ = ["schedule_fused", "schedule_generic", "anchor_of", "FUSED_KNOBS"]

FUSED_KNOBS = {
    "fused_conv2d": {
        "cpu": {"oc_block": 8, "ow_block": 16, "vec": 8, "inline_pad": True, "unroll": True},
        "gpu": conv_gpu.CONV_GPU_KNOBS["gpu_direct"],
    },
    "fused_depthwise": {"cpu": {"ow_block": 0, "inline_pad": True}, "gpu": {"num_thread": 128}},
    "fused_matmul": {
        "cpu": {"bm": 4, "bn": 64, "bk": 1},
        "gpu": {"num_thread": 64, "tm": 4},
    },
    # a 1x1 stride-1 convolution (topi.conv2d_pointwise): fused_matmul's schedule on the cpu
    "fused_pointwise": {
        "cpu": {"bm": 4, "bn": 64, "bk": 1},
        "gpu": conv_gpu.CONV_GPU_KNOBS["gpu_pointwise"],
    },
    "generic": {"cpu": {"chunk": 4096, "vec": 8}, "gpu": {"num_thread": 256}},
    # a few-row product (an fc layer at batch 1) on a GPU: gemv_gpu's split-K (the cpu entry
    # is unused: fused_matmul's cpu schedule runs it there)
    "fused_gemv": {"cpu": {}, "gpu": gemv_gpu.GEMV_GPU_KNOBS},
}
KNOBS.update(FUSED_KNOBS)

_ANCHOR_TAGS = ("conv2d_nchw", "depthwise_conv2d_nchw", "matmul", "dense", "conv2d_transpose")


def anchor_of(out):
    """The anchor reduction of a fused kernel's output (the output itself if it is one),
    or None."""
    seen, stack = set(), [out]
    while stack:
        t = stack.pop()
        if id(t.op) in seen or not isinstance(t.op, ComputeOp):
            continue
        seen.add(id(t.op))
        if t.op.reduce_axis and t.op.tag in _ANCHOR_TAGS:
            return t
        stack.extend(t.op.input_tensors)
    return None


def _const(d):
    return d.value if isinstance(d, IntImm) else None


def _vec_block(n, cap):
    """The vectorised block of a matmul tile's columns (n of them): cap (the knob) when n is
    unknown or at least cap, else the power of two below n (8 at the least). LLVM legalises
    a block of <49 x float> accumulators element by element through the stack: a 7x7 map's
    pointwise conv with 49-wide tiles ran 40x slower than with 32-wide tiles and a guarded
    tail (bench/results/graph.md)."""
    if n is None or n >= cap:
        return cap
    return max(8, 1 << (n.bit_length() - 1))


def schedule_fused(out, target="cpu", **kw):
    """Schedules ``out``: an anchor (conv2d_nchw, depthwise_conv2d_nchw, a matmul-tagged
    product: gemm, matmul, dense, conv2d_pointwise) with element-wise stages after it.
    Without an anchor this is schedule_generic."""
    anchor = anchor_of(out)
    if anchor is None:
        return schedule_generic(out, target, **kw)
    tag = anchor.op.tag
    if tag == "conv2d_nchw":
        return _fused_conv(out, anchor, target, kw)
    if tag == "depthwise_conv2d_nchw":
        return _fused_depthwise(out, anchor, target, kw)
    if tag == "matmul" and anchor.op.name == "conv2d_pointwise" and is_gpu(target):
        return _fused_pointwise_gpu(out, anchor, target, kw)
    if is_gpu(target) and gemv_gpu.fits(anchor) and not (set(kw) - set(gemv_gpu.GEMV_GPU_KNOBS)):
        return _fused_gemv_gpu(out, anchor, target, kw)
    if tag in ("matmul", "dense") and len(anchor.shape) in (2, 3):
        return _fused_matmul(out, anchor, target, kw)
    return schedule_generic(out, target, **kw)


def _inline_between(s, out, anchor, keep_pads=False):
    """Inlines every element-wise stage except the output and the anchor; pads too unless
    keep_pads (then they stay at the root: their own kernel)."""
    for st in _computes(s):
        if st.op is out.op or st.op is anchor.op or st.op.reduce_axis or st.attach != "root":
            continue
        if keep_pads and "pad" in st.op.tag.split(","):
            _injective_stage(s, st, False, KNOBS["injective"]["cpu"])
            continue
        st.compute_inline()


def _epilogue_stage(s, out, anchor):
    if out.op is anchor.op:
        # no element-wise work after it: compute into a local accumulator copied out
        a = s.cache_write(out, "local")
        return s[out], s[a], a
    return s[out], s[anchor], anchor


def _fused_conv(out, anchor, target, kw):
    gpu = is_gpu(target)
    k = _knobs("fused_conv2d", target, kw)
    s = te.create_schedule(out.op)
    if gpu:
        _inline_between(s, out, anchor)
        data, kernel = anchor.op.input_tensors
        split = conv_gpu.direct_split(anchor, data, k)
        if split > 1:
            return conv_gpu.direct_split_k(s, out, anchor, data, kernel, k, split)
        so, sa, _ = _epilogue_stage(s, out, anchor)
        return conv_gpu.direct(s, so, sa, data, kernel, k)
    _inline_between(s, out, anchor, keep_pads=not k["inline_pad"])
    so, sa, _ = _epilogue_stage(s, out, anchor)
    n, f, y, x = so.op.axis
    owb = k["ow_block"]
    ow = _const(out.shape[3])
    if not owb:
        owb = ow if ow is not None and ow <= 64 else 32
    elif ow is not None and ow < owb:
        owb = ow
    ocb = k["oc_block"]
    oc = _const(out.shape[1])
    if oc is not None and oc < ocb:
        ocb = oc
    fo, fi = so.split(f, factor=ocb)
    xo, xi = so.split(x, factor=owb)
    so.reorder(n, fo, y, xo, fi, xi)
    g = so.fuse(n, fo)
    g = so.fuse(g, y)
    so.parallel(g)
    so.vectorize(xi)
    sa.compute_at(so, xo)
    _, fc, yc, xc = sa.op.axis
    rc, ry, rx = sa.op.reduce_axis
    vec = k["vec"]
    if owb > vec:
        xco, xci = sa.split(xc, factor=vec)
        sa.reorder(rc, ry, rx, fc, xco, xci)
        sa.vectorize(xci)
        sa.unroll(xco)
    else:
        sa.reorder(rc, ry, rx, fc, xc)
        sa.vectorize(xc)
    sa.unroll(fc)
    if k["unroll"]:
        # the unrolled body is oc_block x (ow_block / vec) vector FMAs; unrolling the
        # kernel window multiplies it, and LLVM's compile time with it (a 7x7 stem fully
        # unrolled took minutes), so the window is unrolled only while the body stays small
        body = ocb * max(owb // vec, 1)
        kh, kw = _const(ry.dom.extent), _const(rx.dom.extent)
        if kw is not None and body * kw <= 64:
            sa.unroll(rx)
            if kh is not None and body * kw * kh <= 64:
                sa.unroll(ry)
    return s


def _fused_pointwise_gpu(out, anchor, target, kw):
    """A 1x1 stride-1 convolution (N x O x P) and its epilogue: conv_gpu.pointwise."""
    k = _knobs("fused_pointwise", target, kw)
    s = te.create_schedule(out.op)
    _inline_between(s, out, anchor)
    so, sa, _ = _epilogue_stage(s, out, anchor)
    W, X = sorted(anchor.op.input_tensors, key=lambda t: len(t.shape))   # O x C, N x C x P
    return conv_gpu.pointwise(s, so, sa, W, X, k)


def _fused_gemv_gpu(out, anchor, target, kw):
    """A few-row product (gemv_gpu.fits) and its epilogue: gemv_gpu.split_k, two kernels."""
    k = _knobs("fused_gemv", target, kw)
    s = te.create_schedule(out.op)
    _inline_between(s, out, anchor)
    return gemv_gpu.split_k(s, out, anchor, k)


def _fused_depthwise(out, anchor, target, kw):
    gpu = is_gpu(target)
    k = _knobs("fused_depthwise", target, kw)
    s = te.create_schedule(out.op)
    if gpu:
        _inline_between(s, out, anchor)
        so, sa, _ = _epilogue_stage(s, out, anchor)
        g = so.fuse(*so.op.axis[:2])
        g = so.fuse(g, so.op.axis[2])
        g = so.fuse(g, so.op.axis[3])
        bx, tx = so.split(g, factor=k["num_thread"])
        so.bind(bx, te.thread_axis("blockIdx.x"))
        so.bind(tx, te.thread_axis("threadIdx.x"))
        sa.compute_at(so, tx)
        return s
    _inline_between(s, out, anchor, keep_pads=not k["inline_pad"])
    so, sa, _ = _epilogue_stage(s, out, anchor)
    n, c, y, x = so.op.axis
    owb = k["ow_block"]
    ow = _const(out.shape[3])
    if not owb:
        # the row's own width, even when not a power of two: measured faster here than
        # power-of-two blocks with a guarded tail (bench/results/graph.md)
        owb = ow if ow is not None and ow <= 64 else 32
    elif ow is not None and ow < owb:
        owb = ow
    xo, xi = so.split(x, factor=owb)
    g = so.fuse(n, c)
    g = so.fuse(g, y)
    so.parallel(g)
    so.vectorize(xi)
    sa.compute_at(so, xo)
    _, _, _, xc = sa.op.axis
    ry, rx = sa.op.reduce_axis
    sa.reorder(ry, rx, xc)
    sa.vectorize(xc)
    sa.unroll(ry)
    sa.unroll(rx)
    return s


def _fused_matmul(out, anchor, target, kw):
    """2-d (M x N) or batched 3-d (B x M x N) products: bm x bn tiles of the output, the
    product accumulated in a local block inside each tile (rows unrolled, columns one
    vector each), tiles over the pool."""
    gpu = is_gpu(target)
    k = _knobs("fused_matmul", target, kw)
    s = te.create_schedule(out.op)
    _inline_between(s, out, anchor)
    so, sa, _ = _epilogue_stage(s, out, anchor)
    axes = list(so.op.axis)
    i, j = axes[-2], axes[-1]
    if gpu:
        tm = k["tm"]
        io, ii = so.split(i, factor=tm)
        so.reorder(*(axes[:-2] + [io, j, ii]))
        g = io
        for b in reversed(axes[:-2]):
            g = so.fuse(b, g)
        g = so.fuse(g, j)
        bx, tx = so.split(g, factor=k["num_thread"])
        so.bind(bx, te.thread_axis("blockIdx.x"))
        so.bind(tx, te.thread_axis("threadIdx.x"))
        sa.compute_at(so, tx)
        (kk,) = sa.op.reduce_axis
        mc = sa.op.axis[-2]
        sa.reorder(kk, mc)
        sa.unroll(mc)
        return s
    bm, bn, bk = k["bm"], k["bn"], k["bk"]
    M, N = _const(out.shape[-2]), _const(out.shape[-1])
    if M is not None and M < bm:
        bm = M
    bn = _vec_block(N, bn)
    io, ii = so.split(i, factor=bm)
    jo, ji = so.split(j, factor=bn)
    batch = 1
    for d in out.shape[:-2]:
        batch *= _const(d) or 1
    tiles_j = -(-N // bn) if N is not None else 8
    if batch * tiles_j >= 8:
        # column panels over the pool (a K x bn panel of B stays in cache while the row
        # tiles pass over it), the accumulator block computed per row tile
        outer, inner = jo, io
    else:
        # few columns (a 7x7 map): row tiles over the pool
        outer, inner = io, jo
    so.reorder(*(axes[:-2] + [outer, inner, ii, ji]))
    g = outer
    for b in reversed(axes[:-2]):
        g = so.fuse(b, g)
    so.parallel(g)
    so.vectorize(ji)
    sa.compute_at(so, inner)
    mc, nc = sa.op.axis[-2], sa.op.axis[-1]
    (kk,) = sa.op.reduce_axis
    ko, ki = sa.split(kk, factor=bk)
    sa.reorder(ko, ki, mc, nc)
    sa.vectorize(nc)
    sa.unroll(mc)
    return s


def schedule_generic(outs, target="cpu", **kw):
    """Any program without an anchor: element-wise stages inlined into their readers, every
    reduction its own kernel (its data loops fused: over the pool on the CPU, one element
    per work-item on GPUs), the output flat (schedule_injective's layout) or, when it is a
    reduction, like the other reductions."""
    gpu = is_gpu(target)
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    k = _knobs("generic", target, kw)
    s = te.create_schedule([o.op for o in outs])
    outputs = {o.op for o in outs}
    for st in _computes(s):
        if st.attach != "root":
            continue
        if st.op not in outputs and not st.op.reduce_axis:
            st.compute_inline()
    for st in _computes(s):
        if st.attach != "root":
            continue
        if not st.op.reduce_axis:
            _injective_stage(s, st, gpu, k)
            continue
        axes = list(st.op.axis)
        if gpu:
            g = st.fuse(*axes) if len(axes) > 1 else axes[0]
            bx, tx = st.split(g, factor=k["num_thread"])
            st.bind(bx, te.thread_axis("blockIdx.x"))
            st.bind(tx, te.thread_axis("threadIdx.x"))
            continue
        if len(axes) >= 2:
            g = st.fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
            st.parallel(g)
        else:
            o, _ = st.split(axes[0], factor=16)
            st.parallel(o)
    return s
