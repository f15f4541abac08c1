"""More kiln.topi computes: the operators a network importer needs beyond ops.py (grouped
and pointwise convolution, pooling with ONNX's options, reductions over any axes, softmax on
any axis, transpose, concatenation, padding modes, depth-to-space, broadcast matmul, resize).

Each returns a te Tensor; ``schedule_fused`` / ``schedule_generic`` (fused.py) schedule them.
"""

from .. import te
from ..errors import InvalidArgument
from .ops import _pair, _padding, _const

__all__ = ["group_conv2d_nchw", "conv2d_pointwise", "gemm", "matmul_broadcast", "pool2d_nchw", "global_pool",
           "reduce", "softmax_axis", "transpose", "concatenate", "pad_mode", "depth_to_space", "resize2d",
           "gather", "slice_nd", "cast", "conv2d_transpose_nchw", "pooled_size"]


def _ints(shape, what):
    out = []
    for d in shape:
        c = _const(d)
        if c is None:
            raise InvalidArgument("%s needs constant shapes" % what)
        out.append(c)
    return out


def group_conv2d_nchw(data, kernel, stride=1, padding=0, dilation=1, groups=1, name="group_conv2d_nchw"):
    """data N x C x H x W, kernel O x C/groups x KH x KW -> N x O x OH x OW; output channel f
    reads input channels (f // (O/groups)) * C/groups ... + C/groups - 1."""
    from .ops import pad, _out_size
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pt, pl, pb, pr = _padding(padding)
    N, C, H, W = data.shape
    O, CG, KH, KW = _ints(kernel.shape, "group_conv2d_nchw")
    c = _const(C)
    if c is None or c % groups or O % groups or c // groups != CG:
        raise InvalidArgument("group_conv2d_nchw: %s input channels, %d output channels and kernel %s do not "
                              "split into %d groups" % (C, O, tuple(kernel.shape), groups))
    og = O // groups
    OH = _out_size(H, KH, sh, pt, pb, dh)
    OW = _out_size(W, KW, sw, pl, pr, dw)
    padded = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_data")
    rc = te.reduce_axis((0, CG), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    return te.compute((N, O, OH, OW), lambda n, f, y, x: te.sum(
        padded[n, (f // og) * CG + rc, y * sh + ry * dh, x * sw + rx * dw] * kernel[f, rc, ry, rx],
        axis=[rc, ry, rx]), name=name, tag="conv2d_nchw")


def conv2d_pointwise(data, weight, name="conv2d_pointwise"):
    """A 1x1 convolution with stride 1 as a matrix product per image: data N x C x P (the
    spatial dimensions flattened), weight O x C -> N x O x P."""
    if len(data.shape) != 3 or len(weight.shape) != 2:
        raise InvalidArgument("conv2d_pointwise takes data N x C x P and weight O x C")
    N, C, P = data.shape
    O = weight.shape[0]
    k = te.reduce_axis((0, C), name="k")
    return te.compute((N, O, P), lambda n, i, j: te.sum(weight[i, k] * data[n, k, j], axis=k), name=name,
                      tag="matmul")


def gemm(A, B, trans_a=False, trans_b=False, name="gemm"):
    """C[i, j] = sum_k A'[i, k] * B'[k, j] with A' = A.T if trans_a, B' = B.T if trans_b."""
    if len(A.shape) != 2 or len(B.shape) != 2:
        raise InvalidArgument("gemm takes 2-d tensors")
    M, K = (A.shape[1], A.shape[0]) if trans_a else A.shape
    N = B.shape[0] if trans_b else B.shape[1]
    k = te.reduce_axis((0, K), name="k")

    def a(i, kk):
        return A[kk, i] if trans_a else A[i, kk]

    def b(kk, j):
        return B[j, kk] if trans_b else B[kk, j]
    return te.compute((M, N), lambda i, j: te.sum(a(i, k) * b(k, j), axis=k), name=name, tag="matmul")


def matmul_broadcast(A, B, name="matmul"):
    """numpy's matmul for tensors of rank >= 2 (the leading dimensions broadcast)."""
    if len(A.shape) < 2 or len(B.shape) < 2:
        raise InvalidArgument("matmul_broadcast takes tensors of rank >= 2 (promote vectors first)")
    sa, sb = _ints(A.shape, "matmul"), _ints(B.shape, "matmul")
    if sa[-1] != sb[-2]:
        raise InvalidArgument("matmul: %s x %s do not agree" % (sa, sb))
    ba, bb = sa[:-2], sb[:-2]
    n = max(len(ba), len(bb))
    ba, bb = [1] * (n - len(ba)) + ba, [1] * (n - len(bb)) + bb
    batch = []
    for x, y in zip(ba, bb):
        if x != y and 1 not in (x, y):
            raise InvalidArgument("matmul: batch dimensions %s and %s do not broadcast" % (sa[:-2], sb[:-2]))
        batch.append(max(x, y))
    K = sa[-1]
    k = te.reduce_axis((0, K), name="k")
    ra, rb = len(sa) - 2, len(sb) - 2

    def f(*idx):
        bi, i, j = idx[:-2], idx[-2], idx[-1]
        ia = [0 if d == 1 else v for d, v in zip(ba, bi)][n - ra:]
        ib = [0 if d == 1 else v for d, v in zip(bb, bi)][n - rb:]
        return te.sum(A[tuple(ia) + (i, k)] * B[tuple(ib) + (k, j)], axis=k)
    return te.compute(tuple(batch) + (sa[-2], sb[-1]), f, name=name, tag="matmul")


def pooled_size(size, k, stride, pad_lo, pad_hi, dilation, ceil_mode):
    """ONNX's output size of a pooling window (ceil_mode: a last window that starts inside
    the input or its leading pad still counts)."""
    span = (k - 1) * dilation + 1
    num = size + pad_lo + pad_hi - span
    out = (-(-num // stride) if ceil_mode else num // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_lo:
        out -= 1
    return out


def pool2d_nchw(data, kernel, stride=1, padding=0, dilation=1, pool_type="max", ceil_mode=False,
                count_include_pad=False, name="pool2d"):
    """Max or average pooling of N x C x H x W with ONNX's options: asymmetric padding,
    dilation (max), ceil_mode, count_include_pad (average: the divisor counts the window's
    positions inside the padded input instead of inside the input)."""
    kh, kw = _pair(kernel, "kernel")
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pt, pl, pb, pr = _padding(padding)
    N, C, H, W = data.shape
    h, w = _ints((H, W), "pool2d_nchw")
    OH = pooled_size(h, kh, sh, pt, pb, dh, ceil_mode)
    OW = pooled_size(w, kw, sw, pl, pr, dw, ceil_mode)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def inside(y, x):
        iy = y * sh - pt + ry * dh
        ix = x * sw - pl + rx * dw
        conds = []
        if pt or ceil_mode or pb:
            conds += [iy >= 0, iy < h]
        if pl or ceil_mode or pr:
            conds += [ix >= 0, ix < w]
        return iy, ix, conds
    if pool_type == "max":
        def fmax(n, c, y, x):
            iy, ix, conds = inside(y, x)
            v = data[n, c, iy, ix]
            if conds:
                v = te.if_then_else(te.all(*conds), v, te.min_value(data.dtype))
            return te.max(v, axis=[ry, rx])
        return te.compute((N, C, OH, OW), fmax, name=name, tag="pool_max")
    if pool_type != "avg":
        raise InvalidArgument("pool_type is 'max' or 'avg', not %r" % (pool_type,))
    if dh != 1 or dw != 1:
        raise InvalidArgument("average pooling with dilation is not supported")

    def fsum(n, c, y, x):
        iy, ix, conds = inside(y, x)
        v = data[n, c, iy, ix]
        if conds:
            v = te.if_then_else(te.all(*conds), v, te.const(0, data.dtype))
        return te.sum(v, axis=[ry, rx])
    total = te.compute((N, C, OH, OW), fsum, name=name + "_sum", tag="pool_sum")
    lo_y, hi_y = (-pt, h + pb) if count_include_pad else (0, h)
    lo_x, hi_x = (-pl, w + pr) if count_include_pad else (0, w)

    def count(y, x):
        y0 = y * sh - pt
        x0 = x * sw - pl
        ch = te.min(y0 + kh, hi_y) - te.max(y0, lo_y)
        cw = te.min(x0 + kw, hi_x) - te.max(x0, lo_x)
        return (ch * cw).astype(data.dtype)
    return te.compute(total.shape, lambda n, c, y, x: total[n, c, y, x] / count(y, x), name=name, tag="pool_avg")


def global_pool(data, pool_type="avg", name="global_pool"):
    """N x C x H x W -> N x C x 1 x 1 (mean or max over the spatial dimensions)."""
    N, C = data.shape[:2]
    spatial = data.shape[2:]
    return reduce(data, list(range(2, 2 + len(spatial))), True, "mean" if pool_type == "avg" else pool_type,
                  name=name)


def reduce(data, axes, keepdims=True, op="sum", name="reduce"):
    """Reduction of ``data`` over ``axes`` (sum, mean, max, min, prod); keepdims keeps them
    as size-1 dimensions."""
    nd = len(data.shape)
    axes = sorted(set(a % nd for a in axes))
    shape = _ints(data.shape, "reduce")
    raxes = [te.reduce_axis((0, shape[a]), name="r%d" % a) for a in axes]
    out_shape = []
    for d in range(nd):
        if d in axes:
            if keepdims:
                out_shape.append(1)
        else:
            out_shape.append(shape[d])
    combiner = {"sum": te.sum, "mean": te.sum, "max": te.max, "min": te.min, "prod": te.prod}.get(op)
    if combiner is None:
        raise InvalidArgument("reduce: op is sum, mean, max, min or prod, not %r" % (op,))

    def f(*idx):
        src, k, r = [], 0, 0
        for d in range(nd):
            if d in axes:
                src.append(raxes[r])
                r += 1
                if keepdims:
                    k += 1
            else:
                src.append(idx[k])
                k += 1
        return combiner(data[tuple(src)], axis=raxes)
    if not out_shape:
        out_shape = [1]   # a 0-d result is kept as one element
        f0 = f

        def f(i):
            return f0()
    if op == "mean":
        # one kernel: the mean is the sum of x / count (a rounding apart from sum(x) / count)
        count = 1
        for a in axes:
            count *= shape[a]
        inv = 1.0 / count
        sum_f = f

        def f(*idx):
            r = sum_f(*idx)
            return te.sum(r.source * te.const(inv, data.dtype), axis=r.axis)
    return te.compute(out_shape, f, name=name, tag="reduce")


def softmax_axis(x, log=False, name="softmax"):
    """Softmax (or log-softmax) over the middle axis of a 3-d tensor outer x n x inner (any
    axis of an n-d tensor, seen through a reshape)."""
    if len(x.shape) != 3:
        raise InvalidArgument("softmax_axis takes outer x n x inner")
    O, N, I = x.shape
    k1 = te.reduce_axis((0, N), name="k")
    mx = te.compute((O, I), lambda o, i: te.max(x[o, k1, i], axis=k1), name=name + "_max", tag="reduce")
    k2 = te.reduce_axis((0, N), name="k")
    sm = te.compute((O, I), lambda o, i: te.sum(te.exp(x[o, k2, i] - mx[o, i]), axis=k2), name=name + "_sum",
                    tag="reduce")
    if log:
        return te.compute(x.shape, lambda o, j, i: x[o, j, i] - mx[o, i] - te.log(sm[o, i]), name=name,
                          tag="injective")
    return te.compute(x.shape, lambda o, j, i: te.exp(x[o, j, i] - mx[o, i]) / sm[o, i], name=name,
                      tag="injective")


def transpose(data, perm, name="transpose"):
    """out[i_0, ..., i_n] = data[i_perm^-1...]: out dimension d is data dimension perm[d]."""
    nd = len(data.shape)
    if sorted(perm) != list(range(nd)):
        raise InvalidArgument("transpose: %r is not a permutation of %d axes" % (perm, nd))
    shape = [data.shape[p] for p in perm]

    def f(*idx):
        src = [None] * nd
        for d, p in enumerate(perm):
            src[p] = idx[d]
        return data[tuple(src)]
    return te.compute(shape, f, name=name, tag="injective")


def concatenate(tensors, axis, name="concat"):
    """numpy.concatenate of tensors of one rank along ``axis``."""
    nd = len(tensors[0].shape)
    axis %= nd
    sizes = [_const(t.shape[axis]) for t in tensors]
    if any(s is None for s in sizes):
        raise InvalidArgument("concatenate needs constant sizes along the axis")
    shape = list(tensors[0].shape)
    shape[axis] = sum(sizes)
    live = [(t, s) for t, s in zip(tensors, sizes) if s > 0]

    def f(*idx):
        i = idx[axis]
        starts = []
        off = 0
        for t, s in live:
            starts.append(off)
            off += s
        # the last piece is the fall-through; walk back so each select tests one bound
        t, s = live[-1]
        v = t[tuple(idx[:axis]) + (i - starts[-1],) + tuple(idx[axis + 1:])]
        for (t, s), st in reversed(list(zip(live[:-1], starts[:-1]))):
            v = te.if_then_else(i < st + s, t[tuple(idx[:axis]) + (i - st,) + tuple(idx[axis + 1:])], v)
        return v
    return te.compute(shape, f, name=name, tag="injective")


def pad_mode(data, before, after, mode="constant", value=0.0, name="pad"):
    """Padding of every dimension by ``before``/``after`` (negative amounts crop) with
    ``mode`` "constant" (``value``), "reflect" (mirror without the edge) or "edge"."""
    nd = len(data.shape)
    shape = _ints(data.shape, "pad")
    if len(before) != nd or len(after) != nd:
        raise InvalidArgument("pad: one amount per dimension (%d)" % nd)
    out_shape = [shape[d] + before[d] + after[d] for d in range(nd)]
    if any(s < 0 for s in out_shape):
        raise InvalidArgument("pad: amounts %s %s crop %s below zero" % (before, after, shape))
    if mode == "reflect" and any((before[d] >= shape[d] or after[d] >= shape[d]) and (before[d] > 0 or after[d] > 0)
                                 for d in range(nd)):
        raise InvalidArgument("pad: reflect padding must be smaller than the dimension")

    def f(*idx):
        conds, src = [], []
        for d, i in enumerate(idx):
            j = i - before[d] if before[d] else i
            n = shape[d]
            if mode == "constant":
                if before[d] > 0:
                    conds.append(j >= 0)
                if after[d] > 0:
                    conds.append(j < n)
            elif mode == "edge":
                if before[d] > 0:
                    j = te.max(j, 0)
                if after[d] > 0:
                    j = te.min(j, n - 1)
            elif mode == "reflect":
                if before[d] > 0:
                    j = te.if_then_else(j < 0, -j, j)
                if after[d] > 0:
                    j = te.if_then_else(j >= n, 2 * (n - 1) - j, j)
            else:
                raise InvalidArgument("pad mode is constant, reflect or edge, not %r" % (mode,))
            src.append(j)
        v = data[tuple(src)]
        if conds:
            v = te.if_then_else(te.all(*conds), v, te.const(value, data.dtype))
        return v
    return te.compute(out_shape, f, name=name, tag="injective")


def depth_to_space(data, block, mode="DCR", name="depth_to_space"):
    """N x C x H x W -> N x C/b^2 x H*b x W*b (ONNX DepthToSpace; DCR or CRD order)."""
    N, C, H, W = data.shape
    c = _const(C)
    b = int(block)
    if c is None or c % (b * b):
        raise InvalidArgument("depth_to_space: %s channels do not divide by block^2 = %d" % (C, b * b))
    oc = c // (b * b)

    def f(n, k, y, x):
        by, bx = y % b, x % b
        if mode == "DCR":
            ch = (by * b + bx) * oc + k
        elif mode == "CRD":
            ch = k * b * b + by * b + bx
        else:
            raise InvalidArgument("depth_to_space mode is DCR or CRD, not %r" % (mode,))
        return data[n, ch, y // b, x // b]
    return te.compute((N, oc, H * b, W * b), f, name=name, tag="injective")


def resize2d(data, out_h, out_w, mode="nearest", coord="half_pixel", nearest_mode="round_prefer_floor",
             scale_h=None, scale_w=None, cubic_coeff=-0.75, name="resize"):
    """ONNX Resize of the last two dimensions of N x C x H x W: "nearest" or "linear"
    (bilinear), with ONNX's coordinate_transformation_mode and nearest_mode."""
    N, C, H, W = data.shape
    h, w = _ints((H, W), "resize2d")
    sh = float(scale_h) if scale_h else out_h / h
    sw = float(scale_w) if scale_w else out_w / w

    def src(o, scale, insz, outsz):
        of = o.astype("float32")
        if coord == "half_pixel":
            return (of + 0.5) / scale - 0.5
        if coord == "pytorch_half_pixel":
            return (of + 0.5) / scale - 0.5 if outsz > 1 else of * 0.0
        if coord == "align_corners":
            # ONNX uses the unrounded output length in * scale here
            length = insz * scale
            return of * ((insz - 1) / (length - 1)) if length > 1 else of * 0.0
        if coord == "asymmetric":
            return of / scale
        if coord == "tf_half_pixel_for_nn":
            return (of + 0.5) / scale
        raise InvalidArgument("resize: coordinate_transformation_mode %r is not supported" % (coord,))

    def clampi(v, n):
        return te.min(te.max(v, 0), n - 1)

    if mode == "nearest":
        def near(x):
            if nearest_mode == "round_prefer_floor":
                return te.ceil(x - 0.5)
            if nearest_mode == "round_prefer_ceil":
                return te.floor(x + 0.5)
            if nearest_mode == "floor":
                return te.floor(x)
            if nearest_mode == "ceil":
                return te.ceil(x)
            raise InvalidArgument("resize: nearest_mode %r is not supported" % (nearest_mode,))

        def fn(n, c, y, x):
            iy = clampi(near(src(y, sh, h, out_h)).astype("int32"), h)
            ix = clampi(near(src(x, sw, w, out_w)).astype("int32"), w)
            return data[n, c, iy, ix]
        return te.compute((N, C, out_h, out_w), fn, name=name, tag="injective")
    if mode != "linear":
        raise InvalidArgument("resize: mode %r is not supported (nearest, linear)" % (mode,))

    def fl(n, c, y, x):
        fy = te.max(src(y, sh, h, out_h), 0.0) if coord != "asymmetric" else src(y, sh, h, out_h)
        fx = te.max(src(x, sw, w, out_w), 0.0) if coord != "asymmetric" else src(x, sw, w, out_w)
        y0f, x0f = te.floor(fy), te.floor(fx)
        dy, dx = fy - y0f, fx - x0f
        y0, x0 = clampi(y0f.astype("int32"), h), clampi(x0f.astype("int32"), w)
        y1, x1 = clampi(y0 + 1, h), clampi(x0 + 1, w)
        top = data[n, c, y0, x0] * (1.0 - dx) + data[n, c, y0, x1] * dx
        bot = data[n, c, y1, x0] * (1.0 - dx) + data[n, c, y1, x1] * dx
        return top * (1.0 - dy) + bot * dy
    return te.compute((N, C, out_h, out_w), fl, name=name, tag="injective")


def gather(data, indices, axis, name="gather", scalar=False):
    """numpy.take(data, indices, axis) with int indices in a te tensor (negative indices
    count from the end; an index still out of range is clamped, so a bad index never reads
    outside ``data``). ``scalar``: indices is one element standing for a 0-d index."""
    nd = len(data.shape)
    axis %= nd
    n = _const(data.shape[axis])
    ri = 0 if scalar else len(indices.shape)
    shape = list(data.shape[:axis]) + list(indices.shape if not scalar else ()) + list(data.shape[axis + 1:])

    def f(*idx):
        ix = indices[tuple(idx[axis:axis + ri])] if ri else indices[0]
        ix = ix.astype("int32") if indices.dtype != "int32" else ix
        ix = te.if_then_else(ix < 0, ix + n, ix)
        ix = te.min(te.max(ix, 0), n - 1)
        return data[tuple(idx[:axis]) + (ix,) + tuple(idx[axis + ri:])]
    return te.compute(shape if shape else [1], f, name=name, tag="injective")


def slice_nd(data, starts, steps, out_shape, name="slice"):
    """out[i] = data[starts + i * steps] per dimension (the bounds already resolved)."""
    def f(*idx):
        return data[tuple(s + i * st if st != 1 else (i + s if s else i) for i, s, st in zip(idx, starts, steps))]
    return te.compute(out_shape, f, name=name, tag="injective")


def cast(data, dtype, name="cast"):
    def f(*i):
        v = data[i]
        if dtype == "bool":
            return v != te.const(0, data.dtype)
        return v.astype(dtype)
    return te.compute(data.shape, f, name=name, tag="injective")


def conv2d_transpose_nchw(data, kernel, stride=1, padding=0, dilation=1, output_padding=0, groups=1,
                          name="conv2d_transpose_nchw"):
    """Transposed convolution: data N x C x H x W, kernel C x O/groups x KH x KW. ``padding``
    (top, left, bottom, right) is removed from the full output; output_padding adds rows and
    columns at the end."""
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    oph, opw = _pair(output_padding, "output_padding")
    pt, pl, pb, pr = _padding(padding)
    N, C, H, W = data.shape
    c, h, w = _ints((C, H, W), "conv2d_transpose_nchw")
    CK, OG, KH, KW = _ints(kernel.shape, "conv2d_transpose_nchw")
    if CK != c or c % groups:
        raise InvalidArgument("conv2d_transpose: kernel %s does not fit %d channels in %d groups"
                              % (tuple(kernel.shape), c, groups))
    cg = c // groups
    OH = (h - 1) * sh + (KH - 1) * dh + 1 + oph - pt - pb
    OW = (w - 1) * sw + (KW - 1) * dw + 1 + opw - pl - pr
    rc = te.reduce_axis((0, cg), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")

    def f(n, o, y, x):
        g = o // OG
        ty = y + pt - ry * dh
        tx = x + pl - rx * dw
        iy = ty // sh
        ix = tx // sw
        conds = [ty >= 0, tx >= 0, iy < h, ix < w]
        if sh > 1:
            conds.append(ty % sh == 0)
        if sw > 1:
            conds.append(tx % sw == 0)
        ci = g * cg + rc
        return te.sum(te.if_then_else(te.all(*conds), data[n, ci, iy, ix] * kernel[ci, o % OG, ry, rx],
                                      te.const(0, data.dtype)), axis=[rc, ry, rx])
    return te.compute((N, OG * groups, OH, OW), f, name=name, tag="conv2d_transpose")

