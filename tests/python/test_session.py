"""Sessions: connect by url, hello, devices, pipelining (1,000 futures), threads, callbacks."""

import os
import threading

import numpy as np
import pytest

import kiln
from kiln.daemon import start_daemon


def test_connect_unix_and_tcp(unix_url, tcp_url):
    for url in (unix_url, tcp_url):
        with kiln.connect(url) as s:
            assert s.ping() == "pong"
            assert s.version == 1 and s.tenant == "default"
            assert s.server.startswith("kilnd")
            assert s.limits["max_message"] > 0
        assert s.closed
        with pytest.raises(kiln.Unavailable):
            s.ping()


def test_kiln_url_env(unix_url, monkeypatch):
    monkeypatch.setenv("KILN_URL", unix_url)
    with kiln.connect() as s:
        assert s.url == unix_url and s.ping() == "pong"


def test_devices(s):
    devs = s.devices()
    assert s.cpu(0) in devs
    cpu = s.cpu(0)
    assert cpu.exist and cpu.device_type == "cpu" and cpu.device_id == 0
    assert cpu.arch == "cpu" and cpu.wave_size == 1 and cpu.max_block >= 1 and cpu.memory > 0
    assert isinstance(cpu.name, str)
    info = s.devices_info(absent=True)
    ids = {d["id"] for d in info}
    assert "cpu:0" in ids
    for d in info:
        if d.get("available") is False:
            assert d["reason"]  # a backend that found no device says why
    if "hsa:0" not in ids:
        assert not s.rocm(0).exist
    if "cuda:0" not in ids:
        assert not s.cuda(0).exist
    assert not s.cpu(9).exist
    assert s.device("rocm:0").id == "hsa:0" and s.device("llvm").id == "cpu:0"


def test_generic_call_with_raw_fields(s):
    r = s.call("alloc", {"dtype": "int32"}, shape=[2])
    assert isinstance(r["id"], int)
    s.call("free", id=r["id"])


def test_1000_futures_in_flight(s):
    futs = [s.ping_async() for _ in range(1000)]
    assert s._conn.inflight() >= 1
    assert [f.result() for f in futs] == ["pong"] * 1000


def test_1000_mixed_futures_out_of_order(s, dev):
    # uploads, downloads and pings in flight together; waited for in reverse order
    xs = [np.full(17, i, dtype=np.int32) for i in range(250)]
    ups = [kiln.nd.array_async(x, dev) for x in xs]
    pings = [s.ping_async() for _ in range(250)]
    arrays = [f.result() for f in reversed(ups)][::-1]
    downs = [a.numpy_async() for a in arrays]
    stats = [s.stats_async() for _ in range(250)]
    for i, f in reversed(list(enumerate(downs))):
        assert (f.result() == i).all()
    assert all(p.result() == "pong" for p in pings)
    assert all(isinstance(st.result(), dict) for st in stats)


def test_errors_in_a_pipeline_stay_with_their_request(s):
    futs = []
    for i in range(300):
        futs.append(s.call_async("download", id=i + 1) if i % 3 == 0 else s.ping_async())
    for i, f in enumerate(futs):
        if i % 3 == 0:
            assert isinstance(f.exception(), kiln.NotFound)
            with pytest.raises(kiln.NotFound):
                f.result()
        else:
            assert f.result() == "pong"


def test_threads_share_one_session(s, dev):
    errors = []

    def work(k):
        try:
            for i in range(100):
                x = np.arange(i + k, dtype=np.float32)
                assert np.array_equal(kiln.nd.array(x, dev).numpy(), x)
                assert s.ping() == "pong"
        except Exception as e:  # reported below
            errors.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_callbacks_and_wait(s):
    seen = []
    futs = [s.ping_async() for _ in range(10)]
    for f in futs:
        f.add_done_callback(lambda f: seen.append(f.result()))
    assert kiln.wait(futs) == ["pong"] * 10
    assert seen == ["pong"] * 10
    done = s.ping_async()
    done.result()
    done.add_done_callback(lambda f: seen.append("late"))
    assert seen[-1] == "late"


def test_sync_waits_for_everything(s):
    futs = [s.ping_async() for _ in range(100)]
    s.sync()
    assert all(f.done() for f in futs)


def test_context_manager_closes(unix_url):
    with kiln.connect(unix_url) as s:
        f = s.ping_async()
    assert s.closed
    assert f.done()  # close drained or failed it; either way nobody hangs


def test_module_level_devices(unix_url, monkeypatch):
    monkeypatch.setenv("KILN_URL", unix_url)
    monkeypatch.setattr(kiln.session, "_default", None)
    a = kiln.nd.array(np.arange(3))  # default session, cpu:0
    assert a.device.id == "cpu:0" and kiln.cpu(0).exist
    kiln.default_session().close()


def test_futures_waited_in_other_threads(s):
    # futures made in one thread and waited for in others, while those others make their own:
    # the reader role moves between threads and nobody misses an answer
    import queue
    q = queue.Queue()
    errors = []

    def producer():
        for _ in range(2000):
            q.put(s.ping_async())
        for _ in range(4):
            q.put(None)

    def consumer():
        try:
            while True:
                f = q.get()
                if f is None:
                    return
                assert f.result(timeout=60) == "pong"
                assert s.ping() == "pong"
        except Exception as e:  # reported below
            errors.append(e)
    ts = [threading.Thread(target=consumer) for _ in range(4)] + [threading.Thread(target=producer)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts), "a thread hangs"
    assert not errors, errors[:3]


def test_hsa_library_option_reaches_the_probe(tmp_path):
    """kilnd --hsa-library PATH is the ROCm runtime the hsa backend loads: a library that is
    not one is named in the backend's absent reason (it is dlopened, not found on the path)."""
    import ctypes.util
    libm = ctypes.util.find_library("m")
    path = next(p for p in ("/lib/x86_64-linux-gnu/" + (libm or ""), "/usr/lib/x86_64-linux-gnu/libm.so.6")
                if os.path.isfile(p))
    with start_daemon(args=["--hsa-library", path]) as d:
        with kiln.connect(d.urls[0]) as s:
            hsa = [x for x in s.devices_info(absent=True) if x["kind"] == "hsa"]
            assert len(hsa) == 1 and hsa[0].get("available") is False
            assert os.path.realpath(path) in hsa[0]["reason"], hsa[0]
    # Asking for the absent backend by name refuses the start, with the same reason.
    with pytest.raises(kiln.Unavailable) as e:
        start_daemon(args=["--devices", "cpu,hsa", "--hsa-library", path])
    assert "--devices names 'hsa'" in str(e.value)
    assert os.path.realpath(path) in str(e.value), str(e.value)
