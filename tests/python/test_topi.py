"""kiln.topi: every operator with its CPU schedule against numpy on fresh random inputs (odd
sizes, partial tiles), its GPU schedule compiled for gfx942 and sm_90 and run on a CUDA
device where the daemon has one, and the knobs."""

import numpy as np
import pytest

import kiln
from kiln import te, topi
from te_helpers import GPU_TARGETS, require_te, rand


@pytest.fixture
def ts(s):
    require_te(s)
    return s


def conv_ref(x, w, stride, pad, dil):
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH = (H + 2 * pad - (KH - 1) * dil - 1) // stride + 1
    OW = (W + 2 * pad - (KW - 1) * dil - 1) // stride + 1
    out = np.zeros((N, O, OH, OW), "float64")
    for ry in range(KH):
        for rx in range(KW):
            patch = xp[:, :, ry * dil: ry * dil + stride * (OH - 1) + 1: stride,
                       rx * dil: rx * dil + stride * (OW - 1) + 1: stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, ry, rx])
    return out


def depthwise_ref(x, w, stride, pad):
    N, C, H, W = x.shape
    _, M, KH, KW = w.shape
    xr = np.repeat(x, M, axis=1)
    full = np.zeros((C * M, C * M, KH, KW), x.dtype)
    for c in range(C * M):
        full[c, c] = w[c // M, c % M]
    return conv_ref(xr, full, stride, pad, 1)


def pool_ref(x, k, stride, pad, kind):
    N, C, H, W = x.shape
    fill = -np.inf if kind == "max" else 0
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    OH = (H + 2 * pad - k) // stride + 1
    OW = (W + 2 * pad - k) // stride + 1
    win = np.stack([xp[:, :, ry: ry + stride * (OH - 1) + 1: stride, rx: rx + stride * (OW - 1) + 1: stride]
                    for ry in range(k) for rx in range(k)])
    return win.max(axis=0) if kind == "max" else win.mean(axis=0)


def softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layer_norm_ref(x, g, b, eps=1e-5):
    m = x.mean(axis=1, keepdims=True)
    v = x.var(axis=1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def cases():
    """name -> (make(): (inputs placeholders, output, numpy inputs, reference), schedule)."""
    def mm():
        M, N, K = 67, 45, 77
        A, B = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B")
        a, b = rand((M, K)), rand((K, N))
        return [A, B], topi.matmul(A, B), [a, b], a @ b
    def mm_sym():
        M, N, K = te.var("M"), te.var("N"), te.var("K")
        A, B = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B")
        a, b = rand((33, 70)), rand((70, 41))
        return [A, B], topi.matmul(A, B), [a, b], a @ b
    def dense():
        A, W = te.placeholder((19, 40), name="A"), te.placeholder((23, 40), name="W")
        a, w = rand((19, 40)), rand((23, 40))
        return [A, W], topi.dense(A, W), [a, w], a @ w.T
    def bmm():
        A, B = te.placeholder((3, 21, 17), name="A"), te.placeholder((3, 17, 37), name="B")
        a, b = rand((3, 21, 17)), rand((3, 17, 37))
        return [A, B], topi.batch_matmul(A, B), [a, b], a @ b
    def conv(stride=1, pad=1, dil=1):
        def f():
            X, Wt = te.placeholder((2, 5, 13, 11), name="X"), te.placeholder((7, 5, 3, 3), name="W")
            x, w = rand((2, 5, 13, 11)), rand((7, 5, 3, 3))
            return [X, Wt], topi.conv2d_nchw(X, Wt, stride, pad, dil), [x, w], conv_ref(x, w, stride, pad, dil)
        return f
    def dw():
        X, Wt = te.placeholder((1, 6, 15, 9), name="X"), te.placeholder((6, 2, 3, 3), name="W")
        x, w = rand((1, 6, 15, 9)), rand((6, 2, 3, 3))
        return [X, Wt], topi.depthwise_conv2d_nchw(X, Wt, 2, 1), [x, w], depthwise_ref(x, w, 2, 1)
    def pool(kind):
        def f():
            X = te.placeholder((2, 3, 11, 14), name="X")
            x = rand((2, 3, 11, 14))
            return [X], topi.pool2d(X, 3, 2, 1, kind), [x], pool_ref(x, 3, 2, 1, kind)
        return f
    def softmax():
        X = te.placeholder((9, 37), name="X")
        x = rand((9, 37), lo=-4, hi=4)
        return [X], topi.softmax(X), [x], softmax_ref(x)
    def layer_norm():
        X, G, B = te.placeholder((7, 50), name="X"), te.placeholder((50,), name="G"), te.placeholder((50,), name="Bt")
        x, g, b = rand((7, 50)), rand(50), rand(50)
        return [X, G, B], topi.layer_norm(X, G, B), [x, g, b], layer_norm_ref(x, g, b)
    def bcast():
        A, B = te.placeholder((5, 1, 7), name="A"), te.placeholder((6, 1), name="B")
        a, b = rand((5, 1, 7)), rand((6, 1))
        return [A, B], topi.relu(topi.add(A, B)), [a, b], np.maximum(a + b, 0)
    def eltwise():
        n = te.var("n")
        A, B = te.placeholder((n,), name="A"), te.placeholder((n,), name="B")
        a, b = rand(1001), rand(1001, lo=0.5, hi=2)
        return [A, B], topi.divide(topi.tanh(A), B), [a, b], np.tanh(a) / b
    return {
        "matmul": (mm, topi.schedule_matmul), "matmul_symbolic": (mm_sym, topi.schedule_matmul),
        "dense": (dense, topi.schedule_dense), "batch_matmul": (bmm, topi.schedule_batch_matmul),
        "conv2d": (conv(), topi.schedule_conv2d_nchw), "conv2d_stride2_pad2": (conv(2, 2), topi.schedule_conv2d_nchw),
        "conv2d_dilation2": (conv(1, 2, 2), topi.schedule_conv2d_nchw),
        "depthwise_conv2d": (dw, topi.schedule_depthwise_conv2d_nchw),
        "max_pool": (pool("max"), topi.schedule_pool2d), "avg_pool": (pool("avg"), topi.schedule_pool2d),
        "softmax": (softmax, topi.schedule_softmax), "layer_norm": (layer_norm, topi.schedule_layer_norm),
        "broadcast": (bcast, topi.schedule_broadcast), "elementwise": (eltwise, topi.schedule_elementwise),
    }


CASES = cases()


def _run(s, name, target, dev):
    make, sched = CASES[name]
    ins, out, arrays, ref = make()
    sch = sched(out, "gpu" if target != "llvm" else "cpu")
    f = kiln.build(sch, ins + [out], target, name=name, session=s)
    nd_in = [kiln.nd.array(x, dev) for x in arrays]
    o = kiln.nd.empty(ref.shape, out.dtype, dev)
    f(*(nd_in + [o]))
    np.testing.assert_allclose(o.numpy(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu(ts, name):
    _run(ts, name, "llvm", ts.cpu(0))


@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_compiles(ts, name, target):
    make, sched = CASES[name]
    ins, out, _, _ = make()
    f = kiln.build(sched(out, "gpu"), ins + [out], target, name=name, session=ts)
    assert all("launch" in k.info for k in f.module.kernels)
    assert f.get_source("asm")


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_runs_on(ts, name, kind):
    """On the daemon's first GPU of each kind; ROCm in CI is the software GPU (.ci/softgpu)."""
    dev = getattr(ts, kind)(0)
    if not dev.exist:
        pytest.skip("the daemon has no %s device" % kind)
    _run(ts, name, dev, dev)


def test_knobs():
    assert topi.knobs("matmul", "gpu")["block_m"] == 64
    assert "bn" in topi.knobs("matmul", "llvm")
    A, B = te.placeholder((8, 8), name="A"), te.placeholder((8, 8), name="B")
    C = topi.matmul(A, B)
    with pytest.raises(kiln.InvalidArgument, match="no knob"):
        topi.schedule_matmul(C, "cpu", block_m=4)
    with pytest.raises(kiln.InvalidArgument, match="unknown target"):
        topi.schedule_matmul(C, "tpu")


@pytest.mark.parametrize("M,N,K,bn", [(67, 45, 77, 16), (64, 96, 50, 32)])
def test_matmul_packed_cpu(ts, M, N, K, bn):
    """pack=bn: B in column panels (the last one partial when bn does not divide N)."""
    A, B = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B")
    C = topi.matmul(A, B, pack=bn)
    f = kiln.build(topi.schedule_matmul(C, "cpu", bm=4), [A, B, C], "llvm", session=ts, options={"fast_math": True})
    assert len(f.module.kernels) == 2
    a, b = rand((M, K)), rand((K, N))
    dev = ts.cpu(0)
    o = kiln.nd.empty((M, N), "float32", dev)
    f(kiln.nd.array(a, dev), kiln.nd.array(b, dev), o)
    np.testing.assert_allclose(o.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(kiln.InvalidArgument, match="CPU layout"):
        topi.schedule_matmul(C, "gpu")


def test_matmul_knobs_change_the_program(ts):
    M = N = K = 96
    A, B = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B")
    C = topi.matmul(A, B)
    a, b = rand((M, K)), rand((K, N))
    dev = ts.cpu(0)
    ids = set()
    for kn in ({"bm": 8, "bn": 16, "bk": 2}, {"bm": 32, "bn": 32, "bk": 4, "unroll_k": False}):
        f = kiln.build(topi.schedule_matmul(C, "cpu", **kn), [A, B, C], "llvm", session=ts)
        ids.add(f.module.id)
        o = kiln.nd.empty((M, N), "float32", dev)
        f(kiln.nd.array(a, dev), kiln.nd.array(b, dev), o)
        np.testing.assert_allclose(o.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    assert len(ids) == 2


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_payload(name, kind):
    """Every template and schedule makes a program kilnd can read (no daemon needed)."""
    import msgpack
    make, sched = CASES[name]
    ins, out, _, _ = make()
    p = te.lower(sched(out, kind), ins + [out], name)
    prog = msgpack.unpackb(p.payload, raw=False)
    stages = {t["name"] for t in prog["tensors"]} | {m["name"] for m in prog["schedule"] if "name" in m}
    for m in prog["schedule"]:
        assert m.get("stage", m.get("tensor")) in stages
    assert prog["kernels"][-1]["compute"] == p.names[id(out)]
