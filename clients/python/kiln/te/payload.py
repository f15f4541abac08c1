"""The te payload: a schedule and its arguments as the MessagePack program of docs/te.md.

``lower(s, args, name)`` returns a Program: the payload map (``program``), its encoded
bytes (``payload``), and what the client needs to call the kernels (the user's arguments,
the intermediate tensors kiln allocates, and the kernels in launch order).
"""

import re

import msgpack

from ..errors import InvalidArgument
from . import expr as X
from .tensor import Tensor, PlaceholderOp, ComputeOp, tensors_read
from .schedule import Schedule

__all__ = ["lower", "Program", "encode_expr"]

_NAME_OK = re.compile(r"^[A-Za-z0-9_.]{1,63}$")
_PAYLOAD_DTYPES = set(X.DTYPES) - {"bfloat16"}


class _Names:
    """Unique wire names in one namespace, from the objects' own names."""

    def __init__(self, taken=()):
        self.used = set(taken)
        self.of = {}

    def get(self, obj, want):
        n = self.of.get(id(obj))
        if n is not None:
            return n
        base = re.sub(r"[^A-Za-z0-9_.]", "_", want or "v")[:55] or "v"
        n, k = base, 1
        while n in self.used:
            n = "%s_%d" % (base, k)
            k += 1
        self.used.add(n)
        self.of[id(obj)] = n
        return n


class _Encoder:
    def __init__(self, shape_vars, tensor_names, index_dtype):
        self.shape_vars = shape_vars        # id(Var) -> name
        self.tensor_names = tensor_names    # id(Tensor) -> name
        self.index_dtype = index_dtype
        self.local = {}                     # id(Var) -> name (axes of the compute being encoded)
        self.in_select = 0

    def var_name(self, v):
        n = self.local.get(id(v)) or self.shape_vars.get(id(v))
        if n is None:
            raise InvalidArgument("variable %s is not an axis of this compute, a reduce axis of it, or a shape "
                                  "variable (only int shape variables can be scalar arguments)" % v.name)
        return n

    def __call__(self, e):
        if isinstance(e, X.IntImm):
            if e.dtype == "bool":
                return bool(e.value)
            if e.dtype == self.index_dtype or e.implicit:
                return e.value
            return ["const", e.dtype, e.value]
        if isinstance(e, X.FloatImm):
            if e.dtype == "float32":
                return e.value
            return ["const", _wire_dtype(e.dtype), e.value]
        if isinstance(e, X.Var):
            return ["var", self.var_name(e)]
        if isinstance(e, X.BinaryOp):
            op = {"truncdiv": "div", "truncmod": "mod"}.get(e.op, e.op)
            return [op, self(e.a), self(e.b)]
        if isinstance(e, X.Compare):
            op = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}[e.op]
            return [op, self(e.a), self(e.b)]
        if isinstance(e, X.Logical):
            return [e.op, self(e.a), self(e.b)]
        if isinstance(e, X.Not):
            return ["not", self(e.a)]
        if isinstance(e, X.Select) and e.lazy:
            # only the chosen side is evaluated: its loads may point outside where not taken
            cond, f = self(e.cond), self(e.f)
            outer, self.in_select = self.in_select, 0
            try:
                t = self(e.t)
            finally:
                self.in_select = outer
            return ["if_then_else", cond, t, f]
        if isinstance(e, X.Select):
            # Both sides of a wire select are evaluated; a load in a side that is not taken
            # (padding: A[i - 1] where i == 0) must stay in bounds, so clamp its indices.
            self.in_select += 1
            try:
                return ["select", self(e.cond), self(e.t), self(e.f)]
            finally:
                self.in_select -= 1
        if isinstance(e, X.Cast):
            return ["cast", _wire_dtype(e.dtype), self(e.value)]
        if isinstance(e, X.Call):
            if e.name == "rsqrt":
                return ["div", ["const", _wire_dtype(e.dtype), 1.0], ["call", "sqrt", [self(a) for a in e.args]]]
            return ["call", e.name, [self(a) for a in e.args]]
        if isinstance(e, X.TensorLoad):
            name = self.tensor_names.get(id(e.tensor))
            if name is None:
                raise InvalidArgument("%s reads tensor %s, which is not part of the schedule"
                                      % (self.current, e.tensor.name))
            idx = [self(i) for i in e.indices]
            if self.in_select:
                idx = [["max", ["min", ix, ["sub", self(d), 1]], 0] if not _const_in(i, d) else ix
                       for ix, i, d in zip(idx, e.indices, e.tensor.shape)]
            return ["load", name, idx]
        if isinstance(e, X.Reduce):
            raise InvalidArgument("%s: a reduction must be the whole body of a compute" % self.current)
        raise InvalidArgument("cannot encode %r" % (e,))


def _const_in(i, d):
    return isinstance(i, X.IntImm) and isinstance(d, X.IntImm) and 0 <= i.value < d.value


def _wire_dtype(dt):
    if dt not in _PAYLOAD_DTYPES:
        raise InvalidArgument("dtype %s is not supported by te programs (docs/te.md: %s)"
                              % (dt, " ".join(sorted(_PAYLOAD_DTYPES))))
    return dt


def encode_expr(e, shape_vars):
    """An expression over shape variables (``{id(var): name}``) in the wire form."""
    return _Encoder(shape_vars, {}, "int32")(e)


class Program:
    """``program`` (the map), ``payload`` (bytes), ``args`` (the user's arguments: Tensor or
    Var), ``temps`` (intermediate Tensors kiln allocates per call), ``kernels`` (wire kernel
    maps, in launch order), ``shape_vars`` (Var list in the payload's ``vars`` order) and
    ``names`` (id(obj) -> wire name)."""

    def __init__(self, program, args, temps, shape_vars, names):
        self.program = program
        self.payload = msgpack.packb(program, use_bin_type=True)
        self.args = args
        self.temps = temps
        self.kernels = program["kernels"]
        self.shape_vars = shape_vars
        self.names = names

    schedule = None   # set by lower(): what __str__ prints the loop nests of
    name = "default_function"

    def __str__(self):
        """The loop nests after scheduling, as TVM's simple mode prints them (printer.py);
        ``summary()`` is the payload a line per tensor, primitive and kernel."""
        if self.schedule is None:
            return self.summary()
        from .printer import loop_nest
        try:
            return loop_nest(self.schedule, self.args, self.name)
        except Exception as e:  # noqa: BLE001 (printing must not fail where building works)
            return "// no loop nest for this schedule (%s: %s)\n%s" % (type(e).__name__, e, self.summary())

    def summary(self):
        import json
        p = self.program
        lines = ["te program: vars %s" % [v["name"] for v in p["vars"]]]
        lines += ["  tensor " + json.dumps(t) for t in p["tensors"]]
        lines += ["  schedule " + json.dumps(m) for m in p["schedule"]]
        lines += ["  kernel " + json.dumps(k) for k in p["kernels"]]
        return "\n".join(lines)


def _collect_vars(e, out, bound):
    """Free Vars of ``e`` (not in ``bound``), in first-seen order."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, X.Var):
            if id(x) not in bound and id(x) not in out:
                out[id(x)] = x
        elif isinstance(x, X.TensorLoad):
            stack.extend(reversed(x.indices))
        elif isinstance(x, X.Reduce):
            stack.append(x.source)
            if x.where is not None:
                stack.append(x.where)
        elif isinstance(x, X.Call):
            stack.extend(reversed(x.args))
        elif isinstance(x, X.Cast):
            stack.append(x.value)
        else:
            for slot in ("f", "t", "cond", "b", "a"):
                c = getattr(x, slot, None)
                if isinstance(c, X.PrimExpr):
                    stack.append(c)


def lower(s, args, name="default_function", simple_mode=False, binds=None):
    """The te program of schedule ``s`` with kernel arguments ``args`` (Tensors and shape
    Vars, in the order the built function takes them). ``simple_mode`` is accepted for
    TVM's spelling (``print(tvm.lower(s, [A, B, C], simple_mode=True))`` prints the
    program); ``binds`` (TVM's buffer bindings) is refused."""
    if binds:
        raise InvalidArgument("lower: binds= (explicit buffers) is not supported by kiln")
    if not isinstance(s, Schedule):
        raise InvalidArgument("build takes a schedule from te.create_schedule, not %r" % (s,))
    if not isinstance(args, (list, tuple)) or not args:
        raise InvalidArgument("build needs the argument list: [A, B, C] (tensors and shape vars)")
    args = list(args)
    for a in args:
        if not isinstance(a, (Tensor, X.Var)):
            raise InvalidArgument("a build argument is a te tensor or te.var, not %r" % (a,))
    ops = [st for st in s.stages if st.cache_of is None and not st.cache_write_of]
    program_ops = s.program_ops
    arg_ids = {id(a) for a in args}
    for a in args:
        if isinstance(a, Tensor) and a.op not in program_ops:
            raise InvalidArgument("argument %s is not part of the schedule" % a.name)
    # every placeholder read must be an argument
    for op in program_ops:
        if isinstance(op, PlaceholderOp) and id(op.output(0)) not in arg_ids:
            raise InvalidArgument("input %s is read but not among the build arguments" % op.name)

    index_dtype = "int32"
    # shape variables: every free Var of shapes and bodies, plus Var arguments
    free = {}
    for op in program_ops:
        for d in op.shape:
            _collect_vars(d, free, {})
    for a in args:
        if isinstance(a, X.Var):
            free.setdefault(id(a), a)
    for op in program_ops:
        if isinstance(op, ComputeOp):
            bound = {id(iv.var): 1 for iv in list(op.axis) + list(op.reduce_axis)}
            _collect_vars(op.orig_body, free, bound)
    for v in free.values():
        if v.dtype not in ("int32", "int64"):
            raise InvalidArgument("variable %s is %s; te programs take int32/int64 shape variables only"
                                  % (v.name, v.dtype))
        if v.dtype == "int64":
            index_dtype = "int64"
    shape_vars = list(free.values())

    top = _Names()
    var_names = {id(v): top.get(v, v.name) for v in shape_vars}
    tensor_names = {}
    for op in program_ops:
        tensor_names[id(op.output(0))] = top.get(op.output(0), op.name)
    enc = _Encoder(var_names, tensor_names, index_dtype)

    tensors = []
    for op in program_ops:
        t = op.output(0)
        tn = tensor_names[id(t)]
        enc.current = tn
        enc.local = {}
        m = {"name": tn, "op": "placeholder" if isinstance(op, PlaceholderOp) else "compute",
             "dtype": _wire_dtype(op.dtype), "shape": [enc(d) for d in op.shape]}
        if isinstance(op, ComputeOp):
            local = _Names(top.used)
            axes = [local.get(iv, iv.var.name) for iv in op.axis]
            enc.local = {id(iv.var): n for iv, n in zip(op.axis, axes)}
            m["axes"] = axes
            body = op.orig_body
            if isinstance(body, X.Reduce):
                rnames = [local.get(iv, iv.var.name) for iv in body.axis]
                enc.local.update({id(iv.var): n for iv, n in zip(body.axis, rnames)})
                m["reduce_axes"] = [{"name": n, "min": enc(iv.dom.min), "extent": enc(iv.dom.extent)}
                                    for iv, n in zip(body.axis, rnames)]
                if body.init is not None:
                    raise InvalidArgument("%s: te.%s(init=...) is not supported by kiln" % (tn, body.combiner))
                r = ["reduce", body.combiner, enc(body.source), rnames]
                if body.where is not None:
                    r.append(enc(body.where))
                m["body"] = r
            else:
                m["body"] = enc(body)
            s._axis_names[id(op)] = local
        tensors.append(m)

    schedule = _encode_schedule(s, tensor_names, top)

    # kernels: every root compute stage that is not a cache stage, in dependency order.
    roots = [st for st in s.stages if isinstance(st.orig_op, ComputeOp) and st.attach == "root"
             and st.cache_of is None and not st.cache_write_of]
    temps = [st.orig_op.output(0) for st in roots if id(st.orig_op.output(0)) not in arg_ids]
    wire_args = [tensor_names[id(a)] if isinstance(a, Tensor) else var_names[id(a)] for a in args]
    wire_args += [tensor_names[id(t)] for t in temps]
    kernels = []
    for k, st in enumerate(roots):
        kname = name if len(roots) == 1 else "%s_kernel%d" % (name, k)
        kernels.append({"name": _Names().get(st, kname), "args": wire_args,
                        "compute": tensor_names[id(st.orig_op.output(0))]})
    if not kernels:
        raise InvalidArgument("the schedule computes nothing: no compute stage at the root")
    # one index dtype for all shape vars (docs/te.md: a var's dtype must equal it)
    program = {"te": 1, "index_dtype": index_dtype, "vars": [{"name": var_names[id(v)], "dtype": index_dtype}
                                                               for v in shape_vars],
               "tensors": tensors, "schedule": schedule, "kernels": kernels}
    names = dict(tensor_names)
    names.update(var_names)
    prog = Program(program, args, temps, shape_vars, names)
    prog.schedule, prog.name = s, name
    return prog


def _encode_schedule(s, tensor_names, top):
    out = []
    for entry in s.log:
        if entry[0] == "rfactor":   # the stage's op after rfactor names its loops as before
            s._axis_names[id(entry[1].op)] = s._axis_names[id(entry[1].orig_op)]
    # stage wire names: program tensors by tensor name; cache stages get fresh names
    for entry in s.log:
        kind = entry[0]
        st = entry[1]
        if kind in ("cache_read", "cache_write"):
            _, st, tensor, scope, readers = entry
            sname = top.get(st, st.op.name)
            tensor_names[id(st)] = sname
            # axis names of a cache stage, as the lowering will name them
            local = _Names(top.used)
            if kind == "cache_read":
                for k, iv in enumerate(st.op.axis):
                    local.used.add("ax%d" % k)
                    local.of[id(iv)] = "ax%d" % k
                m = {"op": "cache_read", "tensor": tensor_names[id(tensor)], "scope": scope,
                     "readers": [_stage_name(s, r, tensor_names) for r in readers], "name": sname}
            else:
                # the new stage takes the tensor's axis and reduce-axis names; the tensor
                # keeps its axis names and loses its reduce axes
                orig = s._axis_names[id(tensor.op)]
                for iv_new, iv_old in zip(list(st.op.axis) + list(st.op.reduce_axis),
                                          list(tensor.op.axis) + list(tensor.op.reduce_axis)):
                    n = orig.of[id(iv_old)]
                    local.used.add(n)
                    local.of[id(iv_new)] = n
                tstage = s[tensor]
                tl = _Names(top.used)
                for iv_new, iv_old in zip(tstage.op.axis, tensor.op.axis):
                    n = orig.of[id(iv_old)]
                    tl.used.add(n)
                    tl.of[id(iv_new)] = n
                s._axis_names[id(tstage.op)] = tl
                m = {"op": "cache_write", "tensor": tensor_names[id(tensor)], "scope": scope, "name": sname}
            s._axis_names[id(st.op)] = local
            out.append(m)
            continue
        if kind == "rfactor":
            out.append(_encode_rfactor(s, entry, tensor_names, top))
            continue
        sname = _stage_name(s, st, tensor_names)
        local = s._axis_names[id(st.op)]

        def nm(iv):
            n = local.of.get(id(iv))
            if n is None:
                raise InvalidArgument("stage %s: loop %s is not one of its loops" % (sname, iv.var.name))
            return n
        if kind == "split":
            _, _, parent, outer, inner, factor, nparts = entry
            m = {"op": "split", "stage": sname, "var": nm(parent)}
            k = factor if factor is not None else nparts
            if not isinstance(k, X.IntImm):
                raise InvalidArgument("split of %s: kiln needs a constant factor, not %r" % (sname, k))
            m["factor" if factor is not None else "nparts"] = k.value
            m["outer"] = local.get(outer, outer.var.name)
            m["inner"] = local.get(inner, inner.var.name)
        elif kind == "fuse":
            _, _, a, b, fused = entry
            m = {"op": "fuse", "stage": sname, "vars": [nm(a), nm(b)], "fused": local.get(fused, fused.var.name)}
        elif kind == "reorder":
            m = {"op": "reorder", "stage": sname, "vars": [nm(iv) for iv in entry[2]]}
        elif kind == "bind":
            tag = entry[3].thread_tag
            if not (tag.startswith("blockIdx.") or tag.startswith("threadIdx.") or tag == "vthread"):
                raise InvalidArgument("bind to %s: kiln binds blockIdx.x/y/z, threadIdx.x/y/z and vthread only" % tag)
            m = {"op": "bind", "stage": sname, "var": nm(entry[2]), "thread": tag}
        elif kind in ("unroll", "vectorize", "parallel"):
            m = {"op": kind, "stage": sname, "var": nm(entry[2])}
            if kind == "parallel" and entry[3] is not None:
                m["chunk"] = entry[3]
        elif kind == "compute_at":
            parent, iv = entry[2], entry[3]
            pl = s._axis_names[id(parent.op)]
            m = {"op": "compute_at", "stage": sname, "parent": _stage_name(s, parent, tensor_names),
                 "var": pl.of[id(iv)]}
        elif kind == "compute_inline":
            m = {"op": "compute_inline", "stage": sname}
        elif kind == "storage_align":
            m = {"op": "storage_align", "stage": sname, "var": nm(entry[2]), "factor": entry[3], "offset": entry[4]}
        elif kind == "storage_order":
            m = {"op": "storage_order", "stage": sname, "vars": [nm(a) for a in entry[2]]}
        elif kind == "double_buffer":
            m = {"op": "double_buffer", "stage": sname}
        elif kind == "launch_bounds":
            m = {"op": "launch_bounds", "stage": sname, "min_blocks": entry[2]}
        else:
            raise InvalidArgument("schedule primitive %s is not supported by kiln" % kind)
        out.append(m)
    return out


def _encode_rfactor(s, entry, tensor_names, top):
    """The rfactor primitive; the new stage's vars and the tensor's new reduce var get the wire
    names the lowering gives them (the tensor's axes, the factored and other reduce loops,
    ``<factored>.v``)."""
    _, st, axis, factor_axis, nst, rv, old_leaves, reds = entry
    sname = _stage_name(s, st, tensor_names)
    local = s._axis_names[id(st.op)]
    rfname = top.get(nst, nst.op.name)
    tensor_names[id(nst)] = tensor_names[id(nst.op.output(0))] = rfname
    rl = _Names(top.used)
    src = [local.of[id(iv)] for iv in st.op.axis]
    src.insert(factor_axis, local.of[id(axis)])
    for iv, n in zip(list(nst.op.axis) + list(nst.op.reduce_axis), src + [local.of[id(l)] for l in reds]):
        rl.used.add(n)
        rl.of[id(iv)] = n
    s._axis_names[id(nst.op)] = rl
    local.used.add(local.of[id(axis)] + ".v")
    local.of[id(rv)] = local.of[id(axis)] + ".v"
    return {"op": "rfactor", "stage": sname, "var": local.of[id(axis)], "name": rfname, "factor_axis": factor_axis}


def _stage_name(s, st, tensor_names):
    from .schedule import Stage
    if not isinstance(st, Stage):
        st = s[st]
    n = tensor_names.get(id(st))
    if n is None:
        n = tensor_names.get(id(st.orig_op.output(0)))
    if n is None:
        raise InvalidArgument("stage %s is not part of the program" % st.op.name)
    return n
