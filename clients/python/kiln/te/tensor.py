"""Tensors and the operations that produce them: placeholders and computes (TVM's te)."""

import itertools

from ..errors import InvalidArgument
from .expr import (PrimExpr, IntImm, FloatImm, Var, SizeVar, Call, TensorLoad, Reduce, Range, IterVar, Select,
                   Logical, BinaryOp, convert, as_expr, check_dtype, is_float, _unwrap, match_types)

__all__ = ["Tensor", "Operation", "PlaceholderOp", "ComputeOp", "var", "size_var", "placeholder", "compute",
           "reduce_axis", "thread_axis", "sum", "max", "min", "prod", "comm_reducer", "if_then_else", "all",
           "any", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "floor", "ceil", "round",
           "power", "pow", "sin", "cos", "log2", "exp2", "fmod", "max_value", "min_value", "const", "floordiv",
           "floormod", "truncdiv", "truncmod", "indexdiv", "indexmod"]

_names = itertools.count()


class Operation:
    """What produces a tensor; ``output(0)`` is that tensor."""

    def __init__(self, name):
        self.name = name
        self._outputs = []

    def output(self, i):
        return self._outputs[i]

    @property
    def num_outputs(self):
        return len(self._outputs)

    @property
    def input_tensors(self):
        return []


class PlaceholderOp(Operation):
    def __init__(self, name, shape, dtype):
        super().__init__(name)
        self.shape = shape
        self.dtype = dtype


class ComputeOp(Operation):
    """``axis``: one data-parallel IterVar per output dimension; ``reduce_axis``: the
    reduction's IterVars; ``body``: the element expression (a Reduce for reductions)."""

    def __init__(self, name, tag, attrs, axis, body, shape, dtype):
        super().__init__(name)
        self.tag = tag
        self.attrs = attrs
        self.axis = axis
        self.body = body
        self.orig_body = body
        self.reduce_axis = list(body.axis) if isinstance(body, Reduce) else []
        self.shape = shape
        self.dtype = dtype

    @property
    def input_tensors(self):
        seen, out = set(), []
        for t in tensors_read(self.body):
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out


def tensors_read(e):
    """The tensors an expression loads from, left to right (may repeat)."""
    if isinstance(e, TensorLoad):
        yield e.tensor
        for i in e.indices:
            yield from tensors_read(i)
    elif isinstance(e, Reduce):
        yield from tensors_read(e.source)
        if e.where is not None:
            yield from tensors_read(e.where)
    elif isinstance(e, Call):
        for a in e.args:
            yield from tensors_read(a)
    elif isinstance(e, PrimExpr):
        for slot in ("cond", "a", "b", "t", "f", "value"):
            c = getattr(e, slot, None)
            if isinstance(c, PrimExpr):
                yield from tensors_read(c)


class Tensor:
    """A tensor: ``shape`` (tuple of expressions), ``dtype``, ``name``, ``op``. ``T[i, j]``
    is an element in an expression."""

    def __init__(self, op, shape, dtype, value_index=0):
        self.op = op
        self.shape = tuple(shape)
        self.dtype = dtype
        self.value_index = value_index

    @property
    def name(self):
        return self.op.name

    @property
    def ndim(self):
        return len(self.shape)

    def __getitem__(self, idx):
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != len(self.shape):
            raise InvalidArgument("%s has %d dimensions; indexed with %d" % (self.name, len(self.shape), len(idx)))
        ix = []
        for i in idx:
            i = as_expr(i)
            if is_float(i.dtype):
                raise InvalidArgument("index of %s is %s; indices are integers" % (self.name, i.dtype))
            ix.append(i)
        return TensorLoad(self, ix)

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __repr__(self):
        return "Tensor(%s, shape=%r, %s)" % (self.name, self.shape, self.dtype)


def _dim(d):
    # TVM's tutorials write shapes as N / bn with Python ints: an integral float is that int
    if isinstance(d, float) and d.is_integer():
        return int(d)
    return d


def _shape(shape, what):
    if isinstance(shape, (int, float, PrimExpr, IterVar)):
        shape = (shape,)
    try:
        out = tuple(as_expr(_dim(d)) for d in shape)
    except TypeError:
        raise InvalidArgument("%s: a shape is a tuple of ints or te.var, not %r" % (what, shape)) from None
    for d in out:
        if is_float(d.dtype):
            raise InvalidArgument("%s: shape %r has a float dimension" % (what, shape))
        if isinstance(d, IntImm) and d.value < 0:
            raise InvalidArgument("%s: shape %r has a negative dimension" % (what, shape))
    return out


def var(name="tindex", dtype="int32"):
    """A scalar variable (a symbolic size, or a scalar argument of the kernel)."""
    return Var(name, dtype)


def size_var(name="size", dtype="int32"):
    return SizeVar(name, dtype)


def placeholder(shape, dtype="float32", name="placeholder"):
    dtype = check_dtype(dtype)
    op = PlaceholderOp(name, _shape(shape, "te.placeholder"), dtype)
    t = Tensor(op, op.shape, dtype)
    op._outputs.append(t)
    return t


def compute(shape, fcompute, name="compute", tag="", attrs=None):
    """``te.compute(shape, lambda i, j: ...)``: one IterVar per dimension (named after the
    lambda's parameters), the body is whatever fcompute returns."""
    shape = _shape(shape, "te.compute")
    code = fcompute.__code__
    argnames = list(code.co_varnames[:code.co_argcount])
    if code.co_flags & 0x04:  # *args: one index per dimension
        argnames = ["i%d" % k for k in range(len(shape))]
    if len(argnames) != len(shape):
        raise InvalidArgument("te.compute %s: the shape has %d dimensions but fcompute takes %d indices"
                              % (name, len(shape), len(argnames)))
    axis = [IterVar(Range.from_min_extent(0, d), Var(n), IterVar.DATA_PAR) for n, d in zip(argnames, shape)]
    body = fcompute(*[a.var for a in axis])
    if isinstance(body, (list, tuple)):
        if len(body) != 1:
            raise InvalidArgument("te.compute %s: several outputs per compute are not supported" % name)
        body = body[0]
    body = convert(_unwrap(body))
    if isinstance(body, Reduce):
        for r in body.axis:
            if r.dom is None:
                raise InvalidArgument("reduce axis %s has no range" % r.var.name)
    _no_nested_reduce(body, name)
    op = ComputeOp(name, tag, dict(attrs or {}), axis, body, shape, body.dtype)
    t = Tensor(op, shape, body.dtype)
    op._outputs.append(t)
    return t


def _no_nested_reduce(body, name):
    inner = body.source if isinstance(body, Reduce) else body
    stack = [inner]
    while stack:
        x = stack.pop()
        if isinstance(x, Reduce):
            raise InvalidArgument("te.compute %s: a reduction must be the whole body (te.sum(...)), "
                                  "not part of an expression; compute it as its own tensor" % name)
        for slot in ("a", "b", "cond", "t", "f"):
            c = getattr(x, slot, None)
            if isinstance(c, PrimExpr):
                stack.append(c)
        if isinstance(x, (Call, TensorLoad)):
            stack.extend(x.args if isinstance(x, Call) else x.indices)
        if isinstance(x, BinaryOp) is False and hasattr(x, "value") and isinstance(x.value, PrimExpr):
            stack.append(x.value)


def reduce_axis(dom, name="rv"):
    """``te.reduce_axis((0, n), name="k")``."""
    if isinstance(dom, Range):
        r = dom
    else:
        try:
            lo, hi = dom
        except (TypeError, ValueError):
            raise InvalidArgument("te.reduce_axis takes (begin, end), not %r" % (dom,)) from None
        r = Range.from_min_extent(lo, as_expr(hi) - as_expr(lo) if not (isinstance(lo, int) and lo == 0)
                                  else as_expr(hi))
        from .expr import simplify
        r.extent = simplify(r.extent)
    return IterVar(r, Var(name), IterVar.REDUCE)


def thread_axis(dom=None, tag="", name=""):
    """``te.thread_axis("blockIdx.x")`` (TVM also accepts ``(dom, tag)``)."""
    if isinstance(dom, str):
        tag, dom = dom, None
    if tag not in IterVar.THREAD_TAGS:
        raise InvalidArgument("unknown thread tag %r; use one of %s" % (tag, ", ".join(IterVar.THREAD_TAGS)))
    if dom is not None and not isinstance(dom, Range):
        dom = Range(*dom) if isinstance(dom, (tuple, list)) else Range(dom)
    return IterVar(dom, Var(name or tag), IterVar.THREAD, tag)


def _reducer(combiner):
    def f(expr, axis, where=None, init=None):
        if isinstance(axis, IterVar):
            axis = [axis]
        return Reduce(combiner, as_expr(expr), axis, where, init)
    f.__name__ = combiner
    f.__doc__ = "te.%s(expr, axis=k or [k1, k2], where=None)" % combiner
    return f


sum = _reducer("sum")
prod = _reducer("prod")


def _max_or_reduce(combiner, binop):
    red = _reducer(combiner)

    def f(*args, axis=None, where=None, init=None):
        if axis is not None or (len(args) == 2 and (isinstance(args[1], IterVar) or
                                                     (isinstance(args[1], (list, tuple)) and args[1]
                                                      and isinstance(args[1][0], IterVar)))):
            if axis is None:
                args, axis = args[:1], args[1]
            return red(args[0], axis, where, init)
        if len(args) != 2:
            raise InvalidArgument("te.%s takes (expr, axis=...) or two expressions" % combiner)
        from .expr import _binary
        return _binary(binop, args[0], args[1])
    f.__name__ = combiner
    f.__doc__ = ("te.%s(expr, axis=k): a reduction; te.%s(a, b): the elementwise %s"
                 % (combiner, combiner, combiner))
    return f


max = _max_or_reduce("max", "max")
min = _max_or_reduce("min", "min")


def comm_reducer(fcombine, fidentity, name="reduce"):
    """TVM's commutative reducer from a combiner and an identity. kiln recognises the
    reducers it lowers by tracing them: ``x + y`` with identity 0 is sum, ``x * y`` with 1
    prod, ``te.max(x, y)`` with the lowest value max, ``te.min`` with the highest min (any
    name); other combiners are refused."""
    known = {"add": (sum, 0), "mul": (prod, 1), "max": (max, "lowest"), "min": (min, "highest")}
    x, y = Var("x", "float32"), Var("y", "float32")
    try:
        e = _unwrap(fcombine(x, y))
    except Exception as err:  # noqa: BLE001 (the user's lambda may raise anything)
        raise InvalidArgument("te.comm_reducer %s: its combiner fails on two expressions: %s" % (name, err)) from None
    op = e.op if isinstance(e, BinaryOp) and {id(e.a), id(e.b)} == {id(x), id(y)} else None
    if op not in known:
        raise InvalidArgument("te.comm_reducer %s: kiln lowers combiners x + y, x * y, max(x, y) and min(x, y) "
                              "only" % name)
    red, ident = known[op]

    def f(expr, axis, where=None, init=None):
        expr = as_expr(expr)
        want = {"lowest": min_value, "highest": max_value}[ident](expr.dtype).value if isinstance(ident, str) \
            else ident
        got = _unwrap(fidentity(expr.dtype))
        got = got.value if isinstance(got, (IntImm, FloatImm)) else got
        if got != want:
            raise InvalidArgument("te.comm_reducer %s: identity %r for %s; kiln's %s reduction starts at %r"
                                  % (name, got, expr.dtype, red.__name__, want))
        return red(expr, axis=axis, where=where, init=init)
    f.__name__ = name
    return f


def if_then_else(cond, t, f):
    return Select(as_expr(cond), as_expr(t), as_expr(f))


def all(*conds):
    out = None
    for c in conds:
        out = as_expr(c) if out is None else Logical("and", out, as_expr(c))
    return out if out is not None else IntImm(1, "bool")


def any(*conds):
    out = None
    for c in conds:
        out = as_expr(c) if out is None else Logical("or", out, as_expr(c))
    return out if out is not None else IntImm(0, "bool")


def _math(name, nargs=1):
    def f(*args):
        if len(args) != nargs:
            raise InvalidArgument("te.%s takes %d argument%s" % (name, nargs, "s" if nargs > 1 else ""))
        xs = [as_expr(a) for a in args]
        if nargs == 2:
            xs = list(match_types(*xs))   # TVM's pow and fmod meet at the common type
        dt = xs[0].dtype
        if not is_float(dt):
            if name in ("abs",):
                return Call(name, xs, dt)
            raise InvalidArgument("te.%s needs a float operand, not %s (cast with .astype)" % (name, dt))
        return Call(name, xs, dt)
    f.__name__ = name
    return f


exp = _math("exp")
exp2 = _math("exp2")
log = _math("log")
log2 = _math("log2")
sqrt = _math("sqrt")
rsqrt = _math("rsqrt")
tanh = _math("tanh")
sigmoid = _math("sigmoid")
erf = _math("erf")
abs = _math("abs")
floor = _math("floor")
ceil = _math("ceil")
round = _math("round")
sin = _math("sin")
cos = _math("cos")
power = _math("pow", 2)
pow = power
fmod = _math("fmod", 2)


def max_value(dtype):
    import numpy as np
    dtype = check_dtype(dtype)
    if is_float(dtype):
        return FloatImm(3.3895313892515355e38 if dtype == "bfloat16" else float(np.finfo(dtype).max), dtype)
    return IntImm(int(np.iinfo(dtype).max) if dtype != "bool" else 1, dtype)


def min_value(dtype):
    import numpy as np
    dtype = check_dtype(dtype)
    if is_float(dtype):
        return FloatImm(-3.3895313892515355e38 if dtype == "bfloat16" else float(np.finfo(dtype).min), dtype)
    return IntImm(int(np.iinfo(dtype).min) if dtype != "bool" else 0, dtype)


def const(value, dtype=None):
    from .expr import const as c
    return c(value, dtype)


def _intop(op):
    def f(a, b):
        from .expr import _binary
        return _binary(op, as_expr(a), as_expr(b))
    f.__name__ = op
    return f


floordiv = indexdiv = _intop("floordiv")
floormod = indexmod = _intop("floormod")
truncdiv = _intop("truncdiv")
truncmod = _intop("truncmod")
