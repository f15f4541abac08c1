"""Schedules (TVM's ``te.create_schedule`` and Stage primitives).

A Schedule holds one Stage per operation reachable from the outputs. A stage records its
loop transformations as relations (split, fuse), the order of its leaf loops, each leaf's
annotation (bind to a thread axis, unroll, vectorize, parallel), and where it is computed
(at the root, inlined, or inside a loop of another stage). The C lowering (compiler/te/)
turns that into loop nests; nothing is lowered here.
"""

from ..errors import InvalidArgument
from .expr import IterVar, Var, Range, convert, IntImm, PrimExpr, as_expr
from .tensor import Tensor, Operation, PlaceholderOp, ComputeOp, TensorLoad, Reduce

__all__ = ["Schedule", "Stage", "create_schedule", "Split", "Fuse"]


class Split:
    __slots__ = ("parent", "outer", "inner", "factor", "nparts")

    def __init__(self, parent, outer, inner, factor, nparts):
        self.parent, self.outer, self.inner, self.factor, self.nparts = parent, outer, inner, factor, nparts


class Fuse:
    __slots__ = ("outer", "inner", "fused")

    def __init__(self, outer, inner, fused):
        self.outer, self.inner, self.fused = outer, inner, fused


class Stage:
    """The schedule of one operation: ``s[C]``."""

    def __init__(self, op, schedule):
        self.op = op
        self.orig_op = op
        self.cache_write_of = None
        self.schedule = schedule
        self.relations = []
        if isinstance(op, ComputeOp):
            self.all_iter_vars = list(op.axis) + list(op.reduce_axis)
        else:
            self.all_iter_vars = []
        self.leaf_iter_vars = list(self.all_iter_vars)
        self.attrs = {}            # IterVar -> ("bind", thread IterVar) | ("unroll",) | ...
        self.attach = "root"       # "root", "inline", or ("at", Stage, IterVar)
        self.scope = "global"
        self.cache_of = None       # for cache_read stages: (Tensor read, [reader ops])
        self.rfactor_of = None     # for rfactor stages: the Tensor factored
        self.aligns = {}

    @property
    def origin_op(self):
        return self.op

    def _extent(self, iv):
        """The extent of loop iv (an expression), through the splits and fuses made it."""
        from .expr import simplify
        for r in self.relations:
            if isinstance(r, Split) and iv in (r.outer, r.inner):
                pe = self._extent(r.parent)
                k = r.factor if r.factor is not None else r.nparts
                ceil = simplify((pe + (k - 1)) // k)
                return k if (iv is r.inner) == (r.factor is not None) else ceil
            if isinstance(r, Fuse) and iv is r.fused:
                return simplify(self._extent(r.outer) * self._extent(r.inner))
        if iv.dom is None:
            raise InvalidArgument("loop %s has no known range" % iv.var.name)
        return iv.dom.extent

    def _check_leaf(self, iv, what):
        if not isinstance(iv, IterVar):
            raise InvalidArgument("%s: expected an IterVar of %s, got %r" % (what, self.op.name, iv))
        if iv not in self.leaf_iter_vars:
            if iv in self.all_iter_vars:
                raise InvalidArgument("%s: loop %s of %s was already split or fused; use the loops that "
                                      "returned" % (what, iv.var.name, self.op.name))
            raise InvalidArgument("%s: loop %s is not a loop of %s" % (what, iv.var.name, self.op.name))

    def _no_inline(self, what):
        if self.attach == "inline":
            raise InvalidArgument("%s: %s is inlined and has no loops" % (what, self.op.name))

    def split(self, parent, factor=None, nparts=None):
        """``outer, inner = s[C].split(axis, factor=f)`` (or ``nparts=p``)."""
        self._no_inline("split")
        self._check_leaf(parent, "split")
        if (factor is None) == (nparts is None):
            raise InvalidArgument("split takes factor= or nparts=, exactly one")
        k = factor if factor is not None else nparts
        k = as_expr(k)
        if isinstance(k, IntImm) and k.value < 1:
            raise InvalidArgument("split %s: %s=%d must be >= 1" % (parent.var.name,
                                                                     "factor" if factor is not None else "nparts",
                                                                     k.value))
        typ = parent.iter_type if parent.iter_type == IterVar.REDUCE else IterVar.DATA_PAR
        outer = IterVar(None, Var(parent.var.name + ".outer"), typ)
        inner = IterVar(None, Var(parent.var.name + ".inner"), typ)
        self.relations.append(Split(parent, outer, inner, k if factor is not None else None,
                                    k if nparts is not None else None))
        self.schedule.log.append(("split", self, parent, outer, inner, k if factor is not None else None,
                                  k if nparts is not None else None))
        i = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[i:i + 1] = [outer, inner]
        self.all_iter_vars += [outer, inner]
        return outer, inner

    def fuse(self, *args):
        """``f = s[C].fuse(i, j)``: adjacent loops, outer first, into one."""
        self._no_inline("fuse")
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        if not args:
            raise InvalidArgument("fuse needs at least one loop")
        for a in args:
            self._check_leaf(a, "fuse")
        cur = args[0]
        for nxt in args[1:]:
            i, j = self.leaf_iter_vars.index(cur), self.leaf_iter_vars.index(nxt)
            if j != i + 1:
                raise InvalidArgument("fuse: %s and %s of %s are not adjacent loops (outer first)"
                                      % (cur.var.name, nxt.var.name, self.op.name))
            if (cur.iter_type == IterVar.REDUCE) != (nxt.iter_type == IterVar.REDUCE):
                raise InvalidArgument("fuse: cannot fuse a reduction loop with a data-parallel loop")
            fused = IterVar(None, Var(cur.var.name + "." + nxt.var.name + ".fused"),
                            IterVar.REDUCE if cur.iter_type == IterVar.REDUCE else IterVar.DATA_PAR)
            self.relations.append(Fuse(cur, nxt, fused))
            self.schedule.log.append(("fuse", self, cur, nxt, fused))
            self.leaf_iter_vars[i:i + 2] = [fused]
            self.all_iter_vars.append(fused)
            cur = fused
        return cur

    def reorder(self, *args):
        """Puts the given loops in this order, in the positions they occupy now."""
        self._no_inline("reorder")
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        for a in args:
            self._check_leaf(a, "reorder")
        if len(set(map(id, args))) != len(args):
            raise InvalidArgument("reorder: a loop is named twice")
        pos = sorted(self.leaf_iter_vars.index(a) for a in args)
        for p, a in zip(pos, args):
            self.leaf_iter_vars[p] = a
        self.schedule.log.append(("reorder", self, list(args)))

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """``xo, yo, xi, yi = s[C].tile(x, y, xf, yf)``."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def _annotate(self, iv, what, value):
        self._no_inline(what)
        self._check_leaf(iv, what)
        self.attrs[iv] = value
        self.schedule.log.append((what, self, iv) + tuple(value[1:]))

    def bind(self, iv, thread_iv):
        """Binds a loop to ``te.thread_axis("blockIdx.x")`` etc., or to a virtual thread
        (``te.thread_axis("vthread", name="vx")``: each value of the loop becomes a copy of
        the statements inside it, unrolled in the work-item; docs/te.md §5)."""
        if not isinstance(thread_iv, IterVar) or thread_iv.iter_type != IterVar.THREAD:
            raise InvalidArgument("bind: the second argument is a te.thread_axis, not %r" % (thread_iv,))
        if iv.iter_type == IterVar.REDUCE:
            raise InvalidArgument("bind: %s is a reduction loop; kiln binds data-parallel loops only"
                                  % iv.var.name)
        if iv in self.attrs and self.attrs[iv][0] == "bind":
            raise InvalidArgument("bind: %s of %s is already bound to %s"
                                  % (iv.var.name, self.op.name, self.attrs[iv][1].thread_tag))
        vthread = thread_iv.thread_tag == "vthread"
        for other, a in self.attrs.items():
            if a[0] == "bind" and other is not iv and (a[1] is thread_iv if vthread
                                                        else a[1].thread_tag == thread_iv.thread_tag):
                raise InvalidArgument("bind: %s of %s is already bound to %s"
                                      % (other.var.name, self.op.name, thread_iv.thread_tag))
        self._annotate(iv, "bind", ("bind", thread_iv))

    def launch_bounds(self, min_blocks):
        """kiln's occupancy hint for the kernel that computes this stage (its output stage):
        at least ``min_blocks`` work-groups resident per SM (NVPTX ``.minnctapersm``: ptxas
        caps registers to fit them) or per CU (AMDGPU ``amdgpu-waves-per-eu``); ignored on
        the CPU. docs/te.md §5."""
        if not isinstance(min_blocks, int) or isinstance(min_blocks, bool) or not 1 <= min_blocks <= 32:
            raise InvalidArgument("launch_bounds: min_blocks is an int from 1 to 32, not %r" % (min_blocks,))
        self._no_inline("launch_bounds")
        self.launch_min_blocks = min_blocks
        self.schedule.log.append(("launch_bounds", self, min_blocks))

    def unroll(self, iv):
        self._annotate(iv, "unroll", ("unroll",))

    def vectorize(self, iv):
        self._annotate(iv, "vectorize", ("vectorize",))

    def parallel(self, iv, chunk=None):
        """Runs loop ``iv`` over the CPU pool: by default in one share per pool thread;
        ``chunk=n`` (kiln's knob) gives each work-group n iterations."""
        if iv.iter_type == IterVar.REDUCE:
            raise InvalidArgument("parallel: %s is a reduction loop" % iv.var.name)
        if chunk is not None and (not isinstance(chunk, int) or isinstance(chunk, bool) or not 1 <= chunk <= 1 << 30):
            raise InvalidArgument("parallel: chunk is an int from 1 to 2**30, not %r" % (chunk,))
        self._annotate(iv, "parallel", ("parallel", chunk))

    def pragma(self, iv, name, value=None):
        if name in ("unroll", "vectorize", "parallel"):
            getattr(self, name)(iv)
        # other pragmas are hints TVM passes to its code generators; kiln ignores them

    def compute_at(self, parent, scope):
        """Computes this stage inside loop ``scope`` of stage ``parent``."""
        if not isinstance(parent, Stage):
            parent = self.schedule[parent]
        if parent is self:
            raise InvalidArgument("compute_at: a stage cannot be computed inside itself")
        parent._check_leaf(scope, "compute_at")
        if isinstance(self.op, PlaceholderOp):
            raise InvalidArgument("compute_at: %s is an input" % self.op.name)
        self.attach = ("at", parent, scope)
        self.schedule.log.append(("compute_at", self, parent, scope))

    def compute_inline(self):
        """Substitutes this stage's body into its readers (no buffer, no loops)."""
        if not isinstance(self.op, ComputeOp):
            raise InvalidArgument("compute_inline: %s is an input" % self.op.name)
        if self.op.reduce_axis:
            raise InvalidArgument("compute_inline: %s is a reduction and cannot be inlined" % self.op.name)
        if self.orig_op in [t.op for t in self.schedule.outputs]:
            raise InvalidArgument("compute_inline: %s is an output of the schedule" % self.op.name)
        self.attach = "inline"
        self.schedule.log.append(("compute_inline", self))

    def compute_root(self):
        if self.attach != "root":
            raise InvalidArgument("compute_root: kiln cannot undo compute_at/compute_inline of %s" % self.op.name)

    def set_scope(self, scope):
        if scope not in ("global", "shared", "local", "warp"):
            raise InvalidArgument("set_scope: scope is global, shared or local, not %r" % (scope,))
        self.scope = scope

    def storage_align(self, axis, factor, offset):
        """Pads the storage stride of dimension ``axis`` (one of ``op.axis``) to the next
        k * factor + offset elements (shared tiles without bank conflicts); for a stage
        attached inside a kernel (docs/te.md §5)."""
        if axis not in list(self.op.axis):
            raise InvalidArgument("storage_align: %r is not an axis of %s" % (axis, self.op.name))
        factor, offset = int(factor), int(offset)
        if not 1 <= factor <= 4096 or not 0 <= offset < factor:
            raise InvalidArgument("storage_align: factor is 1..4096 and offset 0..factor-1, not %d, %d"
                                  % (factor, offset))
        self._no_inline("storage_align")
        self.aligns[axis] = (factor, offset)
        self.schedule.log.append(("storage_align", self, axis, factor, offset))

    def storage_order(self, *axes):
        """Lays the stage's storage out with its dimensions in this order, outermost first
        (every one of ``op.axis`` once): ``storage_order(k, m)`` stores an m x k tile k-major,
        so that reads along m are contiguous (a transposed shared tile); for a stage attached
        inside a kernel (docs/te.md §5)."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        own = list(self.op.axis)
        if sorted(own.index(a) if a in own else -1 for a in axes) != list(range(len(own))):
            raise InvalidArgument("storage_order: name each axis of %s once (%d axes), outermost first"
                                  % (self.op.name, len(own)))
        self._no_inline("storage_order")
        self.schedule.log.append(("storage_order", self, tuple(axes)))

    def double_buffer(self):
        """A shared stage attached at a loop of its reader is filled for iteration i + 1
        (through registers) while iteration i reads it: two halves, one barrier an iteration
        (docs/te.md §5)."""
        self._no_inline("double_buffer")
        if self.op.reduce_axis:
            raise InvalidArgument("double_buffer: %s is a reduction" % self.op.name)
        self.schedule.log.append(("double_buffer", self))

    def __repr__(self):
        return "stage(%s)" % self.op.name


class Schedule:
    """``s = te.create_schedule(C.op)``; ``s[C]`` is C's Stage."""

    def __init__(self, ops):
        self.outputs = [op.output(0) for op in ops]
        self.stages = []
        self._by_op = {}
        self.log = []               # primitives in call order (what the payload carries)
        self._axis_names = {}       # id(op) -> wire names of its loops (filled by the payload)
        self.program_ops = _post_order(ops)
        for op in self.program_ops:
            self._add(op)

    def _add(self, op, index=None):
        st = Stage(op, self)
        if index is None:
            self.stages.append(st)
        else:
            self.stages.insert(index, st)
        self._by_op[op] = st
        return st

    def __getitem__(self, key):
        op = key.op if isinstance(key, Tensor) else key
        st = self._by_op.get(op)
        if st is None:
            raise InvalidArgument("%r is not part of this schedule" % (key,))
        return st

    def cache_read(self, tensor, scope, readers):
        """A copy of ``tensor`` in ``scope`` ("shared" or "local") that ``readers`` (a
        tensor or list of tensors) read instead of it; returns the copy (its stage is
        placed with ``compute_at``)."""
        if scope not in ("shared", "local"):
            raise InvalidArgument("cache_read: scope is 'shared' or 'local', not %r" % (scope,))
        if isinstance(readers, (Tensor, Operation)):
            readers = [readers]
        reader_ops = [r.op if isinstance(r, Tensor) else r for r in readers]
        for r in reader_ops:
            if not isinstance(r, ComputeOp) or tensor not in r.input_tensors:
                raise InvalidArgument("cache_read: %s does not read %s" % (getattr(r, "name", r), tensor.name))
        name = "%s.%s" % (tensor.name, scope)
        shape = tensor.shape
        cop = ComputeOp(name, "cache_read", {}, [], None, shape, tensor.dtype)
        from .expr import IterVar as IV
        cop.axis = [IV(Range.from_min_extent(0, d), Var("ax%d" % k), IV.DATA_PAR) for k, d in enumerate(shape)]
        cop.body = TensorLoad(tensor, [a.var for a in cop.axis])
        cop.reduce_axis = []
        cache = Tensor(cop, shape, tensor.dtype)
        cop._outputs.append(cache)
        after = self.stages.index(self[tensor]) + 1
        st = self._add(cop, after)
        st.scope = scope
        st.cache_of = (tensor, reader_ops)
        self.log.append(("cache_read", st, tensor, scope, [self[r] for r in reader_ops]))
        return cache

    def cache_write(self, tensor, scope):
        """Computes ``tensor`` into a ``scope`` buffer and copies it out: returns the
        buffer's tensor (which takes over the body); ``tensor`` becomes the copy. "global"
        (TVM's CPU spelling) is storage the stage's compute_at decides: work-group memory
        when it binds threads, else per-work-item (docs/te.md §5)."""
        if scope not in ("shared", "local", "global"):
            raise InvalidArgument("cache_write: scope is 'shared', 'local' or 'global', not %r" % (scope,))
        op = tensor.op
        if not isinstance(op, ComputeOp):
            raise InvalidArgument("cache_write: %s is an input" % tensor.name)
        st_old = self[tensor]
        if st_old.relations or st_old.attrs or st_old.op is not op or tensor.op not in self.program_ops:
            raise InvalidArgument("cache_write: call it once, before scheduling %s" % tensor.name)
        # the new op takes the body and the original IterVars' ranges
        axis = [IterVar(a.dom, Var(a.var.name), IterVar.DATA_PAR) for a in op.axis]
        mapping = {a.var: n.var for a, n in zip(op.axis, axis)}
        # the reduce axes move to the new stage as they are (so C.op.reduce_axis names them)
        body = _substitute(op.body, mapping)
        cop = ComputeOp(op.name + "." + scope, op.tag, dict(op.attrs), axis, body, op.shape, op.dtype)
        cache = Tensor(cop, op.shape, op.dtype)
        cop._outputs.append(cache)
        # the stage of ``tensor`` now copies the buffer out, over the same axes (C.op.axis works)
        nop = ComputeOp(op.name, op.tag, dict(op.attrs), list(op.axis), None, op.shape, op.dtype)
        nop.body = TensorLoad(cache, [a.var for a in nop.axis])
        nop._outputs.append(tensor)
        st_old.op = nop
        st_old.all_iter_vars = list(nop.axis)
        st_old.leaf_iter_vars = list(nop.axis)
        self._by_op[nop] = st_old
        idx = self.stages.index(st_old)
        st = self._add(cop, idx)
        st.scope = scope
        st.cache_write_of = tensor
        self.log.append(("cache_write", st, tensor, scope, None))
        return cache

    def rfactor(self, tensor, axis, factor_axis=0):
        """TVM's rfactor: the reduce loop ``axis`` of ``tensor`` (a leaf, usually the inner
        part of a split) becomes a data axis of a new stage that reduces over the other
        reduce loops; ``tensor`` then reduces that stage over ``axis``'s range (its only
        reduce axis, named ``<axis>.v``). Returns the new stage's tensor."""
        st = self[tensor]
        op = st.op
        if not isinstance(op, ComputeOp) or not isinstance(op.orig_body, Reduce) or st.cache_write_of:
            raise InvalidArgument("rfactor: %s is not a reduction" % tensor.name)
        st._check_leaf(axis, "rfactor")
        if axis.iter_type != IterVar.REDUCE:
            raise InvalidArgument("rfactor: %s is not a reduce loop of %s" % (axis.var.name, tensor.name))
        if not isinstance(factor_axis, int) or not 0 <= factor_axis <= len(op.axis):
            raise InvalidArgument("rfactor: factor_axis is 0..%d, not %r" % (len(op.axis), factor_axis))
        if st.attach != "root":
            raise InvalidArgument("rfactor: call it before placing %s" % tensor.name)
        ext = st._extent(axis)
        axes = [IterVar(Range.from_min_extent(0, d), Var(a.var.name), IterVar.DATA_PAR) for a, d in zip(op.axis, op.shape)]
        fa = IterVar(Range.from_min_extent(0, ext), Var(axis.var.name), IterVar.DATA_PAR)
        axes.insert(factor_axis, fa)
        reds = [l for l in st.leaf_iter_vars if l.iter_type == IterVar.REDUCE and l is not axis]
        rf_red = [IterVar(Range.from_min_extent(0, st._extent(l)), Var(l.var.name), IterVar.REDUCE) for l in reds]
        shape = list(op.shape)
        shape.insert(factor_axis, ext)
        cop = ComputeOp(op.name + ".rf", "rfactor", {}, axes, None, tuple(shape), op.dtype)
        cop.reduce_axis = rf_red
        rf = Tensor(cop, tuple(shape), op.dtype)
        cop._outputs.append(rf)
        nst = self._add(cop, self.stages.index(st))
        nst.rfactor_of = tensor
        # the stage of ``tensor`` now reduces rf over the factored range
        rv = IterVar(Range.from_min_extent(0, ext), Var(axis.var.name + ".v"), IterVar.REDUCE)
        nop = ComputeOp(op.name, op.tag, dict(op.attrs), list(op.axis), None, op.shape, op.dtype)
        nop.reduce_axis = [rv]
        nop._outputs.append(tensor)
        old = list(st.leaf_iter_vars)
        st.op = nop
        st.leaf_iter_vars = [l for l in st.leaf_iter_vars if l.iter_type != IterVar.REDUCE] + [rv]
        st.all_iter_vars.append(rv)
        self._by_op[nop] = st
        self.log.append(("rfactor", st, axis, factor_axis, nst, rv, old, reds))
        return rf

    def normalize(self):
        return self


def create_schedule(ops):
    """``te.create_schedule(C.op)`` or a list of output ops."""
    if isinstance(ops, (Operation, Tensor)):
        ops = [ops]
    ops = [o.op if isinstance(o, Tensor) else o for o in ops]
    for o in ops:
        if not isinstance(o, Operation):
            raise InvalidArgument("create_schedule takes the output op(s) (C.op), not %r" % (o,))
    return Schedule(ops)


def _post_order(ops):
    out, seen = [], set()

    def visit(op):
        if op in seen:
            return
        seen.add(op)
        for t in op.input_tensors:
            visit(t.op)
        out.append(op)
    for op in ops:
        visit(op)
    return out


def _rebuild(e, fn):
    """A copy of expression ``e`` with ``fn`` applied bottom-up (fn returns None to keep)."""
    from . import expr as X
    r = fn(e)
    if r is not None:
        return r
    if isinstance(e, X.BinaryOp):
        return X.BinaryOp(e.op, _rebuild(e.a, fn), _rebuild(e.b, fn), e.dtype)
    if isinstance(e, X.Compare):
        return X.Compare(e.op, _rebuild(e.a, fn), _rebuild(e.b, fn))
    if isinstance(e, X.Logical):
        return X.Logical(e.op, _rebuild(e.a, fn), _rebuild(e.b, fn))
    if isinstance(e, X.Not):
        return X.Not(_rebuild(e.a, fn))
    if isinstance(e, X.Select):
        return X.Select(_rebuild(e.cond, fn), _rebuild(e.t, fn), _rebuild(e.f, fn), getattr(e, "lazy", False))
    if isinstance(e, X.Cast):
        return X.Cast(e.dtype, _rebuild(e.value, fn))
    if isinstance(e, X.Call):
        return X.Call(e.name, [_rebuild(a, fn) for a in e.args], e.dtype)
    if isinstance(e, X.TensorLoad):
        return X.TensorLoad(e.tensor, [_rebuild(i, fn) for i in e.indices])
    if isinstance(e, X.Reduce):
        r = X.Reduce.__new__(X.Reduce)
        r.combiner, r.axis, r.init, r.dtype = e.combiner, e.axis, e.init, e.dtype
        r.source = _rebuild(e.source, fn)
        r.where = None if e.where is None else _rebuild(e.where, fn)
        return r
    return e


def _substitute(e, mapping):
    def fn(x):
        if isinstance(x, Var):
            return mapping.get(x, x)
        return None
    return _rebuild(e, fn)
