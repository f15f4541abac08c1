"""The graph payload of docs/graph.md, built up by the importer and encoded in the wire's
fixed key order (the graph id is a hash of these bytes, so one model always gives the same
bytes)."""

import msgpack
import numpy as np

from ..errors import InvalidArgument
from .ops import carray

__all__ = ["GraphPayload", "GRAPH_VERSION"]

GRAPH_VERSION = 1


class PNode:
    """One node: a program (index into ``programs``), its kernels launched in order with one
    argument list, and what the importer keeps for people (label, the ONNX nodes in it)."""

    def __init__(self, name, program, kernels, args, label, onnx_nodes, writes):
        self.name, self.program, self.kernels, self.args = name, program, kernels, args
        self.label, self.onnx_nodes, self.writes = label, onnx_nodes, writes

    def __repr__(self):
        return "<node %s: %s>" % (self.name, self.label)


class GraphPayload:
    def __init__(self, name="graph"):
        self.name = name
        self.inputs = []       # (name, dtype, shape)
        self.outputs = []      # names
        self.constants = []    # (name, numpy array)
        self.values = []       # (name, dtype, shape)
        self.views = []        # (name, of, shape)
        self.programs = []     # te payload bytes
        self.nodes = []        # PNode
        self._kinds = {}       # name -> "input" | "constant" | "value" | "view"
        self._shape = {}
        self._dtype = {}
        self._program_index = {}
        self._view_index = {}

    # -- building -------------------------------------------------------------------------

    def has(self, name):
        return name in self._kinds

    def kind(self, name):
        return self._kinds[name]

    def shape(self, name):
        return self._shape[name]

    def dtype(self, name):
        return self._dtype[name]

    def fresh(self, base):
        n, k = base, 1
        while n in self._kinds:
            n = "%s.%d" % (base, k)
            k += 1
        return n

    def _declare(self, name, kind, dtype, shape):
        if name in self._kinds:
            raise InvalidArgument("internal: graph name %r declared twice" % name)
        if not isinstance(name, str) or not name or len(name.encode()) > 255:
            raise InvalidArgument("graph names are 1 to 255 bytes of UTF-8, not %r" % (name,))
        self._kinds[name] = kind
        self._shape[name] = tuple(int(d) for d in shape)
        self._dtype[name] = dtype

    def add_input(self, name, dtype, shape):
        self._declare(name, "input", dtype, shape)
        self.inputs.append((name, dtype, tuple(shape)))

    def add_constant(self, name, array):
        array = carray(array)
        self._declare(name, "constant", array.dtype.name, array.shape)
        self.constants.append((name, array))

    def add_value(self, name, dtype, shape):
        if name in self._kinds:
            if self._kinds[name] != "value" or self._shape[name] != tuple(shape):
                raise InvalidArgument("internal: value %r redeclared" % name)
            return
        self._declare(name, "value", dtype, shape)
        self.values.append((name, dtype, tuple(shape)))

    def base(self, name):
        while self._kinds.get(name) == "view":
            name = self._view_of[name]
        return name

    def add_view(self, name, of, shape, label=None):
        if of not in self._kinds:
            raise InvalidArgument("internal: view %r of unknown %r" % (name, of))
        shape = tuple(int(d) for d in shape)
        if int(np.prod(shape, dtype=np.int64)) != int(np.prod(self._shape[of], dtype=np.int64)):
            raise InvalidArgument("internal: view %r %s of %r %s changes the element count"
                                  % (name, shape, of, self._shape[of]))
        self._declare(name, "view", self._dtype[of], shape)
        if not hasattr(self, "_view_of"):
            self._view_of = {}
        self._view_of[name] = of
        self.views.append((name, of, shape))

    def view_of(self, name, shape):
        """The name of a view of ``name`` with ``shape`` (made once per pair)."""
        shape = tuple(int(d) for d in shape)
        if self._shape.get(name) == shape:
            return name
        key = (name, shape)
        v = self._view_index.get(key)
        if v is None:
            v = self.fresh("%s@%s" % (name, "x".join(map(str, shape)) or "scalar"))
            self.add_view(v, name, shape)
            self._view_index[key] = v
        return v

    def add_node(self, name, program, kernels, args, label, onnx_nodes, writes):
        idx = self._program_index.get(program)
        if idx is None:
            idx = len(self.programs)
            self.programs.append(program)
            self._program_index[program] = idx
        names = set(n.name for n in self.nodes)
        base, k = name, 1
        while name in names:
            name = "%s.%d" % (base, k)
            k += 1
        self.nodes.append(PNode(name, idx, list(kernels), list(args), label, list(onnx_nodes), list(writes)))

    def add_output(self, name):
        if name not in self._kinds:
            raise InvalidArgument("internal: output %r is not in the graph" % name)
        self.outputs.append(name)

    # -- wire -----------------------------------------------------------------------------

    def to_wire(self, constant_ids=None):
        """The graph map of docs/graph.md. ``constant_ids`` ({name: tensor id}) sends those
        constants as tensor ids already on the device instead of inline."""
        constant_ids = constant_ids or {}
        consts = []
        for name, a in self.constants:
            if name in constant_ids:
                consts.append({"name": name, "id": int(constant_ids[name]), "dtype": a.dtype.name,
                               "shape": list(a.shape)})
            else:
                consts.append({"name": name, "tensor": {"dtype": a.dtype.name, "shape": list(a.shape),
                                                        "data": a.tobytes()}})
        nodes = []
        for n in self.nodes:
            args = [{"value": a} for a in n.args]
            nodes.append({"name": n.name, "program": n.program,
                          "launches": [{"kernel": k, "args": args} for k in n.kernels],
                          "label": n.label})
        return {
            "graph": GRAPH_VERSION,
            "name": self.name,
            "inputs": [{"name": n, "dtype": d, "shape": list(s)} for n, d, s in self.inputs],
            "outputs": list(self.outputs),
            "constants": consts,
            "values": [{"name": n, "dtype": d, "shape": list(s)} for n, d, s in self.values],
            "views": [{"name": n, "of": o, "shape": list(s)} for n, o, s in self.views],
            "programs": [{"format": "te", "ir": p} for p in self.programs],
            "nodes": nodes,
        }

    def encode(self, constant_ids=None):
        """The msgpack bytes sent as graph_create's ``graph``."""
        return msgpack.packb(self.to_wire(constant_ids), use_bin_type=True)

    def constant_bytes(self):
        return sum(a.nbytes for _, a in self.constants)
