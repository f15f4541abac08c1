"""kiln.onnx: the fused graph, the payload, the executor, bad input, the CLI; on the real
kilnd, checked against numpy references computed here."""

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed (Debian: python3-onnx; .ci/setup "
                                          "installs it)")
import kiln.onnx  # noqa: E402
from onnx import helper, numpy_helper, TensorProto  # noqa: E402

from conftest import PKG_PYTHONPATH  # noqa: E402

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, inits=(), opset=13, name="m"):
    g = helper.make_graph(nodes, name, inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _conv_ref(x, w, b, stride=1, pads=(0, 0, 0, 0), group=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (xp.shape[2] - kh) // stride + 1
    ow = (xp.shape[3] - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    og = o // group
    for f in range(o):
        g = f // og
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                out[:, f, i, j] = (patch * w[f]).sum(axis=(1, 2, 3))
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


@pytest.fixture(scope="module")
def sess(unix_url):
    with kiln.connect(unix_url) as s:
        yield s


def _tensors(s):
    return s.stats()["tensors"]


def _residual_block():
    """conv3x3 -> BN -> (+ x) -> Relu, then a depthwise conv with asymmetric pads -> Clip
    (ReLU6) and HardSwish, a pointwise conv, global pool, flatten, Gemm(transB): the
    EfficientNet/ResNet shapes in small."""
    c = 8
    w1 = RNG.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2
    b1 = RNG.standard_normal(c).astype(np.float32)
    gamma, beta = RNG.random(c).astype(np.float32) + 0.5, RNG.standard_normal(c).astype(np.float32)
    mean, var = RNG.standard_normal(c).astype(np.float32), RNG.random(c).astype(np.float32) + 0.5
    wd = RNG.standard_normal((c, 1, 3, 3)).astype(np.float32) * 0.3
    wp = RNG.standard_normal((16, c, 1, 1)).astype(np.float32) * 0.3
    wg = RNG.standard_normal((10, 16)).astype(np.float32)
    bg = RNG.standard_normal(10).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn1"], epsilon=1e-3,
                         name="bn1"),
        helper.make_node("Add", ["bn1", "x"], ["a1"], name="add1"),
        helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "wd"], ["d1"], group=c, strides=[2, 2], pads=[0, 0, 1, 1], name="dw"),
        helper.make_node("Clip", ["d1", "lo", "hi"], ["k1"], name="relu6"),
        helper.make_node("HardSwish", ["k1"], ["h1"], name="hswish"),
        helper.make_node("Conv", ["h1", "wp"], ["p1"], name="pw"),
        helper.make_node("GlobalAveragePool", ["p1"], ["gp"], name="gap"),
        helper.make_node("Flatten", ["gp"], ["fl"], name="flatten"),
        helper.make_node("Gemm", ["fl", "wg", "bg"], ["y"], transB=1, name="fc"),
    ]
    inits = [("w1", w1), ("b1", b1), ("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var), ("wd", wd),
             ("wp", wp), ("wg", wg), ("bg", bg), ("lo", np.array(0, np.float32)), ("hi", np.array(6, np.float32))]
    m = _model(nodes, [_vi("x", [1, c, 10, 10])], [_vi("y", [1, 10])], inits, opset=14)

    def ref(x):
        x = x.astype(np.float64)
        c1 = _conv_ref(x, w1, b1, pads=(1, 1, 1, 1))
        bn = (c1 - mean.reshape(1, -1, 1, 1)) / np.sqrt(var.reshape(1, -1, 1, 1) + 1e-3) * \
            gamma.reshape(1, -1, 1, 1) + beta.reshape(1, -1, 1, 1)
        r1 = np.maximum(bn + x, 0)
        d1 = _conv_ref(r1, wd, None, stride=2, pads=(0, 0, 1, 1), group=c)
        k1 = np.clip(d1, 0, 6)
        h1 = k1 * np.clip(k1 / 6 + 0.5, 0, 1)
        p1 = _conv_ref(h1, wp, None)
        return p1.mean(axis=(2, 3)) @ wg.T.astype(np.float64) + bg
    return m, ref


def test_fused_graph_matches_numpy_and_shows_fusion(sess):
    m, ref = _residual_block()
    before = _tensors(sess)
    g = kiln.onnx.import_model(m, sess.cpu(0))
    labels = [n.label for n in g.nodes]
    # conv + folded BN + residual add + relu: one kernel; depthwise + clip + hardswish: one
    assert "Conv conv1+BatchNormalization bn1+Add add1+Relu relu1" in labels, labels
    assert "Conv dw+Clip relu6+HardSwish hswish" in labels, labels
    assert len(g.nodes) == 5, labels        # conv1.., dw.., pw, gap, fc (flatten is a view)
    assert any(v[1] == "gp" for v in g.payload.views), g.payload.views
    text = str(g)
    assert "Conv conv1+BatchNormalization bn1" in text and "output y float32 [1, 10]" in text
    x = RNG.standard_normal((1, 8, 10, 10)).astype(np.float32)
    (y,) = g.run(x)
    np.testing.assert_allclose(y, ref(x), rtol=1e-4, atol=1e-4)
    (y2,) = g.run(x=x)               # by name
    np.testing.assert_array_equal(y, y2)
    r = g.time_evaluator(number=2, repeat=2)()
    assert len(r.results) == 2 and r.mean > 0
    prof = g.profile(number=1, repeat=1)
    assert [p[0].name for p in prof] == [n.name for n in g.nodes] and all(t > 0 for _, t in prof)
    g.free()
    assert _tensors(sess) == before


def test_identical_layers_share_programs(sess):
    w = [RNG.standard_normal((4, 4, 3, 3)).astype(np.float32) for _ in range(3)]
    nodes = [helper.make_node("Conv", ["x" if i == 0 else "c%d" % (i - 1), "w%d" % i], ["c%d" % i], pads=[1] * 4)
             for i in range(3)]
    m = _model(nodes, [_vi("x", [1, 4, 6, 6])], [_vi("c2", [1, 4, 6, 6])], [("w%d" % i, w[i]) for i in range(3)])
    payload, _ = kiln.onnx.build_payload(m)
    assert len(payload.nodes) == 3 and len(payload.programs) == 1
    wire = payload.to_wire()
    assert [n["program"] for n in wire["nodes"]] == [0, 0, 0]
    assert payload.encode() == kiln.onnx.build_payload(m)[0].encode()   # same model, same bytes
    g = kiln.onnx.import_model(m, sess.cpu(0))
    x = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    want = x.astype(np.float64)
    for i in range(3):
        want = _conv_ref(want, w[i], None, pads=(1, 1, 1, 1))
    np.testing.assert_allclose(g.run(x)[0], want, rtol=1e-4, atol=1e-4)
    # the value planner reuses buffers: three conv outputs of 576 bytes, the third one's bytes
    # are the first's once the first is dead (kilnd's plan holds the output too, in slots of
    # 256 bytes; the client executor gives outputs their own tensors)
    if g.executor == "server":
        assert g._impl.arena_bytes == 2 * 768
    else:
        assert g._impl.arena_bytes <= 2 * 4 * 4 * 6 * 6
    gc = kiln.onnx.import_model(m, sess.cpu(0), executor="client")
    assert gc._impl.arena_bytes <= 2 * 4 * 4 * 6 * 6
    gc.free()


def test_gpu_targets_compile(sess):
    """The GPU schedules of every kernel kind compile for gfx942 and sm_90 (no GPU needed)."""
    m, _ = _residual_block()
    payload, _ = kiln.onnx.build_payload(m, target="gpu")
    for target in ("gfx942", "sm_90"):
        mods = sess.compile_batch([{"ir": p, "target": target, "format": "te"} for p in payload.programs])
        bad = [str(x) for x in mods if isinstance(x, kiln.KilnError)]
        assert not bad, bad


def test_gpu_payload_runs_on_the_cpu(sess):
    """The GPU schedules (shared-memory GEMMs for the 1x1 convs, direct convs with the input
    patch in shared memory, kiln.topi.conv_gpu) are portable kernels: the GPU payload run on
    cpu:0 by graph_run gives the CPU payload's answer."""
    m, _ = _residual_block()
    x = RNG.standard_normal((1, 8, 10, 10)).astype(np.float32)
    want = kiln.onnx.import_model(m, sess.cpu(0)).run(x)[0]
    payload, _ = kiln.onnx.build_payload(m, target="gpu")
    r = sess.call("graph_create", device="cpu:0", graph=payload.encode())
    try:
        out = sess.call("graph_run", graph=r["graph"], inputs={payload.inputs[0][0]: {
            "dtype": "float32", "shape": list(x.shape), "data": x.tobytes()}})["outputs"][0]
    finally:
        sess.call("graph_free", graph=r["graph"])
    np.testing.assert_allclose(np.frombuffer(out["data"], np.float32).reshape(out["shape"]), want,
                               rtol=1e-4, atol=1e-4)


def test_executor_choice(sess):
    m, ref = _residual_block()
    with pytest.raises(kiln.InvalidArgument, match="executor"):
        kiln.onnx.import_model(m, sess.cpu(0), executor="remote")
    g = kiln.onnx.import_model(m, sess.cpu(0), executor="client")
    assert g.executor == "client"
    x = RNG.standard_normal((1, 8, 10, 10)).astype(np.float32)
    want = g.run(x)[0]
    gs = kiln.onnx.import_model(m, sess.cpu(0), executor="server")
    assert gs.executor == "server"
    np.testing.assert_allclose(gs.run(x)[0], want, rtol=1e-5, atol=1e-5)
    gs.free()


def test_run_argument_errors(sess):
    m, _ = _residual_block()
    g = kiln.onnx.import_model(m, sess.cpu(0))
    with pytest.raises(kiln.InvalidArgument, match="shape"):
        g.run(np.zeros((1, 8, 11, 10), np.float32))
    with pytest.raises(kiln.InvalidArgument, match="takes 1 input"):
        g.run()
    with pytest.raises(kiln.InvalidArgument, match="no input"):
        g.run(z=np.zeros((1, 8, 10, 10), np.float32))
    with pytest.raises(kiln.InvalidArgument, match="int8"):
        g.run(np.zeros((1, 8, 10, 10), np.int8))


# -- bad input: a clear error before anything runs, nothing left on the daemon ---------------

def _refused(sess, model, match, **kw):
    # Tensors of earlier tests' objects may be collected (and freed on the daemon) at any
    # time: collect them first, and ask only that a refused import added none.
    gc.collect()
    before = _tensors(sess)
    with pytest.raises(kiln.InvalidArgument, match=match) as e:
        kiln.onnx.import_model(model, sess.cpu(0), **kw)
    gc.collect()
    assert _tensors(sess) <= before, "a refused import left tensors on the daemon"
    return str(e.value)


def test_unsupported_operator_names_op_node_and_set(sess):
    m = _model([helper.make_node("LRN", ["x"], ["y"], size=3, name="lrn7")], [_vi("x", [1, 4, 5, 5])],
               [_vi("y", [1, 4, 5, 5])])
    msg = _refused(sess, m, "LRN")
    assert "lrn7" in msg and "Supported:" in msg and "Conv" in msg


def test_dynamic_dims_need_input_shapes(sess):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 3])], [_vi("y", ["N", 3])])
    msg = _refused(sess, m, "dynamic")
    assert "input_shapes" in msg and "'x'" in msg
    g = kiln.onnx.import_model(m, sess.cpu(0), input_shapes={"x": (2, 3)})
    np.testing.assert_array_equal(g.run(np.array([[-1, 2, -3], [4, -5, 6]], np.float32))[0],
                                  [[0, 2, 0], [4, 0, 6]])
    _refused(sess, m, "differs", input_shapes={"x": (2, 4)})
    _refused(sess, m, "inputs are x", input_shapes={"nope": (2, 3)})


def test_malformed_truncated_empty_files(sess, tmp_path):
    m, _ = _residual_block()
    data = m.SerializeToString()
    for name, blob, match in (("garbage.onnx", bytes(RNG.integers(0, 256, 4096, dtype=np.uint8)), "not an ONNX"),
                              ("truncated.onnx", data[:len(data) // 2], "not an ONNX"),
                              ("empty.onnx", b"", "empty")):
        p = tmp_path / name
        p.write_bytes(blob)
        _refused(sess, str(p), match)
    _refused(sess, str(tmp_path / "missing.onnx"), "no ONNX model")


def test_over_2gib_and_external_data(sess, tmp_path):
    big = tmp_path / "big.onnx"
    with open(big, "wb") as f:           # sparse: nothing is written or read
        f.truncate(2 ** 31 + 10)
    msg = _refused(sess, str(big), "2 GiB")
    assert "external data" in msg
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    e = w.external_data.add()
    e.key, e.value = "location", "weights.bin"
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "ext", [_vi("x", [1, 4])],
                          [_vi("y", [1, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    _refused(sess, m, "external")


def test_weights_that_disagree_with_the_graph(sess):
    w = np.ones((8, 5, 3, 3), np.float32)      # 5 input channels; the input has 4
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="convbad")], [_vi("x", [1, 4, 6, 6])],
               [_vi("y", [1, 8, 4, 4])], [("w", w)])
    msg = _refused(sess, m, "convbad")
    assert "weight" in msg
    m = _model([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1, name="fcbad")], [_vi("x", [1, 16])],
               [_vi("y", [1, 10])], [("w", np.ones((10, 15), np.float32))])
    _refused(sess, m, "fcbad")
    m = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rsbad")], [_vi("x", [2, 6])],
               [_vi("y", [5, 2])], [("s", np.array([5, 2], np.int64))])
    _refused(sess, m, "rsbad")


def test_cycle(sess):
    m = _model([helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
                helper.make_node("Relu", ["a"], ["b"], name="n2")],
               [_vi("x", [2])], [_vi("b", [2])])
    msg = _refused(sess, m, "cycle")
    assert "n1" in msg and "n2" in msg


def test_not_a_model(sess):
    with pytest.raises(kiln.InvalidArgument, match="path, bytes or an onnx.ModelProto"):
        kiln.onnx.import_model(12, sess.cpu(0))


# -- the CLI -------------------------------------------------------------------------------

def test_cli(sess, tmp_path, unix_url):
    m, ref = _residual_block()
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    x = RNG.standard_normal((1, 8, 10, 10)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, KILN_URL=unix_url, PYTHONPATH=PKG_PYTHONPATH)
    r = subprocess.run([sys.executable, "-m", "kiln.onnx", str(path), "--input", str(tmp_path / "x.npy"), "--time",
                        "--save", str(tmp_path / "out.npz")], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "y: float32 [1, 10]" in r.stdout and "top-5" in r.stdout and "ms" in r.stdout, r.stdout
    want = ref(x)
    top = np.argsort(-want[0])[:5]
    assert " ".join(str(int(t)) for t in top) in r.stdout.replace(",", ""), r.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], want, rtol=1e-4, atol=1e-4)
    bad = subprocess.run([sys.executable, "-m", "kiln.onnx", str(path), "--input", str(tmp_path / "nope.npy")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nope.npy" in bad.stderr
