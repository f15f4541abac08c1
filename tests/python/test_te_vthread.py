"""te's virtual threads (bind to te.thread_axis("vthread")) and the launch_bounds occupancy
hint (issue 15's SGEMM step): TVM's classic GPU GEMM with vthreads runs on cpu:0 against
numpy at dividing, partial and symbolic shapes, lowers for sm_90 and gfx942, and ptxas -v
shows what the copies cost (registers, spills) and what they change (the shared loads);
hostile schedules are refused with the reason."""

import re

import numpy as np
import pytest

import kiln
from kiln import te, topi
from te_helpers import PTXAS, ptxas_verbose, require_te
import os


@pytest.fixture(autouse=True)
def _te(s):
    require_te(s)


def gemm(M, N, K, vt=(2, 2), block=32, threads=(4, 4), kt=8, min_blocks=None, name="C"):
    """TVM's GPU GEMM recipe: block x block tiles, vt[0] x vt[1] virtual threads of
    threads[0] x threads[1] work-items, accumulators local (one copy per vthread value), A and
    B tiles shared (one region for all vthreads)."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name=name)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    AA = s.cache_read(A, "shared", [CC])
    BB = s.cache_read(B, "shared", [CC])
    y, x = C.op.axis
    by, yi = s[C].split(y, factor=block)
    bx, xi = s[C].split(x, factor=block)
    vy, yi = s[C].split(yi, nparts=vt[0])
    vx, xi = s[C].split(xi, nparts=vt[1])
    ty, yi = s[C].split(yi, nparts=threads[0])
    tx, xi = s[C].split(xi, nparts=threads[1])
    s[C].reorder(by, bx, vy, vx, ty, tx, yi, xi)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(vy, te.thread_axis((0, vt[0]), "vthread", name="vy"))
    s[C].bind(vx, te.thread_axis((0, vt[1]), "vthread", name="vx"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    if min_blocks:
        s[C].launch_bounds(min_blocks)
    s[CC].compute_at(s[C], tx)
    yc, xc = s[CC].op.axis
    ko, ki = s[CC].split(CC.op.reduce_axis[0], factor=kt)
    s[CC].reorder(ko, ki, yc, xc)
    s[CC].unroll(ki)
    s[CC].unroll(yc)
    s[CC].unroll(xc)
    for T in (AA, BB):
        s[T].compute_at(s[CC], ko)
        f = s[T].fuse(*s[T].op.axis)
        f, t_x = s[T].split(f, factor=threads[1])
        f, t_y = s[T].split(f, factor=threads[0])
        s[T].bind(t_y, te.thread_axis("threadIdx.y"))
        s[T].bind(t_x, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def run_cpu(s, dev, sched, args, shape_a, shape_b, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, size=shape_a).astype("float32")
    b = rng.uniform(-1, 1, size=shape_b).astype("float32")
    f = kiln.build(sched, args, "llvm", session=s)
    c = kiln.nd.array(np.full((shape_a[0], shape_b[1]), np.nan, "float32"), dev)
    f(kiln.nd.array(a, dev), kiln.nd.array(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("M,N,K,vt", [(64, 64, 32, (2, 2)),     # every tile whole
                                      (50, 70, 37, (2, 2)),     # partial tiles: guards per copy
                                      (7, 5, 3, (2, 2)),        # less than one tile
                                      (96, 64, 24, (4, 1)),     # four strided runs of rows
                                      (64, 48, 16, (1, 2))])
def test_vthread_gemm_matches_numpy_on_cpu(s, dev, M, N, K, vt):
    sched, args = gemm(M, N, K, vt=vt)
    run_cpu(s, dev, sched, args, (M, K), (K, N), seed=M + N + K)


def test_vthread_gemm_symbolic_shapes(s, dev):
    """The shapes are vars; the vthread extents are constant nparts splits."""
    n, m, kk = te.var("n"), te.var("m"), te.var("kk")
    sched, args = gemm(n, m, kk)
    f = kiln.build(sched, args, "llvm", session=s)
    for M, N, K in ((64, 32, 16), (45, 33, 9)):
        rng = np.random.default_rng(M)
        a = rng.uniform(-1, 1, size=(M, K)).astype("float32")
        b = rng.uniform(-1, 1, size=(K, N)).astype("float32")
        c = kiln.nd.empty((M, N), "float32", dev)
        f(kiln.nd.array(a, dev), kiln.nd.array(b, dev), c)
        np.testing.assert_allclose(c.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_vthread_payload_and_printer():
    sched, args = gemm(64, 64, 32, min_blocks=2)
    prog = te.lower(sched, args).program
    binds = [p for p in prog["schedule"] if p["op"] == "bind" and p["thread"] == "vthread"]
    assert [b["var"] for b in binds] == ["i.inner.outer", "j.inner.outer"]
    assert {"op": "launch_bounds", "stage": "C", "min_blocks": 2} in prog["schedule"]
    text = str(te.lower(sched, args))
    assert "// attr [iter_var(vy, , vthread)] virtual_thread = 2" in text
    assert "(vy * 16)" in text and "(vx * 16)" in text


def test_vthread_builds_for_gpus(s):
    sched, args = gemm(128, 128, 64, min_blocks=3)
    ptx = kiln.build(sched, args, "sm_90", session=s).get_source("ptx")
    assert ".minnctapersm 3" in ptx and ".maxntid 16, 1, 1" in ptx or ".maxntid 16" in ptx
    sched, args = gemm(128, 128, 64, min_blocks=8)
    f = kiln.build(sched, args, "gfx942", session=s)
    # 8 groups of 16 work-items (one wave64 each) over a CU's 4 SIMDs
    assert '"amdgpu-waves-per-eu"="2"' in f.get_source("llvm")


def _ptxas(ptx):
    r = ptxas_verbose(ptx)
    assert r.returncode == 0, r.stderr
    regs = int(re.search(r"Used (\d+) registers", r.stderr).group(1))
    spill = sum(int(x) for x in re.findall(r"(\d+) bytes spill stores", r.stderr))
    return regs, spill


def _shared_loads(ptx):
    return sorted(set(re.findall(r"ld\.shared(?:\.v\d)?\.[bf]32", ptx)))


@pytest.mark.skipif(not os.access(PTXAS, os.X_OK), reason="CUDA's ptxas is not installed")
def test_topi_matmul_vthread_and_hint_in_ptxas(s):
    """The template's 128 x 128 blocks of 16 x 16 work-items (8 x 8 tiles, vec 4, k_tile 8,
    double-buffered), plain and as 2 x 2 vthreads of 4 x 4 runs: the same tile, 128-bit
    shared loads both, the second run of B columns 64 floats (256 bytes) on, the copy-out in
    128-bit stores (st.global.v4: the runs are whole vectors) instead of 32-bit ones; and with
    min_blocks 2 ptxas holds 128 registers (two 256-work-item blocks an SM)."""
    sp = topi.space("matmul", "gpu", (4096, 4096, 4096))
    plain = dict(sp.default(), block_m=128, block_n=128, thread_m=16, thread_n=16, k_tile=8, vec=4,
                 double_buffer=True)
    strided = dict(plain, vthread_m=2, vthread_n=2)
    hinted = dict(strided, min_blocks=2)
    for c in (plain, strided, hinted):
        assert sp.check(c) is None, (c, sp.check(c))
    out = {}
    for name, c in (("plain", plain), ("strided", strided), ("hinted", hinted)):
        ptx = kiln.build(*sp.build(c), "sm_90", session=s).get_source("ptx")
        out[name] = (ptx,) + _ptxas(ptx)
    for name in out:
        ptx, regs, spill = out[name]
        assert _shared_loads(ptx) == ["ld.shared.v4.b32"], name  # every fragment read 128 bits at a time
        assert regs <= 255 and spill <= 16, (name, regs, spill)
    assert "st.global.v4" not in out["plain"][0] and "st.global.v4.b32" in out["strided"][0]
    assert re.search(r"ld\.shared\.v4\.b32\s+\{[^}]*\}, \[%r\w+\+256\]", out["strided"][0]), "the second run"
    assert ".minnctapersm 2" in out["hinted"][0] and out["hinted"][1] <= 128


def test_vthread_hostile_schedules(s):
    A = te.placeholder((64, 32), name="A")
    B = te.placeholder((32, 64), name="B")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

    def fresh():
        sc = te.create_schedule(C.op)
        return sc, sc[C]

    vt = te.thread_axis((0, 2), "vthread", name="vx")
    # bound twice (the same loop; the same vthread axis on two loops)
    sc, st = fresh()
    o, i = st.split(C.op.axis[0], nparts=2)
    st.bind(o, vt)
    with pytest.raises(kiln.InvalidArgument, match="already bound"):
        st.bind(o, te.thread_axis("vthread", name="vy"))
    o2, _ = st.split(C.op.axis[1], nparts=2)
    with pytest.raises(kiln.InvalidArgument, match="already bound"):
        st.bind(o2, vt)
    # a reduction loop
    sc, st = fresh()
    with pytest.raises(kiln.InvalidArgument, match="reduction"):
        st.bind(C.op.reduce_axis[0], vt)
    # cthread is TVM's too, not kiln's
    sc, st = fresh()
    st.bind(C.op.axis[0], te.thread_axis("cthread"))
    with pytest.raises(kiln.InvalidArgument, match="vthread only"):
        te.lower(sc, [A, B, C]).program
    # extents the lowering refuses: more than 64, more than 64 copies, a whole axis of 64 x 2
    for parts in ((128,), (16, 8)):
        sc, st = fresh()
        for ax, p in zip(C.op.axis, parts):
            o, _ = st.split(ax, nparts=p)
            st.bind(o, te.thread_axis("vthread", name="v%d" % p))
        with pytest.raises(kiln.CompileError, match="too large|at most 64"):
            kiln.build(sc, [A, B, C], "llvm", session=s)
    # symbolic extent
    n = te.var("n")
    A2 = te.placeholder((n,), name="A2")
    C2 = te.compute((n,), lambda i: A2[i] * 2.0, name="C2")
    sc = te.create_schedule(C2.op)
    sc[C2].bind(C2.op.axis[0], te.thread_axis("vthread"))
    with pytest.raises(kiln.CompileError, match="not a constant"):
        kiln.build(sc, [A2, C2], "llvm", session=s)
    # extent 0
    A0 = te.placeholder((0, 4), name="A0")
    C0 = te.compute((0, 4), lambda i, j: A0[i, j] + 1.0, name="C0")
    sc = te.create_schedule(C0.op)
    sc[C0].bind(C0.op.axis[0], te.thread_axis("vthread"))
    with pytest.raises(kiln.CompileError, match="extent 0"):
        kiln.build(sc, [A0, C0], "llvm", session=s)
    # launch_bounds
    sc, st = fresh()
    for bad in (0, 33, -1, 2.0, True, "2"):
        with pytest.raises(kiln.InvalidArgument, match="min_blocks"):
            st.launch_bounds(bad)


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
def test_vthread_gemm_runs_on_gpu(s, kind):
    """On the daemon's first GPU of each kind (ROCm in CI: the software GPU, .ci/softgpu): the
    vthread GEMM with the occupancy hint, a partial shape, against numpy."""
    dev = getattr(s, kind)(0)
    if not dev.exist:
        pytest.skip("the daemon has no %s device" % kind)
    M, N, K = 70, 45, 19
    sched, args = gemm(M, N, K, min_blocks=2)
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, size=(M, K)).astype("float32")
    b = rng.uniform(-1, 1, size=(K, N)).astype("float32")
    f = kiln.build(sched, args, dev, session=s)
    c = kiln.nd.array(np.full((M, N), np.nan, "float32"), dev)
    f(kiln.nd.array(a, dev), kiln.nd.array(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
