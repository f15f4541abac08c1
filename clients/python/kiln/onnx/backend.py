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
    def __init__(self, graph):
        self.graph = graph

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            return tuple(self.graph.run(**inputs))
        if isinstance(inputs, np.ndarray) and len(self.graph.inputs) == 1:
            inputs = [inputs]
        return tuple(self.graph.run(*list(inputs)))


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
        from . import import_model
        s = cls._session()
        g = import_model(model, s.device(_device_id(device)), input_shapes=kwargs.get("input_shapes"),
                         session=s, executor=kwargs.get("executor", "auto"))
        return BackendRep(g)

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
