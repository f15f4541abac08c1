"""kiln.onnx.Backend: onnx.backend.base.Backend on kiln, so onnx's BackendTest (the node,
pytorch-converted and model-zoo test data) runs against kilnd.

    from kiln.onnx import Backend
    rep = Backend.prepare(model, "CPU")          # or "kiln:cpu:0", "CUDA" (cuda:0), "ROCM" (hsa:0)
    outputs = rep.run([x])

The session is ``Backend.session`` if set, else kiln's default session (kiln.connect()).
"""

import numpy as np
import onnx.backend.base as _base

from ..errors import InvalidArgument

__all__ = ["Backend", "BackendRep"]

_DEVICES = {"CPU": "cpu:0", "CUDA": "cuda:0", "ROCM": "hsa:0", "HSA": "hsa:0"}


def _device_id(device):
    d = str(device or "CPU")
    if d.startswith("kiln:"):
        return d[5:]
    up = d.upper()
    if up in _DEVICES:
        return _DEVICES[up]
    if ":" in d:
        kind, _, n = d.partition(":")
        return "%s:%s" % (_DEVICES.get(kind.upper(), kind.lower()).split(":")[0], n)
    raise InvalidArgument("unknown device %r (CPU, CUDA, ROCM, or kiln:<device id>)" % (device,))


class BackendRep(_base.BackendRep):
    """A prepared model. kiln compiles for fixed shapes, so a graph input that decides a
    shape (a Reshape's shape, Slice's starts fed as inputs, as onnx's node tests do) is
    fixed to its value at the first run, and a later run with other values of it imports
    again (one graph per distinct value)."""

    def __init__(self, model, device, session, kwargs):
        from .importer import load
        self.model = load(model)
        self.device = device
        self.session = session
        self.kwargs = kwargs
        self.graphs = {}
        init = {t.name for t in self.model.graph.initializer}
        self.input_names = [i.name for i in self.model.graph.input if i.name not in init]
        self._fixed = []
        try:
            self.graphs[()] = self._import({})
        except Exception as e:
            from .ops import NeedsConstant
            if not (isinstance(e, NeedsConstant) and e.value in self.input_names):
                raise

    def _import(self, fixed):
        from . import import_model
        return import_model(self.model, self.device, input_shapes=self.kwargs.get("input_shapes"),
                            session=self.session, executor=self.kwargs.get("executor", "auto"),
                            constant_inputs=fixed or None)

    def run(self, inputs, **kwargs):
        from .ops import NeedsConstant
        if isinstance(inputs, dict):
            named = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(self.input_names):
                raise InvalidArgument("the model takes %d inputs, %d given" % (len(self.input_names), len(inputs)))
            named = dict(zip(self.input_names, inputs))
        while True:
            key = tuple((n, np.asarray(named[n]).shape, np.asarray(named[n]).tobytes()) for n in self._fixed)
            g = self.graphs.get(key)
            if g is None:
                try:
                    g = self._import({n: np.asarray(named[n]) for n in self._fixed})
                except NeedsConstant as e:
                    if e.value in self.input_names and e.value not in self._fixed:
                        self._fixed.append(e.value)
                        continue
                    raise
                self.graphs[key] = g
            break
        rest = {n: a for n, a in named.items() if n not in self._fixed}
        return tuple(g.run(**rest))


class Backend(_base.Backend):
    session = None

    @classmethod
    def _session(cls):
        from ..session import default_session
        return cls.session or default_session()

    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        from .ops import SUPPORTED
        return all(n.op_type in SUPPORTED and n.domain in ("", "ai.onnx") for n in model.graph.node)

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        s = cls._session()
        return BackendRep(model, s.device(_device_id(device)), s, kwargs)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        import onnx
        from onnx import helper
        ins = [helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype)
                                             if hasattr(onnx.helper, "np_dtype_to_tensor_dtype") else
                                             onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.asarray(a).dtype],
                                             np.asarray(a).shape) for n, a in zip(node.input, inputs)]
        outs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in node.output]
        m = helper.make_model(helper.make_graph([node], "node", ins, outs))
        return cls.run_model(m, inputs, device, **kwargs)

    @classmethod
    def supports_device(cls, device):
        try:
            did = _device_id(device)
        except InvalidArgument:
            return False
        return cls._session().device(did).exist


prepare = Backend.prepare
run_model = Backend.run_model
run_node = Backend.run_node
supports_device = Backend.supports_device
