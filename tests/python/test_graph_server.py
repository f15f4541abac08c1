"""kilnd's graph methods (docs/graph.md): graph_create, graph_run, graph_time, graph_free on the
real daemon, with hand-made payloads (llvm kernels, te programs from kiln.onnx) and hostile
ones: bad shapes, unknown names and tensor ids, another tenant's ids, cycles, huge counts,
truncated payloads, a graph freed while it runs, a fault in a node. KILN_TEST_DEVICE (default
cpu:0) picks the device of the hand-made graphs: bench/gpu's machines run them on cuda:0."""

import os
import threading

import msgpack
import numpy as np
import pytest

import kiln
from conftest import ROOT

ADD = """
define void @addc(ptr noalias %x, ptr noalias %y, float %c, i32 %n) section "kiln.kernel" {
entry:
  %bx = call i32 @__kiln_group_id(i32 0)
  %bs = call i32 @__kiln_group_size(i32 0)
  %tx = call i32 @__kiln_local_id(i32 0)
  %base = mul i32 %bx, %bs
  %i = add i32 %base, %tx
  %inside = icmp slt i32 %i, %n
  br i1 %inside, label %body, label %done
body:
  %j = sext i32 %i to i64
  %px = getelementptr inbounds float, ptr %x, i64 %j
  %py = getelementptr inbounds float, ptr %y, i64 %j
  %a = load float, ptr %px, align 4
  %b = fadd float %a, %c
  store float %b, ptr %py, align 4
  br label %done
done:
  ret void
}

define void @fault(ptr %p, i64 %bad) section "kiln.kernel" {
  %q = inttoptr i64 %bad to ptr
  store volatile float 1.0, ptr %q, align 4
  ret void
}

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

declare i32 @__kiln_group_id(i32)
declare i32 @__kiln_group_size(i32)
declare i32 @__kiln_local_id(i32)
"""

N = 64
DEV = os.environ.get("KILN_TEST_DEVICE", "cpu:0")


def _t(a):
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": a.tobytes()}


def chain(k, n=N, c=1.0, weights=False):
    """x -> +c -> +c ... (k nodes) -> y; with weights, the last node reads a constant too."""
    vals = ["v%d" % i for i in range(k - 1)]
    nodes = []
    prev = "x"
    for i in range(k):
        out = vals[i] if i < k - 1 else "y"
        nodes.append({"name": "add%d" % i, "program": 0,
                      "launches": [{"kernel": "addc", "args": [{"value": prev}, {"value": out}, c, n],
                                    "grid": [(n + 63) // 64], "block": [64]}],
                      "label": "Add add%d" % i})
        prev = out
    return {"graph": 1, "name": "chain%d" % k,
            "inputs": [{"name": "x", "dtype": "float32", "shape": [n]}],
            "outputs": ["y"],
            "constants": [{"name": "w", "tensor": _t(np.arange(n, dtype=np.float32))}] if weights else [],
            "values": [{"name": v, "dtype": "float32", "shape": [n]} for v in vals] +
                      [{"name": "y", "dtype": "float32", "shape": [n]}],
            "views": [],
            "programs": [{"format": "llvm", "ir": ADD}],
            "nodes": nodes}


def pack(g):
    return msgpack.packb(g, use_bin_type=True)


def create(s, g, **kw):
    return s.call("graph_create", device=DEV, graph=pack(g) if isinstance(g, dict) else g, **kw)


def run(s, gid, x, **kw):
    r = s.call("graph_run", graph=gid, inputs={"x": _t(x)}, **kw)
    return [np.frombuffer(t["data"], t["dtype"]).reshape(t["shape"]) for t in r["outputs"]], r


@pytest.fixture(scope="module")
def sess(unix_url):
    with kiln.connect(unix_url) as s:
        yield s


def _graphs(s):
    return s.stats()["graphs"]


def test_chain_runs_and_is_cached(sess):
    x = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    r = create(sess, chain(5))
    assert len(r["graph"]) == 64 and r["nodes"] == 5 and r["launches"] == 5 and r["programs"] == 1
    # five values of 256 bytes planned: liveness leaves two slots (the output takes a freed one)
    assert r["arena_bytes"] == 2 * 256 and r["constant_bytes"] == 0
    (y,), rep = run(sess, r["graph"], x)
    np.testing.assert_allclose(y, x + 5, rtol=1e-6)
    assert rep["elapsed"] > 0
    again = create(sess, chain(5))
    assert again["graph"] == r["graph"] and again["cached"] and again["compiled"] == 0
    other = create(sess, chain(5, c=2.0))
    assert other["graph"] != r["graph"]
    (y2,), _ = run(sess, other["graph"], x)
    np.testing.assert_allclose(y2, x + 10, rtol=1e-6)
    st = sess.stats()
    assert st["graphs"] >= 2 and st["graph_bytes"] > 0
    t = sess.call("graph_time", graph=r["graph"], inputs={"x": _t(x)}, number=5, repeat=3)
    assert len(t["results"]) == 3 and t["number"] == 5 and 0 < t["min"] <= t["median"]
    for gid in (r["graph"], other["graph"]):
        assert sess.call("graph_free", graph=gid) is None
        with pytest.raises(kiln.NotFound):
            sess.call("graph_free", graph=gid)
        with pytest.raises(kiln.NotFound):
            run(sess, gid, x)


def test_outputs_pick_and_views_and_constants(sess):
    g = chain(2, weights=True)
    g["views"] = [{"name": "y8", "of": "y", "shape": [8, 8]}, {"name": "w2", "of": "w", "shape": [2, 32]}]
    g["outputs"] = ["y8", "x", "w2", "v0"]
    r = create(sess, g)
    assert r["constant_bytes"] == 256
    x = np.arange(N, dtype=np.float32)
    outs, _ = run(sess, r["graph"], x)
    np.testing.assert_allclose(outs[0], (x + 2).reshape(8, 8))
    np.testing.assert_allclose(outs[1], x)
    np.testing.assert_allclose(outs[2], np.arange(N, dtype=np.float32).reshape(2, 32))
    np.testing.assert_allclose(outs[3], x + 1)
    picked, _ = run(sess, r["graph"], x, outputs=["v0", "y8"])
    assert [p.shape for p in picked] == [(N,), (8, 8)]
    with pytest.raises(kiln.InvalidArgument, match="outputs\\[0\\]"):
        run(sess, r["graph"], x, outputs=["nope"])
    sess.call("graph_free", graph=r["graph"])


def test_bad_run_inputs(sess):
    r = create(sess, chain(2))
    gid = r["graph"]
    with pytest.raises(kiln.InvalidArgument, match="input 'x'"):
        run(sess, gid, np.zeros(N + 1, np.float32))
    with pytest.raises(kiln.InvalidArgument, match="input 'x'"):
        run(sess, gid, np.zeros(N, np.float64))
    with pytest.raises(kiln.InvalidArgument, match="missing"):
        sess.call("graph_run", graph=gid, inputs={"z": _t(np.zeros(N, np.float32))})
    with pytest.raises(kiln.InvalidArgument, match="takes 1 inputs"):
        sess.call("graph_run", graph=gid, inputs={})
    with pytest.raises(kiln.InvalidArgument, match="data"):
        sess.call("graph_run", graph=gid, inputs={"x": {"dtype": "float32", "shape": [N], "data": b"\0" * 7}})
    with pytest.raises(kiln.NotFound, match="input 'x'"):
        sess.call("graph_run", graph=gid, inputs={"x": {"tensor": 1}})
    with pytest.raises(kiln.InvalidArgument, match="input 'x'"):
        sess.call("graph_run", graph=gid, inputs={"x": {"tensor": "1"}})
    with pytest.raises(kiln.InvalidArgument, match="input 'x'"):
        sess.call("graph_run", graph=gid, inputs={"x": {"tensor": 1, "data": b""}})
    with pytest.raises(kiln.InvalidArgument):
        sess.call("graph_run", graph=gid, inputs={"x": _t(np.zeros(N, np.float32))}, bogus=1)
    for bad in ("0" * 63, "G" * 64, 5, "0" * 64):
        with pytest.raises((kiln.InvalidArgument, kiln.NotFound)):
            sess.call("graph_run", graph=bad, inputs={})
    with pytest.raises(kiln.InvalidArgument, match="number"):
        sess.call("graph_time", graph=gid, inputs={"x": _t(np.zeros(N, np.float32))}, number=0)
    sess.call("graph_free", graph=gid)


def _refused(sess, g, exc, match):
    before = sess.stats()
    with pytest.raises(exc, match=match):
        create(sess, g)
    after = sess.stats()
    assert after["graphs"] == before["graphs"] and after["graph_bytes"] == before["graph_bytes"]
    assert after["tensors"] == before["tensors"]


def test_hostile_payloads(sess):
    I, R = kiln.InvalidArgument, kiln.ResourceExhausted
    g = chain(3)
    _refused(sess, b"\x92\x01\x02", I, "map")              # not a map
    _refused(sess, pack(g)[:-10], I, "truncated")           # truncated
    _refused(sess, pack(g) + b"\xc0", I, "follow")          # trailing bytes
    _refused(sess, b"\xdd\xff\xff\xff\xff", I, "")          # a 2^32-element array header, no body
    _refused(sess, b"\x91" * 40 + b"\xc0", I, "")           # nesting
    _refused(sess, dict(g, graph=2), I, "version")
    _refused(sess, dict(g, extra=1), I, "extra")
    _refused(sess, dict(g, inputs=[{"name": "x", "dtype": "float32", "shape": [N], "x": 1}]), I, "'x'")
    _refused(sess, dict(g, inputs=[{"name": "x", "dtype": "bfloat16", "shape": [N]}]), I, "bfloat16")
    _refused(sess, dict(g, inputs=[{"name": "x", "dtype": "float32", "shape": [1] * 33}]), I, "")
    _refused(sess, dict(g, inputs=[{"name": "x", "dtype": "float32", "shape": [-1]}]), I, "")
    _refused(sess, dict(g, inputs=[{"name": "x", "dtype": "float32", "shape": [1 << 40, 1 << 30]}]), (I, R), "")
    _refused(sess, dict(g, inputs=[{"name": "", "dtype": "float32", "shape": [N]}]), I, "255")
    _refused(sess, dict(g, values=g["values"] + [{"name": "x", "dtype": "float32", "shape": [N]}]), I, "twice")
    _refused(sess, dict(g, views=[{"name": "q", "of": "x", "shape": [N + 1]}]), I, "element count")
    _refused(sess, dict(g, views=[{"name": "q", "of": "nothing", "shape": [N]}]), I, "not declared")
    _refused(sess, dict(g, outputs=[]), I, "outputs")
    _refused(sess, dict(g, outputs=["ghost"]), I, "ghost")
    _refused(sess, dict(g, constants=[{"name": "w", "id": 12345, "dtype": "float32", "shape": [N]}]), kiln.NotFound,
             "constant 'w'")
    _refused(sess, dict(g, constants=[{"name": "w", "id": 0, "dtype": "float32", "shape": [N]}]), I, "id")
    _refused(sess, dict(g, constants=[{"name": "w", "id": -3, "dtype": "float32", "shape": [N]}]), I, "")
    _refused(sess, dict(g, constants=[{"name": "w", "id": 5, "shape": [N]}]), I, "dtype")
    _refused(sess, dict(g, constants=[{"name": "w"}]), I, "'tensor' or 'id'")
    _refused(sess, dict(g, constants=[{"name": "w", "id": 5, "tensor": _t(np.zeros(2, np.float32))}]), I, "inline")
    _refused(sess, dict(g, constants=[{"name": "w", "tensor": {"dtype": "float32", "shape": [4], "data": b"12"}}]),
             I, "")
    bad = chain(3)
    bad["nodes"][0]["launches"][0]["args"][0] = {"value": "undeclared"}
    _refused(sess, bad, I, "undeclared")
    bad = chain(3)
    bad["nodes"][1]["program"] = 7
    _refused(sess, bad, I, "program 7")
    bad = chain(3)
    bad["nodes"][1]["launches"][0]["kernel"] = "nokernel"
    _refused(sess, bad, I, "nokernel")
    bad = chain(3)
    del bad["nodes"][1]["launches"][0]["grid"]
    _refused(sess, bad, I, "grid and block")
    bad = chain(3)
    bad["nodes"][1]["launches"][0]["args"] = bad["nodes"][1]["launches"][0]["args"][:3]
    _refused(sess, bad, I, "takes 4 arguments")
    bad = chain(3)
    bad["nodes"][1]["launches"][0]["args"][2] = {"value": "x"}
    _refused(sess, bad, I, "pass a number")
    bad = chain(3)
    bad["nodes"][1]["launches"][0]["args"][0] = 5
    _refused(sess, bad, I, "pointer")
    # A cycle cannot be expressed: the first node that passes a value writes it, nodes run in
    # list order. Node 0 "reading" v1 (which node 1 meant to write) makes node 0 its writer:
    # the graph is accepted, runs once through in order and ends.
    cyc = chain(3)
    cyc["nodes"][0]["launches"][0]["args"][0] = {"value": "v1"}
    r = create(sess, cyc)
    outs, _ = run(sess, r["graph"], np.zeros(N, np.float32))
    assert outs[0].shape == (N,)
    sess.call("graph_free", graph=r["graph"])
    # the same bytes twice in one launch that writes them
    alias = chain(3)
    alias["views"] = [{"name": "v0b", "of": "v0", "shape": [8, 8]}]
    alias["nodes"][0]["launches"][0]["args"][:2] = [{"value": "v0b"}, {"value": "v0"}]
    _refused(sess, alias, I, "twice")
    # a program that does not compile names its nodes
    broken = chain(2)
    broken["programs"] = [{"format": "llvm", "ir": "define void @k( {"}]
    with pytest.raises(kiln.CompileError, match="add0, add1"):
        create(sess, broken)
    _refused(sess, dict(chain(2), programs=[{"format": "hsaco", "ir": b"x"}]), I, "format")
    _refused(sess, dict(chain(2), programs=[{"module": "ab" * 32}]), kiln.NotFound, "")


def test_huge_counts(sess):
    g = chain(1)
    g["nodes"] = g["nodes"] * 65537
    _refused(sess, g, kiln.ResourceExhausted, "65536 nodes")
    g = chain(1)
    g["values"] = [{"name": "n%d" % i, "dtype": "float32", "shape": [1]} for i in range(65537)]
    _refused(sess, g, kiln.ResourceExhausted, "names")
    g = chain(1)
    g["programs"] = g["programs"] * 4097
    _refused(sess, g, kiln.ResourceExhausted, "programs")


def test_quota_charged(fresh_daemon, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("small-tenant-token-0001 small memory=64K\n")
    d = fresh_daemon("--tokens", str(tokens), listen=["unix:" + str(tmp_path / "k.sock")])
    with kiln.connect(d.urls[0], token="small-tenant-token-0001") as s:
        g = chain(2, n=8192)          # 32 KiB input, two 32 KiB values
        with pytest.raises(kiln.ResourceExhausted, match="memory"):
            create(s, g)
        assert s.stats()["graphs"] == 0
        r = create(s, chain(2, n=4096))
        x = np.ones(4096, np.float32)
        np.testing.assert_allclose(run(s, r["graph"], x)[0][0], x + 2)
        s.call("graph_free", graph=r["graph"])
        r = create(s, chain(2, n=4096))  # the bytes came back
        s.call("graph_free", graph=r["graph"])


def test_tenants_do_not_share_graphs(fresh_daemon, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("alice-token-0123456789 alice\nbob-token-0123456789ab bob\n")
    d = fresh_daemon("--tokens", str(tokens), listen=["unix:" + str(tmp_path / "k.sock")])
    with kiln.connect(d.urls[0], token="alice-token-0123456789") as a, \
            kiln.connect(d.urls[0], token="bob-token-0123456789ab") as b:
        r = create(a, chain(2))
        x = np.zeros(N, np.float32)
        with pytest.raises(kiln.NotFound):
            run(b, r["graph"], x)
        with pytest.raises(kiln.NotFound):
            b.call("graph_free", graph=r["graph"])
        with pytest.raises(kiln.NotFound):
            b.call("graph_time", graph=r["graph"], inputs={"x": _t(x)})
        # bob's own copy of the same graph is his, with the same id, and independent
        rb = create(b, chain(2))
        assert rb["graph"] == r["graph"] and not rb["cached"]
        # another tenant's tensor id is neither an input nor a constant of his: NotFound, as
        # for every other method
        t = kiln.nd.array(np.ones(N, np.float32), a.device(DEV))
        with pytest.raises(kiln.NotFound, match="input 'x'"):
            b.call("graph_run", graph=rb["graph"], inputs={"x": {"tensor": t.id}})
        with pytest.raises(kiln.NotFound):
            b.call("graph_time", graph=rb["graph"], inputs={"x": {"tensor": t.id}})
        g = chain(2, weights=True)
        g["constants"] = [{"name": "w", "id": t.id, "dtype": "float32", "shape": [N]}]
        with pytest.raises(kiln.NotFound, match="constant 'w'"):
            create(b, g)
        # alice's own: fine, and her kept outputs are hers alone
        ra = create(a, g)
        kept = a.call("graph_run", graph=ra["graph"], inputs={"x": {"tensor": t.id}}, keep=True)
        kid = kept["outputs"][0]["id"]
        with pytest.raises(kiln.NotFound):
            b.call("download", id=kid)
        a.call("free", id=kid)
        a.call("graph_free", graph=ra["graph"])
        b.call("graph_free", graph=rb["graph"])
        np.testing.assert_allclose(run(a, r["graph"], x)[0][0], x + 2)


def test_fault_names_the_node_and_loses_the_graph(sess):
    g = chain(2)
    g["nodes"].append({"name": "boom", "program": 0, "label": "Bad boom",
                       "launches": [{"kernel": "fault", "args": [{"value": "y"}, 16], "grid": [1], "block": [1]}]})
    r = create(sess, g)
    ok = create(sess, chain(3))
    with pytest.raises(kiln.DeviceFault, match="node boom \\(Bad boom\\)"):
        run(sess, r["graph"], np.zeros(N, np.float32))
    for gid in (r["graph"], ok["graph"]):      # the worker's graphs went with it
        with pytest.raises(kiln.NotFound, match="lost|no graph"):
            run(sess, gid, np.zeros(N, np.float32))
    again = create(sess, chain(3))              # and the tenant starts again
    np.testing.assert_allclose(run(sess, again["graph"], np.zeros(N, np.float32))[0][0], 3)
    sess.call("graph_free", graph=again["graph"])


def test_freed_while_running(unix_url):
    g = chain(1)
    # long enough to be running when graph_free comes; the software GPU (hsa:0 in CI)
    # interprets each iteration, 30 times fewer of them take it as long
    spins = 1_000_000 if DEV.startswith("hsa") else 30_000_000
    g["nodes"].insert(0, {"name": "spin", "program": 0, "launches": [
        {"kernel": "spin", "args": [{"value": "s"}, spins], "grid": [1], "block": [1]}]})
    g["values"].append({"name": "s", "dtype": "int64", "shape": [1]})
    with kiln.connect(unix_url) as a, kiln.connect(unix_url) as b:
        r = create(a, g)
        x = np.ones(N, np.float32)
        out = {}

        def go():
            try:
                out["y"] = run(a, r["graph"], x)[0][0]
            except kiln.KilnError as e:
                out["e"] = e
        th = threading.Thread(target=go)
        th.start()
        import time
        time.sleep(0.05)
        b.call("graph_free", graph=r["graph"])   # same tenant, another connection
        th.join(120)
        # the run that was queued first completes; the graph is gone afterwards
        assert "y" in out or isinstance(out.get("e"), kiln.NotFound), out
        with pytest.raises(kiln.NotFound):
            run(a, r["graph"], x)


def test_graph_from_onnx_te_programs(sess):
    onnx = pytest.importorskip("onnx")
    import kiln.onnx
    from onnx import helper, numpy_helper, TensorProto
    w = np.random.default_rng(3).standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv0"),
             helper.make_node("Relu", ["c"], ["r"], name="relu0"),
             helper.make_node("Flatten", ["r"], ["y"], name="flat")]
    gr = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])],
                           [numpy_helper.from_array(w, "w")])
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(4).standard_normal((1, 3, 8, 8)).astype(np.float32)
    base = sess.stats()["tensors"]
    client = kiln.onnx.import_model(m, sess.cpu(0), executor="client")
    server = kiln.onnx.import_model(m, sess.cpu(0), executor="server")
    assert server.executor == "server"
    np.testing.assert_allclose(server.run(x)[0], client.run(x)[0], rtol=1e-5, atol=1e-5)
    t = server.time_evaluator(number=3, repeat=2)(x)
    assert t.mean > 0
    auto = kiln.onnx.import_model(m, sess.cpu(0))
    assert auto.executor == "server" and auto._impl.constant_ids is None     # small weights: inline
    # weights as tensors, uploaded once per session: a second import reuses them
    t1 = kiln.onnx.import_model(m, sess.cpu(0), executor="server", constants="tensors")
    before = sess.stats()["tensors"]
    t2 = kiln.onnx.import_model(m, sess.cpu(0), executor="server", constants="tensors")
    assert t1._impl.constant_ids == t2._impl.constant_ids and len(t1._impl.constant_ids) == 1
    assert sess.stats()["tensors"] == before
    np.testing.assert_allclose(t2.run(x)[0], client.run(x)[0], rtol=1e-5, atol=1e-5)
    # inputs by id and outputs kept on the device
    xt = kiln.nd.array(x, sess.cpu(0))
    (yt,) = t1.run_nd(xt)
    assert isinstance(yt, kiln.nd.NDArray) and yt.shape == (1, 512)
    np.testing.assert_allclose(yt.numpy(), client.run(x)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t1.run(xt)[0], client.run(x)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(kiln.InvalidArgument, match="server executor"):
        client.run_nd(x)
    with pytest.raises(kiln.InvalidArgument, match="constants"):
        kiln.onnx.import_model(m, sess.cpu(0), constants="bogus")
    yt.free()
    xt.free()
    for gg in (client, server, auto, t1, t2):
        gg.free()
    kiln.onnx.free_constants(sess)
    assert sess.stats()["tensors"] == base


def _forever():
    """chain(1) behind a node "forever" whose kernel does not return."""
    g = chain(1)
    g["nodes"].insert(0, {"name": "forever", "program": 0, "launches": [
        {"kernel": "spin", "args": [{"value": "s"}, 1 << 62], "grid": [1], "block": [1]}]})
    g["values"].append({"name": "s", "dtype": "int64", "shape": [1]})
    return g


def test_run_past_its_deadline_names_the_node(unix_url):
    """A kernel that does not return: the run's deadline (timeout_ms) and kilnd's watchdog end
    the worker; the answer names the node."""
    g = _forever()
    with kiln.connect(unix_url) as s:
        r = create(s, g)
        with pytest.raises(kiln.KilnError, match="node forever") as e:
            run(s, r["graph"], np.ones(N, np.float32), timeout_ms=300)
        assert e.value.code in (kiln.Timeout.code, kiln.DeviceFault.code), e.value
        with pytest.raises(kiln.NotFound):
            run(s, r["graph"], np.ones(N, np.float32))


def test_time_of_a_run_that_never_ends_is_bounded(unix_url):
    """graph_time runs the graph many times: each run has the request's deadline, so a kernel
    that never returns ends the worker and the request instead of holding both for good."""
    g = _forever()
    with kiln.connect(unix_url) as s:
        r = create(s, g)
        with pytest.raises(kiln.KilnError, match="node forever") as e:
            s.call("graph_time", graph=r["graph"], inputs={"x": _t(np.ones(N, np.float32))},
                   number=1, repeat=1, timeout_ms=300)
        assert e.value.code in (kiln.Timeout.code, kiln.DeviceFault.code), e.value
        # the tenant's next graph runs on a new worker
        ok = create(s, chain(2))
        (y,), _ = run(s, ok["graph"], np.ones(N, np.float32))
        np.testing.assert_allclose(y, np.full(N, 3.0, np.float32))


def _id_chain(sess, n=N):
    """chain(2, weights=True) whose last node adds the constant w (given by tensor id)."""
    g = chain(2, n=n, weights=True)
    g["nodes"][1]["launches"][0]["args"][0] = {"value": "w"}
    g["nodes"][1]["launches"][0]["args"][1] = {"value": "y"}
    return g


def test_constants_and_inputs_by_id_and_kept_outputs(sess):
    dev = sess.device(DEV)
    before = sess.stats()["tensors"]
    w = np.arange(N, dtype=np.float32) * 3
    wt = kiln.nd.array(w, dev)
    g = chain(2, weights=True)
    g["constants"] = [{"name": "w", "id": wt.id, "dtype": "float32", "shape": [N]}]
    g["outputs"] = ["y", "w", "v0"]
    r = create(sess, g)
    assert r["constant_bytes"] == 256 and not r["cached"]
    # the constant was copied at graph_create: writing or freeing the tensor changes nothing
    wt.copyfrom(np.zeros(N, np.float32))
    x = np.ones(N, np.float32)
    outs, _ = run(sess, r["graph"], x)
    np.testing.assert_allclose(outs[0], x + 2)
    np.testing.assert_allclose(outs[1], w)
    np.testing.assert_allclose(outs[2], x + 1)
    # an id graph is never taken for another: the tensor's bytes may differ
    r2 = create(sess, g)
    assert r2["graph"] != r["graph"] and not r2["cached"]
    np.testing.assert_allclose(run(sess, r2["graph"], x)[0][1], np.zeros(N))
    sess.call("graph_free", graph=r2["graph"])
    wt.free()
    np.testing.assert_allclose(run(sess, r["graph"], x)[0][1], w)
    # inputs by id (copied in at the run), mixed with nothing else here; a kept run's outputs
    # are new tensors of the tenant, charged like alloc's
    xt = kiln.nd.array(x * 5, dev)
    kept = sess.call("graph_run", graph=r["graph"], inputs={"x": {"tensor": xt.id}}, keep=True,
                     outputs=["v0", "y"])
    assert [o["shape"] for o in kept["outputs"]] == [[N], [N]] and kept["elapsed"] > 0
    assert sess.stats()["tensors"] == before + 3     # xt and the two kept outputs
    ids = [o["id"] for o in kept["outputs"]]
    got = [sess.call("download", id=i) for i in ids]
    np.testing.assert_allclose(np.frombuffer(got[0]["data"], np.float32), x * 5 + 1)
    np.testing.assert_allclose(np.frombuffer(got[1]["data"], np.float32), x * 5 + 2)
    # a kept output can feed the next run (the tensor the graph wrote, by id)
    again = sess.call("graph_run", graph=r["graph"], inputs={"x": {"tensor": ids[1]}})
    np.testing.assert_allclose(np.frombuffer(again["outputs"][0]["data"], np.float32), x * 5 + 4)
    # graph_time takes ids too
    t = sess.call("graph_time", graph=r["graph"], inputs={"x": {"tensor": xt.id}}, number=2, repeat=2)
    assert t["repeat"] == 2
    for i in ids:
        sess.call("free", id=i)
    xt.free()
    # hostile: wrong dtype / shape / device of an id input, a freed id
    bad = kiln.nd.array(np.ones(N + 1, np.float32), dev)
    with pytest.raises(kiln.InvalidArgument, match="input 'x'"):
        sess.call("graph_run", graph=r["graph"], inputs={"x": {"tensor": bad.id}})
    bad.free()
    bad = kiln.nd.array(np.ones(N, np.int32), dev)
    with pytest.raises(kiln.InvalidArgument, match="int32"):
        sess.call("graph_run", graph=r["graph"], inputs={"x": {"tensor": bad.id}})
    with pytest.raises(kiln.NotFound):
        sess.call("graph_run", graph=r["graph"], inputs={"x": {"tensor": xt.id}})
    with pytest.raises(kiln.InvalidArgument, match="keep"):
        sess.call("graph_run", graph=r["graph"], inputs={"x": _t(x)}, keep=1)
    with pytest.raises(kiln.InvalidArgument):
        sess.call("graph_time", graph=r["graph"], inputs={"x": _t(x)}, keep=True)
    bad.free()
    sess.call("graph_free", graph=r["graph"])
    assert sess.stats()["tensors"] == before
    # a constant by id whose dtype or shape disagrees, or that is freed: refused, nothing stays
    wt = kiln.nd.array(w, dev)
    g["constants"] = [{"name": "w", "id": wt.id, "dtype": "float32", "shape": [8, 8]}]
    _refused(sess, g, kiln.InvalidArgument, "constant 'w'")
    g["constants"] = [{"name": "w", "id": wt.id, "dtype": "int32", "shape": [N]}]
    _refused(sess, g, kiln.InvalidArgument, "constant 'w'")
    wt.free()
    g["constants"] = [{"name": "w", "id": wt.id, "dtype": "float32", "shape": [N]}]
    _refused(sess, g, kiln.NotFound, "constant 'w'")


def test_kept_outputs_respect_the_quota(fresh_daemon, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("small-tenant-token-0002 small memory=64K\nfew-tenant-token-00003 few tensors=1\n")
    d = fresh_daemon("--tokens", str(tokens), listen=["unix:" + str(tmp_path / "k.sock")])
    x = np.ones(4096, np.float32)
    g = chain(2, n=4096)           # 16 KiB input, values 16 KiB each: 48 KiB in the graph
    g["outputs"] = ["y", "v0"]
    with kiln.connect(d.urls[0], token="small-tenant-token-0002") as s:
        r = create(s, g)
        with pytest.raises(kiln.ResourceExhausted, match="memory"):   # 48 + 32 > 64 KiB
            s.call("graph_run", graph=r["graph"], inputs={"x": _t(x)}, keep=True)
        k = s.call("graph_run", graph=r["graph"], inputs={"x": _t(x)}, keep=True, outputs=["y"])
        np.testing.assert_allclose(np.frombuffer(s.call("download", id=k["outputs"][0]["id"])["data"],
                                                 np.float32), x + 2)
        assert s.stats()["tensors"] == 1
        s.call("free", id=k["outputs"][0]["id"])
        s.call("graph_free", graph=r["graph"])
    with kiln.connect(d.urls[0], token="few-tenant-token-00003") as s:
        r = create(s, g)
        with pytest.raises(kiln.ResourceExhausted, match="tensors"):
            s.call("graph_run", graph=r["graph"], inputs={"x": _t(x)}, keep=True)
        k = s.call("graph_run", graph=r["graph"], inputs={"x": _t(x)}, keep=True, outputs=["v0"])
        with pytest.raises(kiln.ResourceExhausted, match="tensors"):
            s.call("graph_run", graph=r["graph"], inputs={"x": _t(x)}, keep=True, outputs=["v0"])
        s.call("free", id=k["outputs"][0]["id"])
        assert s.stats()["tensors"] == 0
        s.call("graph_free", graph=r["graph"])


def test_a_departed_client_leaves_no_graph_work_behind(unix_url):
    """graph_time and graph_run of a client that disconnects are cancelled in the worker:
    the queued ones never run and the running one stops before its next launch, so the
    tenant's next request on the device is served at once by the same worker."""
    g = chain(1)
    g["nodes"].insert(0, {"name": "spin", "program": 0, "launches": [
        {"kernel": "spin", "args": [{"value": "s"}, 20_000_000], "grid": [1], "block": [1]}]})
    g["values"].append({"name": "s", "dtype": "int64", "shape": [1]})
    import time
    with kiln.connect(unix_url) as b:
        r = create(b, g)
        quick = create(b, chain(2))
        x = np.ones(N, np.float32)
        run(b, quick["graph"], x)
        t0 = time.monotonic()
        run(b, r["graph"], x)
        one = time.monotonic() - t0      # ~20 ms on cpu:0; seconds on the software GPU
        a = kiln.connect(unix_url)
        conn = a._conn
        # at least 20 s of runs timed, then 50 queued runs, all in flight
        futs = [conn.request("graph_time", {"graph": r["graph"], "inputs": {"x": _t(x)},
                                            "number": max(2, int(20 / one)), "repeat": 1})]
        futs += [conn.request("graph_run", {"graph": r["graph"], "inputs": {"x": _t(x)}}) for _ in range(50)]
        a.call("ping")
        time.sleep(0.3)
        a.close()
        t0 = time.monotonic()
        (y,), _ = run(b, quick["graph"], x)
        waited = time.monotonic() - t0
        np.testing.assert_allclose(y, x + 2)
        # uncancelled: 20 s of graph_time and 50 runs ahead of it; cancelled: what was running
        # finishes its kernel (a spin cannot be stopped inside)
        assert waited < max(5, 3 * one), (waited, one)
        b.call("graph_free", graph=r["graph"])
        b.call("graph_free", graph=quick["graph"])


# ---- runs as one submission (launch sequences on GPUs; launch by launch on the cpu) -------

def _broken_chain(kind, k=12, at=6):
    """chain(k) with a node "broken" at position `at` whose kernel faults or never returns."""
    g = chain(k)
    if kind == "fault":
        launch = {"kernel": "fault", "args": [{"value": "y"}, 16], "grid": [1], "block": [1]}
    else:
        launch = {"kernel": "spin", "args": [{"value": "s"}, 1 << 62], "grid": [1], "block": [1]}
        g["values"].append({"name": "s", "dtype": "int64", "shape": [1]})
    g["nodes"].insert(at, {"name": "broken", "program": 0, "label": "Bad broken", "launches": [launch]})
    return g


def test_fault_in_the_middle_names_its_node(unix_url):
    """Nodes after the faulting one were submitted with it (one submission on GPUs): the
    error still names the node that faulted, not the last one queued."""
    with kiln.connect(unix_url) as s:
        r = create(s, _broken_chain("fault"))
        with pytest.raises(kiln.DeviceFault, match="node broken \\(Bad broken\\)"):
            run(s, r["graph"], np.zeros(N, np.float32))


def test_hang_in_the_middle_is_stopped_and_named(unix_url):
    with kiln.connect(unix_url) as s:
        r = create(s, _broken_chain("spin"))
        with pytest.raises(kiln.KilnError, match="node broken") as e:
            run(s, r["graph"], np.ones(N, np.float32), timeout_ms=300)
        assert e.value.code in (kiln.Timeout.code, kiln.DeviceFault.code), e.value
        ok = create(s, chain(2))
        np.testing.assert_allclose(run(s, ok["graph"], np.ones(N, np.float32))[0][0], np.full(N, 3.0))


def test_many_nodes_as_one_run_equal_launch_by_launch(kilnd_bin, tmp_path):
    """1,100 nodes (more than an AQL queue of 1,024 packets) of different constants, run as
    one sequence and, by a kilnd with KILN_GRAPH_SEQUENCE=0, launch by launch: the same bytes,
    and graph_time of each."""
    k = 1100
    g = chain(k, c=1.0)
    for i, nd in enumerate(g["nodes"]):
        nd["launches"][0]["args"][2] = float(i % 7) - 3.0    # adds -3..3: order shows in rounding
    g["nodes"][0]["launches"][0]["args"][2] = 0.1
    x = np.random.default_rng(5).standard_normal(N).astype(np.float32)
    want = x.copy()
    for nd in g["nodes"]:
        want = want + np.float32(nd["launches"][0]["args"][2])
    outs = []
    for env in ({}, {"KILN_GRAPH_SEQUENCE": "0"}):
        d = kiln.start_daemon(kilnd_bin, listen=["unix:" + str(tmp_path / ("k%d.sock" % len(outs)))],
                              env=dict(os.environ, **env))
        try:
            with kiln.connect(d.urls[0]) as s:
                r = create(s, g)
                (y,), _ = run(s, r["graph"], x)
                t = s.call("graph_time", graph=r["graph"], inputs={"x": _t(x)}, number=2, repeat=2)
                assert t["min"] > 0
                outs.append(y)
        finally:
            d.stop(grace=5)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], want)


def test_graph_runs_count_in_device_seconds(kilnd_bin, tmp_path):
    """kiln_device_seconds_total grows by a graph_run's elapsed and a graph_time's runs, as
    it does for launch and time."""
    import re
    import urllib.request
    d = kiln.start_daemon(kilnd_bin, listen=["unix:" + str(tmp_path / "m.sock")],
                          args=["--metrics", "tcp:127.0.0.1:0"])
    try:
        http = next(u for u in d.urls if u.startswith("http://"))

        def seconds():
            text = urllib.request.urlopen(http if http.endswith("/metrics") else http + "/metrics").read().decode()
            m = re.search(r'^kiln_device_seconds_total\{device="%s",tenant="default"\} (\S+)$' % DEV, text, re.M)
            return float(m.group(1)) if m else 0.0
        with kiln.connect(d.urls[0]) as s:
            r = create(s, _forever_for(1_000_000))
            before = seconds()
            (_,), rr = run(s, r["graph"], np.ones(N, np.float32))
            after_run = seconds()
            assert after_run - before >= rr["elapsed"] * 0.99 > 0
            t = s.call("graph_time", graph=r["graph"], inputs={"x": _t(np.ones(N, np.float32))}, number=2, repeat=2)
            assert seconds() - after_run >= t["mean"] * 4 * 0.99
    finally:
        d.stop(grace=5)


def _forever_for(n):
    """_forever's graph whose spin ends after n iterations (a run of measurable length)."""
    g = _forever()
    g["nodes"][0]["launches"][0]["args"][1] = n
    return g
