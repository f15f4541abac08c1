"""kiln.topi.gemv_gpu: the split-K GPU schedule of few-row products (an fc layer at batch 1),
which kiln.topi.fused picks for GPU targets. It is portable kernel code: its two kernels run
on cpu:0 against numpy; it compiles for sm_90 and gfx942 with enough work-groups to fill a
GPU, and ptxas takes its PTX without spills; kiln.onnx puts both kernels and the partials in
one graph node."""

import os
import re

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.topi import gemv_gpu
from te_helpers import GPU_TARGETS, PTXAS, ptxas_verbose, require_te


@pytest.fixture
def ts(s):
    require_te(s)
    return s


def fc(M, K, N, epilogue="bias_relu"):
    """An fc layer as kiln.onnx builds it: topi.gemm (A: M x K, B: K x N) and its epilogue;
    the placeholders, the output, the inputs and numpy's answer."""
    rng = np.random.default_rng(M * 7 + K * 3 + N)
    A, B, bias = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B"), te.placeholder((N,), name="bias")
    T = topi.gemm(A, B)
    a, b, c = (rng.standard_normal(sh).astype("float32") for sh in ((M, K), (K, N), (N,)))
    want = a.astype(np.float64) @ b
    if epilogue == "none":
        return [A, B], T, [a, b], want
    if epilogue == "bias":
        out = te.compute((M, N), lambda i, j: T[i, j] + bias[j], name="out", tag="injective")
        return [A, B, bias], out, [a, b, c], want + c
    out = te.compute((M, N), lambda i, j: te.max(T[i, j] + bias[j], 0.0), name="out", tag="injective")
    return [A, B, bias], out, [a, b, c], np.maximum(want + c, 0)


def _run_cpu(s, M, K, N, epilogue, **knobs):
    return _run(s, M, K, N, epilogue, "llvm", s.cpu(0), **knobs)


def _run(s, M, K, N, epilogue, target, dev, **knobs):
    ins, out, arrays, want = fc(M, K, N, epilogue)
    f = kiln.build(topi.schedule_fused(out, "gpu", **knobs), ins + [out], target, name="fc", session=s)
    o = kiln.nd.empty(want.shape, "float32", dev)
    f(*([kiln.nd.array(x, dev) for x in arrays] + [o]))
    np.testing.assert_allclose(o.numpy(), want, rtol=1e-4, atol=1e-3)
    return f


# (M, K, N, epilogue, knobs): ResNet-50's and EfficientNet-Lite0's fc, a few rows, odd sizes,
# slices that do not divide K, a single column, more slices than K has words
CASES = [(1, 2048, 1000, "bias", {}), (1, 1280, 1000, "bias_relu", {}), (3, 512, 37, "none", {}),
         (4, 1000, 70, "bias", {"split": 3}), (2, 256, 1, "bias_relu", {}), (1, 300, 129, "bias", {"num_thread": 32}),
         (1, 257, 5, "none", {"split": 400})]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "M%d_K%d_N%d_%s%s" % (c[:4] + ("".join(
    "_%s%d" % kv for kv in sorted(c[4].items())),)))
def test_split_k_runs_on_cpu(ts, case):
    M, K, N, epilogue, knobs = case
    f = _run_cpu(ts, M, K, N, epilogue, **knobs)
    # two kernels: the partials, then their sum with the epilogue
    assert [k.name for k in f.module.kernels] == ["fc_kernel0", "fc_kernel1"]


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
def test_split_k_runs_on_gpu(ts, kind):
    dev = getattr(ts, kind)(0)
    if not dev.exist:
        pytest.skip("the daemon has no %s device" % kind)
    for M, K, N, epilogue, knobs in CASES:
        _run(ts, M, K, N, epilogue, dev, dev, **knobs)


def test_fits_and_split_choice():
    def anchor(M, K, N):
        return topi.gemm(te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B"))
    assert gemv_gpu.fits(anchor(1, 2048, 1000)) and gemv_gpu.fits(anchor(4, 256, 10))
    assert not gemv_gpu.fits(anchor(5, 2048, 1000))     # a real GEMM: fused_matmul's tiles
    assert not gemv_gpu.fits(anchor(1, 255, 1000))      # too short to split
    n = te.var("n")
    assert not gemv_gpu.fits(topi.gemm(te.placeholder((1, 512), name="A"), te.placeholder((512, n), name="B")))
    # a 1x1 convolution as a GEMM is 3-d: conv_gpu's
    assert not gemv_gpu.fits(topi.conv2d_pointwise(te.placeholder((1, 512, 49), name="X"),
                                                   te.placeholder((64, 512), name="W")))
    # ResNet-50's fc: 16 column groups x 32 slices of 64 words; EfficientNet-Lite0's: 16 x 16 of 80
    assert gemv_gpu.choose_split(2048, 1000, 64) == 32
    assert gemv_gpu.choose_split(1280, 1000, 64) == 16
    assert gemv_gpu.choose_split(256, 10, 64) == 4
    assert gemv_gpu.choose_split(300, 100000, 64) == 1   # columns enough to fill the GPU


def test_knobs_are_checked(ts):
    ins, out, _, _ = fc(1, 1024, 100)
    s = topi.schedule_fused(out, "gpu", split=4, num_thread=128)
    f = kiln.build(s, ins + [out], "sm_90", name="fc", session=ts)
    assert [k.info["launch"]["grid"] for k in f.module.kernels] == [[1, 4, 1], [1, 1, 1]]
    # a knob gemv_gpu does not have sends the product to fused_matmul, which refuses it
    with pytest.raises(kiln.InvalidArgument, match="no knob 'bogus'"):
        topi.schedule_fused(out, "gpu", bogus=1)
    # the cpu keeps fused_matmul's schedule: one kernel
    f = kiln.build(topi.schedule_fused(out, "cpu"), ins + [out], "llvm", name="fc", session=ts)
    assert len(f.module.kernels) == 1


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_fc_layers_fill_the_gpu(ts, target):
    """ResNet-50's fc: 512 work-groups for the partials (it had 16), 16 for the sum."""
    ins, out, _, _ = fc(1, 2048, 1000, "bias")
    f = kiln.build(topi.schedule_fused(out, "gpu"), ins + [out], target, name="fc", session=ts)
    (k0, k1) = f.module.kernels
    assert k0.info["launch"]["grid"] == [16, 32, 1] and k0.info["launch"]["block"] == [64, 1, 1]
    assert k1.info["launch"]["grid"] == [16, 1, 1]


@pytest.mark.skipif(not os.path.exists(PTXAS), reason="no ptxas (/usr/local/cuda/bin)")
def test_ptx_assembles_without_spills(ts):
    for M, K, N in ((1, 2048, 1000), (1, 1280, 1000), (4, 1024, 1000)):
        ins, out, _, _ = fc(M, K, N)
        f = kiln.build(topi.schedule_fused(out, "gpu"), ins + [out], "sm_90", name="fc", session=ts)
        r = ptxas_verbose(f.get_source("asm"))
        assert r.returncode == 0, r.stderr
        assert len(re.findall(r"Compiling entry function", r.stderr)) == 2, r.stderr
        assert max(int(x) for x in re.findall(r"(\d+) bytes spill stores", r.stderr)) == 0, r.stderr


def test_onnx_gemm_on_gpu_is_one_node_of_two_kernels(ts):
    """kiln.onnx's Gemm (transB, as torch exports an fc) for a GPU target: one node, both
    kernels, the partials a graph value; the GPU payload run on cpu:0 by graph_run gives
    numpy's answer."""
    onnx = pytest.importorskip("onnx", reason="the onnx package is not installed (Debian: python3-onnx)")
    from onnx import helper, numpy_helper, TensorProto
    import kiln.onnx
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((1000, 2048)).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1, name="fc"),
                           helper.make_node("Relu", ["h"], ["y"], name="relu")], "fc",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1000])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    payload, _ = kiln.onnx.build_payload(m, target="gpu")
    (node,) = payload.nodes
    assert len(node.kernels) == 2 and len(node.writes) == 2     # the output and the partials
    x = rng.standard_normal((1, 2048)).astype(np.float32)
    r = ts.call("graph_create", device="cpu:0", graph=payload.encode())
    try:
        out = ts.call("graph_run", graph=r["graph"], inputs={"x": {"dtype": "float32", "shape": [1, 2048],
                                                                    "data": x.tobytes()}})["outputs"][0]
    finally:
        ts.call("graph_free", graph=r["graph"])
    want = np.maximum(x.astype(np.float64) @ w.T + b, 0)
    np.testing.assert_allclose(np.frombuffer(out["data"], np.float32).reshape(1, 1000), want, rtol=1e-4, atol=1e-3)
