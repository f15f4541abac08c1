#!/usr/bin/python3
"""Writes the seed corpus of fuzz_te.c to corpus/te/: te programs (docs/te.md) covering every
expression node, reductions, the schedule primitives and a few malformed programs. Needs the
msgpack module (python3-msgpack)."""
import os

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))


def V(n):
    return ["var", n]


def L(t, *idx):
    return ["load", t, list(idx)]


def ph(name, *shape, dtype="float32"):
    return {"name": name, "op": "placeholder", "dtype": dtype, "shape": list(shape)}


def comp(name, shape, axes, body, dtype="float32", red=None):
    m = {"name": name, "op": "compute", "dtype": dtype, "shape": shape, "axes": axes, "body": body}
    if red:
        m["reduce_axes"] = red
    return m


def prog(tensors, schedule, kernels, nvars=("n", "m")):
    return {"te": 1, "vars": [{"name": v} for v in nvars], "tensors": tensors, "schedule": schedule,
            "kernels": kernels}


ew = comp("C", [V("n")], ["i"], ["add", L("A", V("i")), ["mul", L("B", V("i")), 2.0]])
vadd = prog([ph("A", V("n")), ph("B", V("n")), ew],
            [{"op": "split", "stage": "C", "var": "i", "factor": 64, "outer": "bx", "inner": "tx"},
             {"op": "bind", "stage": "C", "var": "bx", "thread": "blockIdx.x"},
             {"op": "bind", "stage": "C", "var": "tx", "thread": "threadIdx.x"}],
            [{"name": "vadd", "args": ["A", "B", "C"]}], ("n",))
exprs = comp("E", [V("n"), V("m")], ["i", "j"],
             ["select", ["and", ["lt", V("i"), ["floordiv", V("m"), 3]], ["not", ["eq", ["floormod", V("j"), 2], 1]]],
              ["call", "exp", [["cast", "float32", ["bitxor", ["shl", V("i"), 1], ["shr", V("j"), 1]]]]],
              ["call", "pow", [["neg", L("A", V("i"), V("j"))], ["const", "float32", 0.5]]]])
red = comp("M", [V("n")], ["i"], ["reduce", "max", L("A", V("i"), V("k")), ["k"], ["gt", V("k"), 0]],
           red=[{"name": "k", "min": 0, "extent": V("m")}])
rows = prog([ph("A", V("n"), V("m")), red, exprs],
            [{"op": "split", "stage": "M", "var": "k", "factor": 8},
             {"op": "parallel", "stage": "M", "var": "i"},
             {"op": "unroll", "stage": "M", "var": "k.inner"},
             {"op": "fuse", "stage": "E", "vars": ["i", "j"], "fused": "f"},
             {"op": "split", "stage": "E", "var": "f", "nparts": 4},
             {"op": "vectorize", "stage": "E", "var": "f.inner"}],
            [{"name": "rowmax", "args": ["A", "M"]}, {"name": "e", "args": ["A", "E"], "compute": "E"}])
gemm_t = [ph("A", V("n"), V("m")), ph("B", V("m"), V("n")),
          comp("C", [V("n"), V("n")], ["i", "j"], ["reduce", "sum", ["mul", L("A", V("i"), V("k")), L("B", V("k"), V("j"))], ["k"]],
               red=[{"name": "k", "extent": V("m")}])]
shared = prog(gemm_t,
              [{"op": "cache_write", "tensor": "C", "scope": "local", "name": "CL"},
               {"op": "cache_read", "tensor": "A", "scope": "shared", "readers": ["CL"], "name": "AS"},
               {"op": "tile", "stage": "C", "x": "i", "y": "j", "x_factor": 16, "y_factor": 16,
                "x_outer": "bi", "y_outer": "bj", "x_inner": "ti", "y_inner": "tj"},
               {"op": "bind", "stage": "C", "var": "bi", "thread": "blockIdx.y"},
               {"op": "bind", "stage": "C", "var": "ti", "thread": "threadIdx.y"},
               {"op": "bind", "stage": "C", "var": "tj", "thread": "threadIdx.x"},
               {"op": "compute_at", "stage": "CL", "parent": "C", "var": "tj"},
               {"op": "split", "stage": "CL", "var": "k", "factor": 4, "outer": "ko", "inner": "ki"},
               {"op": "reorder", "stage": "CL", "vars": ["ko", "ki", "i", "j"]},
               {"op": "compute_at", "stage": "AS", "parent": "CL", "var": "ko"},
               {"op": "bind", "stage": "AS", "var": "ax0", "thread": "threadIdx.y"}],
              [{"name": "gemm", "args": ["A", "B", "C"]}])
inline = prog([ph("A", V("n"), V("m")), comp("D", [V("n"), V("m")], ["i", "j"], ["mul", L("A", V("i"), V("j")), 2.0]),
               comp("F", [V("n"), V("m")], ["i", "j"], ["max", L("D", V("i"), V("j")), 0.0])],
              [{"op": "compute_inline", "stage": "D"}, {"op": "reorder", "stage": "F", "vars": ["j", "i"]}],
              [{"name": "f", "args": ["A", "F", "n"]}])
# rfactor of a split reduce loop, its stage attached at the row; the blocked GEMM of TVM's
# opt_gemm (cache_write "global", vectorize, unroll, parallel with a chunk)
rfactor = prog([ph("A", V("n"), V("m")), comp("S", [V("n")], ["i"], ["reduce", "sum", L("A", V("i"), V("k")), ["k"]],
                                               red=[{"name": "k", "extent": V("m")}])],
               [{"op": "split", "stage": "S", "var": "k", "factor": 16},
                {"op": "rfactor", "stage": "S", "var": "k.inner", "name": "SF", "factor_axis": 1},
                {"op": "compute_at", "stage": "SF", "parent": "S", "var": "i"}],
               [{"name": "s", "args": ["A", "S"]}])
blocked = prog(gemm_t,
               [{"op": "cache_write", "tensor": "C", "scope": "global", "name": "CC"},
                {"op": "tile", "stage": "C", "x": "i", "y": "j", "x_factor": 32, "y_factor": 32,
                 "x_outer": "mo", "y_outer": "no", "x_inner": "mi", "y_inner": "ni"},
                {"op": "compute_at", "stage": "CC", "parent": "C", "var": "no"},
                {"op": "split", "stage": "CC", "var": "k", "factor": 4, "outer": "ko", "inner": "ki"},
                {"op": "reorder", "stage": "CC", "vars": ["ko", "i", "ki", "j"]},
                {"op": "vectorize", "stage": "CC", "var": "j"},
                {"op": "unroll", "stage": "CC", "var": "ki"},
                {"op": "parallel", "stage": "C", "var": "mo", "chunk": 2}],
               [{"name": "gemm", "args": ["A", "B", "C"]}])
# a parallel transpose with a lazy select over the inner var (its loop stays closed to LLVM's
# vectoriser) beside a contiguous parallel row (left to it)
transpose = prog([ph("A", V("m"), V("n")), ph("R", V("n"), V("m")),
                  comp("T", [V("n"), V("m")], ["i", "j"],
                       ["add", L("A", V("j"), V("i")),
                        ["if_then_else", ["ge", V("j"), 1], L("R", V("i"), ["sub", V("j"), 1]), 0.0]]),
                  comp("U", [V("n"), V("m")], ["i", "j"], ["mul", L("R", V("i"), V("j")), L("A", 0, 0)])],
                 [{"op": "parallel", "stage": "T", "var": "i"}, {"op": "parallel", "stage": "U", "var": "i"}],
                 [{"name": "t", "args": ["A", "R", "T"]}, {"name": "u", "args": ["A", "R", "U"]}])
bad = [
    prog([ph("A", V("n"))], [{"op": "bind", "stage": "A", "var": "i", "thread": "threadIdx.x"}], [{"name": "k", "args": ["A"]}]),
    prog(gemm_t, [{"op": "bind", "stage": "C", "var": "k", "thread": "threadIdx.x"}], [{"name": "g", "args": ["A", "B", "C"]}]),
    prog(gemm_t, [{"op": "compute_at", "stage": "C", "parent": "C", "var": "i"}], [{"name": "g", "args": ["A", "B", "C"]}]),
    {"te": 1, "tensors": [comp("X", [4], ["i"], L("Y", V("i"))), ph("Y", 4)], "kernels": [{"name": "k", "args": ["X", "Y"]}]},
]
out = os.path.join(HERE, "corpus", "te")
os.makedirs(out, exist_ok=True)
for name, p in [("vadd", vadd), ("rows", rows), ("shared", shared), ("inline", inline), ("rfactor", rfactor),
                ("blocked", blocked), ("transpose", transpose)] + \
        [("bad%d" % i, b) for i, b in enumerate(bad)]:
    with open(os.path.join(out, name + ".mp"), "wb") as f:
        f.write(msgpack.packb(p))
