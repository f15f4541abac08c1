"""kiln.te: the payload it produces (docs/te.md), its errors, and every schedule primitive
run through a real kilnd on the CPU against numpy on fresh random inputs (odd sizes,
partial tiles, symbolic shapes). GPU schedules compile for gfx942 and sm_90 and run on a
CUDA device where the daemon has one."""

import os

import msgpack
import numpy as np
import pytest

import kiln
from kiln import te
from te_helpers import GPU_TARGETS, vadd_schedule, require_te, rand, run


# -- the payload ---------------------------------------------------------------------------

def test_vadd_payload_is_the_documented_example():
    s, args = vadd_schedule()
    C = args[2]
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    p = te.lower(s, args, "vadd")
    prog = msgpack.unpackb(p.payload, raw=False)
    assert prog == p.program
    assert prog["te"] == 1 and prog["vars"] == [{"name": "n", "dtype": "int32"}]
    assert [t["name"] for t in prog["tensors"]] == ["A", "B", "C"]
    assert prog["tensors"][2] == {"name": "C", "op": "compute", "dtype": "float32", "shape": [["var", "n"]],
                                  "axes": ["i"], "body": ["add", ["load", "A", [["var", "i"]]],
                                                          ["load", "B", [["var", "i"]]]]}
    assert prog["schedule"] == [
        {"op": "split", "stage": "C", "var": "i", "factor": 64, "outer": "i.outer", "inner": "i.inner"},
        {"op": "bind", "stage": "C", "var": "i.outer", "thread": "blockIdx.x"},
        {"op": "bind", "stage": "C", "var": "i.inner", "thread": "threadIdx.x"}]
    assert prog["kernels"] == [{"name": "vadd", "args": ["A", "B", "C"], "compute": "C"}]


def test_payload_names_are_unique_and_valid():
    A = te.placeholder((4,), name="x y")          # a space is not a wire name character
    B = te.compute((4,), lambda i: A[i] * 2)       # default name "compute"
    C = te.compute((4,), lambda i: B[i] + 1)       # "compute" again
    s = te.create_schedule(C.op)
    prog = te.lower(s, [A, B, C]).program
    names = [t["name"] for t in prog["tensors"]]
    assert names == ["x_y", "compute", "compute_1"]
    assert prog["tensors"][2]["body"] == ["add", ["load", "compute", [["var", "i"]]], 1.0]


def test_expression_types():
    A = te.placeholder((8,), "float16", name="A")
    n = te.var("n")
    e = A[n - 1] * 2
    assert e.dtype == "float16"
    assert (A[0].astype("float32") + 1).dtype == "float32"
    assert (n // 2).dtype == "int32" and (n < 3).dtype == "bool"
    # a Python float is a float32 constant (TVM), so it widens float16; te.const keeps float16
    assert te.if_then_else(n < 3, 1.0, A[0]).dtype == "float32"
    assert te.if_then_else(n < 3, te.const(1.0, "float16"), A[0]).dtype == "float16"
    with pytest.raises(kiln.InvalidArgument):
        te.exp(n)                 # integer operand
    with pytest.raises(kiln.InvalidArgument):
        A[0.5]
    with pytest.raises(kiln.InvalidArgument):
        A[1, 2]
    with pytest.raises(kiln.InvalidArgument):
        bool(n < 3)
    k = te.reduce_axis((0, n), name="k")
    cond = k == 0                               # an expression, not Python's identity test
    assert isinstance(te.if_then_else(cond, 1, 2), te.Select) and bool(k == k) and not bool(k != k)
    assert k in [k] and {k: 1}[k] == 1
    with pytest.raises(kiln.InvalidArgument):   # a reduction inside an expression
        te.compute((1,), lambda i: te.sum(A[k], axis=k) + 1)


def test_schedule_errors():
    n = te.var("n")
    A = te.placeholder((n, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    R = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="R")
    B = te.compute((n, 8), lambda i, j: A[i, j] + R[i], name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    io, ii = s[B].split(i, factor=4)
    with pytest.raises(kiln.InvalidArgument, match="already split"):
        s[B].split(i, factor=2)
    with pytest.raises(kiln.InvalidArgument, match="adjacent"):
        s[B].fuse(io, j)
    with pytest.raises(kiln.InvalidArgument, match="reduction"):
        s[R].bind(R.op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(kiln.InvalidArgument, match="reduction"):
        s[R].compute_inline()
    with pytest.raises(kiln.InvalidArgument, match="output"):
        s[B].compute_inline()
    with pytest.raises(kiln.InvalidArgument, match="unknown thread tag"):
        te.thread_axis("blockIdx.w")
    with pytest.raises(kiln.InvalidArgument, match="not among the build arguments"):
        te.lower(s, [B])
    with pytest.raises(kiln.InvalidArgument, match="shape variables only"):
        x = te.var("x", "float32")
        C = te.compute((4,), lambda i: x * 2.0)
        te.lower(te.create_schedule(C.op), [C])


# -- end to end on the CPU -----------------------------------------------------------------

@pytest.fixture
def ts(s):
    require_te(s)
    return s


@pytest.mark.parametrize("n", [1, 63, 64, 1000, 4097])
def test_vadd_symbolic_odd_sizes(ts, n):
    sch, args = vadd_schedule()
    C = args[2]
    xo, xi = sch[C].split(C.op.axis[0], factor=64)
    sch[C].parallel(xo)
    sch[C].vectorize(xi)
    a, b = rand(n), rand(n)
    (c,), f = run(ts, sch, args, [a, b], [((n,), "float32")], name="vadd_odd")
    np.testing.assert_allclose(c, a + b, rtol=1e-6)
    kern = f.module.kernels[0]
    assert [x.type for x in kern.args] == ["ptr", "ptr", "ptr", "int32"]
    assert kern.info["launch"]["vars"][0]["from"] == [0, 0]


def test_walkthrough_schedule_on_cpu(ts):
    sch, args = vadd_schedule()
    C = args[2]
    bx, tx = sch[C].split(C.op.axis[0], factor=64)
    sch[C].bind(bx, te.thread_axis("blockIdx.x"))
    sch[C].bind(tx, te.thread_axis("threadIdx.x"))
    a, b = rand(1000), rand(1000)
    (c,), _ = run(ts, sch, args, [a, b], [((1000,), "float32")])
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


def _mm(M, N, K, dtype="float32"):
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


MM_SIZES = [(37, 29, 53)]


def _check_mm(ts, sch, A, B, C, M, N, K, target="llvm", dev=None):
    a, b = rand((M, K)), rand((K, N))
    (c,), f = run(ts, sch, [A, B, C], [a, b], [((M, N), "float32")], target=target, dev=dev)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    return f


def test_split_reorder_fuse_tile(ts):
    M, N, K = 37, 29, 53
    A, B, C = _mm(M, N, K)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    ko, ki = s[C].split(C.op.reduce_axis[0], nparts=5)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    f = s[C].fuse(io, jo)
    s[C].parallel(f)
    _check_mm(ts, s, A, B, C, M, N, K)


def test_symbolic_matmul_unroll_vectorize(ts):
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A, B, C = _mm(M, N, K)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=4)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=3)
    s[C].reorder(i, jo, ko, ki, ji)
    s[C].unroll(ki)
    s[C].vectorize(ji)
    s[C].parallel(i)
    for m, n, k in [(5, 7, 9), (33, 18, 70)]:
        _check_mm(ts, s, A, B, C, m, n, k)


def test_cache_write_compute_at(ts):
    M, N, K = 45, 70, 33
    A, B, C = _mm(M, N, K)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 16, 16)
    s[CC].compute_at(s[C], jo)
    mc, nc = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=4)
    s[CC].reorder(ko, mc, ki, nc)
    s[CC].vectorize(nc)
    s[C].parallel(io)
    _check_mm(ts, s, A, B, C, M, N, K)


def _mm_gpu_schedule(M, N, K, shared=True):
    A, B, C = _mm(M, N, K)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    if shared:
        AA = s.cache_read(A, "shared", [CC])
        BB = s.cache_read(B, "shared", [CC])
    by, yi = s[C].split(C.op.axis[0], factor=16)
    bx, xi = s[C].split(C.op.axis[1], factor=16)
    s[C].reorder(by, bx, yi, xi)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(yi, te.thread_axis("threadIdx.y"))
    s[C].bind(xi, te.thread_axis("threadIdx.x"))
    s[CC].compute_at(s[C], xi)
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=8)
    if shared:
        for T in (AA, BB):
            s[T].compute_at(s[CC], ko)
            a0, a1 = s[T].op.axis
            fz = s[T].fuse(a0, a1)
            fo, tx = s[T].split(fz, factor=16)
            fo, ty = s[T].split(fo, factor=16)
            s[T].bind(ty, te.thread_axis("threadIdx.y"))
            s[T].bind(tx, te.thread_axis("threadIdx.x"))
    return s, A, B, C


def test_cache_read_shared_with_threads_on_cpu(ts):
    """The GPU recipe (shared tiles, barriers, work-items) runs on the CPU device too."""
    M, N, K = 50, 35, 41
    s, A, B, C = _mm_gpu_schedule(M, N, K)
    _check_mm(ts, s, A, B, C, M, N, K)


def _mm_cached(variant, M, N, K):
    """8x8 work-groups of 8x8 work-items, one C element each, k in steps of 8, with the
    operand tiles staged as ``variant`` says. C reduces straight into its output."""
    A, B, C = _mm(M, N, K)
    s = te.create_schedule(C.op)
    out = s.cache_write(C, "local") if variant == "local_acc" else C
    readers = [out]
    staged = [s.cache_read(A, "local" if variant == "a_local" else "shared", readers)]
    if variant in ("ab_bound", "double_buffer", "aligned", "local_acc"):
        staged.append(s.cache_read(B, "shared", readers))
    i, j = C.op.axis
    bi, ti = s[C].split(i, factor=8)
    bj, tj = s[C].split(j, factor=8)
    s[C].reorder(bi, bj, ti, tj)
    for v, t in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
        s[C].bind(v, te.thread_axis(t))
    if out is not C:
        s[out].compute_at(s[C], tj)
    ko, ki = s[out].split(s[out].op.reduce_axis[0], factor=8)
    if out is C:
        s[C].reorder(bi, bj, ti, tj, ko, ki)
    for T in staged:
        s[T].compute_at(s[out], ko)
        a0, a1 = s[T].op.axis
        if variant == "a_unbound" or variant == "a_local":
            continue
        if variant == "fused":
            fo, tx = s[T].split(s[T].fuse(a0, a1), factor=8)
            fo, ty = s[T].split(fo, factor=8)
            a0, a1 = ty, tx
        s[T].bind(a0, te.thread_axis("threadIdx.y"))
        s[T].bind(a1, te.thread_axis("threadIdx.x"))
        if variant == "double_buffer":
            s[T].double_buffer()
        if variant == "aligned":
            s[T].storage_align(s[T].op.axis[0], 8, 1)
    return s, A, B, C


MM_CACHED_VARIANTS = ["a_bound", "ab_bound", "a_unbound", "a_local", "fused", "double_buffer", "aligned",
                      "local_acc"]


def test_cache_read_bound_exact_tiles_on_cpu(ts):
    """The cooperative load of A's tile with every tile dividing: the load's two barriers
    share one basic block, and the CPU lowering once kept only one of them (NaN at 8 and 16,
    wrong sums at 40)."""
    for n in (8, 16, 40):
        s, A, B, C = _mm_cached("a_bound", n, n, n)
        _check_mm(ts, s, A, B, C, n, n, n)


@pytest.mark.parametrize("variant", MM_CACHED_VARIANTS)
def test_cached_schedules_match_numpy_on_cpu(ts, variant):
    """A differential sweep: each staged schedule at shapes whose tiles divide, shapes with
    partial tiles everywhere, and symbolic shapes run at both, against numpy."""
    for M, N, K in [(16, 24, 32), (37, 29, 19)]:
        s, A, B, C = _mm_cached(variant, M, N, K)
        _check_mm(ts, s, A, B, C, M, N, K)
    s, A, B, C = _mm_cached(variant, te.var("M"), te.var("N"), te.var("K"))
    f = kiln.build(s, [A, B, C], "llvm", session=ts)
    dev = ts.cpu(0)
    for M, N, K in [(16, 24, 32), (37, 29, 19)]:
        a, b = rand((M, K)), rand((K, N))
        c = kiln.nd.empty((M, N), "float32", dev)
        f(kiln.nd.array(a, dev), kiln.nd.array(b, dev), c)
        np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4, err_msg="symbolic %s" % ((M, N, K),))


def test_compute_inline_and_if_then_else(ts):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    P = te.compute((n + 2,), lambda i: te.if_then_else(te.all(i >= 1, i < n + 1), A[i - 1], 0.0), name="P")
    C = te.compute((n,), lambda i: P[i] + P[i + 1] + P[i + 2], name="C")
    s = te.create_schedule(C.op)
    s[P].compute_inline()
    for size in (1, 7, 100):
        a = rand(size)
        (c,), _ = run(ts, s, [A, C], [a], [((size,), "float32")])
        ref = np.convolve(np.pad(a, 1), np.ones(3, "float32"), mode="valid")
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-6)


def test_compute_at_producer_region(ts):
    n = te.var("n")
    A = te.placeholder((n, 16), name="A")
    B = te.compute((n, 16), lambda i, j: te.exp(A[i, j]), name="B")
    C = te.compute((n, 16), lambda i, j: B[i, j] * 2.0 + A[i, j], name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=3)
    s[B].compute_at(s[C], io)
    a = rand((10, 16))
    (c,), _ = run(ts, s, [A, C], [a], [((10, 16), "float32")])
    np.testing.assert_allclose(c, np.exp(a) * 2 + a, rtol=1e-5, atol=1e-5)


def test_intermediate_root_stage_runs_as_its_own_kernel(ts):
    n = te.var("n")
    A = te.placeholder((n, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    R = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="R")
    C = te.compute((n, 5), lambda i, j: A[i, j] - R[i], name="C")
    s = te.create_schedule(C.op)
    a = rand((11, 5))
    (c,), f = run(ts, s, [A, C], [a], [((11, 5), "float32")])
    assert len(f.module.kernels) == 2
    np.testing.assert_allclose(c, a - a.max(axis=1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("comb,ref", [("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod)])
def test_reductions_with_where(ts, comb, ref):
    A = te.placeholder((9, 13), name="A")
    k = te.reduce_axis((0, 13), name="k")
    red = {"sum": te.sum, "max": te.max, "min": te.min, "prod": te.prod}[comb]
    C = te.compute((9,), lambda i: red(A[i, k], axis=k, where=k % 3 != 1), name="C")
    s = te.create_schedule(C.op)
    a = rand((9, 13), lo=0.5, hi=1.5)
    (c,), _ = run(ts, s, [A, C], [a], [((9,), "float32")])
    mask = np.arange(13) % 3 != 1
    np.testing.assert_allclose(c, ref(a[:, mask], axis=1), rtol=1e-5)


def test_math_casts_and_integer_ops(ts):
    A = te.placeholder((33,), name="A")
    I = te.placeholder((33,), "int32", name="I")
    C = te.compute((33,), lambda i: te.tanh(A[i]) + te.sqrt(te.abs(A[i])) + te.sigmoid(A[i])
                   + (I[i] // 7).astype("float32") + (I[i] % 5).astype("float32") + te.exp(A[i]).astype("float16")
                   .astype("float32"), name="C")
    s = te.create_schedule(C.op)
    a = rand(33)
    ii = rand(33, "int32")
    (c,), _ = run(ts, s, [A, I, C], [a, ii], [((33,), "float32")])
    ref = (np.tanh(a) + np.sqrt(np.abs(a)) + 1 / (1 + np.exp(-a)) + (ii // 7) + (ii % 5)
           + np.exp(a).astype("float16").astype("float32"))
    np.testing.assert_allclose(c, ref, rtol=2e-3, atol=2e-3)


def test_wrong_arguments_are_typed_errors(ts):
    sch, args = vadd_schedule()
    f = kiln.build(sch, args, "llvm", session=ts)
    dev = ts.cpu(0)
    a = kiln.nd.array(rand(8), dev)
    with pytest.raises(kiln.InvalidArgument, match="takes 3 arguments"):
        f(a, a)
    with pytest.raises(kiln.InvalidArgument, match="shape variable n"):
        f(a, kiln.nd.array(rand(9), dev), kiln.nd.empty((8,), "float32", dev))
    with pytest.raises(kiln.InvalidArgument, match="float64"):
        f(a, a, kiln.nd.empty((8,), "float64", dev))


def test_time_evaluator(ts):
    sch, args = vadd_schedule()
    f = kiln.build(sch, args, "llvm", name="vt", session=ts)
    dev = ts.cpu(0)
    a = kiln.nd.array(rand(1000), dev)
    c = kiln.nd.empty((1000,), "float32", dev)
    r = f.time_evaluator(f.entry_name, dev, number=3, repeat=2)(a, a, c)
    assert len(r.results) == 2 and all(x > 0 for x in r.results)


# -- GPU targets -----------------------------------------------------------------------------

@pytest.mark.parametrize("target", GPU_TARGETS)
def test_gpu_schedules_compile(ts, target):
    s, A, B, C = _mm_gpu_schedule(te.var("M"), te.var("N"), te.var("K"))
    f = kiln.build(s, [A, B, C], target, name="mm", session=ts)
    assert f.module.target.startswith(target)
    asm = f.get_source("asm")
    assert ("s_endpgm" in asm) if target.startswith("gfx") else (".entry" in asm or "ret;" in asm)
    launch = f.module.kernels[0].info["launch"]
    assert launch["block"][:2] == [16, 16]


def test_ptx_assembles_with_ptxas(ts, tmp_path):
    import shutil
    import subprocess
    ptxas = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.access("/usr/local/cuda/bin/ptxas", os.X_OK)
                                      else None)
    if ptxas is None:
        pytest.skip("no ptxas on this machine")
    s, A, B, C = _mm_gpu_schedule(te.var("M"), te.var("N"), te.var("K"))
    f = kiln.build(s, [A, B, C], "sm_90", name="mm", session=ts)
    ptx = tmp_path / "mm.ptx"
    ptx.write_text(f.get_source("ptx"))
    r = subprocess.run([ptxas, "-arch=sm_90", str(ptx), "-o", str(tmp_path / "mm.cubin")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


def test_int64_shape_vars(ts):
    n = te.var("n", "int64")
    m = te.var("m")
    A = te.placeholder((n, m), name="A")
    C = te.compute((n, m), lambda i, j: A[i, j] * 3.0, name="C")
    s = te.create_schedule(C.op)
    prog = te.lower(s, [A, C]).program
    assert prog["index_dtype"] == "int64" and {v["dtype"] for v in prog["vars"]} == {"int64"}
    a = rand((5, 7))
    (c,), _ = run(ts, s, [A, C], [a], [((5, 7), "float32")])
    np.testing.assert_allclose(c, a * 3, rtol=1e-6)


def test_gpu_schedule_runs_on_cuda(ts):
    dev = ts.cuda(0)
    if not dev.exist:
        pytest.skip("the daemon has no CUDA device")
    for M, N, K in [(50, 35, 41), (128, 64, 96)]:
        s, A, B, C = _mm_gpu_schedule(M, N, K)
        _check_mm(ts, s, A, B, C, M, N, K, target=dev, dev=dev)
