"""Readable text of expressions (``repr``)."""

from . import expr as X

_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/", "truncdiv": "/", "truncmod": "%", "floordiv": "//",
        "floormod": "%"}


def expr_str(e):
    if isinstance(e, X.IntImm):
        return str(e.value) if e.dtype != "bool" else ("True" if e.value else "False")
    if isinstance(e, X.FloatImm):
        return repr(e.value) + ("f" if e.dtype == "float32" else "")
    if isinstance(e, X.Var):
        return e.name
    if isinstance(e, X.BinaryOp):
        if e.op in _SYM:
            return "(%s %s %s)" % (expr_str(e.a), _SYM[e.op], expr_str(e.b))
        return "%s(%s, %s)" % (e.op, expr_str(e.a), expr_str(e.b))
    if isinstance(e, (X.Compare,)):
        return "(%s %s %s)" % (expr_str(e.a), e.op, expr_str(e.b))
    if isinstance(e, X.Logical):
        return "(%s %s %s)" % (expr_str(e.a), "&&" if e.op == "and" else "||", expr_str(e.b))
    if isinstance(e, X.Not):
        return "!" + expr_str(e.a)
    if isinstance(e, X.Select):
        return "select(%s, %s, %s)" % (expr_str(e.cond), expr_str(e.t), expr_str(e.f))
    if isinstance(e, X.Cast):
        return "%s(%s)" % (e.dtype, expr_str(e.value))
    if isinstance(e, X.Call):
        return "%s(%s)" % (e.name, ", ".join(expr_str(a) for a in e.args))
    if isinstance(e, X.TensorLoad):
        return "%s[%s]" % (e.tensor.name, ", ".join(expr_str(i) for i in e.indices))
    if isinstance(e, X.Reduce):
        return "%s(%s, axis=[%s]%s)" % (e.combiner, expr_str(e.source), ", ".join(a.var.name for a in e.axis),
                                        "" if e.where is None else ", where=" + expr_str(e.where))
    return object.__repr__(e)
