"""TVM's classic tutorials in kiln's spelling (tutorials.py), each built for the CPU and checked
against numpy, with the structure of what kiln emits where the tutorial is about it: the
vectorized loops are vectors of their extent, nothing is gathered or scattered, a parallel
loop runs one share per pool thread."""

import re

import numpy as np
import pytest

import kiln
import kiln.session
import kiln.tvm as tvm
from kiln import te, topi

import tutorials as T

GATHERS = re.compile(r"masked\.(gather|scatter)|vgather|vscatter")


@pytest.fixture
def session(unix_url, monkeypatch, s):
    """kiln.tvm uses the process's default session: point it at the test daemon."""
    monkeypatch.setenv("KILN_URL", unix_url)
    monkeypatch.setattr(kiln.session, "_default", None)
    yield s
    if kiln.session._default is not None:
        kiln.session._default.close()
        kiln.session._default = None


def _gemm_data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, n)).astype("float32"), rng.uniform(-1, 1, (n, n)).astype("float32")


def test_vector_add(session, dev):
    s, args = T.vector_add()
    f = tvm.build(s, args, "llvm", name="myadd")
    for n in (1027, 64, 3):
        a, b = np.random.rand(n).astype("float32"), np.random.rand(n).astype("float32")
        c = tvm.nd.array(np.zeros(n, "float32"), dev)
        f(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
        tvm.testing.assert_allclose(c.numpy(), a + b)
    ir = f.get_source("llvm")
    assert "<64 x float>" in ir, "the 64-wide vectorized loop is one vector statement"
    assert not GATHERS.search(ir)


@pytest.mark.parametrize("step", T.OPT_GEMM_STEPS)
def test_opt_gemm_step(session, dev, step):
    n = 256
    a, b = _gemm_data(n)
    s, args = T.opt_gemm(step, n, n, n)
    f = tvm.build(s, args, "llvm", name="mmult")
    c = tvm.nd.array(np.zeros((n, n), "float32"), dev)
    f(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
    tvm.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    ir, asm = f.get_source("llvm"), f.get_source("asm")
    assert not GATHERS.search(ir) and not GATHERS.search(asm), "no gathers or scatters in %s" % step
    if step not in ("default", "blocking"):
        assert "<32 x float>" in ir, "the vectorized 32-wide loop is vectors of 32 (%s)" % step


def test_opt_gemm_odd_sizes_and_blocks(session, dev):
    """Partial blocks (M and K do not divide by bn or kfactor; packing needs N / bn whole, as in
    TVM's tutorial): the vector statements run on whole blocks, a remainder on the rest."""
    for step, N in (("vectorization", 45), ("write_cache", 48), ("parallel", 48)):
        M, K = 70, 37
        s, args = T.opt_gemm(step, M, N, K, bn=16, kfactor=4)
        f = tvm.build(s, args, "llvm")
        rng = np.random.default_rng(1)
        a, b = rng.uniform(-1, 1, (M, K)).astype("float32"), rng.uniform(-1, 1, (K, N)).astype("float32")
        c = tvm.nd.array(np.zeros((M, N), "float32"), dev)
        f(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
        tvm.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_opt_gemm_packing_shapes(session):
    """N / bn with Python ints is a float in TVM's tutorial; kiln takes it as the int it is."""
    s, args = T.opt_gemm("packing", 128, 128, 128)
    packed = [st.op for st in s.stages if st.op.name == "packedB"][0]
    assert packed.name == "packedB" and [int(d) for d in packed.shape] == [4, 128, 32]
    with pytest.raises(kiln.InvalidArgument):
        te.placeholder((3.5, 2), name="X")


def test_parallel_loop_runs_in_pool_shares(session, dev):
    n = 262144
    s, args = T.parallel_loop(n)
    f = tvm.build(s, args, "llvm")
    assert f._recipes[0][2].get("parallel") == [0]
    launches, _ = f._params((tvm.nd.array(np.zeros(n, "float32"), dev), tvm.nd.empty((n,), "float32", dev)))
    threads = session._device_info()[dev.id]["compute_units"]
    assert launches[0][2][0] == min(n, threads), "one work-group per pool thread"
    a = np.random.rand(n).astype("float32")
    b = tvm.nd.empty((n,), "float32", dev)
    f(tvm.nd.array(a, dev), b)
    tvm.testing.assert_allclose(b.numpy(), a * 2 + 1, rtol=1e-6)


def test_parallel_chunk(session, dev):
    n = 1000
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0], chunk=64)
    f = tvm.build(s, [A, B], "llvm")
    assert "parallel" not in f._recipes[0][2]
    assert f._recipes[0][2]["grid"][0] == 16
    a = np.random.rand(n).astype("float32")
    b = tvm.nd.empty((n,), "float32", dev)
    f(tvm.nd.array(a, dev), b)
    tvm.testing.assert_allclose(b.numpy(), a + 1)
    with pytest.raises(kiln.InvalidArgument):
        s[B].parallel(B.op.axis[0], chunk=0)


@pytest.mark.parametrize("attached", [True, False])
def test_reduction_rfactor(session, dev, attached):
    if attached:
        s, args, BF = T.reduction_rfactor()
    else:
        n, m = te.var("n"), te.var("m")
        A = te.placeholder((n, m), name="A")
        k = te.reduce_axis((0, m), "k")
        B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
        s = te.create_schedule(B.op)
        ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
        BF = s.rfactor(B, ki)
        args = [A, B]
    assert [iv.var.name for iv in BF.op.axis] == ["k.inner", "i"]
    assert [iv.var.name for iv in BF.op.reduce_axis] == ["k.outer"]
    assert [iv.var.name for iv in s[args[1]].op.reduce_axis] == ["k.inner.v"]
    f = tvm.build(s, args, "llvm")
    assert len(f.prog.kernels) == (1 if attached else 2)
    for n, m in ((37, 101), (4, 16), (1, 3)):
        a = np.random.rand(n, m).astype("float32")
        b = tvm.nd.empty((n,), "float32", dev)
        f(tvm.nd.array(a, dev), b)
        tvm.testing.assert_allclose(b.numpy(), a.sum(axis=1), rtol=1e-5)


def test_rfactor_refusals(session):
    A = te.placeholder((8, 8), name="A")
    k = te.reduce_axis((0, 8), "k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    C = te.compute((8,), lambda i: A[i, 0] * 2, name="C")
    s = te.create_schedule([B.op, C.op])
    with pytest.raises(kiln.InvalidArgument):
        s.rfactor(B, B.op.axis[0])          # a data loop
    with pytest.raises(kiln.InvalidArgument):
        s.rfactor(C, C.op.axis[0])          # not a reduction
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=4)
    with pytest.raises(kiln.InvalidArgument):
        s.rfactor(B, ki, factor_axis=5)


def test_comm_reducer(session, dev):
    s, args = T.comm_reducer_product()
    f = tvm.build(s, args, "llvm")
    a = (np.random.rand(9, 7) + 0.5).astype("float32")
    b = tvm.nd.empty((9,), "float32", dev)
    f(tvm.nd.array(a, dev), b)
    tvm.testing.assert_allclose(b.numpy(), a.prod(axis=1), rtol=1e-5)
    mymax = te.comm_reducer(lambda x, y: te.max(x, y), lambda t: tvm.tir.min_value(t), name="mymax")
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis((0, 5), "k")
    assert te.compute((4,), lambda i: mymax(A[i, k], axis=k)).op.body.combiner == "max"
    with pytest.raises(kiln.InvalidArgument):
        te.comm_reducer(lambda x, y: x * y + x, lambda t: tvm.tir.const(1, dtype=t), name="odd")
    with pytest.raises(kiln.InvalidArgument):
        te.comm_reducer(lambda x, y: x - y, lambda t: tvm.tir.const(0, dtype=t))
    bad_identity = te.comm_reducer(lambda x, y: x + y, lambda t: tvm.tir.const(5, dtype=t), name="plus5")
    with pytest.raises(kiln.InvalidArgument):
        te.compute((4,), lambda i: bad_identity(A[i, k], axis=k))


def test_export_library_loads_elsewhere_without_compiling(session, dev, fresh_daemon, tmp_path):
    """TVM's export_library / load_module: the file holds the code object and the launch
    recipes; another daemon (its own empty cache) runs it from the file, and what it was
    given is the code object, not the program (it has no IR of it). A CPU code object cannot
    be checked, so a daemon takes it only when its operator allows prebuilt CPU code."""
    s, args = T.opt_gemm("parallel", 64, 64, 64, bn=16)
    f = tvm.build(s, args, "llvm", name="mmult")
    path = str(tmp_path / "mmult.so")
    f.export_library(path)
    strict = kiln.connect(fresh_daemon().urls[0])
    try:
        with pytest.raises(kiln.PermissionDenied):
            kiln.load_module(path, session=strict)
    finally:
        strict.close()
    other = kiln.connect(fresh_daemon("--allow-prebuilt-cpu").urls[0])
    try:
        g = kiln.load_module(path, session=other)
        with pytest.raises(kiln.KilnError):
            g.get_source("llvm")           # a prebuilt code object carries no IR
        a, b = _gemm_data(64, seed=3)
        odev = other.cpu(0)
        c = kiln.nd.empty((64, 64), "float32", odev)
        g(kiln.nd.array(a, odev), kiln.nd.array(b, odev), c)
        tvm.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
        remote = tvm.rpc.RPCSession(other)   # TVM's RPC spelling over the same session
        remote.upload(path)
        h = remote.load_module("mmult.so")
        h(kiln.nd.array(a, odev), kiln.nd.array(b, odev), c)
        tvm.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    finally:
        other.close()
    blob = bytearray(open(path, "rb").read())
    blob[len(blob) // 2] ^= 0x40
    with pytest.raises(kiln.InvalidArgument, match="sha256|not a module"):
        kiln.load_module(bytes(blob))
    with pytest.raises(kiln.InvalidArgument, match="not a module"):
        kiln.load_module(b"\x93garbage")


@pytest.mark.parametrize("target", ["llvm", "gfx942"])
def test_conv2d_bias_relu_is_one_kernel(session, dev, target):
    """topi's conv2d schedule takes an element-wise consumer of the convolution (bias and relu,
    as an ONNX Conv+Relu) and makes one kernel of them, on the CPU and for GPUs."""
    X = te.placeholder((1, 8, 12, 12), name="X")
    W = te.placeholder((16, 8, 3, 3), name="W")
    bias = te.placeholder((1, 16, 1, 1), name="bias")
    Y = topi.relu(topi.add(topi.conv2d_nchw(X, W, 1, 1, 1), bias))
    s = topi.schedule_conv2d_nchw(Y, target)
    f = tvm.build(s, [X, W, bias, Y], target)
    assert len(f.prog.kernels) == 1
    if target != "llvm":
        return
    rng = np.random.default_rng(2)
    x, w = rng.uniform(-1, 1, (1, 8, 12, 12)).astype("float32"), rng.uniform(-1, 1, (16, 8, 3, 3)).astype("float32")
    b = rng.uniform(-1, 1, (1, 16, 1, 1)).astype("float32")
    y = tvm.nd.empty((1, 16, 12, 12), "float32", dev)
    f(tvm.nd.array(x, dev), tvm.nd.array(w, dev), tvm.nd.array(b, dev), y)
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    ref = sum(np.einsum("chw,oc->ohw", xp[:, dy:dy + 12, dx:dx + 12], w[:, :, dy, dx])
              for dy in range(3) for dx in range(3))
    tvm.testing.assert_allclose(y.numpy()[0], np.maximum(ref + b[0], 0), rtol=1e-4, atol=1e-4)
    with pytest.raises(kiln.InvalidArgument):
        topi.schedule_conv2d_nchw(topi.relu(X), "llvm")
