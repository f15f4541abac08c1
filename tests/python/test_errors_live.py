"""Error classes provoked for real through kilnd (the rest are mapped in test_unit.py).

Provoked here: InvalidArgument, NoMethod, NotFound, ResourceExhausted (server quota and
connection cap), Timeout (server partial-message deadline and client-side wait),
Unavailable (closed connection, nothing listening). CompileError and DeviceFault are
provoked in test_modules.py once kilnd has compile/launch. Unauthenticated and
PermissionDenied need a tokens file, which kilnd does not take yet.
"""

import os
import socket
import tempfile

import numpy as np
import pytest

import kiln


def test_invalid_argument(s):
    with pytest.raises(kiln.InvalidArgument) as e:
        s.call("alloc", dtype="float32", shape=[4], bogus=1)
    assert "bogus" in e.value.message and e.value.code == 1
    with pytest.raises(kiln.InvalidArgument):
        s.call("alloc", dtype="complex64", shape=[4])
    with pytest.raises(kiln.InvalidArgument):
        s.call("hello", version=2)
    assert s.ping() == "pong"  # a bad request leaves the connection usable


def test_no_method(s):
    with pytest.raises(kiln.NoMethod) as e:
        s.call("no_such_method")
    assert e.value.code == 2 and "no_such_method" in e.value.message


def test_not_found(s):
    with pytest.raises(kiln.NotFound) as e:
        s.call("download", id=12345)
    assert e.value.code == 5
    with pytest.raises(kiln.NotFound):
        kiln.nd.array(np.ones(2), s.device("cpu:7"))


def test_resource_exhausted(s, dev):
    with pytest.raises(kiln.ResourceExhausted) as e:
        kiln.nd.empty((1 << 42,), "float32", dev)
    assert e.value.code == 6 and e.value.message
    big = kiln.nd.empty(((1 << 30) + 8,), "uint8", dev)  # untouched memory: cheap
    with pytest.raises(kiln.ResourceExhausted):
        s.call("download", id=big.id)  # over 1 GiB: the message says to read in chunks
    big.free()


def test_connection_cap_is_resource_exhausted(fresh_daemon):
    d = fresh_daemon("--max-connections", "1")
    first = kiln.connect(d.url)
    try:
        with pytest.raises(kiln.ResourceExhausted):
            kiln.connect(d.url).ping()
        assert first.ping() == "pong"
    finally:
        first.close()


def test_server_timeout_on_a_partial_message(fresh_daemon):
    d = fresh_daemon("--partial-timeout", "1")
    s = kiln.connect(d.url)
    f = s.ping_async()
    assert f.result() == "pong"
    s._conn._send([b"\x94\x00\x01\xa4ping\x91\xc4\xff"])  # a bin of 255 bytes that never come
    g = s.ping_async()  # queued behind the partial bytes: part of the same broken message
    with pytest.raises(kiln.Timeout) as e:
        g.result(timeout=30)
    assert e.value.code == 11
    assert s.closed
    with kiln.connect(d.url) as t:
        assert t.ping() == "pong"


def test_client_side_timeout(s):
    # a raw socket that accepts and never answers
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mute.sock")
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(path)
        srv.listen(1)
        from kiln._rpc import Connection
        c = Connection("unix:" + path)
        f = c.request("ping", {})
        with pytest.raises(kiln.Timeout):
            f.result(timeout=0.05)
        assert not f.done()
        c.close(timeout=0)
        srv.close()
        with pytest.raises(kiln.Unavailable):
            f.result()


def test_unavailable(unix_url):
    s = kiln.connect(unix_url)
    s.close()
    with pytest.raises(kiln.Unavailable):
        s.ping()
    with tempfile.TemporaryDirectory() as tmp:
        with pytest.raises(kiln.Unavailable):
            kiln.connect("unix:" + os.path.join(tmp, "nobody.sock"))
    with pytest.raises(kiln.InvalidArgument):
        kiln.connect("http://localhost")


def test_daemon_stopping_fails_pending_requests(fresh_daemon):
    d = fresh_daemon()
    s = kiln.connect(d.url)
    assert s.ping() == "pong"
    d.stop()
    with pytest.raises(kiln.Unavailable):
        s.ping()


def test_close_wakes_a_thread_waiting_for_an_answer(tmp_path):
    import threading
    from kiln._rpc import Connection
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(tmp_path / "mute.sock"))
    srv.listen(1)
    c = Connection("unix:" + str(tmp_path / "mute.sock"))
    f = c.request("ping", {})
    started, got = threading.Event(), []

    def wait():
        started.set()
        got.append(f.exception())
    t = threading.Thread(target=wait)
    t.start()
    started.wait()
    c.close(timeout=0)
    t.join(10)
    srv.close()
    assert not t.is_alive(), "a thread waiting in poll() was not woken by close()"
    assert isinstance(got[0], kiln.Unavailable)
