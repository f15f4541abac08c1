"""Index and value expressions of tensor-expression programs (TVM's PrimExpr family).

Expressions are immutable trees built with Python operators: ``A[i, j] * 2 + B[j]``,
``i // 4``, ``te.if_then_else(i < n, x, 0.0)``, ``x.astype("float16")``. Python
numbers are typed constants as in TVM: an int is int32 (int64 when it does not fit), a
float is float32, and the operands of a binary operation meet at their common type
(``match_types``: int op float is float, the wider of two floats or two integers).
"""

import numbers

import numpy as np

from ..errors import InvalidArgument

__all__ = ["PrimExpr", "IntImm", "FloatImm", "Var", "SizeVar", "BinaryOp", "Compare", "Logical", "Not",
           "Select", "Cast", "Call", "TensorLoad", "Reduce", "Range", "IterVar", "const", "convert",
           "DTYPES", "is_float", "is_int", "match_types"]

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64")
_RANK = {"bool": 0, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 3, "uint32": 3, "int64": 4,
         "uint64": 4, "float16": 5, "bfloat16": 5, "float32": 6, "float64": 7}


def is_float(dtype):
    return dtype.startswith("float") or dtype == "bfloat16"


def is_int(dtype):
    return dtype.startswith("int") or dtype.startswith("uint")


def check_dtype(dtype):
    if isinstance(dtype, np.dtype):
        dtype = dtype.name
    if dtype not in DTYPES:
        raise InvalidArgument("unknown dtype %r; te knows %s" % (dtype, ", ".join(DTYPES)))
    return dtype


_BITS = {"bool": 1, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64,
         "uint64": 64, "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}
_FLOAT16_MAX = 65504.0


def _common(da, db):
    """TVM's BinaryOpMatchTypes: the type both operands of ``da op db`` are cast to.
    Floats widen to the wider float; an integer meets a float as that float; integers of
    one signedness widen; mixed signedness takes the wider, the unsigned one at equal width
    (bool is TVM's uint1)."""
    if da == db:
        return da
    fa, fb = is_float(da), is_float(db)
    if fa and fb:
        return db if _BITS[da] < _BITS[db] else da
    if fa != fb:
        return da if fa else db
    ua, ub = da == "bool" or da.startswith("uint"), db == "bool" or db.startswith("uint")
    if _BITS[da] != _BITS[db]:
        return db if _BITS[da] < _BITS[db] else da
    return da if ua else db


def _promote(a, b):
    return _common(a.dtype, b.dtype)


def _cast_to(x, dtype):
    """``x`` as ``dtype``: a constant is folded into a constant of that type (as TVM's
    ``cast`` does), anything else gets a Cast."""
    if x.dtype == dtype:
        return x
    if isinstance(x, (IntImm, FloatImm)):
        if is_float(dtype):
            if dtype == "float16" and np.isfinite(float(x.value)) and abs(float(x.value)) > _FLOAT16_MAX:
                raise InvalidArgument("the constant %r does not fit float16 (largest %g)" % (x.value, _FLOAT16_MAX))
            return FloatImm(float(x.value), dtype)
        if isinstance(x, IntImm):
            if x.value < 0 and (dtype == "bool" or dtype.startswith("uint")):
                raise InvalidArgument("the constant %d cannot be %s" % (x.value, dtype))
            # a Python int keeps its implicit mark: the payload writes it as a plain number
            return IntImm(x.value, dtype, implicit=x.implicit and dtype != "bool")
    return Cast(dtype, x)


def match_types(a, b):
    """Both operands of a binary operation, converted to their common type (TVM's rules:
    a Python int is an int32 constant (int64 when it does not fit), a Python float a
    float32 constant; ``i * 0.5`` is ``float32(i) * 0.5f``, ``A_int8[i] + 1`` is int32)."""
    dt = _common(a.dtype, b.dtype)
    return _cast_to(a, dt), _cast_to(b, dt)


def convert(v, dtype=None):
    """A Python number (or expression) as an expression."""
    if isinstance(v, EqualOp):
        return v.asobject()
    if isinstance(v, IterVar):
        return v.var
    if isinstance(v, PrimExpr):
        return v
    if isinstance(v, (bool, np.bool_)):
        return IntImm(int(v), "bool", implicit=dtype is None)
    if isinstance(v, numbers.Integral):
        v = int(v)
        if dtype is not None and is_float(dtype):
            return FloatImm(float(v), dtype)
        if dtype is None:
            return IntImm(v, "int32" if -2**31 <= v < 2**31 else "int64", implicit=True)
        return IntImm(v, dtype)
    if isinstance(v, numbers.Real):
        if dtype is None:
            return FloatImm(float(v), "float32", implicit=True)
        return FloatImm(float(v), dtype) if is_float(dtype) else IntImm(int(v), dtype)
    raise InvalidArgument("cannot use %r (%s) in a tensor expression" % (v, type(v).__name__))


def const(value, dtype=None):
    """TVM's ``tvm.tir.const``: a constant of an explicit type (int32 / float32 by default)."""
    if dtype is None:
        dtype = "float32" if isinstance(value, float) else "int32"
    dtype = check_dtype(dtype)
    if is_float(dtype):
        return FloatImm(float(value), dtype)
    return IntImm(int(value), dtype)


def _binary(op, a, b):
    a, b = match_types(convert(_unwrap(a)), convert(_unwrap(b)))
    dt = a.dtype
    if op in ("floordiv", "floormod", "truncdiv", "truncmod") and not is_int(dt):
        if op == "floordiv":
            return Call("floor", [BinaryOp("div", a, b, dt)], dt)
        raise InvalidArgument("%s needs integer operands, not %s" % (op, dt))
    if op in ("<", "<=", ">", ">=", "==", "!="):
        return Compare(op, a, b)
    return BinaryOp(op, a, b, dt)


class PrimExpr:
    """An expression with a ``dtype``."""

    __slots__ = ("dtype",)
    __array_priority__ = 100  # numpy scalars defer to our operators

    def __add__(self, o): return _binary("add", self, o)
    def __radd__(self, o): return _binary("add", o, self)
    def __sub__(self, o): return _binary("sub", self, o)
    def __rsub__(self, o): return _binary("sub", o, self)
    def __mul__(self, o): return _binary("mul", self, o)
    def __rmul__(self, o): return _binary("mul", o, self)

    def __truediv__(self, o):
        a, b = convert(self), convert(o)
        if is_int(a.dtype) and is_int(b.dtype):
            return _binary("truncdiv", a, b)
        return _binary("div", a, b)

    def __rtruediv__(self, o):
        return PrimExpr.__truediv__(convert(o), self)

    def __floordiv__(self, o): return _binary("floordiv", self, o)
    def __rfloordiv__(self, o): return _binary("floordiv", o, self)
    def __mod__(self, o): return _binary("floormod", self, o)
    def __rmod__(self, o): return _binary("floormod", o, self)
    def __neg__(self): return _binary("sub", convert(0, self.dtype), self)
    def __lt__(self, o): return _binary("<", self, o)
    def __le__(self, o): return _binary("<=", self, o)
    def __gt__(self, o): return _binary(">", self, o)
    def __ge__(self, o): return _binary(">=", self, o)

    def __eq__(self, o):
        return EqualOp(self, o, "==")

    def __ne__(self, o):
        return EqualOp(self, o, "!=")

    def __hash__(self):
        return id(self)

    def __and__(self, o): return Logical("and", self, o)
    def __rand__(self, o): return Logical("and", o, self)
    def __or__(self, o): return Logical("or", self, o)
    def __ror__(self, o): return Logical("or", o, self)
    def __invert__(self): return Not(self)

    def __bool__(self):
        raise InvalidArgument("a tensor expression has no truth value; use te.all/te.any or & | ~")

    def equal(self, o):
        return _binary("==", self, o)

    def astype(self, dtype):
        dtype = check_dtype(dtype)
        return self if dtype == self.dtype else Cast(dtype, self)

    def __repr__(self):
        from .printer import expr_str
        return expr_str(self)


class EqualOp:
    """``a == b`` between expressions: an expression where one is needed, and identity
    when Python asks for a truth value (so Vars work as dict keys, as in TVM)."""

    __slots__ = ("a", "b", "op")

    def __init__(self, a, b, op):
        self.a, self.b, self.op = a, b, op

    def __bool__(self):
        base = lambda x: x.var if isinstance(x, IterVar) else x
        same = base(self.a) is base(self.b)
        return same if self.op == "==" else not same

    def asobject(self):
        return _binary(self.op, self.a, self.b)


class IntImm(PrimExpr):
    __slots__ = ("value", "implicit")

    def __init__(self, value, dtype="int32", implicit=False):
        self.value = int(value)
        self.dtype = dtype
        self.implicit = implicit

    def __int__(self):
        return self.value

    __index__ = __int__


class FloatImm(PrimExpr):
    __slots__ = ("value", "implicit")

    def __init__(self, value, dtype="float32", implicit=False):
        self.value = float(value)
        self.dtype = dtype
        self.implicit = implicit

    def __float__(self):
        return self.value


class Var(PrimExpr):
    """A scalar variable: a symbolic size (``te.var("n")``) or a loop index."""

    __slots__ = ("name",)

    def __init__(self, name="v", dtype="int32"):
        self.name = str(name)
        self.dtype = check_dtype(dtype)


class SizeVar(Var):
    """A Var known to be non-negative (TVM's ``te.size_var``)."""
    __slots__ = ()


class BinaryOp(PrimExpr):
    """``op`` is add sub mul div truncdiv truncmod floordiv floormod min max."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op, a, b, dtype):
        self.op, self.a, self.b, self.dtype = op, a, b, dtype


class Compare(PrimExpr):
    __slots__ = ("op", "a", "b")

    def __init__(self, op, a, b):
        self.op, self.a, self.b, self.dtype = op, a, b, "bool"


def _as_bool(x):
    x = _unwrap(x)
    x = convert(x)
    if x.dtype != "bool":
        x = Compare("!=", x, convert(0, x.dtype))
    return x


def _unwrap(x):
    return x.asobject() if isinstance(x, EqualOp) else x


class Logical(PrimExpr):
    __slots__ = ("op", "a", "b")

    def __init__(self, op, a, b):
        self.op, self.a, self.b, self.dtype = op, _as_bool(a), _as_bool(b), "bool"


class Not(PrimExpr):
    __slots__ = ("a",)

    def __init__(self, a):
        self.a, self.dtype = _as_bool(a), "bool"


class Select(PrimExpr):
    """``te.if_then_else(cond, t, f)``. The payload's select evaluates both sides, so the
    encoder clamps the indices of loads inside either side into their tensor. ``lazy``
    (topi's padding) encodes the payload's if_then_else instead: only the chosen side is
    evaluated, the loads are not clamped, and a vectorised loop over them reads contiguous
    lanes under a mask instead of lane by lane."""

    __slots__ = ("cond", "t", "f", "lazy")

    def __init__(self, cond, t, f, lazy=False):
        self.lazy = lazy
        t, f = _unwrap(t), _unwrap(f)
        t, f = convert(t), convert(f)
        self.cond = _as_bool(cond)
        self.t, self.f = match_types(t, f)
        self.dtype = self.t.dtype


class Cast(PrimExpr):
    __slots__ = ("value",)

    def __init__(self, dtype, value):
        self.dtype = check_dtype(dtype)
        self.value = convert(_unwrap(value))


class Call(PrimExpr):
    """A math intrinsic: exp log sqrt tanh sigmoid ... (``te.exp(x)``)."""

    __slots__ = ("name", "args")

    def __init__(self, name, args, dtype):
        self.name, self.args, self.dtype = name, [convert(_unwrap(a)) for a in args], dtype


class TensorLoad(PrimExpr):
    """``A[i, j]``: an element of a tensor."""

    __slots__ = ("tensor", "indices")

    def __init__(self, tensor, indices):
        self.tensor = tensor
        self.indices = indices
        self.dtype = tensor.dtype


class Reduce(PrimExpr):
    """``te.sum(expr, axis=k)``: ``combiner`` is sum, prod, max or min; ``axis`` a list of
    reduce IterVars; ``where`` an optional predicate; ``init`` the identity."""

    __slots__ = ("combiner", "source", "axis", "where", "init")

    def __init__(self, combiner, source, axis, where=None, init=None):
        self.combiner = combiner
        self.source = convert(_unwrap(source))
        self.axis = list(axis)
        for a in self.axis:
            if not isinstance(a, IterVar) or a.iter_type != IterVar.REDUCE:
                raise InvalidArgument("te.%s: axis must be te.reduce_axis IterVars, not %r" % (combiner, a))
        self.where = None if where is None else _as_bool(where)
        self.dtype = self.source.dtype
        self.init = None if init is None else convert(init, self.dtype)


class Range:
    """``[min, min + extent)``."""

    __slots__ = ("min", "extent")

    def __init__(self, begin, end=None):
        if end is None:
            begin, end = 0, begin
        self.min = convert(begin)
        self.extent = simplify(convert(end) - self.min) if not isinstance(begin, int) or begin else convert(end)

    @staticmethod
    def from_min_extent(m, e):
        r = Range.__new__(Range)
        r.min, r.extent = convert(m), convert(e)
        return r

    def __repr__(self):
        return "range(min=%r, ext=%r)" % (self.min, self.extent)


class IterVar:
    """A loop: ``var`` (its index Var), ``dom`` (Range, or None for a split result, whose
    extent the lowering derives), ``iter_type``, and ``thread_tag`` for thread axes.
    Usable in expressions as its var."""

    DATA_PAR, REDUCE, THREAD, ORDERED = "data_par", "reduce", "thread", "ordered"
    THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
                   "vthread", "cthread")

    def __init__(self, dom, var, iter_type, thread_tag=""):
        self.dom = dom
        self.var = var if isinstance(var, Var) else Var(var)
        self.iter_type = iter_type
        self.thread_tag = thread_tag

    def __getattr__(self, name):
        # Arithmetic on an IterVar is arithmetic on its var.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.var, name)

    def __repr__(self):
        return "IterVar(%s, %r%s)" % (self.var.name, self.dom, ", " + self.thread_tag if self.thread_tag else "")


def _iv_forward(op):
    def f(self, *a):
        return getattr(self.var, op)(*a)
    f.__name__ = op
    return f


def _iv_eq(self, o):
    return EqualOp(self.var, o, "==")


def _iv_ne(self, o):
    return EqualOp(self.var, o, "!=")


# ``k == 0`` on a reduce axis is an expression (as on its var); in a truth test it is
# identity, so IterVars still work in lists and as dict keys.
IterVar.__eq__ = _iv_eq
IterVar.__ne__ = _iv_ne
IterVar.__hash__ = object.__hash__

for _op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
            "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__neg__", "__lt__", "__le__", "__gt__",
            "__ge__", "__and__", "__or__", "astype", "equal"):
    setattr(IterVar, _op, _iv_forward(_op))


def as_expr(x):
    """Var for IterVar, expressions as they are, numbers as constants."""
    if isinstance(x, IterVar):
        return x.var
    x = _unwrap(x)
    return convert(x)


def simplify(e):
    """Folds constant integer arithmetic (enough to keep shapes like ``n - 0`` plain)."""
    if isinstance(e, BinaryOp):
        a, b = simplify(e.a), simplify(e.b)
        if isinstance(a, IntImm) and isinstance(b, IntImm):
            x, y = a.value, b.value
            r = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
                 "floordiv": lambda: x // y if y else None, "floormod": lambda: x % y if y else None,
                 "truncdiv": lambda: int(x / y) if y else None, "min": lambda: min(x, y),
                 "max": lambda: max(x, y)}.get(e.op, lambda: None)()
            if r is not None:
                return IntImm(r, e.dtype, a.implicit and b.implicit)
        if e.op in ("add", "sub") and isinstance(b, IntImm) and b.value == 0:
            return a
        if e.op == "add" and isinstance(a, IntImm) and a.value == 0:
            return b
        if e.op == "mul" and isinstance(b, IntImm) and b.value == 1:
            return a
        if e.op == "mul" and isinstance(a, IntImm) and a.value == 1:
            return b
        if a is e.a and b is e.b:
            return e
        return BinaryOp(e.op, a, b, e.dtype)
    return e
