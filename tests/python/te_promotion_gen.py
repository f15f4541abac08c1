"""Writes te_promotion_tvm.json: the types TVM gives mixed-type expressions.

Run once with apache-tvm 0.27 (the venv of bench/te_tutorials_bench.py has it):
    $XDG_CACHE_HOME/kiln-te-bench/bin/python tests/python/te_promotion_gen.py
The table is committed; test_te_promotion.py builds the same expressions with kiln.te and
compares them node by node (kind, dtype, constant value), so kiln follows TVM's promotion
rules (BinaryOpMatchTypes: int op float is float, the wider type wins, Python ints are
int32 constants and Python floats float32 ones). Not imported by the tests.
"""

import json
import os
import sys

# name -> (dtype): a Var, or a placeholder read at i
OPERANDS = [("i", "int32", "var"), ("j", "int64", "var"), ("B", "bool", "load"), ("I8", "int8", "load"),
            ("U8", "uint8", "load"), ("I16", "int16", "load"), ("I32", "int32", "load"),
            ("U32", "uint32", "load"), ("I64", "int64", "load"), ("H", "float16", "load"),
            ("F", "float32", "load"), ("D", "float64", "load")]
LITERALS = ["2", "-3", "0.5", "2**40", "True", "1e30"]


def spellings():
    names = [n if kind == "var" else "%s[i]" % n for n, _, kind in OPERANDS]
    out = []
    for x in names:
        for lit in LITERALS:
            # TVM folds x * 1 to x (True is 1); kiln does not fold, so True meets x in an add
            rev = "%s + %s" if lit == "True" else "%s * %s"
            out += ["%s + %s" % (x, lit), rev % (lit, x), "%s - %s" % (x, lit), "%s < %s" % (x, lit)]
        out += ["te.max(%s, 0.5)" % x, "te.min(1, %s)" % x, "te.if_then_else(i < 4, %s, 0.5)" % x,
                "te.if_then_else(i < 4, 2, %s)" % x, "%s / 2.0" % x]
    for x in names:
        for y in names:
            out.append("%s + %s" % (x, y))
    out += ["F[i] + i * 0.5", "te.power(H[i], 2)", "te.power(F[i], 2)", "te.power(H[i], 0.5)",
            "te.exp(H[i]) * 0.5", "H[i].astype('float32') + 1", "i * 0.5 + j", "(i + 1) * 0.25",
            "I8[i] * 2 + 1", "H[i] * 2 + 1.5", "te.const(1, 'int8') + I8[i]", "te.const(0.5, 'float16') * H[i]"]
    return out


def canon_tvm(e):
    t = type(e).__name__
    ty = str(e.ty)
    if t == "IntImm":
        return ["imm", ty, bool(e.value) if ty == "bool" else int(e.value)]
    if t == "FloatImm":
        return ["imm", ty, float(e.value)]
    if t in ("Var", "SizeVar"):
        return ["var", ty, e.name]
    if t == "Cast":
        return ["cast", ty, canon_tvm(e.value)]
    if t == "Call":
        op = str(e.op.name)
        if op == "te.tensor_load":
            return ["load", ty, e.args[0].name]
        if op.endswith(".if_then_else"):
            return ["select", ty] + [canon_tvm(a) for a in e.args]
        return ["call:" + op.split(".")[-1], ty] + [canon_tvm(a) for a in e.args]
    names = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min", "LT": "lt",
             "LE": "le", "GT": "gt", "GE": "ge", "EQ": "eq", "NE": "ne"}
    if t in names:
        return [names[t], ty, canon_tvm(e.a), canon_tvm(e.b)]
    raise TypeError("no canonical form for %s" % t)


def main():
    from tvm import te   # noqa: F401 (the spellings use it)
    import tvm
    env = {"te": te, "i": te.var("i"), "j": te.var("j", "int64")}
    for n, dt, kind in OPERANDS:
        if kind == "load":
            env[n] = te.placeholder((8,), dt, name=n)
    table = []
    for s in spellings():
        try:
            e = eval(s, env)  # noqa: S307 (our own spellings)
            if hasattr(e, "asobject"):
                e = e.asobject()
            table.append({"expr": s, "tvm": canon_tvm(e)})
        except Exception as err:  # noqa: BLE001
            table.append({"expr": s, "error": str(err).strip().splitlines()[-1][:160]})
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "te_promotion_tvm.json")
    with open(out, "w") as f:
        json.dump({"generator": "tests/python/te_promotion_gen.py", "tvm": tvm.__version__,
                   "operands": OPERANDS, "table": table}, f, indent=0)
        f.write("\n")
    print("%d expressions, %d errors -> %s" % (len(table), sum("error" in t for t in table), out), file=sys.stderr)


if __name__ == "__main__":
    main()
