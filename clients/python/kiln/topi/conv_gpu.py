"""GPU schedules of fused convolutions (kiln.topi.fused calls them for GPU targets).

- ``pointwise``: a 1x1 stride-1 convolution as a GEMM per image (topi.conv2d_pointwise:
  out[n, o, p] = sum_c W[o, c] * X[n, c, p]): block_m x block_n output tiles per work-group,
  thread_m x thread_n accumulators per work-item (strided over the tile, so neighbouring
  work-items read neighbouring words), W and X staged in shared memory k_tile channels at a
  time.
- ``direct``: any other conv2d_nchw (3x3, 7x7, strided 1x1): block_f output channels x a
  block_y x block_x patch of output pixels per work-group, one pixel and thread_f channels
  per work-item; the padded input patch and the weights staged in shared memory k_tile
  input channels at a time, the window unrolled.

Knobs left at 0 (all, by default) are chosen from the shape by a rough cost model (_cost): the tiling whose
work-items' serial chain times the waves of work-groups, or whose FMA and shared-memory
throughput, is least, so that a batch-1 layer with a 7x7 or 14x14 map still spreads over the
GPU (an H200 has 132 SMs) and a 56x56 one gets large tiles. The element-wise epilogue (bias, ReLU, residual add) is
the output stage; the accumulators stay in registers until it.
"""

from .. import te
from ..errors import InvalidArgument
from ..te.build import _eval_expr

__all__ = ["CONV_GPU_KNOBS", "pointwise", "direct", "direct_split", "direct_split_k"]

CONV_GPU_KNOBS = {
    "gpu_pointwise": {"block_m": 0, "block_n": 0, "thread_m": 0, "thread_n": 0, "k_tile": 8},
    "gpu_direct": {"block_f": 0, "block_y": 0, "block_x": 0, "thread_f": 0, "k_tile": 4, "split": 0},
}

_MAX_THREADS = 256
_MAX_SHARED = 24 * 1024   # bytes: half of what every GPU allows, so that groups share an SM


def _const(d):
    """A shape expression's value, None when it has variables."""
    try:
        return int(_eval_expr(d, {}))
    except InvalidArgument:   # a free variable: the shape is not fixed
        return None


def _ceil(a, b):
    return -(-a // b)


def _bind(stage, ax, name):
    stage.bind(ax, te.thread_axis(name))


def _grid(stage, z, y, x, ty, tx):
    """Work-groups over (z, y, x), work-items over (ty, tx)."""
    for ax, name in ((z, "blockIdx.z"), (y, "blockIdx.y"), (x, "blockIdx.x"), (ty, "threadIdx.y"),
                     (tx, "threadIdx.x")):
        _bind(stage, ax, name)


def _shared_copies(s, sa, at, tensors, nthreads_x, nthreads_y):
    """Each tensor sa reads copied to shared memory inside sa's loop `at`, by every
    work-item of the group."""
    for T in tensors:
        _place_copy(s[s.cache_read(T, "shared", [sa.op])], sa, at, nthreads_x, nthreads_y)


def _place_copy(st, sa, at, nthreads_x, nthreads_y):
    st.compute_at(sa, at)
    axes = list(st.op.axis)
    f = st.fuse(*axes) if len(axes) > 1 else axes[0]
    f, tx = st.split(f, factor=nthreads_x)
    f, ty = st.split(f, factor=nthreads_y)
    _bind(st, ty, "threadIdx.y")
    _bind(st, tx, "threadIdx.x")


# What a word copied from global to shared memory costs beside an FMA (an L2 hit, the store,
# the barriers), in the cost model below.
_COPY = 8


def _cost(groups, threads, serial, fmas, loads_per_fma, copies):
    """A rough time of a launch in cycles: the work-items' serial instruction chain times
    the waves of work-groups the GPU runs at once (an H200: 132 SMs, up to 2,048 resident
    work-items and 16 groups each), or the throughput of the SMs that have a group (128
    FMAs per cycle each) with shared-memory loads and the groups' copies to shared memory
    counted, whichever is longer."""
    resident = 132 * max(1, min(16, 2048 // threads))
    waves = _ceil(groups, resident)
    return max(waves * serial, (fmas * (1 + loads_per_fma) + copies * _COPY) / (min(132, groups) * 128.0))


def pointwise_tiles(O, P, N, K, k):
    """(block_m, block_n, thread_m, thread_n) for an O x P output per image, K deep."""
    O, P, N, K = O or 256, P or 256, N or 1, K or 256
    best = None
    for bm in ([k["block_m"]] if k["block_m"] else [128, 64, 32, 16]):
        for bn in ([k["block_n"]] if k["block_n"] else [128, 64, 32, 16]):
            for tm in ([k["thread_m"]] if k["thread_m"] else [4, 2, 1]):
                for tn in ([k["thread_n"]] if k["thread_n"] else [4, 2, 1]):
                    if tm > bm or tn > bn or bm % tm or bn % tn:
                        continue
                    threads = (bm // tm) * (bn // tn)
                    if not 32 <= threads <= _MAX_THREADS:
                        continue
                    groups = N * _ceil(O, bm) * _ceil(P, bn)
                    fmas = groups * bm * bn * K
                    copy = K * (bm + bn)     # per group
                    c = _cost(groups, threads, K * (tm * tn + tm + tn) + _COPY * _ceil(copy, threads), fmas,
                              (tm + tn) / float(tm * tn), groups * copy)
                    if best is None or c < best[0]:
                        best = (c, (bm, bn, tm, tn))
    if best is None:   # knobs that fit nothing above: as given
        return k["block_m"] or 64, k["block_n"] or 64, k["thread_m"] or 4, k["thread_n"] or 4
    return best[1]


def pointwise(s, so, sa, W, X, k):
    """so: the output stage (n, o, p); sa: the product, computed in so's work-item."""
    n, o, p = so.op.axis
    N, O, P = (_const(a.dom.extent) for a in (n, o, p))
    bm, bn, tm, tn = pointwise_tiles(O, P, N, _const(sa.op.reduce_axis[0].dom.extent), k)
    nty, ntx = bm // tm, bn // tn
    ob, oi = so.split(o, factor=bm)
    pb, pi = so.split(p, factor=bn)
    oii, ty = so.split(oi, factor=nty)
    pii, tx = so.split(pi, factor=ntx)
    so.reorder(n, ob, pb, ty, tx, oii, pii)
    _grid(so, n, ob, pb, ty, tx)
    sa.compute_at(so, tx)
    _, oc, pc = sa.op.axis
    (kk,) = sa.op.reduce_axis
    ko, ki = sa.split(kk, factor=k["k_tile"])
    sa.reorder(ko, ki, oc, pc)
    sa.unroll(ki)
    sa.unroll(oc)
    sa.unroll(pc)
    _shared_copies(s, sa, ko, (W, X), ntx, nty)
    return s


def direct_tiles(O, OH, OW, N, R, k, window=(3, 3), stride=1):
    """(block_f, block_y, block_x, thread_f) for an O x OH x OW output per image, R = input
    channels x window deep; the shared copies (k_tile channels of the input patch and of the
    weights) kept within _MAX_SHARED."""
    O, OH, OW, N, R = O or 64, OH or 16, OW or 16, N or 1, R or 576
    kh, kw = window
    kt = k["k_tile"]
    xs = [k["block_x"]] if k["block_x"] else sorted({d for d in range(1, min(OW, 32) + 1) if OW % d == 0} |
                                                    {min(OW, 16), min(OW, 8)})
    best = None
    for bx in xs:
        for by in ([k["block_y"]] if k["block_y"] else [1, 2, 4, 7, 8, 14, 16]):
            if by > OH or by * bx > _MAX_THREADS:
                continue
            for tf in ([k["thread_f"]] if k["thread_f"] else [8, 4, 2, 1]):
                for ty in [1, 2, 4, 8, 16, 32]:
                    bf = k["block_f"] or tf * ty
                    if bf % tf or bf // tf != ty or tf > O:
                        continue
                    threads = ty * by * bx
                    if not 32 <= threads <= _MAX_THREADS:
                        continue
                    patch = ((by - 1) * stride + kh) * ((bx - 1) * stride + kw)
                    if 4 * kt * (patch + bf * kh * kw) > _MAX_SHARED:
                        continue
                    groups = N * _ceil(O, bf) * _ceil(OH, by) * _ceil(OW, bx)
                    fmas = groups * bf * by * bx * R
                    copy = R // (kh * kw) * (patch + bf * kh * kw)     # per group
                    c = _cost(groups, threads, R * (2 * tf + 1) + _COPY * _ceil(copy, threads), fmas,
                              (tf + 1) / float(tf), groups * copy)
                    if best is None or c < best[0]:
                        best = (c, (bf, by, bx, tf))
    if best is None:
        tf = k["thread_f"] or 4
        return k["block_f"] or 4 * tf, k["block_y"] or 1, k["block_x"] or min(OW, 32), tf
    return best[1]


def direct(s, so, sa, data, kernel, k):
    """so: the output stage (n, f, y, x); sa: the convolution, computed in so's work-item;
    data: what the convolution reads (its padded input, or the input itself when unpadded)."""
    n, f, y, x = so.op.axis
    N, O, OH, OW = (_const(a.dom.extent) for a in (n, f, y, x))
    R = 1
    for r in sa.op.reduce_axis:
        R *= _const(r.dom.extent) or 16
    kh, kw = (_const(r.dom.extent) or 3 for r in sa.op.reduce_axis[1:])
    H = _const(data.shape[2])
    stride = max(1, (H - kh) // (OH - 1)) if H and OH and OH > 1 else 1
    bf, by, bx, tf = direct_tiles(O, OH, OW, N, R, k, (kh, kw), stride)
    fb, fi = so.split(f, factor=bf)
    yb, yi = so.split(y, factor=by)
    xb, xi = so.split(x, factor=bx)
    fii, ty = so.split(fi, factor=bf // tf)
    so.reorder(n, fb, yb, xb, ty, yi, xi, fii)
    tx = so.fuse(yi, xi)
    g = so.fuse(yb, xb)
    _grid(so, n, fb, g, ty, tx)
    sa.compute_at(so, tx)
    _, fc, _, _ = sa.op.axis
    rc, ry, rx = sa.op.reduce_axis
    rco, rci = sa.split(rc, factor=k["k_tile"])
    sa.reorder(rco, rci, ry, rx, fc)
    sa.unroll(ry)
    sa.unroll(rx)
    sa.unroll(fc)
    _shared_copies(s, sa, rco, (data, kernel), by * bx, bf // tf)
    return s


# Split-K for small maps: a 3x3 conv on a 14x14 or 7x7 map at batch 1 has few output tiles
# (ResNet-50's: 128 work-groups of 196 work-items, one per SM of an H200) and a deep reduction
# (2,304 to 4,608 per output), so the device is underfilled. Split the input channels in
# slices: a first kernel sums each slice into partials (the direct schedule, a slice per
# blockIdx.z), a second sums the slices and runs the epilogue.
_SPLIT_GROUPS = 512      # work-groups to aim at with the slices (about 4 per SM of an H200)
_SPLIT_MAX_MAP = 14 * 14  # output maps up to this many pixels are split


def _direct_shape(anchor, data):
    """(N, O, OH, OW, C, kh, kw, stride) of a conv2d_nchw anchor reading data."""
    N, O, OH, OW = (_const(d) for d in anchor.shape)
    rc, ry, rx = anchor.op.reduce_axis
    C, kh, kw = (_const(r.dom.extent) for r in (rc, ry, rx))
    H = _const(data.shape[2])
    stride = max(1, (H - kh) // (OH - 1)) if H and OH and kh and OH > 1 else 1
    return N, O, OH, OW, C, kh, kw, stride


def direct_split(anchor, data, k):
    """The number of input-channel slices for the direct conv anchor: the split knob when
    set, else a power of two that brings the work-groups near _SPLIT_GROUPS for a map of at
    most _SPLIT_MAX_MAP pixels, each slice keeping at least 4 k_tiles of channels and
    dividing the channels evenly; 1 for 1x1 kernels and anything else."""
    if k["split"]:
        return k["split"]
    N, O, OH, OW, C, kh, kw, stride = _direct_shape(anchor, data)
    if None in (N, O, OH, OW, C, kh, kw) or OH * OW > _SPLIT_MAX_MAP:
        return 1
    # 1x1 convs that reach direct() are the strided ones (ResNet's downsample onto 14x14 and
    # 7x7): split in 4 they took 0.342 and 0.283 ms on the H200 (20:53 profile) against 0.056
    # and 0.092 ms unsplit (17:05), so they stay whole
    if kh * kw == 1:
        return 1
    bf, by, bx, _ = direct_tiles(O, OH, OW, N, C * kh * kw, k, (kh, kw), stride)
    groups = N * _ceil(O, bf) * _ceil(OH, by) * _ceil(OW, bx)
    kt = k["k_tile"]
    split = 1
    while groups * split * 2 <= _SPLIT_GROUPS and C % (split * 2 * kt) == 0 and C // (split * 2) >= 4 * kt:
        split *= 2
    return split


def direct_split_k(s, out, anchor, data, kernel, k, split):
    """Schedules the conv anchor and its epilogue out (the stages between inlined) as two
    kernels: partial[slice, n, f, y, x] by the direct schedule over a slice of the input
    channels (TVM's rfactor), then their sum and the epilogue, an element per work-item."""
    N, O, OH, OW, C, kh, kw, stride = _direct_shape(anchor, data)
    # the shared copies are made before rfactor (the rfactor stage takes over the anchor's
    # body, and with it the reads of the copies) and placed in the new stage after it
    copies = [s.cache_read(T, "shared", [anchor.op]) for T in (data, kernel)]
    sa = s[anchor]
    rso, _ = sa.split(sa.op.reduce_axis[0], nparts=split)
    part = s.rfactor(anchor, rso)
    bf, by, bx, tf = direct_tiles(O, OH, OW, N, _ceil(C or 16, split) * (kh or 3) * (kw or 3), k,
                                  (kh or 3, kw or 3), stride)
    # the partials: as direct(), the work-item's thread_f outputs accumulated in the output
    # words themselves (an rfactor stage has no cache_write), a slice per blockIdx.z
    sp = s[part]
    ps, n, f, y, x = sp.op.axis
    rc, ry, rx = sp.op.reduce_axis
    fb, fi = sp.split(f, factor=bf)
    yb, yi = sp.split(y, factor=by)
    xb, xi = sp.split(x, factor=bx)
    fii, ty = sp.split(fi, factor=bf // tf)
    rco, rci = sp.split(rc, factor=k["k_tile"])
    sp.reorder(ps, n, fb, yb, xb, ty, yi, xi, rco, rci, ry, rx, fii)
    tx = sp.fuse(yi, xi)
    g = sp.fuse(yb, xb)
    z = sp.fuse(ps, n)
    _grid(sp, z, fb, g, ty, tx)
    sp.unroll(ry)
    sp.unroll(rx)
    sp.unroll(fii)
    for c in copies:
        _place_copy(s[c], sp, rco, by * bx, bf // tf)
    # the sum of the slices and the epilogue
    so = s[out]
    g = so.fuse(*so.op.axis)
    bx_, tx_ = so.split(g, factor=128)
    _bind(so, bx_, "blockIdx.x")
    _bind(so, tx_, "threadIdx.x")
    if out.op is not anchor.op:
        s[anchor].compute_at(so, tx_)
    return s
