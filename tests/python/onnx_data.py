"""Conformance data for the kiln.onnx tests: onnx's backend test directories (Debian's
libonnx-testdata, also under the onnx package's backend/test/data) read without onnx's
runner, so each directory is one pytest case."""

import glob
import os

import numpy as np

DEBIAN_DATA = "/usr/share/libonnx-testdata/data"


def data_root():
    """The node/pytorch-converted/pytorch-operator data: Debian's package, else the onnx
    package's own copy (PyPI wheels before 1.17 carried it)."""
    if os.path.isdir(os.path.join(DEBIAN_DATA, "node")):
        return DEBIAN_DATA
    try:
        import onnx
    except ImportError:
        return None
    d = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    return d if os.path.isdir(os.path.join(d, "node")) else None


def light_root():
    """onnx's 'light' model-zoo structures (PyPI onnx wheels carry them; Debian's do not)."""
    try:
        import onnx
    except ImportError:
        return None
    d = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return d if os.path.isdir(d) else None


def read_tensor(path):
    import onnx
    from onnx import numpy_helper
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def _numbered(paths):
    return sorted(paths, key=lambda p: int(os.path.basename(p).split("_")[-1].split(".")[0]))


def cases(kind, ops):
    """(name, directory) of each test of data/<kind> whose operators are all in ``ops``."""
    root = data_root()
    if root is None:
        return []
    import onnx
    out = []
    for d in sorted(glob.glob(os.path.join(root, kind, "test_*"))):
        m = onnx.load(os.path.join(d, "model.onnx"))
        if {n.op_type for n in m.graph.node} <= set(ops) and all(n.domain in ("", "ai.onnx") for n in m.graph.node):
            out.append((os.path.basename(d), d))
    return out


def load_case(d):
    """model, inputs, expected outputs of test_data_set_0 (None when an input is not a
    plain tensor: sequences and optionals)."""
    import onnx
    m = onnx.load(os.path.join(d, "model.onnx"))
    ds = os.path.join(d, "test_data_set_0")
    try:
        ins = [read_tensor(p) for p in _numbered(glob.glob(os.path.join(ds, "input_*.pb")))]
        outs = [read_tensor(p) for p in _numbered(glob.glob(os.path.join(ds, "output_*.pb")))]
    except Exception:
        return m, None, None
    return m, ins, outs


def assert_close(got, want, rtol=1e-3, atol=1e-5, what=""):
    assert len(got) == len(want), "%s: %d outputs, expected %d" % (what, len(got), len(want))
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, "%s output %d: shape %s, expected %s" % (what, k, g.shape, w.shape)
        assert g.dtype == w.dtype, "%s output %d: dtype %s, expected %s" % (what, k, g.dtype, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg="%s output %d" % (what, k))
        else:
            np.testing.assert_array_equal(g, w, err_msg="%s output %d" % (what, k))
