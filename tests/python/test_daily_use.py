"""Small things daily users hit (issue 16, items 13 and the list after 14)."""

import json
import os

import numpy as np
import pytest

import kiln
from conftest import ROOT


def test_a_malformed_device_id_raises(s):
    for bad in ("cpu0", "cpu:x", "tpu:0", "cuda:-1", ""):
        with pytest.raises(kiln.InvalidArgument, match="is not a device id"):
            s.device(bad)
    assert s.device("cpu:0").id == "cpu:0" and s.device("llvm").id == "cpu:0" and s.device("rocm:1").id == "hsa:1"


def test_compile_of_a_missing_file_raises_file_not_found(s, tmp_path):
    for path in (str(tmp_path / "kernel.ll"), "kernel.ll", "build/x.bc", tmp_path / "k.ll"):
        with pytest.raises(FileNotFoundError):
            s.compile(path)
    # text is still text: one line of IR has blanks
    with pytest.raises(kiln.CompileError):
        s.compile("this is not IR")


def test_str_of_an_ndarray_is_its_values(s):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = kiln.nd.array(x, s.cpu(0))
    assert str(a) == str(x)
    assert repr(a).startswith("<kiln.NDArray id=")


def test_benchmark_result_to_dict(s):
    vadd = os.path.join(ROOT, "clients", "python", "examples", "vadd.ll")
    m = s.compile(vadd)
    dev = s.cpu(0)
    n = 64
    a = kiln.nd.array(np.ones(n, np.float32), dev)
    c = kiln.nd.empty((n,), "float32", dev)
    r = m.time_evaluator(m.kernels[0].name, dev, number=3, repeat=2)(a, a, c, n, grid=1, block=n)
    d = r.to_dict()
    assert set(d) >= {"mean", "median", "min", "max", "std", "cv", "results", "number", "repeat"}
    assert d["number"] == 3 and len(d["results"]) == 2 and d["min"] <= d["mean"]
    json.dumps(d)


def test_daemon_log_after_stop(kilnd_bin):
    d = kiln.start_daemon(kilnd_bin)
    try:
        assert "event=listen" in d.log()   # written before the readiness line, unlike event=ready
    finally:
        d.stop()
    assert d.tmpdir is None          # its folder (and the log file) is gone
    log = d.log()
    assert "event=listen" in log and "event=exit" in log


def test_lower_prints_the_loop_nest():
    from kiln import te
    from te_helpers import vadd_schedule
    s, (A, B, C) = vadd_schedule()
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    text = str(te.lower(s, [A, B, C], name="myadd"))
    assert text.splitlines() == [
        "// myadd(A: float32[n], B: float32[n], C: float32[n])",
        "produce C {",
        "  // attr [iter_var(blockIdx.x, , blockIdx.x)] thread_extent = ((n + 63) // 64)",
        "  // attr [iter_var(threadIdx.x, , threadIdx.x)] thread_extent = 64",
        "  if (likely((((blockIdx.x * 64) + threadIdx.x) < n))) {",
        "    C[((blockIdx.x * 64) + threadIdx.x)] = (A[((blockIdx.x * 64) + threadIdx.x)] + "
        "B[((blockIdx.x * 64) + threadIdx.x)])",
        "  }",
        "}"]
    # a reduction: the identity over the loops inside the reduce loops, then the update
    M = 64
    k = te.reduce_axis((0, M), "k")
    X = te.placeholder((M, M), name="X")
    Y = te.placeholder((M, M), name="Y")
    Z = te.compute((M, M), lambda x, y: te.sum(X[x, k] * Y[k, y], axis=k), name="Z")
    s = te.create_schedule(Z.op)
    xo, yo, xi, yi = s[Z].tile(Z.op.axis[0], Z.op.axis[1], 8, 8)
    s[Z].reorder(xo, yo, k, xi, yi)
    s[Z].vectorize(yi)
    s[Z].parallel(xo)
    text = str(te.lower(s, [X, Y, Z]))
    assert "parallel (x.outer, 0, 8) {" in text and "vectorized (y.inner, 0, 8) {" in text
    init = text.index("= 0.0f")
    assert text.index("for (x.inner, 0, 8)") < init < text.index("for (k, 0, 64)")
    assert "(Z[((x.outer * 8) + x.inner), ((y.outer * 8) + y.inner)] + (X[" in text
    assert te.lower(s, [X, Y, Z]).summary().startswith("te program:")
    # compute_at: the producer over the part its consumer reads inside the loop (bounds as
    # TVM infers them for affine reads: a 2-d stencil needs 9 x 10 of an 8 x 8 tile)
    A2 = te.placeholder((64, 64), name="A2")
    P = te.compute((64, 64), lambda i, j: A2[i, j] * 2, name="P")
    Q = te.compute((62, 62), lambda i, j: P[i, j] + P[i + 1, j + 2], name="Q")
    s = te.create_schedule(Q.op)
    xo, yo, xi, yi = s[Q].tile(Q.op.axis[0], Q.op.axis[1], 8, 8)
    s[P].compute_at(s[Q], yo)
    lines = [l.strip() for l in str(te.lower(s, [A2, Q])).splitlines()]
    at = lines.index("produce P {")
    assert lines[at - 2:at + 4] == [
        "for (i.outer, 0, 8) {", "for (j.outer, 0, 8) {", "produce P {", "for (i, 0, 9) {", "for (j, 0, 10) {",
        "P[((i.outer * 8) + i), ((j.outer * 8) + j)] = (A2[((i.outer * 8) + i), ((j.outer * 8) + j)] * 2.0f)"]


def test_docstring_examples_run(unix_url, monkeypatch):
    # every >>> example in the package (help(kiln.topi) has one) runs against the test daemon
    import doctest
    import importlib
    import pkgutil
    monkeypatch.setenv("KILN_URL", unix_url)
    ran = 0
    for m in pkgutil.walk_packages(kiln.__path__, "kiln."):
        if m.name.endswith("__main__"):
            continue
        mod = importlib.import_module(m.name)
        r = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
        assert r.failed == 0, m.name
        ran += r.attempted
    assert ran >= 8


def test_docs_point_inside_the_repository():
    # no web links (loopback and example hosts aside), nothing beside the checkout, and
    # every relative markdown link resolves to a file of the repository
    import glob
    import re
    docs = [os.path.join(ROOT, p) for p in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md",
                                            os.path.join("clients", "python", "README.md"))]
    docs += glob.glob(os.path.join(ROOT, "docs", "*.md"))
    bad = []
    for path in docs:
        if not os.path.exists(path):
            continue
        text = open(path).read()
        for m in re.finditer(r"https?://([^\s)>`\"/:]+)", text):
            if not re.match(r"(127\.0\.0\.1|localhost|HOST|\[::1\]|[\w.-]*example\.(org|com))$", m.group(1)):
                bad.append("%s: %s" % (os.path.relpath(path, ROOT), m.group(0)))
        for m in re.finditer(r"\.\./shared|(?<![\w/])shared/(reference|seed)", text):
            bad.append("%s: %s" % (os.path.relpath(path, ROOT), m.group(0)))
        for m in re.finditer(r"\]\(([^)#\s]+)(#[^)]*)?\)", text):
            target = m.group(1)
            if "://" in target:
                continue
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), target))):
                bad.append("%s: link to %s" % (os.path.relpath(path, ROOT), target))
    assert not bad, bad


def test_lower_prints_every_tutorial_schedule():
    # TVM's tutorials as kiln writes them: each prints a loop nest
    from kiln import te
    import tutorials as T
    for step in ("default", "blocking", "vectorization", "permutation", "packing", "write_cache", "parallel"):
        s, args = T.opt_gemm(step, M=64, N=64, K=64)[:2]
        text = str(te.lower(s, args))
        assert text.startswith("// default_function(") and "no loop nest" not in text, step
    s, args = T.opt_gemm("parallel", M=64, N=64, K=64)[:2]
    text = str(te.lower(s, args))
    cw = text[text.index("produce C.global {"):]
    assert "for (x, 0, 32) {" in cw and "for (x, 0, 64)" not in cw   # the 32 x 32 tile, not all of C
    s, args = T.reduction_rfactor()[:2]
    text = str(te.lower(s, args))
    assert "no loop nest" not in text and "produce B.rf {" in text


def test_lower_prints_rfactor_as_tvm_does():
    # TVM's reduction tutorial: the .rf stage reduces k.outer with k.inner as a data axis (its
    # guard goes with it), then B reduces the .rf over k.inner.v
    from kiln import te
    import tutorials as T
    s, (A, B), BF = T.reduction_rfactor(attach=False)
    assert str(te.lower(s, [A, B])).splitlines() == [
        "// default_function(A: float32[n, m], B: float32[n])",
        "produce B.rf {",
        "  for (k.inner, 0, 16) {",
        "    for (i, 0, n) {",
        "      B.rf[k.inner, i] = 0.0f",
        "      for (k.outer, 0, ((m + 15) // 16)) {",
        "        if (likely((((k.outer * 16) + k.inner) < m))) {",
        "          B.rf[k.inner, i] = (B.rf[k.inner, i] + A[i, ((k.outer * 16) + k.inner)])",
        "        }",
        "      }",
        "    }",
        "  }",
        "}",
        "produce B {",
        "  for (i, 0, n) {",
        "    B[i] = 0.0f",
        "    for (k.inner.v, 0, 16) {",
        "      B[i] = (B[i] + B.rf[k.inner.v, i])",
        "    }",
        "  }",
        "}"]
    # computed at B's row, the .rf covers one row: no loop of extent 1, B's i indexes it
    s[BF].compute_at(s[B], s[B].op.axis[0])
    lines = [l.strip() for l in str(te.lower(s, [A, B])).splitlines()]
    at = lines.index("produce B.rf {")
    assert lines[at - 1] == "for (i, 0, n) {" and lines[at + 1] == "for (k.inner, 0, 16) {"
    assert "B.rf[k.inner, i] = (B.rf[k.inner, i] + A[i, ((k.outer * 16) + k.inner)])" in lines


def test_lower_prints_rfactor_of_two_reduce_loops_with_where():
    from kiln import te
    A = te.placeholder((8, 12, 10), name="A")
    k, r = te.reduce_axis((0, 12), "k"), te.reduce_axis((0, 10), "r")
    B = te.compute((8,), lambda i: te.max(A[i, k, r], axis=[k, r], where=r < 9), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=5)
    s.rfactor(B, ki, factor_axis=1)
    lines = [l.strip() for l in str(te.lower(s, [A, B])).splitlines()]
    rf = lines[lines.index("produce B.rf {"):lines.index("produce B {")]
    assert rf[1:3] == ["for (i, 0, 8) {", "for (k.inner, 0, 5) {"]
    assert "for (k.outer, 0, 3) {" in rf and "for (r, 0, 10) {" in rf
    assert "if (likely(((r < 9) && (((k.outer * 5) + k.inner) < 12)))) {" in rf
    assert "B.rf[i, k.inner] = max(B.rf[i, k.inner], A[i, ((k.outer * 5) + k.inner), r])" in rf
    b = lines[lines.index("produce B {"):]
    assert "for (k.inner.v, 0, 5) {" in b and "B[i] = max(B[i], B.rf[i, k.inner.v])" in b
    assert not any("likely" in l for l in b)
