"""Daily use (issue 16), the client's side of the daemon's changes: the tenant's tensors
listed, freed many at once, adopted by another session, and tied to their session."""

import gc
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import kiln
from kiln.session import Session


def _ids(sess):
    return {t["id"] for t in sess.tensors()}


def test_tensors_lists_what_the_tenant_holds(unix_url):
    with kiln.connect(unix_url, client="maker") as a, kiln.connect(unix_url) as b:
        x = kiln.nd.array(np.arange(6, dtype="float32").reshape(2, 3), a.cpu(0))
        listed = {t["id"]: t for t in b.tensors()}
        t = listed[x.id]
        assert (t["device"], t["dtype"], t["shape"], t["bytes"]) == ("cpu:0", "float32", [2, 3], 24)
        assert t["client"] == "maker" and t["session"] is False and t["age_s"] >= 0
        assert [t["id"] for t in b.tensors("cpu:0")].count(x.id) == 1
        x.free()
        assert x.id not in _ids(b)


def test_attach_adopts_an_id_from_another_session(unix_url):
    with kiln.connect(unix_url) as a, kiln.connect(unix_url) as b:
        x = kiln.nd.array(np.arange(5, dtype="int32"), a.cpu(0))
        y = kiln.nd.NDArray.attach(b, x.id)
        assert y.shape == (5,) and y.dtype == "int32" and y.device.id == "cpu:0"
        np.testing.assert_array_equal(y.numpy(), np.arange(5, dtype="int32"))
        # Borrowed: collecting it leaves the tensor to its maker.
        del y
        gc.collect()
        b.sync()
        assert x.id in _ids(a)
        with pytest.raises(kiln.NotFound):
            kiln.nd.NDArray.attach(b, 12345)
        owned = kiln.nd.NDArray.attach(b, x.id, own=True)
        owned.free()
        assert x.id not in _ids(a)


def test_free_many_and_all(unix_url):
    with kiln.connect(unix_url) as a:
        xs = [kiln.nd.empty((4,), "float32", a.cpu(0)) for _ in range(3)]
        assert a.free_tensors([xs[0].id, xs[1].id]) == 2
        with pytest.raises(kiln.NotFound):
            a.free_tensors([xs[0].id, xs[2].id])  # the first is gone: nothing is freed
        assert xs[2].id in _ids(a)
        for x in xs:
            x._freed = True  # freed behind the NDArrays' backs
        assert a.free_tensors() >= 1
        assert _ids(a) == set()


def test_session_tensors_end_with_the_session(unix_url):
    with kiln.connect(unix_url) as watcher:
        s = Session(unix_url, tensors="session")
        assert s.hello_result["tensors"] == "session"
        x = kiln.nd.array(np.ones(8, dtype="float32"), s.cpu(0))
        listed = {t["id"]: t for t in watcher.tensors()}
        assert listed[x.id]["session"] is True
        x._freed = True  # left for the daemon to free
        s.close()
        deadline = time.monotonic() + 10
        while x.id in _ids(watcher) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert x.id not in _ids(watcher)


def test_bad_lifetime_is_refused(unix_url):
    with pytest.raises(kiln.InvalidArgument):
        Session(unix_url, tensors="forever")


def test_private_sessions_tie_tensors_to_themselves(kilnd_bin, tmp_path):
    """A process with no daemon to find starts a private one whose sessions are `session`."""
    code = ("import kiln; s = kiln.connect(); print(s.hello_result['tensors'], "
            "s.daemon is not None)")
    env = dict(os.environ, KILND=kilnd_bin, XDG_RUNTIME_DIR=str(tmp_path), KILN_AUTOSTART="1",
               PYTHONPATH=os.path.dirname(os.path.dirname(kiln.__file__)))
    env.pop("KILN_URL", None)
    env["KILN_SEARCH"] = "unix:%s/kiln.sock" % tmp_path  # never a daemon of this box
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["session", "True"]


FILL_IR = ('define void @fill(ptr %p, float %v) section "kiln.kernel" {\n'
           '  store float %v, ptr %p\n  ret void\n}\n')


def test_module_ids_survive_a_restart(kilnd_bin, tmp_path):
    cache = tmp_path / "cache"
    d = kiln.start_daemon(kilnd_bin, cache_dir=str(cache), listen=["tcp:127.0.0.1:0"])
    try:
        with kiln.connect(d.urls[0]) as s:
            mid = s.compile(FILL_IR).id
            with pytest.raises(kiln.NotFound):
                s.module("ab" * 32)
            with pytest.raises(kiln.InvalidArgument):
                s.module("not an id")
    finally:
        d.stop()
    d = kiln.start_daemon(kilnd_bin, cache_dir=str(cache), listen=["tcp:127.0.0.1:0"])
    try:
        with kiln.connect(d.urls[0]) as s:
            m = s.module(mid)
            assert m.cached and [k.name for k in m.kernels] == ["fill"]
            assert [a["name"] for a in m.info["kernels"][0]["args"]] == ["p", "v"]
            x = kiln.nd.empty((1,), "float32", s.cpu(0))
            m["fill"](x, 4.0, grid=1, block=1)
            assert x.numpy()[0] == 4.0
            assert s.stats()["compile"]["compiles"] == 0
    finally:
        d.stop()


def _run(code, env):
    e = {k: v for k, v in os.environ.items() if k not in ("KILN_URL", "KILN_AUTOSTART", "KILN_SEARCH")}
    e.update(env)
    e["PYTHONPATH"] = os.path.dirname(os.path.dirname(kiln.__file__))
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)


def test_no_daemon_found_starts_a_private_cpu_daemon_and_says_so(kilnd_bin, tmp_path):
    code = ("import kiln; s = kiln.connect(); "
            "print(sorted(d['id'] for d in s.devices_info()), s.daemon is not None)")
    r = _run(code, {"KILND": kilnd_bin, "KILN_SEARCH": "unix:%s/nope.sock tcp:127.0.0.1:1" % tmp_path})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("]")[0] + "]" == "['cpu:0']" and r.stdout.strip().endswith("True")
    assert "starting a private CPU-only kilnd" in r.stderr and "KILN_AUTOSTART=0" in r.stderr
    assert "nope.sock: no such socket" in r.stderr and "tcp:127.0.0.1:1: " in r.stderr, r.stderr
    r = _run("import kiln\ntry:\n    kiln.connect()\nexcept kiln.Unavailable as e:\n    print(e)\n",
             {"KILND": kilnd_bin, "KILN_AUTOSTART": "0", "KILN_SEARCH": "tcp:127.0.0.1:1"})
    assert "no kilnd found (tcp:127.0.0.1:1: " in r.stdout and "nothing listens" in r.stdout, r.stdout
    assert "private" not in r.stderr


def test_the_search_list_finds_a_daemon(tcp_url, monkeypatch, tmp_path):
    monkeypatch.delenv("KILN_URL", raising=False)
    monkeypatch.setenv("KILN_SEARCH", "unix:%s/none.sock %s" % (tmp_path, tcp_url))
    with kiln.connect(autostart=False) as s:
        assert s.url == tcp_url and s.daemon is None
    monkeypatch.delenv("KILN_SEARCH")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/4242")
    assert kiln.session.search_list() == ["unix:/run/user/4242/kiln.sock", "unix:/run/kiln/kiln.sock",
                                          "tcp:127.0.0.1:7070"]


def test_the_metrics_port_is_not_an_rpc_port(kilnd_bin):
    d = kiln.start_daemon(kilnd_bin, listen=["tcp:127.0.0.1:0"], args=["--metrics", "tcp:127.0.0.1:0"])
    try:
        http = next(l for l in d.urls if l.startswith("http://"))
        url = "tcp:" + http[len("http://"):].split("/")[0]
        with pytest.raises(kiln.Unavailable) as e:
            kiln.connect(url, autostart=False)
        assert "is not a kilnd RPC port" in e.value.message, e.value.message
    finally:
        d.stop()


def test_a_missing_token_says_how_to_give_one(kilnd_bin, tmp_path, monkeypatch):
    monkeypatch.delenv("KILN_TOKEN", raising=False)
    tokens = tmp_path / "tokens"
    tokens.write_text("daily-token-0123456789 alpha\n")
    d = kiln.start_daemon(kilnd_bin, listen=["tcp:127.0.0.1:0"], args=["--tokens", str(tokens)])
    try:
        with pytest.raises(kiln.Unauthenticated) as e:
            kiln.connect(d.urls[0], autostart=False)
        assert "set KILN_TOKEN" in e.value.message
    finally:
        d.stop()


def test_compute_units_of_a_pinned_cpu_device(fresh_daemon, tmp_path):
    # the probe counts every core kilnd may use; a pinned cpu:0 works on its pinned cores only
    cores = len(os.sched_getaffinity(0))
    pins = [("0", 1), ("0,0", 1)] + ([("0-1", 2), ("1,0", 2)] if cores >= 2 else [])
    for i, (cpus, want) in enumerate(pins):
        d = fresh_daemon("--pin", "cpu:0=" + cpus, listen=["unix:" + str(tmp_path / ("p%d.sock" % i))])
        with kiln.connect(d.url) as s:
            assert s.cpu(0).compute_units == want, cpus
        d.stop()
    d = fresh_daemon(listen=["unix:" + str(tmp_path / "all.sock")])
    with kiln.connect(d.url) as s:
        assert s.cpu(0).compute_units == cores
