"""kiln.te types mixed expressions as TVM does (issue 16, item 2).

data/te_promotion_tvm.json is what apache-tvm 0.27 built for each spelling (written once
by te_promotion_gen.py from TVM itself); kiln.te must build the same tree: the same node
kinds, dtypes, casts and constant values, and refuse what TVM refuses. Then the kernels
that used to be wrong run: ``A[i] + i * 0.5`` is float, ``A[i * 0.5]`` is refused.
"""

import json
import os

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.te import expr as X

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "data", "te_promotion_tvm.json")) as _f:
    TABLE = json.load(_f)

_CMP = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


def canon(e):
    """kiln's tree in te_promotion_gen.canon_tvm's form."""
    if isinstance(e, X.EqualOp):
        e = e.asobject()
    if isinstance(e, X.IntImm):
        return ["imm", e.dtype, bool(e.value) if e.dtype == "bool" else e.value]
    if isinstance(e, X.FloatImm):
        return ["imm", e.dtype, e.value]
    if isinstance(e, X.Var):
        return ["var", e.dtype, e.name]
    if isinstance(e, X.Cast):
        return ["cast", e.dtype, canon(e.value)]
    if isinstance(e, X.TensorLoad):
        return ["load", e.dtype, e.tensor.name]
    if isinstance(e, X.Select):
        return ["select", e.dtype, canon(e.cond), canon(e.t), canon(e.f)]
    if isinstance(e, X.Call):
        return ["call:" + e.name, e.dtype] + [canon(a) for a in e.args]
    if isinstance(e, X.Compare):
        return [_CMP[e.op], e.dtype, canon(e.a), canon(e.b)]
    if isinstance(e, X.BinaryOp):
        return [e.op, e.dtype, canon(e.a), canon(e.b)]
    raise TypeError(type(e).__name__)


def _env():
    env = {"te": te, "i": te.var("i"), "j": te.var("j", "int64")}
    for n, dt, kind in TABLE["operands"]:
        if kind == "load":
            env[n] = te.placeholder((8,), dt, name=n)
    return env


@pytest.mark.parametrize("row", TABLE["table"], ids=[r["expr"] for r in TABLE["table"]])
def test_types_match_tvm(row):
    env = _env()
    if "error" in row:
        with pytest.raises(kiln.InvalidArgument):
            eval(row["expr"], env)  # noqa: S307 (the table's own spellings)
        return
    assert canon(eval(row["expr"], env)) == row["tvm"]  # noqa: S307


def test_table_is_the_generators():
    # The table holds one row for each expression the generator spells, in its order, and the
    # operands it declares: a generator changed without running it again against TVM, or a
    # row added, dropped or moved by hand, fails here.
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "te_promotion_gen", os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_promotion_gen.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)  # spellings() needs no TVM; only its main() imports it
    assert [r["expr"] for r in TABLE["table"]] == list(gen.spellings())
    assert [tuple(o) for o in TABLE["operands"]] == [tuple(o) for o in gen.OPERANDS]
    assert sum("error" in r for r in TABLE["table"]) >= 4  # TVM refuses some: they are kept


def test_float_index_is_refused():
    A = te.placeholder((8,), name="A")
    i = te.var("i")
    for bad in (lambda: A[i * 0.5], lambda: A[i + 0.0], lambda: A[A[i]]):
        with pytest.raises(kiln.InvalidArgument, match="indices are integers"):
            bad()
    with pytest.raises(kiln.InvalidArgument, match="indices are integers"):
        te.compute((8,), lambda k: A[k * 0.5])


def test_float_constants_are_not_truncated(s):
    # the kernel: i * 0.5 used to become int32 zero and the result A[i]
    A = te.placeholder((8,), name="A")
    C = te.compute((8,), lambda i: A[i] + i * 0.5, name="C")
    D = te.compute((8,), lambda i: C[i] * 2 + (i + 1) * 0.25, name="D")
    sch = te.create_schedule(D.op)
    f = kiln.build(sch, [A, D], "llvm", name="promo", session=s)
    dev = s.device("cpu:0")
    a = np.arange(8, dtype=np.float32)
    ka, kd = kiln.nd.array(a, dev), kiln.nd.empty((8,), "float32", dev)
    f(ka, kd)
    i = np.arange(8, dtype=np.float32)
    np.testing.assert_allclose(kd.numpy(), (a + i * 0.5) * 2 + (i + 1) * 0.25)


def test_int8_with_python_int_is_int32(s):
    # TVM: a Python int is an int32 constant, so int8 + 1 is int32 (no int8 wrap-around)
    A = te.placeholder((4,), "int8", name="A")
    C = te.compute((4,), lambda i: A[i] + 100, name="C")
    assert C.dtype == "int32"
    sch = te.create_schedule(C.op)
    f = kiln.build(sch, [A, C], "llvm", name="promo8", session=s)
    dev = s.device("cpu:0")
    a = np.array([100, -100, 27, 127], dtype=np.int8)
    kc = kiln.nd.empty((4,), "int32", dev)
    f(kiln.nd.array(a, dev), kc)
    np.testing.assert_array_equal(kc.numpy(), a.astype(np.int32) + 100)
