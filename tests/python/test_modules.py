"""Modules through kilnd: compile, sources, launches, timing, batches, and the compile and
device errors. Every test skips (with the reason) while kilnd lacks the method it needs."""

import os

import numpy as np
import pytest

import kiln
from conftest import ROOT, needs

VADD = open(os.path.join(ROOT, "clients", "python", "examples", "vadd.ll")).read()

FAULT = """
define void @fault(ptr %p, i64 %bad) section "kiln.kernel" {
  %q = inttoptr i64 %bad to ptr
  store volatile float 1.0, ptr %q, align 4
  ret void
}
"""


@pytest.fixture
def vadd(s):
    with needs("compile"):
        return s.compile(VADD, target=s.cpu(0))


def arrays(dev, n):
    a = np.random.default_rng(n).uniform(size=n).astype(np.float32)
    b = np.random.default_rng(n + 1).uniform(size=n).astype(np.float32)
    return a, b, kiln.nd.array(a, dev), kiln.nd.array(b, dev), kiln.nd.empty((n,), "float32", dev)


def test_compile_reports_kernels(s, vadd):
    assert isinstance(vadd, kiln.Module)
    assert [k.name for k in vadd.kernels] == ["myadd"]
    assert [a.type for a in vadd.kernels[0].args] == ["ptr", "ptr", "ptr", "int32"]
    again = s.compile(VADD, target="cpu")
    assert again.id == vadd.id and again.cached is True
    assert "myadd" in vadd and "nope" not in vadd


def test_compile_from_path_and_bytes(s, vadd, tmp_path):
    p = tmp_path / "k.ll"
    p.write_text(VADD)
    assert s.compile(p, target="cpu").id == vadd.id
    assert s.compile(str(p), target="cpu").id == vadd.id
    assert s.compile(VADD.encode(), target="cpu").id == vadd.id


def test_get_source(s, vadd):
    with needs("source"):
        ll = vadd.get_source("llvm")
    assert isinstance(ll, str) and "myadd" in ll
    assert isinstance(vadd.get_source("asm"), str) and vadd.get_source("asm")
    so = vadd.get_source("so")
    assert isinstance(so, bytes) and so.startswith(b"\x7fELF")


def test_launch(s, dev, vadd):
    n = 1000
    a, b, ad, bd, cd = arrays(dev, n)
    with needs("launch"):
        vadd["myadd"](ad, bd, cd, n, grid=(n + 63) // 64, block=64)
    np.testing.assert_allclose(cd.numpy(), a + b)
    cd2 = kiln.nd.empty((n,), "float32", dev)
    vadd(ad, bd, cd2, np.int32(n), grid=[(n + 127) // 128, 1, 1], block=(128,))  # the only kernel
    np.testing.assert_allclose(cd2.numpy(), a + b)


def test_pipelined_launches(s, dev, vadd):
    n = 4096
    a, b, ad, bd, cd = arrays(dev, n)
    f = vadd["myadd"]
    with needs("launch"):
        futs = [f.launch_async(ad, bd, cd, n, grid=n // 64, block=64) for _ in range(200)]
        kiln.wait(futs)
    np.testing.assert_allclose(cd.numpy(), a + b)


def test_launch_argument_errors(s, dev, vadd):
    _, _, ad, bd, cd = arrays(dev, 8)
    with pytest.raises(kiln.InvalidArgument):
        vadd["myadd"](ad, bd, cd, grid=1, block=8)  # one argument short (checked in the client)
    with pytest.raises(kiln.InvalidArgument):
        vadd["myadd"](ad, bd, cd, 8)  # no geometry
    with needs("launch"):
        with pytest.raises(kiln.InvalidArgument):  # checked by the daemon
            s.call("launch", module=vadd.id, kernel="myadd", device="cpu:0", grid=[1, 1, 1], block=[8, 1, 1],
                   args=[{"tensor": ad.id}, 8])
        with pytest.raises(kiln.NotFound):
            s.call("launch", module=vadd.id, kernel="nope", device="cpu:0", grid=[1, 1, 1], block=[8, 1, 1],
                   args=[])
        with pytest.raises(kiln.NotFound):
            s.call("launch", module=vadd.id, kernel="myadd", device="cpu:0", grid=[1, 1, 1], block=[8, 1, 1],
                   args=[{"tensor": 1}, {"tensor": 2}, {"tensor": 3}, 8])


def test_time_evaluator(s, dev, vadd):
    n = 1 << 16
    a, b, ad, bd, cd = arrays(dev, n)
    ev = vadd.time_evaluator("myadd", dev, number=5, repeat=3, min_repeat_ms=0, grid=n // 256, block=256)
    with needs("time"):
        r = ev(ad, bd, cd, n)
    assert isinstance(r, kiln.BenchmarkResult)
    assert len(r.results) == 3 and all(t > 0 for t in r.results)
    assert r.min <= r.median <= max(r.results) and r.min <= r.mean and r.std >= 0
    assert "mean (ms)" in str(r) and "BenchmarkResult(" in repr(r)
    np.testing.assert_allclose(cd.numpy(), a + b)


def test_compile_error(s):
    with needs("compile"):
        with pytest.raises(kiln.CompileError) as e:
            s.compile("define void @k( {\n", target="cpu")
    assert e.value.code == 7 and e.value.message
    assert s.ping() == "pong"


def test_gpu_targets_without_a_gpu(s):
    with needs("compile"):
        m = s.compile(VADD, target="gfx942")
    with needs("source"):
        asm = m.get_source("asm")
    assert "s_endpgm" in asm
    assert m.get_source("hsaco").startswith(b"\x7fELF")
    assert "amdgpu" in m.get_source("llvm") or "amdgcn" in m.get_source("llvm")
    try:
        p = s.compile(VADD, target="sm_90")
    except kiln.CompileError as e:
        pytest.skip("kilnd does not build sm_90 here: %s" % e.message)
    ptx = p.get_source("ptx")
    assert isinstance(ptx, str) and ".target sm_90" in ptx


def test_compile_batch(s):
    bad = "this is not LLVM IR"
    with needs("compile_batch"):
        out = s.compile_batch([(VADD, "cpu"), {"ir": bad, "target": "cpu"}, (VADD, "gfx942")])
    assert isinstance(out[0], kiln.Module) and [k.name for k in out[0].kernels] == ["myadd"]
    assert isinstance(out[1], kiln.CompileError)
    assert isinstance(out[2], kiln.Module) and out[2].id != out[0].id


def test_device_fault_costs_one_worker(s, dev, vadd):
    with needs("compile"):
        m = s.compile(FAULT, target="cpu")
    keep = kiln.nd.array(np.ones(4, np.float32), dev)
    with needs("launch"):
        with pytest.raises(kiln.DeviceFault) as e:
            m["fault"](keep, 16, grid=1, block=1)
    assert e.value.code == 10 and e.value.message
    with pytest.raises(kiln.NotFound):  # the worker's tensors are gone
        keep.numpy()
    n = 64
    a, b, ad, bd, cd = arrays(dev, n)  # the restarted worker serves again
    vadd["myadd"](ad, bd, cd, n, grid=1, block=64)
    np.testing.assert_allclose(cd.numpy(), a + b)


SPIN = """
define void @spin(ptr %out, i64 %n) section "kiln.kernel" {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%j, %loop]
  store volatile i64 %i, ptr %out
  %j = add i64 %i, 1
  %c = icmp ult i64 %j, %n
  br i1 %c, label %loop, label %done
done:
  ret void
}
"""


def test_launch_past_its_deadline(s, dev, vadd):
    with needs("compile"):
        m = s.compile(SPIN, target="cpu")
    out = kiln.nd.empty((1,), "int64", dev)
    with needs("launch"):
        m["spin"](out, 1000, grid=1, block=1, timeout_ms=5000)  # well inside its deadline
        with pytest.raises(kiln.Timeout) as e:
            m["spin"](out, 2_000_000, grid=100000, block=1, timeout_ms=100)
    assert e.value.code == 11 and "deadline" in e.value.message
    n = 64
    a, b, ad, bd, cd = arrays(dev, n)  # a fresh worker serves the next launch
    vadd["myadd"](ad, bd, cd, n, grid=1, block=64)
    np.testing.assert_allclose(cd.numpy(), a + b)
