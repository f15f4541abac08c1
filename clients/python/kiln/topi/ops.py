"""The computes of kiln.topi (what each operator is; schedules.py says how it runs)."""

from .. import te
from ..errors import InvalidArgument
from ..te.expr import IntImm, as_expr

__all__ = ["matmul", "dense", "batch_matmul", "pad", "conv2d_nchw", "depthwise_conv2d_nchw", "pool2d", "softmax",
           "layer_norm", "elementwise", "broadcast", "add", "subtract", "multiply", "divide", "maximum", "minimum",
           "relu", "exp", "tanh", "sigmoid", "sqrt", "negative"]


def _pair(v, what):
    if isinstance(v, int):
        return v, v
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return tuple(v)
    raise InvalidArgument("%s is an int or a pair of ints, not %r" % (what, v))


def _const(d):
    d = as_expr(d)
    return d.value if isinstance(d, IntImm) else None


def matmul(A, B, out_dtype=None, name="matmul", pack=None):
    """C[i, j] = sum_k A[i, k] * B[k, j] (A: M x K, B: K x N). ``pack=bn`` (a CPU layout)
    first copies B into column panels PB[N/bn, K, bn] (its own kernel), so the inner loop of
    the CPU schedule reads B contiguously; the schedule's bn is then ``pack``."""
    if len(A.shape) != 2 or len(B.shape) != 2:
        raise InvalidArgument("matmul takes 2-d tensors")
    k = te.reduce_axis((0, A.shape[1]), name="k")
    dt = out_dtype or A.dtype
    if pack is None:
        return te.compute((A.shape[0], B.shape[1]),
                          lambda i, j: te.sum(A[i, k].astype(dt) * B[k, j].astype(dt), axis=k),
                          name=name, tag="matmul")
    if not isinstance(pack, int) or pack < 1:
        raise InvalidArgument("matmul pack= is the panel width (a positive int), not %r" % (pack,))
    K, N = B.shape
    bn = pack
    PB = te.compute(((N + bn - 1) // bn, K, bn),
                    lambda jo, kk, ji: te.if_then_else(jo * bn + ji < N, B[kk, jo * bn + ji],
                                                       te.const(0, B.dtype)), name=name + "_packB", tag="pack")
    return te.compute((A.shape[0], N),
                      lambda i, j: te.sum(A[i, k].astype(dt) * PB[j // bn, k, j % bn].astype(dt), axis=k),
                      name=name, tag="matmul", attrs={"pack": bn})


def dense(data, weight, bias=None, out_dtype=None, name="dense"):
    """TVM's dense: out[i, j] = sum_k data[i, k] * weight[j, k] (+ bias[j])."""
    if len(data.shape) != 2 or len(weight.shape) != 2:
        raise InvalidArgument("dense takes 2-d data and weight")
    k = te.reduce_axis((0, data.shape[1]), name="k")
    dt = out_dtype or data.dtype
    out = te.compute((data.shape[0], weight.shape[0]),
                     lambda i, j: te.sum(data[i, k].astype(dt) * weight[j, k].astype(dt), axis=k),
                     name=name, tag="dense")
    if bias is not None:
        out = te.compute(out.shape, lambda i, j: out[i, j] + bias[j].astype(dt), name=name + "_bias",
                         tag="injective")
    return out


def batch_matmul(A, B, name="batch_matmul"):
    """C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]."""
    if len(A.shape) != 3 or len(B.shape) != 3:
        raise InvalidArgument("batch_matmul takes 3-d tensors")
    k = te.reduce_axis((0, A.shape[2]), name="k")
    return te.compute((A.shape[0], A.shape[1], B.shape[2]),
                      lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name=name, tag="batch_matmul")


def pad(data, pad_before, pad_after=None, pad_value=0.0, name="pad", lazy=False):
    """Zero (or ``pad_value``) padding of every dimension. ``lazy``: the payload's
    if_then_else (the source read only inside, so a vectorised consumer reading it at stride
    1 gets masked vector loads) instead of a select over clamped indices (read lane by
    lane when vectorised, but cheaper than the lazy form at other strides)."""
    pad_after = pad_before if pad_after is None else pad_after
    n = len(data.shape)
    if len(pad_before) != n or len(pad_after) != n:
        raise InvalidArgument("pad: give one amount per dimension (%d)" % n)
    if not any(pad_before) and not any(pad_after):
        return data
    shape = [data.shape[d] + pad_before[d] + pad_after[d] for d in range(n)]

    def f(*idx):
        conds, src = [], []
        for d, i in enumerate(idx):
            if pad_before[d]:
                conds.append(i >= pad_before[d])
            if pad_after[d]:
                conds.append(i < data.shape[d] + pad_before[d])
            src.append(i - pad_before[d] if pad_before[d] else i)
        return te.Select(te.all(*conds), data[tuple(src)], te.const(pad_value, data.dtype), lazy=lazy)
    return te.compute(shape, f, name=name, tag="injective,pad")


def _out_size(size, k, stride, pad_lo, pad_hi, dilation):
    return (size + pad_lo + pad_hi - ((k - 1) * dilation + 1)) // stride + 1


def _padding(padding):
    if isinstance(padding, int):
        return padding, padding, padding, padding
    if len(padding) == 2:
        return padding[0], padding[1], padding[0], padding[1]
    if len(padding) == 4:
        return tuple(padding)
    raise InvalidArgument("padding is an int, (ph, pw) or (top, left, bottom, right), not %r" % (padding,))


def conv2d_nchw(data, kernel, stride=1, padding=0, dilation=1, out_dtype=None, name="conv2d_nchw"):
    """data N x C x H x W, kernel O x C x KH x KW -> N x O x OH x OW."""
    if len(data.shape) != 4 or len(kernel.shape) != 4:
        raise InvalidArgument("conv2d_nchw takes 4-d data and kernel")
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pt, pl, pb, pr = _padding(padding)
    N, C, H, W = data.shape
    O, _, KH, KW = kernel.shape
    kh, kw = _const(KH), _const(KW)
    if kh is None or kw is None:
        raise InvalidArgument("conv2d_nchw: the kernel's height and width must be constants")
    OH = _out_size(H, kh, sh, pt, pb, dh)
    OW = _out_size(W, kw, sw, pl, pr, dw)
    padded = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_data", lazy=sw == 1)
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    dt = out_dtype or data.dtype
    return te.compute((N, O, OH, OW), lambda n, f, y, x: te.sum(
        padded[n, rc, y * sh + ry * dh, x * sw + rx * dw].astype(dt) * kernel[f, rc, ry, rx].astype(dt),
        axis=[rc, ry, rx]), name=name, tag="conv2d_nchw")


def depthwise_conv2d_nchw(data, kernel, stride=1, padding=0, dilation=1, name="depthwise_conv2d_nchw"):
    """data N x C x H x W, kernel C x M x KH x KW -> N x (C*M) x OH x OW."""
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pt, pl, pb, pr = _padding(padding)
    N, C, H, W = data.shape
    _, M, KH, KW = kernel.shape
    kh, kw, m = _const(KH), _const(KW), _const(M)
    if kh is None or kw is None or m is None:
        raise InvalidArgument("depthwise_conv2d_nchw: the kernel's multiplier, height and width must be constants")
    OH = _out_size(H, kh, sh, pt, pb, dh)
    OW = _out_size(W, kw, sw, pl, pr, dw)
    padded = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_data", lazy=sw == 1)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute((N, C * m, OH, OW), lambda n, c, y, x: te.sum(
        padded[n, c // m, y * sh + ry * dh, x * sw + rx * dw] * kernel[c // m, c % m, ry, rx], axis=[ry, rx]),
        name=name, tag="depthwise_conv2d_nchw")


def pool2d(data, kernel, stride, padding=0, pool_type="max", count_include_pad=True, name="pool2d"):
    """Max or average pooling of N x C x H x W."""
    kh, kw = _pair(kernel, "kernel")
    sh, sw = _pair(stride, "stride")
    pt, pl, pb, pr = _padding(padding)
    N, C, H, W = data.shape
    OH = _out_size(H, kh, sh, pt, pb, 1)
    OW = _out_size(W, kw, sw, pl, pr, 1)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    if pool_type == "max":
        padded = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), pad_value=te.min_value(data.dtype).value,
                     name="pad_data")
        return te.compute((N, C, OH, OW), lambda n, c, y, x: te.max(padded[n, c, y * sh + ry, x * sw + rx],
                                                                    axis=[ry, rx]), name=name, tag="pool_max")
    if pool_type != "avg":
        raise InvalidArgument("pool_type is 'max' or 'avg', not %r" % (pool_type,))
    padded = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), name="pad_data")
    total = te.compute((N, C, OH, OW), lambda n, c, y, x: te.sum(padded[n, c, y * sh + ry, x * sw + rx],
                                                                 axis=[ry, rx]), name=name + "_sum", tag="pool_sum")
    if count_include_pad:
        return te.compute(total.shape, lambda n, c, y, x: total[n, c, y, x] / float(kh * kw), name=name,
                          tag="pool_avg")

    def count(y, x):
        h0 = te.max(y * sh - pt, 0)
        h1 = te.min(y * sh - pt + kh, H)
        w0 = te.max(x * sw - pl, 0)
        w1 = te.min(x * sw - pl + kw, W)
        return ((h1 - h0) * (w1 - w0)).astype(data.dtype)
    return te.compute(total.shape, lambda n, c, y, x: total[n, c, y, x] / count(y, x), name=name, tag="pool_avg")


def softmax(x, name="softmax"):
    """Softmax over the last axis of a 2-d tensor: max, exp-sum, divide (three stages)."""
    if len(x.shape) != 2:
        raise InvalidArgument("softmax takes a 2-d tensor (rows x classes)")
    M, N = x.shape
    k1 = te.reduce_axis((0, N), name="k")
    mx = te.compute((M,), lambda i: te.max(x[i, k1], axis=k1), name=name + "_max")
    ex = te.compute((M, N), lambda i, j: te.exp(x[i, j] - mx[i]), name=name + "_exp")
    k2 = te.reduce_axis((0, N), name="k")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name=name + "_sum")
    return te.compute((M, N), lambda i, j: ex[i, j] / sm[i], name=name, tag="softmax")


def layer_norm(x, gamma, beta, epsilon=1e-5, name="layer_norm"):
    """Layer norm over the last axis of a 2-d tensor (gamma, beta: N)."""
    if len(x.shape) != 2:
        raise InvalidArgument("layer_norm takes a 2-d tensor")
    M, N = x.shape
    k1 = te.reduce_axis((0, N), name="k")
    mean = te.compute((M,), lambda i: te.sum(x[i, k1], axis=k1), name=name + "_sum")
    k2 = te.reduce_axis((0, N), name="k")
    nf = N.astype(x.dtype) if not isinstance(N, IntImm) else float(N.value)
    var = te.compute((M,), lambda i: te.sum((x[i, k2] - mean[i] / nf) * (x[i, k2] - mean[i] / nf), axis=k2),
                     name=name + "_var")
    return te.compute((M, N), lambda i, j: (x[i, j] - mean[i] / nf) * te.rsqrt(var[i] / nf + epsilon) * gamma[j]
                      + beta[j], name=name, tag="layer_norm")


def elementwise(fn, *xs, name="elementwise"):
    """out[idx] = fn(x0[idx], x1[idx], ...) for tensors of one shape."""
    shape = xs[0].shape
    for x in xs[1:]:
        if len(x.shape) != len(shape):
            raise InvalidArgument("elementwise: shapes differ; use broadcast")
    return te.compute(shape, lambda *i: fn(*[x[i] for x in xs]), name=name, tag="injective")


def broadcast(fn, A, B, name="broadcast"):
    """numpy broadcasting of two tensors (constant size-1 dimensions stretch)."""
    na, nb = len(A.shape), len(B.shape)
    n = max(na, nb)
    sa = [IntImm(1)] * (n - na) + list(A.shape)
    sb = [IntImm(1)] * (n - nb) + list(B.shape)
    shape = []
    for da, db in zip(sa, sb):
        ca, cb = _const(da), _const(db)
        if ca == 1:
            shape.append(db)
        elif cb == 1 or da is db or (ca is not None and ca == cb):
            shape.append(da)
        else:
            raise InvalidArgument("broadcast: dimensions %r and %r do not match" % (da, db))

    def f(*idx):
        ia = [0 if _const(d) == 1 else i for d, i in zip(sa, idx)][n - na:]
        ib = [0 if _const(d) == 1 else i for d, i in zip(sb, idx)][n - nb:]
        return fn(A[tuple(ia)], B[tuple(ib)])
    return te.compute(shape, f, name=name, tag="broadcast")


def _binop(fn, opname):
    def op(A, B):
        return broadcast(fn, A, B, name=opname)
    op.__name__ = opname
    return op


add = _binop(lambda a, b: a + b, "add")
subtract = _binop(lambda a, b: a - b, "subtract")
multiply = _binop(lambda a, b: a * b, "multiply")
divide = _binop(lambda a, b: a / b, "divide")
maximum = _binop(lambda a, b: te.max(a, b), "maximum")
minimum = _binop(lambda a, b: te.min(a, b), "minimum")


def _unary(fn, opname):
    def op(x):
        return elementwise(fn, x, name=opname)
    op.__name__ = opname
    return op


relu = _unary(lambda a: te.max(a, te.const(0, a.dtype)), "relu")
exp = _unary(te.exp, "exp")
tanh = _unary(te.tanh, "tanh")
sigmoid = _unary(te.sigmoid, "sigmoid")
sqrt = _unary(te.sqrt, "sqrt")
negative = _unary(lambda a: -a, "negative")
