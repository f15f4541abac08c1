"""kiln.onnx against onnx's conformance data (node, pytorch-converted, pytorch-operator
tests from Debian's libonnx-testdata), on the real kilnd.

Every test directory whose operators kiln.onnx supports is a case: it either matches the
expected outputs, or it is one of the documented limits (3-d convolution, training mode,
cubic resize, ...) and must be refused with a clear InvalidArgument naming the reason.
"""

import re

import numpy as np
import pytest

import kiln

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed (Debian: python3-onnx; .ci/setup "
                                          "installs it)")
import kiln.onnx  # noqa: E402
from kiln.onnx import Backend  # noqa: E402

from onnx_data import cases, load_case, assert_close, data_root  # noqa: E402

# Documented limits: (name pattern, words the refusal must contain).
REFUSED = [
    (r"(averagepool|maxpool)_3d|Conv3d|Pool3d", "3-d"),
    (r"convtranspose_3d", "2-d ConvTranspose"),
    (r"convtranspose_1d", "2-d ConvTranspose"),
    (r"training", "training"),
    (r"BFLOAT16", "type 16"),
    (r"STRING", "type 8"),
    (r"cubic", "cubic"),
    (r"tf_crop_and_resize", "tf_crop_and_resize"),
    (r"with_argmax", "Indices"),
    (r"test_pow_types_(float$|int32_|int64_)", "float tensors"),
    (r"test_identity_opt|test_identity_sequence", "not a tensor"),
]


def _refusal(name):
    for pat, words in REFUSED:
        if re.search(pat, name):
            return words
    return None


@pytest.fixture(scope="module")
def sess(unix_url):
    with kiln.connect(unix_url) as s:
        Backend.session = s
        yield s
        Backend.session = None


def _run_case(sess, d, name):
    m, ins, outs = load_case(d)
    words = _refusal(name)
    if words is not None:
        with pytest.raises(kiln.InvalidArgument) as e:
            rep = Backend.prepare(m, "CPU")
            rep.run(ins or [])
        assert words in str(e.value), "%s was refused for another reason: %s" % (name, e.value)
        return
    assert ins is not None, "%s: its test data could not be read" % name
    rep = Backend.prepare(m, "CPU")
    assert_close(list(rep.run(ins)), outs, what=name)


NODE = cases("node", kiln.onnx.SUPPORTED)
TORCH = cases("pytorch-converted", kiln.onnx.SUPPORTED) + cases("pytorch-operator", kiln.onnx.SUPPORTED)


def test_conformance_data_present():
    # The suites below are parametrised over the data; an empty parametrisation would pass
    # vacuously, so say where the data is missing instead.
    assert data_root() is not None, "no onnx test data: apt install libonnx-testdata (.ci/setup does)"
    assert len(NODE) > 300 and len(TORCH) > 60, (len(NODE), len(TORCH))


@pytest.mark.parametrize("name,d", NODE, ids=[n for n, _ in NODE])
def test_node(sess, name, d):
    _run_case(sess, d, name)


@pytest.mark.parametrize("name,d", TORCH, ids=[n for n, _ in TORCH])
def test_pytorch(sess, name, d):
    _run_case(sess, d, name)


def test_every_first_milestone_operator_has_node_tests():
    covered = set()
    for _, d in NODE + TORCH:
        covered |= {n.op_type for n in onnx.load(d + "/model.onnx").graph.node}
    missing = [op for op in kiln.onnx.FIRST_MILESTONE if op not in covered]
    # HardSwish has no test in onnx 1.12's data; test_onnx_graph.py checks it against numpy.
    assert missing in ([], ["HardSwish"]), missing
