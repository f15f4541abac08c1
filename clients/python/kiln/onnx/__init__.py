"""kiln.onnx: ONNX models imported into kiln graphs (docs/python.md "ONNX models", docs/graph.md).

    import kiln, kiln.onnx
    s = kiln.connect()
    g = kiln.onnx.import_model("model.onnx", s.cpu(0), input_shapes={"input": (1, 3, 224, 224)})
    print(g)                       # the fused graph: which ONNX nodes went into which kernel
    (logits,) = g.run(x)
    print(g.time_evaluator(number=10, repeat=3)())

The importer needs the ``onnx`` package (Debian's python3-onnx 1.12 or PyPI's onnx); it
reads the model, folds, fuses and lowers it to te programs on the client, and runs the
graph payload of docs/graph.md on the device.
"""

from ..errors import InvalidArgument
from .graph import Graph, GraphNode, free_constants
from .importer import Importer, load
from .ops import SUPPORTED, FIRST_MILESTONE

__all__ = ["import_model", "free_constants", "Graph", "GraphNode", "Backend", "SUPPORTED", "FIRST_MILESTONE", "load", "build_payload"]


def _device(device, session):
    from ..session import Device, default_session
    if isinstance(device, Device):
        return device
    session = session or default_session()
    if device is None:
        return session.cpu(0)
    if isinstance(device, str):
        return session.device(device)
    raise InvalidArgument("device is a kiln Device or a device id such as 'cpu:0', not %r" % (device,))


def build_payload(model, target="cpu", input_shapes=None, knobs=None, constant_inputs=None):
    """The importer alone: (GraphPayload, Importer) for ``target`` ("cpu", "gpu", a device id
    or arch), without a daemon."""
    imp = Importer(model, input_shapes, target=target, knobs=knobs, constant_inputs=constant_inputs)
    return imp.payload, imp


def import_model(model, device=None, input_shapes=None, session=None, executor="auto", knobs=None,
                 constant_inputs=None, constants="auto"):
    """Imports an ONNX model (a path, bytes or an onnx.ModelProto) for ``device`` (a Device
    or an id; default cpu:0 of ``session`` or the default session) and returns a Graph.

    ``input_shapes``: {input name: shape} (or a list in input order) fixing dynamic
    dimensions; every shape is fixed at import. ``constant_inputs``: {input name: array}
    fixes the value of graph inputs that decide shapes (a Reshape's shape fed as an input);
    they are no longer inputs of the graph. ``executor``: "auto", "client" or "server"
    (graph.py). ``knobs``: {template: {knob: value}} for the fused schedules
    (kiln.topi.knobs("fused_conv2d"), ...). ``constants`` (server executor): "inline" sends
    the weights inside graph_create's payload (the graph id then covers them: the same model
    again is answered from kilnd's graph table), "tensors" uploads them once per session as
    tensors and names them by id (a model imported again, at another input shape, reuses
    them; ``free_constants(session)`` frees them), "auto" (default) inline unless they pass
    half the message limit. Everything the importer refuses raises
    kiln.InvalidArgument before anything is sent to the daemon."""
    dev = _device(device, session)
    if not dev.exist:
        raise InvalidArgument("device %s is not served by this kilnd" % dev.id)
    target = "cpu" if dev.kind == "cpu" else "gpu"
    payload, imp = build_payload(model, target, input_shapes, knobs, constant_inputs)
    g = Graph(payload, dev.session, dev, executor=executor, constants=constants)
    g.opset = imp.opset
    return g


def __getattr__(name):
    if name == "Backend":
        from .backend import Backend
        return Backend
    raise AttributeError(name)
