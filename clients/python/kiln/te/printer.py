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


# -- the loop nest (``print(te.lower(s, args))``, TVM's simple mode) ----------------------------

_COMBINE = {"sum": "(%s + %s)", "prod": "(%s*%s)", "max": "max(%s, %s)", "min": "min(%s, %s)"}
_KIND = {"unroll": "unrolled", "vectorize": "vectorized", "parallel": "parallel"}


def _divides(ext, k):
    return isinstance(ext, X.IntImm) and isinstance(k, X.IntImm) and k.value and ext.value % k.value == 0


def _stage_values(st, leaves=None):
    """Each loop variable of ``st`` (original axes included) as an expression over its leaf
    loops (``leaves``, default its current ones; a bound leaf is its thread axis), and the
    original axes whose range a split that does not divide overruns (they need a guard)."""
    from .schedule import Split, Fuse
    val = {}
    for iv in (st.leaf_iter_vars if leaves is None else leaves):
        a = st.attrs.get(iv)
        val[iv] = (X.Var(a[1].var.name if a[1].thread_tag == "vthread" else a[1].thread_tag, iv.var.dtype)
                   if a and a[0] == "bind" else iv.var)
    parent_of = {}
    loose = set()
    for r in reversed(st.relations):
        if isinstance(r, Split):
            k = X.as_expr(r.factor if r.factor is not None else r.nparts)
            ext = st._extent(r.parent)
            inner_ext = k if r.factor is not None else X.simplify((ext + (k - 1)) // k)
            # (rfactor moves a split's loop to the new stage: there it is the var itself)
            val[r.parent] = X.simplify(val.get(r.outer, r.outer.var) * inner_ext + val.get(r.inner, r.inner.var))
            parent_of[r.outer] = parent_of[r.inner] = r.parent
            if not _divides(ext, k):
                loose.add(r.parent)
        elif isinstance(r, Fuse):
            e = st._extent(r.inner)
            val[r.outer] = val.get(r.fused, r.fused.var) // e
            val[r.inner] = val.get(r.fused, r.fused.var) % e
            parent_of[r.fused] = None
    guards = []
    for iv in loose:
        root = iv
        while parent_of.get(root) is not None:
            root = parent_of[root]
        guards.append(iv)
    return val, guards


def _linear(e):
    """``e`` as {id(var): [var, coef]} and a constant when it is an integer affine form of
    vars (add, sub, mul by a constant), else None."""
    if isinstance(e, X.IntImm):
        return {}, e.value
    if isinstance(e, X.Var):
        return {id(e): [e, 1]}, 0
    if isinstance(e, X.BinaryOp) and e.op in ("add", "sub", "mul"):
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        if e.op == "mul":
            if not a[0]:
                a, b = b, a
            if b[0]:
                return None
            return {k: [v, c * b[1]] for k, (v, c) in a[0].items()}, a[1] * b[1]
        sign = 1 if e.op == "add" else -1
        out = {k: [v, c] for k, (v, c) in a[0].items()}
        for k, (v, c) in b[0].items():
            out.setdefault(k, [v, 0])[1] += sign * c
        return out, a[1] + sign * b[1]
    return None


def _loads_of(e, tensor, out):
    if isinstance(e, X.TensorLoad) and e.tensor is tensor:
        out.append(e)
    for slot in ("a", "b", "cond", "t", "f", "value", "source", "where"):
        c = getattr(e, slot, None)
        if isinstance(c, X.PrimExpr):
            _loads_of(c, tensor, out)
    for c in getattr(e, "args", None) or getattr(e, "indices", None) or []:
        _loads_of(c, tensor, out)
    return out


def _region(st, sched, bodies):
    """For a stage computed at loop ``iv`` of ``consumer``: per axis, the first index the
    consumer reads inside that loop (an expression of the loops outside it) and how many,
    as TVM's bound inference gives them for affine reads; None when the reads are not
    affine in the inner loops with constant extents (then the whole domain is shown)."""
    from .schedule import _substitute
    from .expr import IterVar
    _, consumer, iv = st.attach
    # its own data-parallel loops must be its axes as they are (a split reduce loop is fine)
    if any(getattr(r, "parent", None) is not None and r.parent.iter_type != IterVar.REDUCE or
           getattr(r, "fused", None) is not None and r.outer.iter_type != IterVar.REDUCE for r in st.relations):
        return None
    cval, _ = _stage_values(consumer)
    csub = {v.var: e for v, e in cval.items() if e is not v.var}
    leaves = consumer.leaf_iter_vars
    inner = {}
    for leaf in leaves[leaves.index(iv) + 1:]:
        ext = X.simplify(X.as_expr(consumer._extent(leaf)))
        if not isinstance(ext, X.IntImm):
            return None
        inner[id(cval[leaf])] = ext.value
    reads = _loads_of(_inline(bodies.get(id(consumer), consumer.op.body), sched), st.op.output(0), [])
    if not reads:
        return None
    region = []
    for d in range(len(st.op.axis)):
        forms = [_linear(X.simplify(_substitute(r.indices[d], csub))) for r in reads]
        if any(f is None for f in forms):
            return None
        coefs = [{k: c for k, (v, c) in f[0].items() if c} for f in forms]
        if any(c != coefs[0] for c in coefs) or any(c < 0 for k, c in coefs[0].items() if k in inner):
            return None
        lo, hi = min(f[1] for f in forms), max(f[1] for f in forms)
        extent = hi - lo + 1 + sum(c * (inner[k] - 1) for k, c in coefs[0].items() if k in inner)
        m = X.IntImm(lo)
        for k, (v, c) in forms[0][0].items():
            if c and k not in inner:
                m = m + (v * c if c != 1 else v)
        region.append((X.simplify(m), extent))
    return region


def _inline(e, sched):
    """Loads of inlined stages replaced by their bodies (as TVM's lowering shows them)."""
    from .schedule import _rebuild, _substitute

    def fn(x):
        if isinstance(x, X.TensorLoad):
            st = sched._by_op.get(x.tensor.op)
            if st is not None and st.attach == "inline":
                idx = [_inline(i, sched) for i in x.indices]
                body = _substitute(st.op.body, {a.var: i for a, i in zip(st.op.axis, idx)})
                return _inline(body, sched)
        return None
    return _rebuild(e, fn)


def _rfactor_bodies(sched):
    """What the stages of rfactor compute, as Reduce expressions (their ops carry none): the
    new stage ``T.rf`` reduces the original source over the reduce loops left, with the
    factored loop as a data axis; ``T`` reduces ``T.rf`` over the factored range. Keyed by
    id(stage); the set holds the stages whose old reduce loops moved to their ``.rf``."""
    from .schedule import _substitute
    from .expr import IterVar
    bodies, moved = {}, set()
    for entry in sched.log:
        if entry[0] != "rfactor":
            continue
        _, st, axis, factor_axis, nst, rv, old, reds = entry
        red = st.orig_op.orig_body
        rop = nst.op
        # the original reduce loops over the old leaves, then the old leaves as the .rf's loops
        val, loose = _stage_values(st, old)
        to_old = {a.var: val[a] for a in red.axis if a in val and val[a] is not a.var}
        data = [a for j, a in enumerate(rop.axis) if j != factor_axis]
        to_rf = {a.var: b.var for a, b in zip(st.orig_op.axis, data)}
        to_rf[axis.var] = rop.axis[factor_axis].var
        to_rf.update((a.var, b.var) for a, b in zip(reds, rop.reduce_axis))
        where = [red.where] if red.where is not None else []
        where += [a.var < st._extent(a) for a in loose if a.iter_type == IterVar.REDUCE]
        cond = None
        for w in where:
            cond = w if cond is None else X.Logical("and", cond, w)
        fix = lambda e: _substitute(_substitute(e, to_old), to_rf)
        bodies[id(nst)] = X.Reduce(red.combiner, fix(red.source), rop.reduce_axis,
                                   None if cond is None else fix(cond), red.init)
        idx = [a.var for a in st.op.axis]
        idx.insert(factor_axis, rv.var)
        bodies[id(st)] = X.Reduce(red.combiner, X.TensorLoad(rop.output(0), idx), [rv], None, red.init)
        moved.add(id(st))
    return bodies, moved


def _single(extent):
    return isinstance(extent, X.IntImm) and extent.value == 1


def _emit_stage(st, sched, attached, out, depth, bodies, moved):
    from .schedule import _substitute
    from .expr import IterVar
    op = st.op
    pad = "  " * depth
    val, guards = _stage_values(st)
    if id(st) in moved:  # the guards of its old reduce loops went with them to the .rf stage
        guards = [g for g in guards if g.iter_type != IterVar.REDUCE]
    sub = {iv.var: v for iv, v in val.items() if v is not iv.var}
    region = _region(st, sched, bodies) if isinstance(st.attach, tuple) else None
    extents = {}
    if region is not None:
        # the part the consumer reads inside the loop it is computed at
        for a, (m, n) in zip(st.op.axis, region):
            if n == 1:  # one index: no loop, as TVM shows it (the consumer's var may share its name)
                sub[a.var] = m
            else:
                sub[a.var] = X.simplify(m + a.var) if not (isinstance(m, X.IntImm) and m.value == 0) else a.var
            extents[a] = X.IntImm(n)
    target = "%s[%s]" % (op.name, ", ".join(expr_str(_substitute(a.var, sub)) for a in op.axis))
    body = _inline(bodies.get(id(st), op.body), sched)
    red = body if isinstance(body, X.Reduce) else None
    cond = [_substitute(g.var, sub) < st._extent(g) for g in guards]
    if red is not None and red.where is not None:
        cond.append(red.where)
    cond_s = " && ".join(expr_str(_substitute(c, sub)) for c in cond)
    if red is not None:
        src = expr_str(_substitute(red.source, sub))
        stmt = "%s = %s" % (target, _COMBINE[red.combiner] % (target, src))
        ident = {"sum": 0, "prod": 1}.get(red.combiner)
        ident = red.init if red.init is not None else X.convert(ident, red.dtype) if ident is not None else None
        init = "%s = %s" % (target, expr_str(ident) if ident is not None else
                            "%s_value(%s)" % ("min" if red.combiner == "max" else "max", red.dtype))
    else:
        stmt = "%s = %s" % (target, expr_str(_substitute(body, sub)))
        init = None
    note = ""
    if isinstance(st.attach, tuple) and region is None:
        note = ("  // inside %s's loop %s: the loops show %s's whole domain; kilnd narrows them to the "
                "part read there" % (st.attach[1].op.name, st.attach[2].var.name, op.name))
    out.append("%sproduce %s {%s" % (pad, op.name, note))
    depth += 1
    opened = 0
    leaves = st.leaf_iter_vars
    for n_iv, iv in enumerate(leaves):
        pad = "  " * depth
        if init is not None and iv.iter_type == IterVar.REDUCE:
            # the identity is stored over the data-parallel loops still to come, as TVM's init nest
            rest = [v for v in leaves[n_iv:] if v.iter_type != IterVar.REDUCE and not
                    (st.attrs.get(v) and st.attrs[v][0] == "bind") and not _single(extents.get(v))]
            for k, v in enumerate(rest):
                out.append("%sfor (%s, 0, %s) {" % (pad + "  " * k, v.var.name,
                                                       expr_str(extents[v] if v in extents else st._extent(v))))
            out.append(pad + "  " * len(rest) + init)
            for k in reversed(range(len(rest))):
                out.append(pad + "  " * k + "}")
            init = None
        a = st.attrs.get(iv)
        ext = expr_str(extents[iv] if iv in extents else st._extent(iv))
        if _single(extents.get(iv)) and not a:
            pass
        elif a and a[0] == "bind" and a[1].thread_tag == "vthread":
            out.append("%s// attr [iter_var(%s, , vthread)] virtual_thread = %s" % (pad, a[1].var.name, ext))
        elif a and a[0] == "bind":
            out.append("%s// attr [iter_var(%s, , %s)] thread_extent = %s" % (pad, a[1].thread_tag,
                                                                            a[1].thread_tag, ext))
        else:
            kind = _KIND.get(a[0], "for") if a else "for"
            out.append("%s%s (%s, 0, %s) {" % (pad, kind, iv.var.name, ext))
            depth += 1
            opened += 1
        for child in attached.get((id(st), id(iv)), []):
            _emit_stage(child, sched, attached, out, depth, bodies, moved)
    pad = "  " * depth
    if init is not None:
        out.append(pad + init)
    out.append("%sif (likely(%s)) {" % (pad, cond_s) if cond_s else pad + stmt)
    if cond_s:
        out.append("  " + pad + stmt)
        out.append(pad + "}")
    for _ in range(opened):
        depth -= 1
        out.append("  " * depth + "}")
    out.append("  " * (depth - 1) + "}")


def loop_nest(sched, args, name):
    """The loop nests of a schedule as TVM's ``lower(..., simple_mode=True)`` prints them:
    a ``produce`` block per stage at the root, its leaf loops after split, fuse, reorder (``for``,
    ``parallel``, ``unrolled``, ``vectorized``; a bound loop is a ``thread_extent`` attribute),
    stages computed at a loop inside it (over the part read there, for affine reads), inlined
    stages substituted, the guards of splits that do not divide. It is what the schedule says;
    kilnd's lowering (compiler/te) makes the code. An rfactor shows as TVM shows it: the
    ``.rf`` stage reducing over the reduce loops left, then the tensor reducing the ``.rf``."""
    from .tensor import ComputeOp, Tensor
    bodies, moved = _rfactor_bodies(sched)
    params = []
    for a in args:
        if isinstance(a, Tensor):
            params.append("%s: %s[%s]" % (a.name, a.dtype, ", ".join(expr_str(X.as_expr(d)) for d in a.shape)))
        else:
            params.append("%s: %s" % (a.name, a.dtype))
    out = ["// %s(%s)" % (name, ", ".join(params))]
    attached = {}
    for st in sched.stages:
        if isinstance(st.attach, tuple):
            attached.setdefault((id(st.attach[1]), id(st.attach[2])), []).append(st)
    for st in sched.stages:
        if st.attach == "root" and isinstance(st.op, ComputeOp):
            _emit_stage(st, sched, attached, out, 0, bodies, moved)
    return "\n".join(out)
