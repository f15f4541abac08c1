"""kiln.te: tensor expressions with TVM's spelling, compiled by kilnd (docs/te.md, docs/te_python.md).

    from kiln import te
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    f = kiln.build(s, [A, B, C], "rocm", name="myadd")
"""

from .expr import (PrimExpr, IntImm, FloatImm, Var, SizeVar, Range, IterVar, Reduce, Select, Cast, Call,
                   TensorLoad, const)
from .tensor import (Tensor, Operation, PlaceholderOp, ComputeOp, var, size_var, placeholder, compute,
                     reduce_axis, thread_axis, sum, max, min, prod, comm_reducer, if_then_else, all, any, exp,
                     exp2, log, log2, sqrt, rsqrt, tanh, sigmoid, erf, abs, floor, ceil, round, power, pow, sin,
                     cos, fmod, max_value, min_value, floordiv, floormod, truncdiv, truncmod, indexdiv, indexmod)
from .schedule import Schedule, Stage, create_schedule
from .payload import lower, Program
from .build import build, build_batch, TeModule

__all__ = ["PrimExpr", "IntImm", "FloatImm", "Var", "SizeVar", "Range", "IterVar", "Reduce", "Select", "Cast",
           "Call", "TensorLoad", "const", "Tensor", "Operation", "PlaceholderOp", "ComputeOp", "var", "size_var",
           "placeholder", "compute", "reduce_axis", "thread_axis", "sum", "max", "min", "prod", "comm_reducer",
           "if_then_else", "all", "any", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
           "abs", "floor", "ceil", "round", "power", "pow", "sin", "cos", "fmod", "max_value", "min_value",
           "floordiv", "floormod", "truncdiv", "truncmod", "indexdiv", "indexmod", "Schedule", "Stage",
           "create_schedule", "lower", "Program", "build", "build_batch", "TeModule"]
