"""CPU and GPU schedules of the kiln.topi operators, with named knobs.

A knob that does not divide a size still works: the lowering guards partial tiles.
"""

from .. import te
from ..errors import InvalidArgument
from ..te.expr import IntImm
from ..te.tensor import ComputeOp, PlaceholderOp

__all__ = ["schedule_matmul", "schedule_dense", "schedule_batch_matmul", "schedule_conv2d_nchw",
           "schedule_depthwise_conv2d_nchw", "schedule_pool2d", "schedule_softmax", "schedule_layer_norm",
           "schedule_injective", "schedule_elementwise", "schedule_broadcast", "knobs", "KNOBS", "is_gpu"]

# template -> target kind -> knob -> default
KNOBS = {
    "matmul": {
        "cpu": {"bm": 8, "bn": 32, "bk": 4, "order": "ji", "unroll_k": False},
        "gpu": {"block_m": 64, "block_n": 64, "thread_m": 16, "thread_n": 16, "k_tile": 8, "vec": 1,
                "double_buffer": False, "vthread_m": 1, "vthread_n": 1, "min_blocks": 0,
                "k_major": False},
    },
    "batch_matmul": {
        "cpu": {"bm": 8, "bn": 32},
        "gpu": {"tile": 16},
    },
    "conv2d_nchw": {
        "cpu": {"oc_block": 16, "ow_block": 8, "vec": 8, "inline_pad": False, "unroll": True},
        "gpu": {"num_thread": 128, "oc_block": 4},
    },
    "depthwise_conv2d_nchw": {"cpu": {"ow_block": 8}, "gpu": {"num_thread": 128}},
    "pool2d": {"cpu": {"ow_block": 8}, "gpu": {"num_thread": 128}},
    "softmax": {"cpu": {"vec": 8}, "gpu": {"num_thread": 64}},
    "layer_norm": {"cpu": {"vec": 8}, "gpu": {"num_thread": 64}},
    "injective": {"cpu": {"chunk": 4096, "vec": 8}, "gpu": {"num_thread": 256}},
}


def is_gpu(target):
    """True for "gpu", "rocm", "cuda", "nvptx", gfx*/sm_* targets and GPU devices."""
    t = getattr(target, "id", target)
    t = str(t or "cpu").split()[0]
    if t in ("cpu", "llvm", "host", "c") or t.startswith("cpu:"):
        return False
    if t in ("gpu", "rocm", "cuda", "nvptx") or t.startswith(("gfx", "sm_", "hsa:", "cuda:")):
        return True
    raise InvalidArgument("unknown target %r for a topi schedule: use 'cpu' or 'gpu'" % (target,))


def knobs(template, target="cpu"):
    """The knobs of a template for a target and their defaults."""
    if template not in KNOBS:
        raise InvalidArgument("no template %r; kiln.topi has %s" % (template, ", ".join(KNOBS)))
    return dict(KNOBS[template]["gpu" if is_gpu(target) else "cpu"])


# Where tuned knobs come from (kiln.autotune.apply): fn(template, "cpu"|"gpu", out) -> a dict
# of knobs, or None. The last one that answers wins; knobs given to a schedule win over it.
KNOB_PROVIDERS = []


def _knobs(template, target, given, out=None):
    k = knobs(template, target)
    if out is not None:
        for fn in reversed(KNOB_PROVIDERS):
            tuned = fn(template, "gpu" if is_gpu(target) else "cpu", out)
            if tuned:
                k.update({n: v for n, v in tuned.items() if n in k})
                break
    for name, v in given.items():
        if name not in k:
            raise InvalidArgument("%s (%s) has no knob %r; its knobs are %s"
                                  % (template, "gpu" if is_gpu(target) else "cpu", name, ", ".join(k)))
        k[name] = v
    return k


def _outs(outs):
    return [outs] if isinstance(outs, te.Tensor) else list(outs)


def _computes(s):
    return [st for st in s.stages if isinstance(st.op, ComputeOp) and st.cache_of is None
            and st.cache_write_of is None]


def _inline_pads(s, keep=False):
    for st in _computes(s):
        if "pad" in st.op.tag.split(",") and not keep:
            st.compute_inline()


def _injective_stage(s, st, gpu, k):
    """Flat schedule for one stage: GPU one element per thread; CPU chunks over the pool,
    each vectorized."""
    axes = list(st.op.axis)
    if not axes:
        return
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
    if gpu:
        bx, tx = st.split(fused, factor=k["num_thread"])
        st.bind(bx, te.thread_axis("blockIdx.x"))
        st.bind(tx, te.thread_axis("threadIdx.x"))
    else:
        o, i = st.split(fused, factor=k.get("chunk", 4096))
        st.parallel(o)
        st.vectorize(i)


def schedule_injective(outs, target="cpu", **kw):
    """Elementwise and broadcast ops (and any injective compute): every root stage flat."""
    gpu = is_gpu(target)
    outs = _outs(outs)
    s = te.create_schedule([o.op for o in outs])
    k = _knobs("injective", target, kw)
    _inline_pads(s)
    outputs = {o.op for o in outs}
    for st in _computes(s):
        if st.attach == "inline":
            continue
        if st.op not in outputs and not st.op.reduce_axis:
            st.compute_inline()
            continue
        _injective_stage(s, st, gpu, k)
    return s


schedule_elementwise = schedule_injective
schedule_broadcast = schedule_injective


def schedule_matmul(C, target="cpu", **kw):
    """matmul and dense. CPU: tiles of bm x bn accumulated in a local block, k split by bk,
    the bn loop vectorized, row tiles over the
    pool. GPU: block_m x block_n tiles per work-group of thread_m x thread_n work-items,
    A and B tiles staged in shared memory per k_tile step, accumulators in registers;
    ``vec`` elements per global load and shared store of the staging copies (4: 128-bit),
    ``double_buffer``: the next k step's tiles are loaded into registers while this one
    computes, into the other half of two shared tiles (one barrier a step); ``vthread_m`` x
    ``vthread_n`` virtual threads: a work-item's tile is that many sub-tiles strided across
    the block (te's vthread: its shared reads and global stores are those of a block
    vthread times smaller, adjacent across work-items); ``min_blocks`` (0: none): the
    occupancy hint, te's launch_bounds (ptxas caps registers to fit that many blocks an SM);
    ``k_major``: the shared tiles of inputs whose rows run along k (matmul's A, both of dense's)
    are stored k-major (te's storage_order): a k step's fragment of a thread's rows is then
    contiguous, 128-bit shared loads of one k each instead of four k steps of each row at
    once (a quarter of the fragment registers)."""
    gpu = is_gpu(target)
    k = _knobs("matmul", target, kw, C)
    A, B = C.op.input_tensors
    s = te.create_schedule(C.op)
    pack = C.op.attrs.get("pack")
    if gpu:
        if pack:
            raise InvalidArgument("matmul(pack=...) is a CPU layout; build the GPU schedule from matmul(A, B)")
        return _matmul_gpu(s, C, A, B, k)
    if pack:
        if "bn" in kw and kw["bn"] != pack:
            raise InvalidArgument("bn=%r differs from the matmul's pack=%d" % (kw["bn"], pack))
        k["bn"] = pack
        st = s[B]
        jo, kk, ji = st.op.axis
        st.parallel(jo)
        st.vectorize(ji)
    return _matmul_cpu(s, C, A, B, k)


schedule_dense = schedule_matmul


def _matmul_cpu(s, C, A, B, k):
    bm, bn, bk = k["bm"], k["bn"], k["bk"]
    CC = s.cache_write(C, "local")
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=bm)
    jo, ji = s[C].split(j, factor=bn)
    if k["order"] == "ji":
        # column panels over the pool: a K x bn panel of B stays in cache while the
        # row tiles pass over it
        s[C].reorder(jo, io, ii, ji)
        s[C].parallel(jo)
        at = io
    elif k["order"] == "ij":
        s[C].reorder(io, jo, ii, ji)
        s[C].parallel(io)
        at = jo
    else:
        raise InvalidArgument("matmul knob order is 'ij' or 'ji', not %r" % (k["order"],))
    s[C].vectorize(ji)
    s[CC].compute_at(s[C], at)
    mc, nc = s[CC].op.axis
    (kaxis,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kaxis, factor=bk)
    # bm x bn accumulators: rows unrolled, columns one vector each, so they live in registers
    s[CC].reorder(ko, ki, mc, nc)
    s[CC].vectorize(nc)
    s[CC].unroll(mc)
    if k["unroll_k"]:
        s[CC].unroll(ki)
    return s


def _matmul_gpu(s, C, A, B, k):
    bm, bn, tm, tn, kt = k["block_m"], k["block_n"], k["thread_m"], k["thread_n"], k["k_tile"]
    CC = s.cache_write(C, "local")
    AA = s.cache_read(A, "shared", [CC])
    BB = s.cache_read(B, "shared", [CC])
    vm, vn = k["vthread_m"], k["vthread_n"]
    y, x = C.op.axis
    by, yi = s[C].split(y, factor=bm)
    bx, xi = s[C].split(x, factor=bn)
    # vthread_m x vthread_n virtual threads outside the work-items: a work-item's rows are
    # vm runs of (bm / vm / tm), bm / vm apart (TVM's classic GPU GEMM)
    virt = []
    if vm > 1 or vn > 1:
        vy, yi = s[C].split(yi, nparts=vm)
        vx, xi = s[C].split(xi, nparts=vn)
        virt = [vy, vx]
    ty, yi = s[C].split(yi, nparts=tm)
    tx, xi = s[C].split(xi, nparts=tn)
    s[C].reorder(by, bx, *virt, ty, tx, yi, xi)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    for v, n, name in zip(virt, (vm, vn), ("vy", "vx")):
        s[C].bind(v, te.thread_axis((0, n), "vthread", name=name))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    if k["min_blocks"]:
        s[C].launch_bounds(k["min_blocks"])
    if k["vec"] > 1:
        # the thread tile's copy-out unrolled: the accumulators stay registers for every tile
        # shape (LLVM left a 16 x 4 tile's loops, and its accumulators went to local memory)
        s[C].unroll(yi)
        if virt and (bn // tn // vn) % k["vec"] == 0:
            # a run's columns stored as whole vectors (128-bit stores where the index proves
            # the alignment; a partial tile's guard keeps it a loop)
            s[C].vectorize(xi)
        else:
            s[C].unroll(xi)
    s[CC].compute_at(s[C], tx)
    yc, xc = s[CC].op.axis
    (kaxis,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kaxis, factor=kt)
    s[CC].reorder(ko, ki, yc, xc)
    s[CC].unroll(ki)
    s[CC].unroll(yc)
    s[CC].unroll(xc)
    vec, dbuf = k["vec"], k["double_buffer"]
    for T in (AA, BB):
        s[T].compute_at(s[CC], ko)
        a0, a1 = s[T].op.axis
        if vec > 1:
            # 128-bit loads and stores: whole vectors along the rows' contiguous axis
            a1, av = s[T].split(a1, factor=vec)
        f = s[T].fuse(a0, a1)
        f, t_x = s[T].split(f, factor=tn)
        f, t_y = s[T].split(f, factor=tm)
        s[T].bind(t_y, te.thread_axis("threadIdx.y"))
        s[T].bind(t_x, te.thread_axis("threadIdx.x"))
        if vec > 1:
            s[T].vectorize(av)
        if vec > 1 or dbuf:
            s[T].unroll(f)   # a work-item's share: registers when double-buffered
        if dbuf:
            s[T].double_buffer()
    if k["k_major"]:
        # a k row's stride padded to 4 mod 8 elements where the tiles stay within 48 KiB (the
        # smaller static limit, sm_*'s): the copy's scalar stores of neighbouring work-items'
        # vectors land in other banks (half the conflicts), the rows stay 16-byte aligned
        from .space import kmajor_pad
        pad = kmajor_pad(k, A.dtype, C.op.tag == "dense")
        for T, rows_k in ((AA, True), (BB, C.op.tag == "dense")):
            if rows_k:
                r, kk = s[T].op.axis
                s[T].storage_order(kk, r)
                if pad:
                    s[T].storage_align(kk, 8, 4)
    return s


def schedule_batch_matmul(C, target="cpu", **kw):
    """CPU: batch and row tiles over the pool, the column loop vectorized. GPU: tile x tile
    outputs per work-group, one per work-item, the batch on blockIdx.z."""
    gpu = is_gpu(target)
    k = _knobs("batch_matmul", target, kw, C)
    s = te.create_schedule(C.op)
    b, y, x = C.op.axis
    (kaxis,) = C.op.reduce_axis
    if gpu:
        t = k["tile"]
        by, ty = s[C].split(y, factor=t)
        bx, tx = s[C].split(x, factor=t)
        s[C].reorder(b, by, bx, ty, tx, kaxis)
        s[C].bind(b, te.thread_axis("blockIdx.z"))
        s[C].bind(by, te.thread_axis("blockIdx.y"))
        s[C].bind(bx, te.thread_axis("blockIdx.x"))
        s[C].bind(ty, te.thread_axis("threadIdx.y"))
        s[C].bind(tx, te.thread_axis("threadIdx.x"))
        return s
    CC = s.cache_write(C, "local")
    yo, xo, yi, xi = s[C].tile(y, x, k["bm"], k["bn"])
    f = s[C].fuse(b, yo)
    s[C].parallel(f)
    s[C].vectorize(xi)
    s[CC].compute_at(s[C], xo)
    _, yc, xc = s[CC].op.axis
    (kc,) = s[CC].op.reduce_axis
    s[CC].reorder(kc, yc, xc)
    s[CC].vectorize(xc)
    return s


def _conv_like_cpu(s, st, ow_block):
    n, c, y, x = st.op.axis
    xo, xi = st.split(x, factor=ow_block)
    f = st.fuse(n, c)
    f = st.fuse(f, y)
    st.parallel(f)
    st.vectorize(xi)
    return xo


def schedule_conv2d_nchw(C, target="cpu", **kw):
    """CPU: oc_block output channels x ow_block columns (0: the whole output row up to 64)
    accumulated in registers (vectors of ``vec`` columns, unrolled), (n, channel block, row)
    over the pool, the padded input made first by its own kernel (``inline_pad=False``) or
    inlined. GPU: output channels in
    blocks of oc_block per work-item, num_thread work-items per group. ``C`` may be an
    element-wise consumer of the convolution (bias, relu, ...): then it is one kernel with them
    (topi.schedule_fused, the same knobs)."""
    if C.op.tag != "conv2d_nchw":
        return _fused(C, target, kw)
    gpu = is_gpu(target)
    k = _knobs("conv2d_nchw", target, kw, C)
    s = te.create_schedule(C.op)
    if gpu:
        _inline_pads(s)
        n, f, y, x = C.op.axis
        fo, fi = s[C].split(f, factor=k["oc_block"])
        s[C].reorder(n, fo, y, x, fi)
        fused = s[C].fuse(n, fo)
        fused = s[C].fuse(fused, y)
        fused = s[C].fuse(fused, x)
        bx, tx = s[C].split(fused, factor=k["num_thread"])
        s[C].bind(bx, te.thread_axis("blockIdx.x"))
        s[C].bind(tx, te.thread_axis("threadIdx.x"))
        rc, ry, rx = C.op.reduce_axis
        s[C].reorder(rc, ry, rx, fi)
        s[C].unroll(fi)
        return s
    _inline_pads(s, keep=not k["inline_pad"])
    for st in _computes(s):
        if st.attach == "root" and st.op is not C.op and st.op.tag.startswith("injective"):
            _injective_stage(s, st, False, KNOBS["injective"]["cpu"])
    CC = s.cache_write(C, "local")
    n, f, y, x = C.op.axis
    owb = k["ow_block"]
    if not owb:
        ow = C.shape[3]
        owb = ow.value if isinstance(ow, IntImm) and ow.value <= 64 else 32
    fo, fi = s[C].split(f, factor=k["oc_block"])
    xo, xi = s[C].split(x, factor=owb)
    s[C].reorder(n, fo, y, xo, fi, xi)
    g = s[C].fuse(n, fo)
    g = s[C].fuse(g, y)
    s[C].parallel(g)
    s[C].vectorize(xi)
    s[CC].compute_at(s[C], xo)
    _, fc, yc, xc = s[CC].op.axis
    rc, ry, rx = s[CC].op.reduce_axis
    # oc_block x ow_block accumulators: columns in vectors of vec, all of them unrolled, so
    # one input vector load feeds oc_block FMAs and one weight broadcast feeds ow_block/vec
    if owb > k["vec"]:
        xco, xci = s[CC].split(xc, factor=k["vec"])
        s[CC].reorder(rc, ry, rx, fc, xco, xci)
        s[CC].vectorize(xci)
        s[CC].unroll(xco)
    else:
        s[CC].reorder(rc, ry, rx, fc, xc)
        s[CC].vectorize(xc)
    s[CC].unroll(fc)
    if k["unroll"]:
        s[CC].unroll(ry)
        s[CC].unroll(rx)
    return s


def _fused(out, target, kw):
    from .fused import anchor_of, schedule_fused
    if anchor_of(out) is None:
        raise InvalidArgument("%s is neither the operator nor an element-wise consumer of it" % out.name)
    return schedule_fused(out, target, **kw)


def _window_op(C, target, kw, template):
    gpu = is_gpu(target)
    k = _knobs(template, target, kw, C)
    s = te.create_schedule(C.op)
    _inline_pads(s)
    for st in _computes(s):
        if st.attach != "root":
            continue
        if st.op is not C.op and not st.op.reduce_axis:
            st.compute_inline()
            continue
        if gpu:
            _injective_stage(s, st, True, k)
        else:
            _conv_like_cpu(s, st, k["ow_block"])
    return s


def schedule_depthwise_conv2d_nchw(C, target="cpu", **kw):
    """One output element per GPU work-item; on the CPU (n, c, row) over the pool and the
    columns vectorized. An element-wise consumer of it is scheduled as one kernel with it."""
    if C.op.tag != "depthwise_conv2d_nchw":
        return _fused(C, target, kw)
    return _window_op(C, target, kw, "depthwise_conv2d_nchw")


def schedule_pool2d(C, target="cpu", **kw):
    """As depthwise conv2d (average pooling's sum is its own stage)."""
    return _window_op(C, target, kw, "pool2d")


def _rows(s, target, k, template):
    """softmax / layer_norm: every root stage is its own kernel: row reductions one row
    per GPU work-item (rows over the pool on the CPU), elementwise stages flat."""
    gpu = is_gpu(target)
    for st in _computes(s):
        if st.attach != "root":
            continue
        if not st.op.reduce_axis and len(st.op.axis) == 2 and st.op.tag not in (template,):
            st.compute_inline()
            continue
        if st.op.reduce_axis:
            (i,) = st.op.axis
            if gpu:
                bx, tx = st.split(i, factor=k["num_thread"])
                st.bind(bx, te.thread_axis("blockIdx.x"))
                st.bind(tx, te.thread_axis("threadIdx.x"))
            else:
                o, _ = st.split(i, factor=4)
                st.parallel(o)
        else:
            i, j = st.op.axis
            if gpu:
                _injective_stage(s, st, True, k)
            else:
                st.parallel(i)
                jo, ji = st.split(j, factor=k["vec"])
                st.vectorize(ji)
    return s


def schedule_softmax(C, target="cpu", **kw):
    k = _knobs("softmax", target, kw, C)
    return _rows(te.create_schedule(C.op), target, k, "softmax")


def schedule_layer_norm(C, target="cpu", **kw):
    k = _knobs("layer_norm", target, kw)
    return _rows(te.create_schedule(C.op), target, k, "layer_norm")
