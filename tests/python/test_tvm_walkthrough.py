"""The TVM ROCm walkthrough (../shared/seed: "ROCm backend walkthrough", the vector add of
TVM's getting-started tutorial) with its import changed to ``import kiln.tvm as tvm``.
Building for "rocm" compiles for gfx942 anywhere; running it needs a ROCm device, so the
same program built for "llvm" runs on the CPU."""

import numpy as np
import pytest

import kiln
import kiln.session
from te_helpers import require_te


@pytest.fixture
def tvm_default(unix_url, monkeypatch, s):
    """kiln.tvm uses the process's default session: point it at the test daemon."""
    require_te(s)
    monkeypatch.setenv("KILN_URL", unix_url)
    monkeypatch.setattr(kiln.session, "_default", None)
    import kiln.tvm as tvm
    yield tvm
    if kiln.session._default is not None:
        kiln.session._default.close()


def walkthrough_program(tvm):
    # --- as in the walkthrough ---
    n = tvm.var("n")
    A = tvm.placeholder((n,), name='A')
    B = tvm.placeholder((n,), name='B')
    C = tvm.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = tvm.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, tvm.thread_axis("blockIdx.x"))
    s[C].bind(tx, tvm.thread_axis("threadIdx.x"))
    return s, A, B, C


def launch_and_check(tvm, fadd, ctx, A, B, C):
    # --- as in the walkthrough ---
    n = 1024
    a = tvm.nd.array(np.random.uniform(size=n).astype(A.dtype), ctx)
    b = tvm.nd.array(np.random.uniform(size=n).astype(B.dtype), ctx)
    c = tvm.nd.array(np.zeros(n, dtype=C.dtype), ctx)

    fadd(a, b, c)
    np.testing.assert_allclose(c.asnumpy(), a.asnumpy() + b.asnumpy())


def test_walkthrough_rocm_build_and_sources(tvm_default):
    tvm = tvm_default
    s, A, B, C = walkthrough_program(tvm)
    target = "rocm"
    fadd_rocm = tvm.build(s, [A, B, C], target, target_host="llvm", name="myadd")
    dev_module = fadd_rocm.imported_modules[0]
    ll = dev_module.get_source("llvm")
    asm = dev_module.get_source("asm")
    print(ll)
    print(asm)
    assert "amdgcn" in ll and "myadd" in ll
    assert "workgroup.id.x" in ll and "workitem.id.x" in ll
    assert "s_endpgm" in asm and ("global_load" in asm or "flat_load" in asm)
    assert str(dev_module.target).startswith("gfx942") or tvm.rocm(0).exist
    ctx = tvm.rocm(0)
    if not ctx.exist:
        pytest.skip("built for rocm; running it needs a ROCm device, which this daemon does not have")
    launch_and_check(tvm, fadd_rocm, ctx, A, B, C)


def test_walkthrough_rocm_mcpu(tvm_default):
    tvm = tvm_default
    s, A, B, C = walkthrough_program(tvm)
    f = tvm.build(s, [A, B, C], "rocm -mcpu=gfx90a", target_host="llvm", name="myadd")
    assert str(f.imported_modules[0].target).startswith("gfx90a")


def test_walkthrough_llvm_runs_on_cpu(tvm_default):
    tvm = tvm_default
    s, A, B, C = walkthrough_program(tvm)
    fadd = tvm.build(s, [A, B, C], "llvm", name="myadd")
    launch_and_check(tvm, fadd, tvm.cpu(0), A, B, C)
    assert fadd.imported_modules == []
