"""The ONNX operators kiln.onnx imports: for each, how its output types and shapes follow from
its inputs (``infer``), how it is computed with numpy when every input is a constant
(``fold``: constants and shape arithmetic are folded at import), and how it becomes te
(``lower`` for the operators that run on the device).

An operator is one of four kinds:
- "view": a reshape of its input's bytes (Reshape, Flatten, Squeeze, Unsqueeze, Identity,
  Dropout): no kernel, a no-copy view in the graph;
- "elementwise": one output element from the same element of each (broadcast) input; these
  fuse into the kernel before them (``ew`` gives the expression);
- "anchor": a convolution or matrix product that element-wise work after it fuses into;
- "other": a kernel of its own (pooling, reductions, softmax, transpose, concat, ...).
"""

import numpy as np

from .. import te, topi
from ..errors import InvalidArgument

ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
               10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}

OPS = {}


class Op:
    def __init__(self, name, kind, infer, fold=None, lower=None, ew=None, min_inputs=1):
        self.name, self.kind, self.infer, self.fold, self.lower, self.ew = name, kind, infer, fold, lower, ew
        self.min_inputs = min_inputs


def _reg(names, kind, infer, fold=None, lower=None, ew=None, min_inputs=1):
    for n in names.split():
        OPS[n] = Op(n, kind, infer, fold, lower, ew, min_inputs)


class NodeError(InvalidArgument):
    """A node the importer cannot take: the message names the node and its operator."""


class NeedsConstant(NodeError):
    """An input that decides shapes (Reshape's shape, Slice's starts, ...) is computed at
    run time; ``value`` names it. A graph input can be fixed with constant_inputs."""

    def __init__(self, message, value):
        super().__init__(message)
        self.value = value


def fail(node, msg):
    raise NodeError("node %s (%s): %s" % (node.name, node.op, msg))


def _const_in(node, ins, i, what):
    v = ins[i] if i < len(ins) else None
    if v is None:
        return None
    if v.const is None:
        raise NeedsConstant("node %s (%s): %s (input %d, %s) must be a constant for kiln, which compiles for fixed "
                            "shapes (it is computed at run time; if it is a graph input, pass its value in "
                            "constant_inputs)" % (node.name, node.op, what, i, v.name), v.name)
    return v.const


def carray(a):
    """A C-contiguous numpy array of a, keeping 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    a = np.asarray(a)
    return a if a.flags.c_contiguous else a.copy(order="C")


def ishape(t):
    """A te tensor's shape as ints (the importer's shapes are all constant)."""
    from ..te.build import _eval_expr
    return tuple(int(_eval_expr(d, {})) for d in t.shape)


def _ints_of(arr):
    return [int(x) for x in np.asarray(arr).reshape(-1)]


# -- shapes -------------------------------------------------------------------------------------

def bcast_shape(node, shapes):
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        fail(node, "input shapes %s do not broadcast" % ", ".join(str(tuple(s)) for s in shapes))


def _ew_infer(out_dtype=None):
    def infer(node, ins):
        ins_ = [v for v in ins if v is not None]
        dt = out_dtype(node, ins_) if callable(out_dtype) else ins_[0].dtype
        return [(dt, bcast_shape(node, [v.shape for v in ins_]))]
    return infer


def _same_dtype(node, ins):
    dts = {v.dtype for v in ins if v is not None}
    if len(dts) > 1:
        fail(node, "inputs have different dtypes %s" % sorted(dts))


# -- element-wise operators ---------------------------------------------------------------------
# ew(node, xs, dtype) -> expression; xs are the operands' expressions in input order.

def _f(dtype, v):
    return te.const(v, dtype)


def _zero(dt):
    return te.const(0, dt)


def _np_unary(fn):
    def fold(node, a):
        return [np.asarray(fn(node, a[0])).astype(a[0].dtype)]
    return fold


def _clip_bounds(node, ins):
    lo = node.attrs.get("min")
    hi = node.attrs.get("max")
    if len(ins) > 1 and ins[1] is not None:
        lo = _const_in(node, ins, 1, "min").item()
    if len(ins) > 2 and ins[2] is not None:
        hi = _const_in(node, ins, 2, "max").item()
    return lo, hi


def _ew_clip(node, xs, dt):
    lo, hi = node.attrs["_bounds"]
    x = xs[0]
    if lo is not None:
        x = te.max(x, _f(dt, lo))
    if hi is not None:
        x = te.min(x, _f(dt, hi))
    return x


def _clip_infer(node, ins):
    node.attrs["_bounds"] = _clip_bounds(node, ins)
    node.ew_inputs = 1      # min and max become immediates
    return [(ins[0].dtype, ins[0].shape)]


def _np_clip(node, a):
    lo, hi = node.attrs["_bounds"]
    x = a[0]
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return [x.astype(a[0].dtype)]


def _hardsigmoid(x, dt, alpha, beta):
    return te.max(_zero(dt), te.min(_f(dt, 1.0), x * _f(dt, alpha) + _f(dt, beta)))


def _float_only(node, ins):
    for v in ins:
        if v is not None and not v.dtype.startswith("float"):
            fail(node, "input %s is %s; this operator takes float tensors" % (v.name, v.dtype))


_UNARY = {
    # name: (te expression, numpy, float only)
    "Relu": (lambda n, x, dt: te.max(x, _zero(dt)), lambda n, x: np.maximum(x, 0), False),
    "Sigmoid": (lambda n, x, dt: te.sigmoid(x), lambda n, x: 1 / (1 + np.exp(-x)), True),
    "Tanh": (lambda n, x, dt: te.tanh(x), lambda n, x: np.tanh(x), True),
    "Exp": (lambda n, x, dt: te.exp(x), lambda n, x: np.exp(x), True),
    "Log": (lambda n, x, dt: te.log(x), lambda n, x: np.log(x), True),
    "Sqrt": (lambda n, x, dt: te.sqrt(x), lambda n, x: np.sqrt(x), True),
    "Abs": (lambda n, x, dt: te.abs(x), lambda n, x: np.abs(x), False),
    "Neg": (lambda n, x, dt: -x, lambda n, x: -x, False),
    "Reciprocal": (lambda n, x, dt: _f(dt, 1.0) / x, lambda n, x: 1 / x, True),
    "Floor": (lambda n, x, dt: te.floor(x), lambda n, x: np.floor(x), True),
    "Ceil": (lambda n, x, dt: te.ceil(x), lambda n, x: np.ceil(x), True),
    "Erf": (lambda n, x, dt: te.erf(x), None, True),
    "HardSigmoid": (lambda n, x, dt: _hardsigmoid(x, dt, n.attrs.get("alpha", 0.2), n.attrs.get("beta", 0.5)),
                    lambda n, x: np.clip(x * n.attrs.get("alpha", 0.2) + n.attrs.get("beta", 0.5), 0, 1), True),
    "HardSwish": (lambda n, x, dt: x * _hardsigmoid(x, dt, 1.0 / 6, 0.5),
                  lambda n, x: x * np.clip(x / 6 + 0.5, 0, 1), True),
    "LeakyRelu": (lambda n, x, dt: te.if_then_else(x < _zero(dt), x * _f(dt, n.attrs.get("alpha", 0.01)), x),
                  lambda n, x: np.where(x < 0, x * n.attrs.get("alpha", 0.01), x), True),
    "Elu": (lambda n, x, dt: te.if_then_else(x < _zero(dt), (te.exp(x) - _f(dt, 1.0)) * _f(dt, n.attrs.get("alpha", 1.0)),
                                             x), None, True),
    "Selu": (lambda n, x, dt: te.if_then_else(
        x <= _zero(dt), (te.exp(x) * _f(dt, n.attrs.get("alpha", 1.67326319217681884765625))
                         - _f(dt, n.attrs.get("alpha", 1.67326319217681884765625)))
        * _f(dt, n.attrs.get("gamma", 1.05070102214813232421875)),
        x * _f(dt, n.attrs.get("gamma", 1.05070102214813232421875))), None, True),
    "Softplus": (lambda n, x, dt: te.log(te.exp(x) + _f(dt, 1.0)), None, True),
    "Softsign": (lambda n, x, dt: x / (te.abs(x) + _f(dt, 1.0)), None, True),
}


def _unary_infer(float_only):
    def infer(node, ins):
        if float_only:
            _float_only(node, ins[:1])
        return [(ins[0].dtype, ins[0].shape)]
    return infer


for _n, (_e, _np, _fo) in _UNARY.items():
    _reg(_n, "elementwise", _unary_infer(_fo), fold=_np_unary(_np) if _np else None,
         ew=(lambda e: lambda node, xs, dt: e(node, xs[0], dt))(_e))

_reg("Clip", "elementwise", _clip_infer, fold=_np_clip, ew=_ew_clip)


def _bin(fn):
    def ew(node, xs, dt):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x, dt)
        return out
    return ew


def _div(a, b, dt):
    if dt.startswith("float"):
        return a / b
    # ONNX integer Div truncates like C (numpy's // floors: the fold uses trunc too)
    return te.truncdiv(a, b)


def _bin_infer(node, ins):
    _same_dtype(node, ins)
    return _ew_infer()(node, ins)


def _np_bin(fn):
    def fold(node, a):
        out = a[0]
        for x in a[1:]:
            out = fn(out, x)
        return [np.asarray(out).astype(a[0].dtype)]
    return fold


def _np_div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        return np.trunc(a / b).astype(a.dtype)
    return a / b


_reg("Add Sum", "elementwise", _bin_infer, fold=_np_bin(np.add), ew=_bin(lambda a, b, dt: a + b))
_reg("Sub", "elementwise", _bin_infer, fold=_np_bin(np.subtract), ew=_bin(lambda a, b, dt: a - b))
_reg("Mul", "elementwise", _bin_infer, fold=_np_bin(np.multiply), ew=_bin(lambda a, b, dt: a * b))
_reg("Div", "elementwise", _bin_infer, fold=_np_bin(_np_div), ew=_bin(_div))
_reg("Max", "elementwise", _bin_infer, fold=_np_bin(np.maximum), ew=_bin(lambda a, b, dt: te.max(a, b)))
_reg("Min", "elementwise", _bin_infer, fold=_np_bin(np.minimum), ew=_bin(lambda a, b, dt: te.min(a, b)))


def _pow_infer(node, ins):
    _float_only(node, ins[:1])
    return [(ins[0].dtype, bcast_shape(node, [ins[0].shape, ins[1].shape]))]


def _pow_ew(node, xs, dt):
    b = xs[1]
    if b.dtype != dt:
        b = b.astype(dt)
    return te.power(xs[0], b)


_reg("Pow", "elementwise", _pow_infer, fold=lambda n, a: [np.power(a[0], a[1]).astype(a[0].dtype)], ew=_pow_ew,
     min_inputs=2)


def _prelu_infer(node, ins):
    _float_only(node, ins)
    out = bcast_shape(node, [ins[0].shape, ins[1].shape])
    if tuple(out) != tuple(ins[0].shape):
        fail(node, "slope shape %s does not broadcast to the input %s" % (ins[1].shape, ins[0].shape))
    return [(ins[0].dtype, ins[0].shape)]


_reg("PRelu", "elementwise", _prelu_infer, fold=lambda n, a: [np.where(a[0] < 0, a[0] * a[1], a[0]).astype(a[0].dtype)],
     ew=lambda node, xs, dt: te.if_then_else(xs[0] < _zero(dt), xs[0] * xs[1], xs[0]), min_inputs=2)


# BatchNormalization (inference) becomes _ScaleShift(x, a, b) with per-channel constants
# a = scale / sqrt(var + eps) and b = bias - mean * a, shaped (C, 1, ..., 1) to broadcast;
# a _ScaleShift right after a convolution is folded into its weights.

def _bn_infer(node, ins):
    if node.attrs.get("training_mode", 0):
        fail(node, "training_mode=1 is not supported (kiln runs inference)")
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        fail(node, "the running mean/var outputs (training) are not supported")
    x = ins[0]
    _float_only(node, ins[:1])
    if len(x.shape) < 2:
        fail(node, "input %s has rank %d; BatchNormalization needs N x C x ..." % (x.name, len(x.shape)))
    scale = _const_in(node, ins, 1, "scale")
    bias = _const_in(node, ins, 2, "B")
    mean = _const_in(node, ins, 3, "input_mean")
    var = _const_in(node, ins, 4, "input_var")
    c = x.shape[1]
    for nm, a in (("scale", scale), ("B", bias), ("mean", mean), ("var", var)):
        if a is None or a.size != c:
            fail(node, "%s has %s values; the input has %d channels" % (nm, None if a is None else a.size, c))
    eps = node.attrs.get("epsilon", 1e-5)
    a = (scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps))
    b = bias.astype(np.float64) - mean.astype(np.float64) * a
    node.attrs["_a"] = a.astype(x.dtype)
    node.attrs["_b"] = b.astype(x.dtype)
    return [(x.dtype, x.shape)]


def _bn_ew(node, xs, dt):
    return xs[0] * xs[1] + xs[2]


def _bn_fold(node, arrs):
    shape = (1, -1) + (1,) * (arrs[0].ndim - 2)
    return [(arrs[0] * node.attrs["_a"].reshape(shape) + node.attrs["_b"].reshape(shape)).astype(arrs[0].dtype)]


_reg("BatchNormalization", "elementwise", _bn_infer, fold=_bn_fold, ew=_bn_ew, min_inputs=5)


def _cast_infer(node, ins):
    to = ONNX_DTYPES.get(node.attrs.get("to"))
    if to is None:
        fail(node, "cast to ONNX type %r is not supported" % node.attrs.get("to"))
    return [(to, ins[0].shape)]


def _cast_ew(node, xs, dt):
    x = xs[0]
    if dt == "bool":
        return x != te.const(0, x.dtype)
    if dt == "float16" and x.dtype == "float64":
        # through float32: the CPU target has no double -> half conversion routine
        # (__truncdfhf2 is missing at link time); float32 -> float16 rounds the same here
        # except for values within half a float32 ulp of a float16 tie
        x = x.astype("float32")
    return x.astype(dt)


_reg("Cast", "elementwise", _cast_infer, fold=lambda n, a: [a[0].astype(ONNX_DTYPES[n.attrs["to"]])], ew=_cast_ew)


# -- views ------------------------------------------------------------------------------------

def _view_same(node, ins):
    return [(ins[0].dtype, ins[0].shape)]


def _dropout_infer(node, ins):
    if len(ins) > 2 and ins[2] is not None:
        t = _const_in(node, ins, 2, "training_mode")
        if bool(np.asarray(t).reshape(-1)[0]):
            fail(node, "training_mode is true; kiln runs inference")
    out = [(ins[0].dtype, ins[0].shape)]
    if len(node.outputs) > 1 and node.outputs[1]:
        node.attrs["_mask"] = np.ones(ins[0].shape, dtype=bool)
        out.append(("bool", ins[0].shape))
    return out


def _flatten_infer(node, ins):
    s = ins[0].shape
    axis = node.attrs.get("axis", 1)
    if axis < 0:
        axis += len(s)
    if not 0 <= axis <= len(s):
        fail(node, "axis %d is out of range for rank %d" % (node.attrs.get("axis", 1), len(s)))
    return [(ins[0].dtype, (int(np.prod(s[:axis], dtype=np.int64)), int(np.prod(s[axis:], dtype=np.int64))))]


def _reshape_infer(node, ins):
    if len(ins) > 1 and ins[1] is not None:
        shape = _ints_of(_const_in(node, ins, 1, "shape"))
    elif "shape" in node.attrs:
        shape = list(node.attrs["shape"])
    else:
        fail(node, "no target shape")
    src = ins[0].shape
    allowzero = node.attrs.get("allowzero", 0)
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(src):
                fail(node, "shape %s copies dimension %d, which the input %s lacks" % (shape, i, src))
            out.append(src[i])
        else:
            out.append(d)
    total = int(np.prod(src, dtype=np.int64))
    if out.count(-1) > 1:
        fail(node, "shape %s has more than one -1" % shape)
    if -1 in out:
        rest = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if rest == 0 or total % rest:
            fail(node, "cannot reshape %s into %s" % (src, shape))
        out[out.index(-1)] = total // rest
    if any(d < 0 for d in out) or int(np.prod(out, dtype=np.int64)) != total:
        fail(node, "cannot reshape %s (%d elements) into %s" % (src, total, shape))
    return [(ins[0].dtype, tuple(out))]


def _axes(node, ins, idx=1, attr="axes"):
    if len(ins) > idx and ins[idx] is not None:
        return _ints_of(_const_in(node, ins, idx, "axes"))
    a = node.attrs.get(attr)
    return None if a is None else list(a)


def _squeeze_infer(node, ins):
    s = list(ins[0].shape)
    axes = _axes(node, ins)
    if axes is None:
        axes = [i for i, d in enumerate(s) if d == 1]
    axes = [a + len(s) if a < 0 else a for a in axes]
    for a in axes:
        if not 0 <= a < len(s) or s[a] != 1:
            fail(node, "cannot squeeze axis %d of shape %s" % (a, tuple(s)))
    return [(ins[0].dtype, tuple(d for i, d in enumerate(s) if i not in axes))]


def _unsqueeze_infer(node, ins):
    s = list(ins[0].shape)
    axes = _axes(node, ins)
    if axes is None:
        fail(node, "no axes")
    r = len(s) + len(axes)
    axes = sorted(a + r if a < 0 else a for a in axes)
    if len(set(axes)) != len(axes) or any(not 0 <= a < r for a in axes):
        fail(node, "axes %s are out of range or repeat for output rank %d" % (axes, r))
    for a in axes:
        s.insert(a, 1)
    return [(ins[0].dtype, tuple(s))]


def _view_fold(node, arrs):
    return [arrs[0].reshape(node.out_shapes[0])] + ([node.attrs["_mask"]] if "_mask" in node.attrs else [])


_reg("Identity", "view", _view_same, fold=_view_fold)
_reg("Dropout", "view", _dropout_infer, fold=_view_fold)
_reg("Flatten", "view", _flatten_infer, fold=_view_fold)
_reg("Reshape", "view", _reshape_infer, fold=_view_fold)
_reg("Squeeze", "view", _squeeze_infer, fold=_view_fold)
_reg("Unsqueeze", "view", _unsqueeze_infer, fold=_view_fold)


# -- shape arithmetic (folded; Shape and Size of any tensor are constants) ----------------------

def _shape_infer(node, ins):
    s = list(ins[0].shape)
    start = node.attrs.get("start", 0)
    end = node.attrs.get("end", len(s))
    sl = s[slice(start, end)]
    node.attrs["_value"] = np.array(sl, dtype=np.int64)
    return [("int64", (len(sl),))]


def _size_infer(node, ins):
    node.attrs["_value"] = np.array(int(np.prod(ins[0].shape, dtype=np.int64)), dtype=np.int64)
    return [("int64", ())]


_reg("Shape", "shape", _shape_infer, fold=lambda n, a: [n.attrs["_value"]])
_reg("Size", "shape", _size_infer, fold=lambda n, a: [n.attrs["_value"]])


def _cos_infer(node, ins):
    shape = tuple(_ints_of(_const_in(node, ins, 0, "shape")))
    t = node.attrs.get("value")
    v = np.zeros(1, np.float32) if t is None else t
    node.attrs["_value"] = np.full(shape, v.reshape(-1)[0], dtype=v.dtype)
    return [(v.dtype.name, shape)]


_reg("ConstantOfShape", "shape", _cos_infer, fold=lambda n, a: [n.attrs["_value"]])


def _range_infer(node, ins):
    a = [_const_in(node, ins, i, w) for i, w in enumerate(("start", "limit", "delta"))]
    v = np.arange(a[0].item(), a[1].item(), a[2].item()).astype(a[0].dtype)
    node.attrs["_value"] = v
    return [(v.dtype.name, v.shape)]


_reg("Range", "shape", _range_infer, fold=lambda n, a: [n.attrs["_value"]], min_inputs=3)


def _cmp_infer(node, ins):
    return [("bool", bcast_shape(node, [ins[0].shape, ins[1].shape]))]


_reg("Equal", "elementwise", _cmp_infer, fold=lambda n, a: [np.equal(a[0], a[1])],
     ew=lambda node, xs, dt: xs[0] == xs[1], min_inputs=2)
_reg("Where", "elementwise", lambda node, ins: [(ins[1].dtype, bcast_shape(node, [v.shape for v in ins]))],
     fold=lambda n, a: [np.where(a[0], a[1], a[2])], ew=lambda node, xs, dt: te.if_then_else(xs[0], xs[1], xs[2]),
     min_inputs=3)


def _expand_infer(node, ins):
    shape = _ints_of(_const_in(node, ins, 1, "shape"))
    return [(ins[0].dtype, bcast_shape(node, [ins[0].shape, shape]))]


def _expand_infer_ew(node, ins):
    node.ew_inputs = 1
    return _expand_infer(node, ins)


_reg("Expand", "elementwise", _expand_infer_ew, fold=lambda n, a: [np.broadcast_to(a[0], n.out_shapes[0]).copy()],
     ew=lambda node, xs, dt: xs[0], min_inputs=2)


# -- anchors: convolutions and matrix products -------------------------------------------------

def conv_geometry(node, x_shape, w_shape, transpose=False):
    """(strides, dilations, pads_begin, pads_end, out_spatial) of a Conv/ConvTranspose."""
    r = len(x_shape) - 2
    k = list(node.attrs.get("kernel_shape") or w_shape[2:])
    if len(k) != r:
        fail(node, "kernel_shape %s has %d dimensions; the input has %d spatial" % (k, len(k), r))
    strides = list(node.attrs.get("strides") or [1] * r)
    dil = list(node.attrs.get("dilations") or [1] * r)
    pads = list(node.attrs.get("pads") or [0] * (2 * r))
    if len(strides) != r or len(dil) != r or len(pads) != 2 * r:
        fail(node, "strides %s, dilations %s, pads %s do not match %d spatial dimensions" % (strides, dil, pads, r))
    if any(s < 1 for s in strides) or any(d < 1 for d in dil) or any(p < 0 for p in pads):
        fail(node, "strides and dilations must be >= 1 and pads >= 0")
    auto = node.attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    pb, pe = pads[:r], pads[r:]
    out = []
    for i in range(r):
        n = x_shape[2 + i]
        span = (k[i] - 1) * dil[i] + 1
        if transpose:
            op = (node.attrs.get("output_padding") or [0] * r)[i]
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                o = n * strides[i]
                total = max(0, strides[i] * (n - 1) + op + span - o)
                pb[i], pe[i] = (total // 2, total - total // 2) if auto == "SAME_UPPER" else \
                    (total - total // 2, total // 2)
            elif auto == "VALID":
                pb[i] = pe[i] = 0
            out_shape = node.attrs.get("output_shape")
            if out_shape:
                o = list(out_shape)[-r:][i]
                total = strides[i] * (n - 1) + op + span - o
                pb[i], pe[i] = (total // 2, total - total // 2) if auto == "SAME_UPPER" else \
                    (total - total // 2, total // 2)
            out.append(strides[i] * (n - 1) + op + span - pb[i] - pe[i])
            continue
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // strides[i])
            total = max(0, (o - 1) * strides[i] + span - n)
            pb[i], pe[i] = (total // 2, total - total // 2) if auto == "SAME_UPPER" else \
                (total - total // 2, total // 2)
        elif auto == "VALID":
            pb[i] = pe[i] = 0
        elif auto != "NOTSET":
            fail(node, "auto_pad %r is not an ONNX value" % auto)
        o = (n + pb[i] + pe[i] - span) // strides[i] + 1
        if o < 1:
            fail(node, "the kernel %s does not fit the input %s" % (k, x_shape))
        out.append(o)
    return strides, dil, pb, pe, out, k


def _conv_infer(node, ins):
    x, w = ins[0], ins[1]
    _float_only(node, ins)
    _same_dtype(node, ins)
    if len(x.shape) not in (3, 4):
        fail(node, "%d-d convolution is not supported (kiln.onnx has 1-d and 2-d)" % (len(x.shape) - 2))
    if len(w.shape) != len(x.shape):
        fail(node, "weight shape %s does not match input %s" % (w.shape, x.shape))
    g = node.attrs.get("group", 1)
    c = x.shape[1]
    if g < 1 or c % g or w.shape[0] % g or w.shape[1] * g != c:
        fail(node, "weight %s does not fit %d input channels in %d groups" % (w.shape, c, g))
    if len(ins) > 2 and ins[2] is not None and tuple(ins[2].shape) != (w.shape[0],):
        fail(node, "bias shape %s is not (%d,)" % (ins[2].shape, w.shape[0]))
    _, _, _, _, out, _ = conv_geometry(node, x.shape, w.shape)
    return [(x.dtype, (x.shape[0], w.shape[0]) + tuple(out))]


def _conv_lower(ctx, node, ins):
    x, w = ins[0], ins[1]
    strides, dil, pb, pe, out, k = conv_geometry(node, x.shape, w.shape)
    g = node.attrs.get("group", 1)
    if len(x.shape) == 3:    # 1-d as 2-d with height 1
        strides, dil, pb, pe, out, k = [1] + strides, [1] + dil, [0] + pb, [0] + pe, [1] + out, [1] + k
    N, C = x.shape[0], x.shape[1]
    H, W = (1, x.shape[2]) if len(x.shape) == 3 else x.shape[2:]
    O = w.shape[0]
    oshape = (N, O) + tuple(out)
    pad4 = (pb[0], pb[1], pe[0], pe[1])
    if g == 1 and k == [1, 1] and strides == [1, 1] and not any(pad4):
        X = ctx.input(x, (N, C, H * W))
        Wt = ctx.input(w, (O, C))
        T = topi.conv2d_pointwise(X, Wt)
        if len(oshape) == 3:
            return T, oshape, None
        OW = out[1]
        return T, oshape, lambda n, o, p: (n, o, p // OW, p % OW)
    X = ctx.input(x, (N, C, H, W))
    if g == 1:
        T = topi.conv2d_nchw(X, ctx.input(w, (O, C) + tuple(k)), strides, pad4, dil)
    elif g == C and O % C == 0:
        T = topi.depthwise_conv2d_nchw(X, ctx.input(w, (C, O // C) + tuple(k)), strides, pad4, dil)
    else:
        T = topi.group_conv2d_nchw(X, ctx.input(w, (O, C // g) + tuple(k)), strides, pad4, dil, g)
    if len(x.shape) == 3:
        return T, oshape, lambda n, o, y, xx: (n, o, xx)
    return T, oshape, None


_reg("Conv", "anchor", _conv_infer, lower=_conv_lower, min_inputs=2)


def _gemm_infer(node, ins):
    a, b = ins[0], ins[1]
    _float_only(node, ins)
    _same_dtype(node, ins)
    if len(a.shape) != 2 or len(b.shape) != 2:
        fail(node, "Gemm takes 2-d A and B, not %s and %s" % (a.shape, b.shape))
    M, K = a.shape[::-1] if node.attrs.get("transA", 0) else a.shape
    K2, N = b.shape[::-1] if node.attrs.get("transB", 0) else b.shape
    if K != K2:
        fail(node, "A %s and B %s do not agree (transA=%d, transB=%d)" % (a.shape, b.shape,
                                                                          node.attrs.get("transA", 0),
                                                                          node.attrs.get("transB", 0)))
    if len(ins) > 2 and ins[2] is not None:
        if bcast_shape(node, [ins[2].shape, (M, N)]) != (M, N):
            fail(node, "C %s does not broadcast to (%d, %d)" % (ins[2].shape, M, N))
    return [(a.dtype, (M, N))]


def _gemm_lower(ctx, node, ins):
    a, b = ins[0], ins[1]
    ta, tb = node.attrs.get("transA", 0), node.attrs.get("transB", 0)
    if ta and a.const is not None:
        A, ta = ctx.const(carray(a.const.T)), 0
    else:
        A = ctx.input(a)
    if tb and b.const is not None:
        B, tb = ctx.const(carray(b.const.T)), 0   # K x N: the columns vectorise
    else:
        B = ctx.input(b)
    T = topi.gemm(A, B, bool(ta), bool(tb))
    return T, T.shape, None


_reg("Gemm", "anchor", _gemm_infer, lower=_gemm_lower, min_inputs=2)


def _matmul_infer(node, ins):
    a, b = ins[0], ins[1]
    _same_dtype(node, ins)
    if not a.shape or not b.shape:
        fail(node, "MatMul of a 0-d tensor")
    sa = (1,) + tuple(a.shape) if len(a.shape) == 1 else tuple(a.shape)
    sb = tuple(b.shape) + (1,) if len(b.shape) == 1 else tuple(b.shape)
    if sa[-1] != sb[-2]:
        fail(node, "shapes %s and %s do not agree" % (a.shape, b.shape))
    batch = bcast_shape(node, [sa[:-2], sb[:-2]])
    out = tuple(batch) + (sa[-2], sb[-1])
    if len(a.shape) == 1:
        out = out[:-2] + out[-1:]
    if len(b.shape) == 1:
        out = out[:-1]
    return [(a.dtype, out)]


def _matmul_lower(ctx, node, ins):
    a, b = ins[0], ins[1]
    sa = (1,) + tuple(a.shape) if len(a.shape) == 1 else tuple(a.shape)
    sb = tuple(b.shape) + (1,) if len(b.shape) == 1 else tuple(b.shape)
    A, B = ctx.input(a, sa), ctx.input(b, sb)
    if len(sa) == 2 and len(sb) == 2:
        T = topi.gemm(A, B)
    else:
        T = topi.matmul_broadcast(A, B)
    return T, ishape(T), None


_reg("MatMul", "anchor", _matmul_infer, lower=_matmul_lower, min_inputs=2)


def _convt_infer(node, ins):
    x, w = ins[0], ins[1]
    _float_only(node, ins)
    if len(x.shape) != 4:
        fail(node, "only 2-d ConvTranspose is supported")
    g = node.attrs.get("group", 1)
    if w.shape[0] != x.shape[1] or x.shape[1] % g:
        fail(node, "weight %s does not fit input %s with %d groups" % (w.shape, x.shape, g))
    _, _, _, _, out, _ = conv_geometry(node, x.shape, w.shape, transpose=True)
    return [(x.dtype, (x.shape[0], w.shape[1] * g) + tuple(out))]


def _convt_lower(ctx, node, ins):
    x, w = ins[0], ins[1]
    strides, dil, pb, pe, out, k = conv_geometry(node, x.shape, w.shape, transpose=True)
    op = node.attrs.get("output_padding") or [0, 0]
    T = topi.conv2d_transpose_nchw(ctx.input(x), ctx.input(w), strides, (pb[0], pb[1], pe[0], pe[1]), dil,
                                   tuple(op), node.attrs.get("group", 1))
    want = (x.shape[0], w.shape[1] * node.attrs.get("group", 1)) + tuple(out)
    got = ishape(T)
    if got != want:
        fail(node, "internal: transposed convolution shape %s, expected %s (output_padding %s)" % (got, want, op))
    return T, want, None


_reg("ConvTranspose", "anchor", _convt_infer, lower=_convt_lower, min_inputs=2)

# -- other device operators --------------------------------------------------------------------


def _pool_attrs(node, x_shape, global_=False):
    r = len(x_shape) - 2
    k = list(node.attrs.get("kernel_shape") or [])
    if len(k) != r:
        fail(node, "kernel_shape %s does not match %d spatial dimensions" % (k, r))
    strides = list(node.attrs.get("strides") or [1] * r)
    dil = list(node.attrs.get("dilations") or [1] * r)
    pads = list(node.attrs.get("pads") or [0] * (2 * r))
    auto = node.attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    ceil = node.attrs.get("ceil_mode", 0)
    pb, pe = pads[:r], pads[r:]
    out = []
    for i in range(r):
        n = x_shape[2 + i]
        span = (k[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // strides[i])
            total = max(0, (o - 1) * strides[i] + span - n)
            pb[i], pe[i] = (total // 2, total - total // 2) if auto == "SAME_UPPER" else \
                (total - total // 2, total // 2)
        elif auto == "VALID":
            pb[i] = pe[i] = 0
        o = topi.pooled_size(n, k[i], strides[i], pb[i], pe[i], dil[i], ceil)
        if o < 1:
            fail(node, "the window %s does not fit the input %s" % (k, x_shape))
        out.append(o)
    return k, strides, dil, pb, pe, out, ceil


def _pool_infer(node, ins):
    x = ins[0]
    if node.op != "MaxPool":
        _float_only(node, ins)
    if len(x.shape) not in (3, 4):
        fail(node, "%d-d pooling is not supported (kiln.onnx has 1-d and 2-d)" % (len(x.shape) - 2))
    if len(node.outputs) > 1 and node.outputs[1]:
        fail(node, "the Indices output is not supported")
    if node.op == "AveragePool" and any(d != 1 for d in node.attrs.get("dilations") or []):
        fail(node, "AveragePool with dilations is not supported")
    k, strides, dil, pb, pe, out, ceil = _pool_attrs(node, x.shape)
    return [(x.dtype, tuple(x.shape[:2]) + tuple(out))]


def _pool_lower(ctx, node, ins):
    x = ins[0]
    k, strides, dil, pb, pe, out, ceil = _pool_attrs(node, x.shape)
    one_d = len(x.shape) == 3
    if one_d:
        k, strides, dil, pb, pe = [1] + k, [1] + strides, [1] + dil, [0] + pb, [0] + pe
        X = ctx.input(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
    else:
        X = ctx.input(x)
    T = topi.pool2d_nchw(X, k, strides, (pb[0], pb[1], pe[0], pe[1]), dil,
                         "max" if node.op == "MaxPool" else "avg", bool(ceil),
                         bool(node.attrs.get("count_include_pad", 0)))
    oshape = tuple(x.shape[:2]) + tuple(out)
    return T, oshape, (lambda n, c, y, xx: (n, c, xx)) if one_d else None


_reg("MaxPool AveragePool", "other", _pool_infer, lower=_pool_lower)


def _gpool_infer(node, ins):
    x = ins[0]
    _float_only(node, ins)
    if len(x.shape) < 3:
        fail(node, "input %s has no spatial dimensions" % (x.shape,))
    return [(x.dtype, tuple(x.shape[:2]) + (1,) * (len(x.shape) - 2))]


def _gpool_lower(ctx, node, ins):
    T = topi.global_pool(ctx.input(ins[0]), "avg" if node.op == "GlobalAveragePool" else "max")
    return T, ishape(T), None


_reg("GlobalAveragePool GlobalMaxPool", "other", _gpool_infer, lower=_gpool_lower,
     fold=lambda n, a: [(a[0].mean if n.op == "GlobalAveragePool" else a[0].max)(
         axis=tuple(range(2, a[0].ndim)), keepdims=True)])


def _reduce_axes(node, ins):
    nd = len(ins[0].shape)
    axes = _axes(node, ins)
    if axes is None or not axes:
        if axes is not None or node.attrs.get("noop_with_empty_axes", 0):
            if node.attrs.get("noop_with_empty_axes", 0):
                return []
        return list(range(nd))
    out = []
    for a in axes:
        if not -nd <= a < nd:
            fail(node, "axis %d is out of range for rank %d" % (a, nd))
        out.append(a % nd)
    return sorted(set(out))


def _reduce_infer(node, ins):
    s = ins[0].shape
    axes = _reduce_axes(node, ins)
    keep = node.attrs.get("keepdims", 1)
    out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i not in axes)
    node.attrs["_axes"] = axes
    return [(ins[0].dtype, out)]


_REDUCE_NP = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min,
              "ReduceProd": np.prod}


def _reduce_fold(node, a):
    axes = node.attrs["_axes"]
    if not axes:
        return [a[0].copy()]
    return [np.asarray(_REDUCE_NP[node.op](a[0], axis=tuple(axes), keepdims=bool(node.attrs.get("keepdims", 1))))
            .astype(a[0].dtype)]


def _reduce_lower(ctx, node, ins):
    axes = node.attrs["_axes"]
    x = ctx.input(ins[0])
    if not axes:
        T = topi.transpose(x, list(range(len(ins[0].shape))))
        return T, ins[0].shape, None
    op = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min",
          "ReduceProd": "prod"}[node.op]
    T = topi.reduce(x, axes, bool(node.attrs.get("keepdims", 1)), op)
    return T, tuple(node.out_shapes[0]), (lambda i: ()) if not node.out_shapes[0] else None


_reg("ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd", "other", _reduce_infer, fold=_reduce_fold,
     lower=_reduce_lower)


def _softmax_split(node, shape, opset):
    nd = len(shape)
    default = -1 if opset >= 13 else 1
    axis = node.attrs.get("axis", default)
    if not -nd <= axis < max(nd, 1):
        fail(node, "axis %d is out of range for rank %d" % (axis, nd))
    axis %= max(nd, 1)
    if opset >= 13:
        return (int(np.prod(shape[:axis], dtype=np.int64)), shape[axis],
                int(np.prod(shape[axis + 1:], dtype=np.int64)))
    return int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)), 1


def _softmax_infer(node, ins):
    _float_only(node, ins)
    if not ins[0].shape:
        fail(node, "softmax of a 0-d tensor")
    return [(ins[0].dtype, ins[0].shape)]


def _softmax_np(node, x, opset, log):
    o, n, i = _softmax_split(node, x.shape, opset)
    v = x.reshape(o, n, i).astype(np.float64)
    v = v - v.max(axis=1, keepdims=True)
    e = np.exp(v)
    out = v - np.log(e.sum(axis=1, keepdims=True)) if log else e / e.sum(axis=1, keepdims=True)
    return out.reshape(x.shape).astype(x.dtype)


def _softmax_lower(ctx, node, ins):
    o, n, i = _softmax_split(node, ins[0].shape, ctx.opset)
    T = topi.softmax_axis(ctx.input(ins[0], (o, n, i)), log=node.op == "LogSoftmax")
    return T, ins[0].shape, "reshape"


_reg("Softmax LogSoftmax", "other", _softmax_infer, lower=_softmax_lower)


def _transpose_perm(node, nd):
    perm = node.attrs.get("perm")
    perm = list(range(nd))[::-1] if perm is None else list(perm)
    if sorted(perm) != list(range(nd)):
        fail(node, "perm %s is not a permutation of %d axes" % (perm, nd))
    return perm


def _transpose_infer(node, ins):
    perm = _transpose_perm(node, len(ins[0].shape))
    return [(ins[0].dtype, tuple(ins[0].shape[p] for p in perm))]


def _transpose_lower(ctx, node, ins):
    T = topi.transpose(ctx.input(ins[0]), _transpose_perm(node, len(ins[0].shape)))
    return T, node.out_shapes[0], None


_reg("Transpose", "other", _transpose_infer,
     fold=lambda n, a: [np.transpose(a[0], _transpose_perm(n, a[0].ndim)).copy()], lower=_transpose_lower)


def _concat_infer(node, ins):
    ins = [v for v in ins if v is not None]
    _same_dtype(node, ins)
    nd = len(ins[0].shape)
    if "axis" not in node.attrs:
        fail(node, "no axis")
    axis = node.attrs["axis"]
    if not -nd <= axis < nd:
        fail(node, "axis %d is out of range for rank %d" % (axis, nd))
    axis %= nd
    out = list(ins[0].shape)
    out[axis] = 0
    for v in ins:
        if len(v.shape) != nd or any(v.shape[d] != ins[0].shape[d] for d in range(nd) if d != axis):
            fail(node, "input shapes %s differ outside axis %d" % ([v.shape for v in ins], axis))
        out[axis] += v.shape[axis]
    return [(ins[0].dtype, tuple(out))]


def _concat_lower(ctx, node, ins):
    ins = [v for v in ins if v is not None and int(np.prod(v.shape)) > 0]
    T = topi.concatenate([ctx.input(v) for v in ins], node.attrs["axis"])
    return T, node.out_shapes[0], None


_reg("Concat", "other", _concat_infer, fold=lambda n, a: [np.concatenate(a, axis=n.attrs["axis"])],
     lower=_concat_lower)


def _pad_amounts(node, ins):
    nd = len(ins[0].shape)
    if len(ins) > 1 and ins[1] is not None:
        pads = _ints_of(_const_in(node, ins, 1, "pads"))
    else:
        pads = list(node.attrs.get("pads", node.attrs.get("paddings", [])))
    axes = _axes(node, ins, idx=3) if len(ins) > 3 else None
    if axes is None:
        axes = list(range(nd))
    axes = [a % nd for a in axes]
    if len(pads) != 2 * len(axes):
        fail(node, "pads %s: give two amounts per axis (%d axes)" % (pads, len(axes)))
    before, after = [0] * nd, [0] * nd
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + len(axes)]
    value = node.attrs.get("value", 0.0)
    if len(ins) > 2 and ins[2] is not None:
        value = _const_in(node, ins, 2, "constant_value").reshape(-1)[0].item()
    mode = node.attrs.get("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("constant", "reflect", "edge"):
        fail(node, "mode %r is not supported (constant, reflect, edge)" % mode)
    return before, after, value, mode


def _pad_infer(node, ins):
    before, after, value, mode = _pad_amounts(node, ins)
    out = tuple(d + b + a for d, b, a in zip(ins[0].shape, before, after))
    if any(d < 0 for d in out):
        fail(node, "pads crop %s below zero" % (ins[0].shape,))
    if mode == "reflect" and any((b > 0 and b >= d) or (a > 0 and a >= d)
                                 for d, b, a in zip(ins[0].shape, before, after)):
        fail(node, "reflect padding must be smaller than the dimension")
    return [(ins[0].dtype, out)]


def _pad_lower(ctx, node, ins):
    before, after, value, mode = _pad_amounts(node, ins)
    T = topi.pad_mode(ctx.input(ins[0]), before, after, mode, value)
    return T, node.out_shapes[0], None


_reg("Pad", "other", _pad_infer, lower=_pad_lower)


def _d2s_infer(node, ins):
    x = ins[0]
    b = node.attrs.get("blocksize")
    if len(x.shape) != 4 or not b or x.shape[1] % (b * b):
        fail(node, "input %s and blocksize %r: need N x C x H x W with C divisible by blocksize^2" % (x.shape, b))
    return [(x.dtype, (x.shape[0], x.shape[1] // (b * b), x.shape[2] * b, x.shape[3] * b))]


def _d2s_mode(node):
    m = node.attrs.get("mode", "DCR")
    return m.decode() if isinstance(m, bytes) else m


def _d2s_lower(ctx, node, ins):
    T = topi.depth_to_space(ctx.input(ins[0]), node.attrs["blocksize"], _d2s_mode(node))
    return T, node.out_shapes[0], None


_reg("DepthToSpace", "other", _d2s_infer, lower=_d2s_lower)


def _gather_infer(node, ins):
    data, idx = ins[0], ins[1]
    nd = len(data.shape)
    axis = node.attrs.get("axis", 0)
    if not -nd <= axis < nd:
        fail(node, "axis %d is out of range for rank %d" % (axis, nd))
    axis %= nd
    if idx.const is not None:
        n = data.shape[axis]
        if np.any(idx.const >= n) or np.any(idx.const < -n):
            fail(node, "indices %s are out of range for a dimension of %d" % (_ints_of(idx.const)[:8], n))
    return [(data.dtype, tuple(data.shape[:axis]) + tuple(idx.shape) + tuple(data.shape[axis + 1:]))]


def _gather_lower(ctx, node, ins):
    data, idx = ins[0], ins[1]
    if idx.const is not None:
        ic = idx.const.astype(np.int32)
        I = ctx.const(ic.reshape(ic.shape or (1,)))
    else:
        I = ctx.input(idx, idx.shape or (1,))
    T = topi.gather(ctx.input(data), I, node.attrs.get("axis", 0), scalar=not idx.shape)
    return T, node.out_shapes[0], (lambda i: ()) if not node.out_shapes[0] else None


_reg("Gather", "other", _gather_infer, fold=lambda n, a: [np.take(a[0], a[1], axis=n.attrs.get("axis", 0))],
     lower=_gather_lower, min_inputs=2)


def _slice_params(node, ins):
    shape = ins[0].shape
    nd = len(shape)
    if len(ins) > 1 and ins[1] is not None:
        starts = _ints_of(_const_in(node, ins, 1, "starts"))
        ends = _ints_of(_const_in(node, ins, 2, "ends"))
        axes = _ints_of(_const_in(node, ins, 3, "axes")) if len(ins) > 3 and ins[3] is not None else \
            list(range(len(starts)))
        steps = _ints_of(_const_in(node, ins, 4, "steps")) if len(ins) > 4 and ins[4] is not None else \
            [1] * len(starts)
    else:
        starts, ends = list(node.attrs.get("starts", [])), list(node.attrs.get("ends", []))
        axes = list(node.attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        fail(node, "starts, ends, axes and steps differ in length")
    st, sp, out = [0] * nd, [1] * nd, list(shape)
    for s, e, a, k in zip(starts, ends, axes, steps):
        if not -nd <= a < nd:
            fail(node, "axis %d is out of range for rank %d" % (a, nd))
        a %= nd
        if k == 0:
            fail(node, "a step of 0")
        sl = slice(s, e, k).indices(shape[a])
        st[a], sp[a] = sl[0], sl[2]
        out[a] = len(range(*sl))
    return st, sp, tuple(out)


def _slice_infer(node, ins):
    return [(ins[0].dtype, _slice_params(node, ins)[2])]


def _slice_fold(node, a):
    st, sp, out = _slice_params(node, node.in_vals)
    idx = tuple(slice(s, s + k * n, k) if k > 0 else slice(s, (s + k * n) if s + k * n >= 0 else None, k)
                for s, k, n in zip(st, sp, out))
    return [a[0][idx].copy()]


def _slice_lower(ctx, node, ins):
    st, sp, out = _slice_params(node, ins)
    T = topi.slice_nd(ctx.input(ins[0]), st, sp, out)
    return T, out, None


_reg("Slice", "other", _slice_infer, fold=_slice_fold, lower=_slice_lower)


def _resize_infer(node, ins):
    x = ins[0]
    _float_only(node, ins[:1])
    if len(x.shape) != 4:
        fail(node, "only 4-d (N x C x H x W) Resize is supported")
    scales = sizes = None
    if node.op == "Upsample":
        scales = _const_in(node, ins, 1, "scales") if len(ins) > 1 else np.array(node.attrs.get("scales", []))
    else:
        if len(ins) > 3 and ins[3] is not None:
            sizes = _ints_of(_const_in(node, ins, 3, "sizes"))
        if len(ins) > 2 and ins[2] is not None:
            scales = _const_in(node, ins, 2, "scales")
            if scales.size == 0:
                scales = None
    if sizes is not None and len(sizes) == 4:
        out = tuple(sizes)
    elif scales is not None and scales.size == 4:
        out = tuple(int(np.floor(d * s)) for d, s in zip(x.shape, scales.reshape(-1)))
        node.attrs["_scales"] = [float(s) for s in scales.reshape(-1)]
    else:
        fail(node, "needs constant scales or sizes for all 4 dimensions")
    if out[:2] != tuple(x.shape[:2]):
        fail(node, "resizing the batch or channel dimensions is not supported")
    mode = node.attrs.get("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("nearest", "linear", "bilinear"):
        fail(node, "mode %r is not supported (nearest, linear)" % mode)
    return [(x.dtype, out)]


def _dec(v, default):
    v = default if v is None else v
    return v.decode() if isinstance(v, bytes) else v


def _resize_lower(ctx, node, ins):
    out = node.out_shapes[0]
    mode = _dec(node.attrs.get("mode"), "nearest")
    mode = "linear" if mode == "bilinear" else mode
    default_coord = "asymmetric" if node.op == "Upsample" or ctx.opset < 11 else "half_pixel"
    coord = _dec(node.attrs.get("coordinate_transformation_mode"), default_coord)
    nmode = _dec(node.attrs.get("nearest_mode"), "round_prefer_floor")
    if node.op == "Upsample" or ctx.opset < 11:
        nmode = "floor"
    sc = node.attrs.get("_scales")
    T = topi.resize2d(ctx.input(ins[0]), out[2], out[3], mode, coord, nmode,
                      sc[2] if sc else None, sc[3] if sc else None)
    return T, out, None


_reg("Resize Upsample", "other", _resize_infer, lower=_resize_lower)


# Constant is handled by the importer (its value becomes a constant tensor).
SUPPORTED = sorted(set(OPS) | {"Constant"})
FIRST_MILESTONE = ("Conv Gemm MatMul Relu Clip Sigmoid HardSigmoid HardSwish LeakyRelu PRelu Add Sub Mul Div Sum "
                   "BatchNormalization MaxPool AveragePool GlobalAveragePool ReduceMean Flatten Reshape Transpose "
                   "Concat Pad Squeeze Unsqueeze Softmax DepthToSpace Identity Dropout").split()
