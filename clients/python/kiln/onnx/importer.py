"""ONNX model -> kiln graph payload (docs/graph.md).

Steps, each failing with a clear kiln.InvalidArgument before anything reaches the daemon:
load and check the model, refuse what kiln cannot run (unsupported operators, external
weights, cycles), fix the input shapes, infer every value's dtype and shape, fold constants
and shape arithmetic, fold BatchNormalization into the convolution before it, turn
reshapes into views, group each convolution or matrix product with the element-wise nodes
after it, and lower every group to one te program through kiln.topi.
"""

import collections
import os

import numpy as np

from .. import te, topi
from ..topi import gemv_gpu
from ..errors import InvalidArgument
from .ops import OPS, SUPPORTED, ONNX_DTYPES, NodeError, fail, ishape, carray
from .payload import GraphPayload

MAX_MODEL_BYTES = 2 ** 31 - 1     # protobuf's own limit for one message


def _onnx():
    try:
        import onnx
        import onnx.numpy_helper  # noqa: F401
    except ImportError as e:
        raise InvalidArgument("kiln.onnx needs the onnx package (Debian: apt install python3-onnx; "
                              "or pip install onnx): %s" % e) from None
    return onnx


class Val:
    __slots__ = ("name", "dtype", "shape", "const", "producer")

    def __init__(self, name, dtype, shape, const=None, producer=None):
        self.name, self.dtype, self.shape, self.const, self.producer = name, dtype, tuple(shape), const, producer

    def __repr__(self):
        return "Val(%s %s %s%s)" % (self.name, self.dtype, self.shape, " const" if self.const is not None else "")


class Node:
    def __init__(self, op, name, inputs, outputs, attrs, index):
        self.op, self.name, self.inputs, self.outputs, self.attrs = op, name, inputs, outputs, attrs
        self.index = index
        self.out_shapes = []
        self.in_vals = []
        self.ew_inputs = None      # element-wise operands: the first ew_inputs inputs (None: all)
        self.folded_into = None    # name of the node this one was folded into (BatchNormalization)

    @property
    def kind(self):
        return OPS[self.op].kind

    def __repr__(self):
        return "%s(%s)" % (self.op, self.name)


def load(model):
    """A ModelProto from a path, bytes or a ModelProto; the weights must be inside the model."""
    onnx = _onnx()
    from google.protobuf.message import DecodeError
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        where = "the model bytes"
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise InvalidArgument("no ONNX model at %r" % path)
        size = os.path.getsize(path)
        if size > MAX_MODEL_BYTES:
            raise InvalidArgument("%s is %d bytes: ONNX files over 2 GiB keep their weights in external data, "
                                  "which kiln.onnx does not read" % (path, size))
        with open(path, "rb") as f:
            data = f.read()
        where = path
    else:
        raise InvalidArgument("import_model takes a path, bytes or an onnx.ModelProto, not %s" % type(model).__name__)
    if not data:
        raise InvalidArgument("%s is empty, not an ONNX model" % where)
    m = onnx.ModelProto()
    try:
        m.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InvalidArgument("%s is not an ONNX model (malformed or truncated protobuf: %s)" % (where, e)) from None
    if not m.HasField("graph") or (not m.graph.node and not m.graph.output):
        raise InvalidArgument("%s is not an ONNX model (no graph; a truncated or foreign file?)" % where)
    return m


def _attrs(onnx, node):
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if a.type == onnx.AttributeProto.TENSOR:
            v = onnx.numpy_helper.to_array(v)
        elif isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        out[a.name] = v
    return out


def _tensor_array(onnx, t, what):
    if t.data_location == onnx.TensorProto.EXTERNAL or t.external_data:
        raise InvalidArgument("%s %r keeps its data in an external file (ONNX external data, used by models over "
                              "2 GiB); kiln.onnx reads only weights stored inside the model" % (what, t.name))
    if t.data_type not in ONNX_DTYPES:
        raise InvalidArgument("%s %r has ONNX element type %d, which kiln does not take (it takes %s)"
                              % (what, t.name, t.data_type, ", ".join(sorted(set(ONNX_DTYPES.values())))))
    try:
        a = onnx.numpy_helper.to_array(t)
    except Exception as e:   # protobuf/numpy raise several kinds for inconsistent tensors
        raise InvalidArgument("%s %r is malformed: %s" % (what, t.name, e)) from None
    return carray(a)


class Importer:
    """Does the whole import; ``payload`` is the GraphPayload, ``groups`` the fused kernels."""

    def __init__(self, model, input_shapes=None, target="cpu", knobs=None, constant_inputs=None):
        onnx = _onnx()
        self.onnx = onnx
        self.model = load(model)
        self.target = target
        self.knobs = knobs or {}
        g = self.model.graph
        self.opset = 1
        for imp in self.model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = imp.version
        self.vals = {}
        self._check_structure(g)
        try:
            onnx.checker.check_model(self.model)
        except Exception as e:   # onnx.checker.ValidationError and protobuf errors
            raise InvalidArgument("the model does not pass onnx.checker: %s" % str(e).strip().splitlines()[0]
                                  if str(e).strip() else "the model does not pass onnx.checker") from None
        self._constants(g)
        self._fix_inputs(g, constant_inputs or {})
        self._inputs(g, input_shapes)
        self._infer()
        self.outputs = [o.name for o in g.output]
        for o in self.outputs:
            if o not in self.vals:
                raise InvalidArgument("graph output %r is produced by no node" % o)
        self._fold_batchnorm()
        self._group()
        self.payload = self._lower()

    # -- structure ------------------------------------------------------------------------

    def _check_structure(self, g):
        """Unsupported operators, cycles and undefined inputs, before onnx's checker (whose
        message for a cycle does not say 'cycle')."""
        bad = collections.OrderedDict()
        for i, n in enumerate(g.node):
            if n.domain not in ("", "ai.onnx"):
                bad.setdefault("%s:%s" % (n.domain, n.op_type), []).append(n.name or "#%d" % i)
            elif n.op_type not in SUPPORTED:
                bad.setdefault(n.op_type, []).append(n.name or "#%d" % i)
        if bad:
            what = "; ".join("%s (node%s %s)" % (op, "s" if len(ns) > 1 else "", ", ".join(ns[:5]) +
                                                 (", ..." if len(ns) > 5 else "")) for op, ns in bad.items())
            raise InvalidArgument("the model uses operators kiln.onnx does not support: %s. Supported: %s"
                                  % (what, " ".join(SUPPORTED)))
        onnx = self.onnx
        for t in g.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL or t.external_data:
                raise InvalidArgument("initializer %r keeps its data in an external file (ONNX external data, used "
                                      "by models over 2 GiB); kiln.onnx reads only weights stored inside the model"
                                      % t.name)
        produced = {}
        for i, n in enumerate(g.node):
            for o in n.output:
                if o:
                    if o in produced:
                        raise InvalidArgument("value %r is written by two nodes (%s and %s)"
                                              % (o, produced[o][1], n.name or "#%d" % i))
                    produced[o] = (i, n.name or "#%d" % i)
        # Kahn's algorithm over node dependencies: what is left over sits on a cycle.
        deps = [set() for _ in g.node]
        users = [[] for _ in g.node]
        for i, n in enumerate(g.node):
            for x in n.input:
                if x in produced:
                    j = produced[x][0]
                    if i not in users[j]:
                        users[j].append(i)
                    deps[i].add(j)
        ready = [i for i in range(len(g.node)) if not deps[i]]
        seen = 0
        indeg = [len(d) for d in deps]
        while ready:
            i = ready.pop()
            seen += 1
            for u in users[i]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    ready.append(u)
        if seen != len(g.node):
            cyc = [g.node[i].name or "#%d" % i for i in range(len(g.node)) if indeg[i] > 0]
            raise InvalidArgument("the graph has a cycle through nodes %s" % ", ".join(cyc[:10]))

    def _constants(self, g):
        onnx = self.onnx
        for t in g.initializer:
            a = _tensor_array(onnx, t, "initializer")
            self.vals[t.name] = Val(t.name, a.dtype.name, a.shape, const=a)
        if g.sparse_initializer:
            raise InvalidArgument("sparse initializers are not supported")

    def _fix_inputs(self, g, fixed):
        names = [i.name for i in g.input if i.name not in self.vals]
        for k, a in fixed.items():
            if k not in names:
                raise InvalidArgument("constant_inputs names %r; the model's inputs are %s" % (k, ", ".join(names)))
            a = carray(a)
            if a.dtype.name not in ONNX_DTYPES.values():
                raise InvalidArgument("constant_inputs[%r] has dtype %s, which kiln does not take" % (k, a.dtype))
            self.vals[k] = Val(k, a.dtype.name, a.shape, const=a)

    def _inputs(self, g, input_shapes):
        onnx = self.onnx
        names = [i.name for i in g.input if i.name not in self.vals]
        if input_shapes is None:
            input_shapes = {}
        elif isinstance(input_shapes, (list, tuple)):
            if len(input_shapes) != len(names):
                raise InvalidArgument("input_shapes lists %d shapes; the model has %d inputs (%s)"
                                      % (len(input_shapes), len(names), ", ".join(names)))
            input_shapes = dict(zip(names, input_shapes))
        elif not isinstance(input_shapes, dict):
            raise InvalidArgument("input_shapes is a dict {name: shape} or a list of shapes in input order")
        for k in input_shapes:
            if k not in names:
                raise InvalidArgument("input_shapes names %r; the model's inputs are %s" % (k, ", ".join(names)))
        self.inputs = []
        for i in g.input:
            if i.name in self.vals:
                continue   # an initializer listed as an input (older exporters): a constant
            tt = i.type.tensor_type
            if not i.type.HasField("tensor_type"):
                raise InvalidArgument("input %r is not a tensor (sequences, maps and optionals are not supported)"
                                      % i.name)
            dt = ONNX_DTYPES.get(tt.elem_type)
            if dt is None:
                raise InvalidArgument("input %r has ONNX element type %d, which kiln does not take"
                                      % (i.name, tt.elem_type))
            model_dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
            given = input_shapes.get(i.name)
            if given is not None:
                try:
                    given = tuple(int(d) for d in given)
                except (TypeError, ValueError):
                    raise InvalidArgument("input_shapes[%r] is %r, not a tuple of ints" % (i.name, given)) from None
                if any(d < 0 for d in given):
                    raise InvalidArgument("input_shapes[%r] = %s has a negative dimension" % (i.name, given))
                if tt.HasField("shape"):
                    if len(given) != len(model_dims):
                        raise InvalidArgument("input_shapes[%r] = %s has rank %d; the model declares %s"
                                              % (i.name, given, len(given), model_dims))
                    for d, m in zip(given, model_dims):
                        if isinstance(m, int) and m != d:
                            raise InvalidArgument("input_shapes[%r] = %s differs from the model's fixed %s"
                                                  % (i.name, given, model_dims))
                shape = given
            else:
                if not tt.HasField("shape"):
                    raise InvalidArgument("input %r has no shape in the model: give input_shapes={%r: (...)}"
                                          % (i.name, i.name))
                dyn = [m for m in model_dims if not isinstance(m, int)]
                if dyn:
                    raise InvalidArgument("input %r has dynamic dimensions %s (shape %s): kiln compiles for fixed "
                                          "shapes; give input_shapes={%r: (...)}"
                                          % (i.name, ", ".join(map(str, dyn)), model_dims, i.name))
                shape = tuple(model_dims)
            v = Val(i.name, dt, shape)
            self.vals[i.name] = v
            self.inputs.append(v)

    # -- inference and folding ------------------------------------------------------------

    def _infer(self):
        onnx = self.onnx
        self.nodes = []
        used_names = set()
        for idx, n in enumerate(self.model.graph.node):
            name = n.name or "%s_%d" % (n.op_type, idx)
            while name in used_names:
                name += "_"
            used_names.add(name)
            node = Node(n.op_type, name, [x or None for x in n.input], [x for x in n.output], _attrs(onnx, n), idx)
            if node.op == "Constant":
                self._constant_node(node)
                continue
            ins = []
            for x in node.inputs:
                if x is None:
                    ins.append(None)
                    continue
                v = self.vals.get(x)
                if v is None:
                    fail(node, "input %r is not produced by any earlier node, initializer or graph input" % x)
                ins.append(v)
            op = OPS[node.op]
            if node.op == "PRelu" and len(ins) == 2 and ins[1] is not None and ins[1].const is not None and \
                    len(ins[0].shape) > 2 and len(ins[1].shape) == 1 and ins[1].shape[0] == ins[0].shape[1] and \
                    ins[1].shape[0] != ins[0].shape[-1]:
                # opset 6 and older exports: a 1-d slope runs along the channel axis
                nm = self._fresh(ins[1].name + ".channels")
                a = ins[1].const.reshape((-1,) + (1,) * (len(ins[0].shape) - 2))
                self.vals[nm] = Val(nm, a.dtype.name, a.shape, const=a)
                node.inputs[1] = nm
                ins[1] = self.vals[nm]
            if len([v for v in ins if v is not None]) < op.min_inputs or not ins or ins[0] is None:
                fail(node, "has %d inputs; it needs at least %d" % (len([v for v in ins if v]), op.min_inputs))
            node.in_vals = ins
            outs = op.infer(node, ins)
            node.out_shapes = [tuple(s) for _, s in outs]
            for o, (dt, shape) in zip(node.outputs, outs):
                if o:
                    self.vals[o] = Val(o, dt, shape, producer=node)
            if node.op == "BatchNormalization":
                self._bn_constants(node)
            mask = node.attrs.get("_mask")
            if mask is not None:
                self.vals[node.outputs[1]].const = mask
            self._maybe_fold(node, ins)
            self.nodes.append(node)

    def _constant_node(self, node):
        a = node.attrs
        if "value" in a:
            v = a["value"]
        elif "value_float" in a:
            v = np.array(a["value_float"], np.float32)
        elif "value_floats" in a:
            v = np.array(a["value_floats"], np.float32)
        elif "value_int" in a:
            v = np.array(a["value_int"], np.int64)
        elif "value_ints" in a:
            v = np.array(a["value_ints"], np.int64)
        else:
            fail(node, "a Constant with %s is not supported (tensor, float(s) or int(s) values are)"
                 % ", ".join(a) or "no value")
        v = carray(v)
        if v.dtype.name not in ONNX_DTYPES.values():
            fail(node, "constant of dtype %s is not supported" % v.dtype)
        self.vals[node.outputs[0]] = Val(node.outputs[0], v.dtype.name, v.shape, const=v)

    def _bn_constants(self, node):
        x = self.vals[node.inputs[0]]
        shape = (x.shape[1],) + (1,) * (len(x.shape) - 2)
        names = []
        for k in ("_a", "_b"):
            nm = self._fresh("%s.%s" % (node.name, k[1:]))
            self.vals[nm] = Val(nm, x.dtype, shape, const=node.attrs[k].reshape(shape))
            names.append(nm)
        node.inputs = [node.inputs[0]] + names
        node.in_vals = [x] + [self.vals[n] for n in names]

    def _fresh(self, base):
        n, k = base, 1
        while n in self.vals:
            n = "%s.%d" % (base, k)
            k += 1
        return n

    def _maybe_fold(self, node, ins):
        op = OPS[node.op]
        live = [v for v in ins if v is not None]
        if op.fold is None:
            if op.kind == "shape":
                fail(node, "its inputs are computed at run time; kiln folds this operator only on constants")
            return
        if op.kind != "shape" and not all(v.const is not None for v in live):
            return
        if op.kind == "shape" and node.op not in ("Shape", "Size") and \
                not all(v.const is not None for v in live):
            if node.op in ("Equal", "Where", "Expand"):
                fail(node, "its inputs are computed at run time; kiln folds this operator only on constants")
        try:
            outs = op.fold(node, [v.const for v in live])
        except NodeError:
            raise
        except Exception as e:   # numpy errors on values the checks let through
            fail(node, "folding it failed: %s" % e)
        for o, a in zip(node.outputs, outs):
            if o:
                a = carray(a)
                v = self.vals[o]
                if tuple(a.shape) != v.shape:
                    fail(node, "internal: folded shape %s, inferred %s" % (a.shape, v.shape))
                v.const = a.astype(v.dtype)
        node.folded = True

    # -- graph passes ---------------------------------------------------------------------

    def _live_nodes(self):
        """Nodes that run on the device and whose outputs someone needs, in order."""
        needed = set(self.outputs)
        live = []
        for node in reversed(self.nodes):
            if getattr(node, "folded", False) or node.folded_into:
                continue
            if not any(o in needed for o in node.outputs if o):
                continue
            live.append(node)
            for x in node.inputs:
                if x:
                    needed.add(x)
        return live[::-1]

    def _consumers(self, nodes):
        c = collections.defaultdict(list)
        for n in nodes:
            for x in set(x for x in n.inputs if x):
                c[x].append(n)
        return c

    def _fold_batchnorm(self):
        """Conv -> BatchNormalization (constant weights, the conv's output read by nothing
        else): the BN's scale goes into the weights and its shift into the bias."""
        nodes = self._live_nodes()
        cons = self._consumers(nodes)
        for n in nodes:
            if n.op != "Conv" or n.outputs[0] in self.outputs:
                continue
            users = cons.get(n.outputs[0], [])
            if len(users) != 1 or users[0].op != "BatchNormalization" or users[0].inputs[0] != n.outputs[0]:
                continue
            bn = users[0]
            w = self.vals[n.inputs[1]]
            b = self.vals[n.inputs[2]] if len(n.inputs) > 2 and n.inputs[2] else None
            if w.const is None or (b is not None and b.const is None):
                continue
            a = bn.attrs["_a"].astype(np.float64)
            shift = bn.attrs["_b"].astype(np.float64)
            wn = (w.const.astype(np.float64) * a.reshape((-1,) + (1,) * (w.const.ndim - 1))).astype(w.dtype)
            bias = b.const.astype(np.float64) if b is not None else np.zeros(a.shape)
            bn_bias = (bias * a + shift).astype(w.dtype)
            wname, bname = self._fresh(n.name + ".w_bn"), self._fresh(n.name + ".b_bn")
            self.vals[wname] = Val(wname, w.dtype, wn.shape, const=carray(wn))
            self.vals[bname] = Val(bname, w.dtype, bn_bias.shape, const=bn_bias)
            n.inputs = [n.inputs[0], wname, bname]
            n.in_vals = [self.vals[n.inputs[0]], self.vals[wname], self.vals[bname]]
            out = bn.outputs[0]
            self.vals[out].producer = n
            n.outputs = [out]
            n.fused_bn = bn.name
            bn.folded_into = n.name

    def _group(self):
        """Kernel groups: each live non-view node starts one, and an anchor or element-wise
        start absorbs the element-wise nodes after it while the value between them has that
        one reader, is no graph output and keeps its shape."""
        nodes = self._live_nodes()
        cons = self._consumers(nodes)
        outputs = set(self.outputs)
        taken = set()
        self.groups = []
        self.views = []
        for n in nodes:
            if id(n) in taken:
                continue
            if n.kind == "view":
                self.views.append(n)
                continue
            group = [n]
            if n.kind in ("anchor", "elementwise") or (n.kind == "other" and n.op in ("Transpose", "Concat", "Pad",
                                                                                     "DepthToSpace", "Slice")):
                cur = n.outputs[0]
                while cur not in outputs:
                    users = cons.get(cur, [])
                    if len(users) != 1:
                        break
                    u = users[0]
                    if u.kind != "elementwise" or id(u) in taken or self.vals[u.outputs[0]].shape != self.vals[cur].shape:
                        break
                    k = u.ew_inputs if u.ew_inputs is not None else len(u.inputs)
                    if cur in u.inputs[k:]:
                        break
                    group.append(u)
                    taken.add(id(u))
                    cur = u.outputs[0]
            taken.add(id(n))
            self.groups.append(group)

    # -- lowering -------------------------------------------------------------------------

    def _lower(self):
        p = GraphPayload(name=self.model.graph.name or "model")
        for v in self.inputs:
            p.add_input(v.name, v.dtype, v.shape)
        order = []   # (position, kind, item): groups run at their last node's place, views at theirs
        for gr in self.groups:
            order.append((max(x.index for x in gr), 0, gr))
        for v in self.views:
            order.append((v.index, 1, v))
        order.sort(key=lambda t: (t[0], t[1]))
        self._written = set(v.name for v in self.inputs)
        for _, kind, item in order:
            if kind == 1:
                self._lower_view(p, item)
            else:
                self._lower_group(p, item)
        for o in self.outputs:
            v = self.vals[o]
            if v.const is not None and not p.has(o):
                p.add_constant(o, v.const)
            elif not p.has(o):
                raise InvalidArgument("graph output %r is not computed by the graph" % o)
            p.add_output(o)
        return p

    def _ensure(self, p, v):
        """Makes value v known to the payload (a constant the first time a kernel reads it)."""
        if p.has(v.name):
            return
        if v.const is not None:
            p.add_constant(v.name, v.const)
            return
        raise InvalidArgument("internal: value %r is read before anything writes it" % v.name)

    def _lower_view(self, p, node):
        src = self.vals[node.inputs[0]]
        self._ensure(p, src)
        for o, shape in zip(node.outputs[:1], node.out_shapes[:1]):
            p.add_view(o, src.name, shape, label="%s %s" % (node.op, node.name))
        if len(node.outputs) > 1 and node.outputs[1]:
            m = self.vals[node.outputs[1]]
            if not p.has(m.name):
                p.add_constant(m.name, m.const)

    def _lower_group(self, p, group):
        base = group[0]
        ctx = KernelCtx(self, p)
        steps = []
        if base.kind in ("anchor", "other"):
            T, lshape, mapping = OPS[base.op].lower(ctx, base, base.in_vals)
            lshape = tuple(lshape)
            phys = ishape(T)
            steps += self._anchor_extras(ctx, base)
            ew_nodes = group[1:]
        else:
            T, mapping = None, None
            lshape = tuple(self.vals[base.outputs[0]].shape)
            phys = lshape if lshape else (1,)
            if not lshape:
                mapping = lambda i: ()   # noqa: E731  (a 0-d value is one element)
            ew_nodes = group
        chain = base.outputs[0] if T is not None else None
        for u in ew_nodes:
            steps.append(self._ew_step(ctx, u, chain, lshape, phys, mapping))
            chain = u.outputs[0]
        out_val = self.vals[group[-1].outputs[0]]
        if steps:
            def body(*pi):
                li = mapping(*pi) if callable(mapping) else pi
                v = T[pi] if T is not None else None
                for st in steps:
                    v = st(v, pi, li)
                return v
            final = te.compute(phys, body, name="out", tag="injective")
        else:
            final = T
        if final.dtype != out_val.dtype:
            raise InvalidArgument("internal: kernel of %s computes %s, the value is %s"
                                  % (group[-1].name, final.dtype, out_val.dtype))
        s = topi.schedule_fused(final, self.target, **self.knobs.get(self._template(T), {}))
        args = ctx.placeholders + [final]
        prog = te.lower(s, args, name="k")
        out_name = ctx.bind_output(out_val, phys)
        label = "+".join("%s %s" % (n.op, n.name) for n in group)
        if getattr(base, "fused_bn", None):
            label = label.replace("Conv %s" % base.name, "Conv %s+BatchNormalization %s" % (base.name, base.fused_bn),
                                  1)
        onnx_nodes = [n.name for n in group]
        if getattr(base, "fused_bn", None):
            onnx_nodes.insert(1, base.fused_bn)
        temps = []
        for k, t in enumerate(prog.temps):
            nm = p.fresh("%s.tmp%d" % (group[-1].name, k))
            p.add_value(nm, t.dtype, ishape(t))
            temps.append(nm)
        p.add_node(name=group[-1].name if len(group) == 1 else "%s..%s" % (group[0].name, group[-1].name),
                   program=prog.payload, kernels=[k["name"] for k in prog.kernels],
                   args=ctx.arg_names + [out_name] + temps, label=label, onnx_nodes=onnx_nodes,
                   writes=[out_name] + temps)

    def _template(self, T):
        if T is None:
            return "generic"
        a = topi.anchor_of(T)
        if a is None:
            return "generic"
        if a.op.name == "conv2d_pointwise":    # a 1x1 convolution as a GEMM (its own GPU schedule)
            return "fused_pointwise"
        if topi.is_gpu(self.target) and gemv_gpu.fits(a):    # an fc layer at batch 1: split-K
            return "fused_gemv"
        return {"conv2d_nchw": "fused_conv2d", "depthwise_conv2d_nchw": "fused_depthwise"}.get(a.op.tag,
                                                                                              "fused_matmul")

    def _anchor_extras(self, ctx, node):
        """The bias of Conv and alpha/beta/C of Gemm, as the first epilogue steps."""
        steps = []
        if node.op in ("Conv", "ConvTranspose") and len(node.inputs) > 2 and node.inputs[2]:
            b = self.vals[node.inputs[2]]
            nsp = len(self.vals[node.outputs[0]].shape) - 2
            bview = Val(b.name, b.dtype, b.shape + (1,) * nsp, const=b.const)

            def add_bias(v, pi, li, b=bview):
                return v + ctx.load(b, pi, li)
            steps.append(add_bias)
        if node.op == "Gemm":
            alpha = float(node.attrs.get("alpha", 1.0))
            beta = float(node.attrs.get("beta", 1.0))
            c = self.vals[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
            dt = self.vals[node.outputs[0]].dtype

            def gemm_tail(v, pi, li):
                if alpha != 1.0:
                    v = v * te.const(alpha, dt)
                if c is not None and beta != 0.0:
                    cv = ctx.load(c, pi, li)
                    v = v + (cv * te.const(beta, dt) if beta != 1.0 else cv)
                return v
            if alpha != 1.0 or (c is not None and beta != 0.0):
                steps.append(gemm_tail)
        return steps

    def _ew_step(self, ctx, u, chain, lshape, phys, mapping):
        op = OPS[u.op]
        k = u.ew_inputs if u.ew_inputs is not None else len(u.inputs)
        operands = [self.vals[x] if x else None for x in u.inputs[:k]]
        dt = self.vals[u.outputs[0]].dtype

        def step(v, pi, li):
            xs = []
            for x in operands:
                if x is None:
                    continue
                if chain is not None and x.name == chain:
                    xs.append(v)
                else:
                    xs.append(ctx.load(x, pi, li, lshape, phys, mapping))
            return op.ew(u, xs, dt)
        return step


class KernelCtx:
    """The arguments of one kernel: a te placeholder per (value, shape) it reads, named
    x0, x1, ... in order of first use, so the same layer shape gives the same program."""

    def __init__(self, imp, payload):
        self.imp = imp
        self.p = payload
        self.opset = imp.opset
        self.placeholders = []
        self.arg_names = []
        self._by = {}

    def input(self, v, shape=None):
        shape = tuple(v.shape if shape is None else shape) or (1,)
        key = (v.name, shape)
        t = self._by.get(key)
        if t is not None:
            return t
        if int(np.prod(shape, dtype=np.int64)) != int(np.prod(v.shape, dtype=np.int64)):
            raise InvalidArgument("internal: %s %s read as %s" % (v.name, v.shape, shape))
        self.imp._ensure(self.p, v)
        name = v.name if tuple(v.shape) == shape else self.p.view_of(v.name, shape)
        t = te.placeholder(shape, v.dtype, name="x%d" % len(self.placeholders))
        self._by[key] = t
        self.placeholders.append(t)
        self.arg_names.append(name)
        return t

    def const(self, array):
        """A constant made at import (a transposed weight): a new graph constant."""
        array = carray(array)
        name = self.p.fresh("const%d" % len(self.p.constants))
        v = Val(name, array.dtype.name, array.shape, const=array)
        self.imp.vals[name] = v
        return self.input(v)

    def load(self, v, pi, li, lshape=None, phys=None, mapping=None):
        """Element of value v for the kernel element at physical index pi / logical index li
        (numpy broadcasting against the logical shape); one-element constants become
        immediates."""
        if v.const is not None and v.const.size == 1:
            return te.const(v.const.reshape(-1)[0].item(), v.dtype)
        if lshape is not None and tuple(v.shape) == tuple(lshape) and phys is not None and mapping is not None:
            return self.input(v, phys)[tuple(pi)]
        r = len(v.shape)
        idx = [0 if d == 1 else li[len(li) - r + i] for i, d in enumerate(v.shape)]
        if not idx:
            return self.input(v, (1,))[0]
        return self.input(v)[tuple(idx)]

    def bind_output(self, v, phys):
        self.p.add_value(v.name, v.dtype, v.shape)
        if tuple(v.shape) == tuple(phys):
            return v.name
        return self.p.view_of(v.name, phys)
