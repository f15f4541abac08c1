"""The GPU matmul/dense template's fast-SGEMM knobs (issue 15 item 6): 128-bit staging
copies (vec), double-buffered shared tiles (te's double_buffer), storage_align. Every
configuration the space allows computes the right answer: a sample of the space runs on cpu:0
(te programs with threadIdx bindings run there as work-items) on even and odd shapes, and
compiles for sm_90 (ptxas where installed)."""

import os
import random
import re
import shutil
import subprocess

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.topi import schedules as S

PTXAS = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.access("/usr/local/cuda/bin/ptxas", os.X_OK)
                                  else None)


def sample(sp, n, seed):
    """n distinct configurations: every (vec, double_buffer) pair, every (k_major, vec) pair,
    every (vthread_m, vthread_n) pair, then random ones."""
    rng = random.Random(seed)
    cfgs = list(sp.configs())
    out = []
    for vec in sp.knobs["vec"]:
        for db in (False, True):
            out.append(rng.choice([c for c in cfgs if c["vec"] == vec and c["double_buffer"] == db]))
    for km in sp.knobs["k_major"]:
        for vec in sp.knobs["vec"]:
            pick = [c for c in cfgs if c["k_major"] == km and c["vec"] == vec and c not in out]
            if pick:
                out.append(rng.choice(pick))
    for vm in sp.knobs["vthread_m"]:
        for vn in sp.knobs["vthread_n"]:
            pick = [c for c in cfgs if c["vthread_m"] == vm and c["vthread_n"] == vn and c not in out]
            if pick:
                out.append(rng.choice(pick))
    while len(out) < n:
        c = rng.choice(cfgs)
        if c not in out:
            out.append(c)
    return out


def test_space_keeps_the_old_configurations_and_the_new_rules():
    sp = topi.space("matmul", "gpu", (4096, 4096, 4096))
    assert sp.knobs["vec"] == [1, 4] and sp.knobs["double_buffer"] == [False, True]
    old = [c for c in sp.configs() if c["vec"] == 1 and not c["double_buffer"] and c["vthread_m"] == 1
           and c["vthread_n"] == 1 and not c["min_blocks"] and not c["k_major"]]
    assert len(old) == 736  # the whole space before item 6, measured on the H200
    assert sp.default()["vec"] == 1 and not sp.default()["double_buffer"]
    big = dict(sp.default(), block_m=128, block_n=128, k_tile=32, thread_m=16, thread_n=16, vec=4)
    assert sp.check(big) is None  # 32 KiB of tiles
    assert "shared" in sp.check(dict(big, double_buffer=True))  # 64 KiB: over sm_90's static 48
    # 64 threads staging 64 x 32 of A and 32 x 64 of B: 64 registers each
    assert "prefetch" in sp.check(dict(sp.default(), k_tile=32, thread_m=8, thread_n=8, double_buffer=True))
    # with vec: 8 x 16 tiles (128 accumulators) and 256-wide blocks; 32-row tiles and 1024
    # threads with 64 accumulators each spill (ptxas -v), so the register estimate refuses them
    assert sp.check(dict(sp.default(), block_m=128, block_n=256, k_tile=8, thread_m=16, thread_n=16, vec=4)) is None
    assert "registers" in sp.check(dict(sp.default(), block_m=128, block_n=128, thread_m=4, thread_n=32, vec=4))
    assert "registers" in sp.check(dict(sp.default(), block_m=256, block_n=256, thread_m=32, thread_n=32, vec=4))
    assert "registers" in sp.check(dict(sp.default(), block_m=256, block_n=128, thread_m=16, thread_n=16))
    vector = [fn for name, _, fn in sp.rules if name == "vector"][0]
    assert not vector(dict(sp.default(), k_tile=4, vec=8)) and vector(dict(sp.default(), k_tile=8, vec=4))
    # records made before the knobs existed still key and describe (their defaults)
    legacy = {k: v for k, v in sp.default().items()
              if k not in ("vec", "double_buffer", "vthread_m", "vthread_n", "min_blocks", "k_major")}
    assert sp.key(legacy) == sp.key(sp.default())
    assert sp.features(legacy) == sp.features(sp.default())
    # the CPU template is untouched
    assert "vec" not in topi.space("matmul", "cpu", (64, 64, 64)).knobs


@pytest.mark.parametrize("op,shapes", [("matmul", (64, 48, 32)), ("matmul", (37, 29, 19)), ("dense", (33, 40, 24))])
def test_gpu_space_sample_is_right_on_cpu(s, dev, op, shapes):
    sp = topi.space(op, "gpu", shapes)
    ins = sp.inputs()
    ref = sp.reference(ins)
    cfgs = sample(sp, 10, hash(shapes) & 0xffff)
    builds = te.build_batch([sp.build(c) for c in cfgs], "cpu", session=s)
    for c, f in zip(cfgs, builds):
        xs = [kiln.nd.array(a, dev) for a in ins] + [kiln.nd.array(np.full(sp.output_shape(), np.nan, "float32"), dev)]
        f(*xs)
        np.testing.assert_allclose(xs[-1].numpy(), ref, rtol=1e-4, atol=1e-4, err_msg=str(c))


def test_gpu_space_sample_compiles_for_sm_90(s, tmp_path):
    from kiln.topi.space import _shared_bytes
    sp = topi.space("matmul", "gpu", (1024, 1024, 1024))
    cfgs = sample(sp, 8, 7)
    builds = te.build_batch([sp.build(c) for c in cfgs], "sm_90", session=s)
    for c, f in zip(cfgs, builds):
        ptx = f.get_source("ptx")
        shared = sorted(int(x) for x in re.findall(r"\.shared \.align 16 \.b8 \S+\[(\d+)\]", ptx))
        assert len(shared) == 2 and sum(shared) == _shared_bytes(c, 4), (c, shared)  # padding and halves counted
        if c["k_major"] and c["vec"] == 4 and (c["block_m"] // c["thread_m"]) % (4 * c["vthread_m"]) == 0:
            # A's fragment of one k step: 128-bit loads along the rows; the copy stores lane by lane
            assert "st.shared.f32" in ptx or "st.shared.b32" in ptx, c
        assert "bar.sync" in ptx
        if c["vec"] == 4:
            assert "ld.global.nc.v4" in ptx and "st.shared.v4" in ptx, c
        if PTXAS:
            p = tmp_path / "mm.ptx"
            p.write_text(ptx)
            r = subprocess.run([PTXAS, "-arch=sm_90", "-v", str(p), "-o", str(tmp_path / "mm.cubin")],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            if not c["min_blocks"]:  # the hint caps registers: ptxas may spill (the tuner weighs it)
                assert not re.search(r"[1-9]\d* bytes spill", r.stderr), (c, r.stderr)
            else:
                assert ".minnctapersm %d" % c["min_blocks"] in ptx, c


def test_storage_align_and_double_buffer_from_python(s, dev):
    """TVM's spellings: s[AA].storage_align(axis, factor, offset), s[AA].double_buffer()."""
    sp = topi.space("matmul", "gpu", (40, 36, 44))
    cfg = dict(sp.default(), block_m=16, block_n=16, thread_m=4, thread_n=8, k_tile=8, vec=4, double_buffer=True)
    sch, args = sp.build(cfg)
    shared = [st for st in sch.stages if st.scope == "shared"]
    assert len(shared) == 2
    for st in shared:
        st.storage_align(st.op.axis[0], 8, 4)   # rows of 8 or 16 padded by 4: 12 and 20
    prog = te.lower(sch, args).program
    ops = [p["op"] for p in prog["schedule"]]
    assert ops.count("storage_align") == 2 and ops.count("double_buffer") == 2
    f = kiln.build(sch, args, "cpu", session=s)
    ins = sp.inputs()
    xs = [kiln.nd.array(a, dev) for a in ins] + [kiln.nd.empty(sp.output_shape(), "float32", dev)]
    f(*xs)
    np.testing.assert_allclose(xs[-1].numpy(), sp.reference(ins), rtol=1e-4, atol=1e-4)
    st = shared[0]
    with pytest.raises(kiln.InvalidArgument):
        st.storage_align(st.op.axis[0], 4, 4)
    with pytest.raises(kiln.InvalidArgument):
        st.storage_align(sch.stages[-1].op.axis[0], 4, 1)
    out = [x for x in sch.stages if getattr(x.op, "reduce_axis", None)][0]
    with pytest.raises(kiln.InvalidArgument):
        out.double_buffer()
    # the lowering's own check: a kernel's output has no storage of its own to pad
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s2 = te.create_schedule(B.op)
    s2[B].storage_align(B.op.axis[0], 8, 1)
    with pytest.raises(kiln.KilnError) as e:
        kiln.build(s2, [A, B], "cpu", session=s)
    assert "storage_align" in str(e.value)


H200 = {"max_block": 1024, "max_shared": 232448, "wave_size": 32, "arch": "sm_90"}  # opt-in maximum


def test_space_shared_rule_is_the_static_limit_of_the_target():
    """A device's opt-in maximum (227 KiB on sm_90) is not te's static limit (48 KiB on sm_*,
    64 KiB on gfx*): the space caps it, and counts both halves of double-buffered tiles."""
    from kiln.topi.space import _shared_bytes, static_shared
    assert static_shared("sm_90") == static_shared("cuda:0") == static_shared("gpu") == 48 * 1024
    assert static_shared("gfx942") == static_shared("hsa:0") == 64 * 1024 and static_shared("cpu") is None
    sp = topi.space("matmul", "cuda:0", (4096, 4096, 4096), device=H200)
    assert sp.limits["max_shared"] == 48 * 1024
    big = dict(sp.default(), block_m=128, block_n=128, k_tile=32, thread_m=16, thread_n=16, vec=4,
               double_buffer=True)
    assert _shared_bytes(big, 4) == 64 * 1024 and "shared" in sp.check(big)
    assert all(_shared_bytes(c, 4) <= 48 * 1024 for c in sp.configs())
    amd = topi.space("matmul", "hsa:0", (4096, 4096, 4096), device=dict(H200, arch="gfx942", max_shared=65536))
    assert amd.limits["max_shared"] == 64 * 1024 and amd.check(dict(big, thread_m=8, thread_n=32)) is None
    # odd tiles: each half of a double-buffered tile is a whole 16 elements
    assert _shared_bytes(dict(big, block_m=16, block_n=16, k_tile=4), 4) == 2 * (2 * 64 * 4)
    assert _shared_bytes(dict(big, block_m=16, block_n=16, k_tile=4, double_buffer=False), 4) == 2 * 64 * 4


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_space_largest_shared_configurations_compile(s, target):
    """The configurations of the most shared memory the space keeps compile within te's limit,
    and the PTX declares exactly the bytes the rule counts."""
    from kiln.topi.space import _shared_bytes
    info = dict(H200, arch=target, max_shared=65536 if target.startswith("gfx") else 232448)
    sp = topi.space("matmul", target, (4096, 4096, 4096), device=info)
    cfgs = sorted(sp.configs(), key=lambda c: -_shared_bytes(c, 4))
    top = _shared_bytes(cfgs[0], 4)
    pick = [c for c in cfgs if _shared_bytes(c, 4) == top]
    pick = random.Random(3).sample(pick, min(4, len(pick))) + [c for c in cfgs if c["block_m"] == 16][:1]
    builds = te.build_batch([sp.build(c) for c in pick], target, session=s)
    for c, f in zip(pick, builds):
        assert not isinstance(f, kiln.KilnError), (c, f)
        if target.startswith("sm_"):
            ptx = f.get_source("ptx")
            declared = sum(int(x) for x in re.findall(r"\.shared \.align 16 \.b8 \S+\[(\d+)\]", ptx))
            assert declared == _shared_bytes(c, 4) <= 48 * 1024, c


def test_storage_order_from_python(s, dev):
    """s[AA].storage_order(k, m): the k-major A tile of k_major, spelled in Python; dense has
    both tiles k-major; both right on cpu:0, and a wrong axis list is refused before kilnd."""
    for op in ("matmul", "dense"):
        sp = topi.space(op, "gpu", (40, 36, 44))
        cfg = dict(sp.default(), block_m=16, block_n=32, thread_m=4, thread_n=8, k_tile=8, vec=4,
                   double_buffer=True, k_major=True)
        sch, args = sp.build(cfg)
        ops = [p["op"] for p in te.lower(sch, args).program["schedule"]]
        assert ops.count("storage_order") == (2 if op == "dense" else 1), ops
        f = kiln.build(sch, args, "cpu", session=s)
        ins = sp.inputs()
        xs = [kiln.nd.array(a, dev) for a in ins] + [kiln.nd.empty(sp.output_shape(), "float32", dev)]
        f(*xs)
        np.testing.assert_allclose(xs[-1].numpy(), sp.reference(ins), rtol=1e-4, atol=1e-4, err_msg=op)
    st = [x for x in sch.stages if x.scope == "shared"][0]
    with pytest.raises(kiln.InvalidArgument):
        st.storage_order(st.op.axis[0])
    with pytest.raises(kiln.InvalidArgument):
        st.storage_order(st.op.axis[0], st.op.axis[0])
