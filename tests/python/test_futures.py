"""kiln.Future is a concurrent.futures.Future (issue 16 item 12): done() polls, callbacks and
concurrent.futures.wait/as_completed complete without anyone calling result() (the session's
reader thread reads for them), cancel() sends `cancel`, asyncio awaits futures, a connection
lost mid-flight fails every pending future, and a forked child cannot use its parent's
sessions. Each against a real kilnd."""

import asyncio
import concurrent.futures as cf
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

import kiln

from test_tuner_server import quick


def _run_all(threads, timeout):
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hangs"


def _reader_threads(s):
    return [t for t in threading.enumerate() if t.name == "kiln-reader %s" % s.url]


def test_a_future_is_a_concurrent_future(s):
    f = s.ping_async()
    assert isinstance(f, cf.Future)
    deadline = time.monotonic() + 30
    while not f.done():  # nobody calls result(): done() itself reads what has arrived
        assert time.monotonic() < deadline, "done() never became true"
        time.sleep(0.001)
    assert f.result(0) == "pong" and f.exception() is None and not f.cancelled()
    assert issubclass(kiln.Cancelled, cf.CancelledError) and issubclass(kiln.Timeout, TimeoutError)


def test_callbacks_fire_without_a_waiter(s):
    got = threading.Event()
    seen = []
    f = s.ping_async()
    f.add_done_callback(lambda fut: (seen.append((fut.result(), threading.current_thread().name)), got.set()))
    assert got.wait(30), "the callback never ran"  # before: only a result() call read the reply
    assert seen[0][0] == "pong" and seen[0][1].startswith("kiln-reader")
    # a callback may make blocking calls on its own session (it runs after the reader role is
    # handed back)
    out = []
    again = threading.Event()
    g = s.ping_async()
    g.add_done_callback(lambda fut: (out.append(s.stats()["connections"]), again.set()))
    assert again.wait(30) and out and out[0] >= 1
    # the reader thread ends when nothing is watched any more
    deadline = time.monotonic() + 30
    while _reader_threads(s):
        assert time.monotonic() < deadline, "the reader thread outlives its work"
        time.sleep(0.05)


def test_wait_and_as_completed(s, dev):
    futs = [s.ping_async() for _ in range(300)]
    futs += [kiln.nd.array_async(np.arange(i + 1, dtype="float32"), dev) for i in range(20)]
    done, not_done = cf.wait(futs, timeout=60)
    assert not not_done and len(done) == len(futs)
    futs = [s.ping_async() for _ in range(200)]
    assert sorted(f.result() for f in cf.as_completed(futs, timeout=60)) == ["pong"] * 200
    # a chunked upload (a CombinedFuture) is waited for through its parts
    big = np.arange(3 << 20, dtype="float32")
    up = kiln.nd.array_async(big, dev)
    done, _ = cf.wait([up], timeout=60)
    assert done and np.array_equal(up.result().numpy(), big)


def test_many_futures_from_many_threads(s):
    # 8 threads, each with 400 futures: half with callbacks, some waited with as_completed,
    # some with result(), and blocking calls in between; every answer arrives exactly once.
    counts = []
    lock = threading.Lock()
    errors = []

    def work(k):
        try:
            n = [0]
            futs = [s.ping_async() for _ in range(400)]
            for f in futs[:200]:
                f.add_done_callback(lambda fut: n.__setitem__(0, n[0] + (fut.result() == "pong")))
            assert s.ping() == "pong"
            assert all(f.result(timeout=60) == "pong" for f in cf.as_completed(futs[200:300], timeout=60))
            assert all(f.result(timeout=60) == "pong" for f in futs[300:])
            cf.wait(futs[:200], timeout=60)
            deadline = time.monotonic() + 30
            while n[0] < 200 and time.monotonic() < deadline:
                time.sleep(0.01)
            with lock:
                counts.append(n[0])
        except Exception as e:  # reported below
            errors.append(e)
    _run_all([threading.Thread(target=work, args=(k,)) for k in range(8)], 180)
    assert not errors, errors[:3]
    assert counts == [200] * 8


def test_asyncio_gather_of_compiles(s):
    async def main():
        mods = await asyncio.gather(*[s.compile_async(quick(100 + i), target="cpu") for i in range(12)])
        pong = await asyncio.wrap_future(s.ping_async())
        return mods, pong
    mods, pong = asyncio.run(main())
    assert pong == "pong" and len({m.id for m in mods}) == 12
    assert all(isinstance(m, kiln.Module) and "quick" in m for m in mods)

    async def failing():
        return await s.compile_async("this is not LLVM IR", target="cpu", format="llvm")
    with pytest.raises(kiln.CompileError):
        asyncio.run(failing())


SLOW_PAD = "".join("  %%a%d = mul i64 %%a%d, %d\n" % (i + 1, i, 3 + i % 7) for i in range(4000))


def _slow(i):
    # a build of a few tens of ms, distinct per i: keeps the one compile worker busy
    return ('define void @slow(ptr %%p) section "kiln.kernel" {\nentry:\n  %%a0 = load i64, ptr %%p\n%s'
            '  store i64 %%a4000, ptr %%p\n  store i32 %d, ptr %%p\n  ret void\n}\n' % (SLOW_PAD, i))


def test_cancel_a_queued_compile(fresh_daemon, tmp_path):
    d = fresh_daemon("--compile-workers", "1", listen=["unix:" + str(tmp_path / "k.sock")])
    with kiln.connect(d.urls[0]) as s:
        before = s.stats()["compile"]["cancelled"]
        busy = s.compile_batch_async([(_slow(i), "cpu") for i in range(30)])
        f = s.compile_async(quick(900), target="cpu")
        seen = []
        f.add_done_callback(lambda fut: seen.append(fut.cancelled()))
        assert f.cancel() is True and f.cancelled() and f.done()  # at once, with no round trip
        with pytest.raises(kiln.Cancelled):
            f.result()
        with pytest.raises(cf.CancelledError):
            f.result()
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [True]
        assert f.cancel() is False  # a finished request has nothing to cancel
        assert s.ping_async().cancel() is False  # nor has a method that cannot be cancelled
        # the one worker builds batch items: the compile was queued, and the daemon dropped it
        assert s.stats()["compile"]["cancelled"] == before + 1
        assert busy.cancel() is False  # a batch is not cancelled as a whole
        assert all(isinstance(r, (kiln.Module, kiln.Cancelled)) for r in busy.result(timeout=120))

        # an asyncio task awaiting a compile, cancelled: the daemon is told (cancel)
        async def main():
            blocker = s.compile_batch_async([(_slow(100 + i), "cpu") for i in range(30)])
            t = asyncio.ensure_future(s.compile_async(quick(901), target="cpu"))
            await asyncio.sleep(0)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            blocker.cancel()
            return await blocker
        asyncio.run(main())
        assert s.stats()["compile"]["cancelled"] >= before + 2
        assert s.compile(quick(901), target="cpu").id  # the session still works


def test_a_cancelled_running_compile_keeps_its_quota_until_sync(fresh_daemon, tmp_path):
    # REVIEW2 G4: cancel() of a compile already running returns True, but the build holds the
    # tenant's compiles quota until it ends; sync() waits for its late answer, so a resubmit
    # after sync() is not refused under compiles=1
    tokens = tmp_path / "tokens"
    tokens.write_text("tok-0123456789abcdefghij tuner compiles=1\n")
    d = fresh_daemon("--tokens", str(tokens), "--compile-workers", "1", listen=["unix:" + str(tmp_path / "k.sock")])
    with kiln.connect(d.urls[0], token="tok-0123456789abcdefghij") as s:
        f = s.compile_async(_slow(1), target="cpu")
        deadline = time.monotonic() + 10
        while s.quotas()["used"]["compiles"] == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert f.cancel() is True and f.cancelled()
        s.sync(30)
        assert s.quotas()["used"]["compiles"] == 0
        assert s.compile(quick(902), target="cpu").id  # not refused for the quota


def _two_tenants(fresh_daemon, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("owner-token-0123456789 owner\nother-token-0123456789 other\n")
    return fresh_daemon("--tokens", str(tokens), listen=["unix:" + str(tmp_path / "k.sock")])


def test_connection_killed_mid_flight_fails_every_future(fresh_daemon, tmp_path):
    # The owner leases cpu:0, so the other tenant's launches wait inside kilnd (no CPU spent);
    # then kilnd is killed with SIGKILL. Every pending future fails with kiln.Unavailable:
    # those with callbacks, those waited in threads, and an asyncio await.
    d = _two_tenants(fresh_daemon, tmp_path)
    owner = kiln.connect(d.urls[0], token="owner-token-0123456789")
    s = kiln.connect(d.urls[0], token="other-token-0123456789")
    try:
        dev = s.cpu(0)
        k = s.compile(quick(7), target=dev)["quick"]
        x = kiln.nd.array(np.zeros(4, "int32"), dev)
        lease = owner.lease("cpu:0", 60).acquire()
        futs = [k.launch_async(x, grid=1, block=1) for _ in range(20)]
        time.sleep(0.2)
        assert not any(f.done() for f in futs), "the launches did not wait for the lease"
        failed = []
        for f in futs[:10]:
            f.add_done_callback(lambda fut: failed.append(type(fut.exception())))
        waited = []

        def waiter(f):
            try:
                f.result(timeout=60)
            except Exception as e:  # noqa: BLE001 (recorded)
                waited.append(e)
        ts = [threading.Thread(target=waiter, args=(f,)) for f in futs[10:15]]
        for t in ts:
            t.start()

        async def awaiter():
            try:
                await asyncio.gather(*futs[15:])
            except Exception as e:  # noqa: BLE001 (returned)
                return e
        loop_result = []
        at = threading.Thread(target=lambda: loop_result.append(asyncio.run(awaiter())))
        at.start()
        time.sleep(0.2)
        os.kill(d.pid, signal.SIGKILL)
        for t in ts + [at]:
            t.join(30)
        assert not any(t.is_alive() for t in ts + [at]), "a waiter hangs after the daemon died"
        deadline = time.monotonic() + 30
        while len(failed) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert failed == [kiln.Unavailable] * 10
        assert len(waited) == 5 and all(isinstance(e, kiln.Unavailable) for e in waited)
        assert "closed the connection" in str(waited[0])
        assert isinstance(loop_result[0], kiln.Unavailable)
        assert all(f.done() and isinstance(f.exception(), kiln.Unavailable) for f in futs)
        with pytest.raises(kiln.Unavailable):
            s.ping_async()
        del lease
    finally:
        s.close()
        owner.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_cannot_use_the_parents_session(s):
    pending = s.ping_async()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its copy of the session is refused, the parent's is untouched
        code = 1
        try:
            try:
                s.ping()
            except kiln.Unavailable as e:
                code = 0 if "forked child" in str(e) else 2
            try:
                pending.result(1)
                code = 3
            except kiln.Unavailable:
                pass
        finally:
            os.write(w, b"%d" % code)
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    code = os.read(r, 16)
    os.close(r)
    assert code == b"0"
    assert pending.result(30) == "pong" and s.ping() == "pong"


def test_a_forked_child_leaves_the_private_daemon_alone(kilnd_bin, tmp_path):
    # A child that exits normally runs the atexit handlers it inherited: before, it stopped
    # its parent's private kilnd (and removed its folder) under the parent's sessions.
    from test_daemon import run_python, gone
    code = ("import os, sys, kiln\n"
            "s = kiln.connect()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    t = kiln.connect()  # the child reaches the parent's private daemon anew\n"
            "    assert t.daemon is s.daemon and t.ping() == 'pong'\n"
            "    sys.exit(0)\n"
            "assert os.waitpid(pid, 0)[1] == 0\n"
            "print(s.daemon.pid, s.daemon.alive(), s.ping())\n")
    r = run_python(code, {"KILND": kilnd_bin, "XDG_RUNTIME_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    pid, alive, pong = r.stdout.split()
    assert alive == "True" and pong == "pong"
    assert gone(int(pid)), "the private kilnd outlived its Python process"


def _sender_blocked(s, t, big, reading=True):
    """Starts a thread uploading ``big`` into ``t`` while kilnd is stopped, and returns it
    (and an event set when its send is done) once its send found the socket full: it holds
    the send lock, and with ``reading`` the reader role too (it reads replies while it waits
    when no other thread reads)."""
    sent = threading.Event()
    b = threading.Thread(target=lambda: (t.copyfrom_async(big), sent.set()), name="big-sender")
    b.start()
    deadline = time.monotonic() + 30
    # white box: who holds what
    while not s._conn._send_lock.locked() or (reading and s._conn._reader_ident != b.ident):
        assert time.monotonic() < deadline and b.is_alive(), "the sender never blocked"
        time.sleep(0.001)
    return b, sent


def _finished(f):
    return f._state in kiln._rpc._DONE_STATES  # done() would read: no peeking that way


@pytest.mark.parametrize("how", ["callback", "await"])
def test_callbacks_run_while_another_thread_sends(fresh_daemon, tmp_path, how):
    # Review F5: a thread whose send finds the socket full reads replies while it waits (or
    # kilnd would stop reading it), and completes other threads' futures; their callbacks
    # waited for a later read, which never came when the session went quiet: a done callback
    # (and so an asyncio await) stalled while a large body was sent, and after it too.
    # Here kilnd is stopped while the sender blocks, so the ping's answer is read by the
    # sender (the reader thread started by the callback finds the role taken); once the
    # answer is read kilnd is stopped again, so the body cannot finish before the callback runs.
    d = fresh_daemon(listen=["unix:" + str(tmp_path / "k.sock")])
    with kiln.connect(d.urls[0]) as s:
        big = np.ones(4 * kiln.nd._chunk_bytes(s) // 4, "float32")  # four messages
        t = kiln.nd.empty(big.shape, "float32", s.cpu(0))
        os.kill(d.pid, signal.SIGSTOP)
        try:
            f = s.ping_async()  # ahead of the body in the stream: answered first
            b, sent = _sender_blocked(s, t, big)
            ran, ev, again = [], threading.Event(), []
            if how == "callback":
                def cb(fut):
                    ran.append((fut.result(), sent.is_set()))
                    ev.set()
                    again.append(s.ping())  # a callback may send (it waits for the send lock)
                f.add_done_callback(cb)
            else:
                def await_it():
                    async def main():
                        return await asyncio.wait_for(asyncio.wrap_future(f), 60)
                    ran.append((asyncio.run(main()), sent.is_set()))
                    ev.set()
                threading.Thread(target=await_it, daemon=True).start()
                deadline = time.monotonic() + 30
                while not f._watched:  # white box: the loop has wrapped (and so watches) it
                    assert time.monotonic() < deadline, "asyncio never wrapped the future"
                    time.sleep(0.001)
            os.kill(d.pid, signal.SIGCONT)
            deadline = time.monotonic() + 30
            while not _finished(f):
                assert time.monotonic() < deadline, "the ping was never answered"
                time.sleep(0.001)
            os.kill(d.pid, signal.SIGSTOP)  # the body stays unfinished from here on
            assert ev.wait(30), "the ping is done but its callback (await) never ran"
            assert ran == [("pong", False)], ran
        finally:
            os.kill(d.pid, signal.SIGCONT)
        b.join(60)
        assert sent.is_set()
        if how == "callback":
            deadline = time.monotonic() + 30
            while not again and time.monotonic() < deadline:
                time.sleep(0.01)
            assert again == ["pong"]
        assert np.array_equal(t.numpy()[-4:], big[-4:])
        assert s.ping() == "pong"


def test_cancel_returns_while_kilnd_is_stopped(fresh_daemon, tmp_path):
    # Review F7: cancel() waited for the daemon's answer; asyncio calls it from its event loop
    # when a task awaiting a compile is cancelled (asyncio.wait_for's timeout), so the loop froze
    # until an unresponsive kilnd answered. Now it sends `cancel` and returns at once.
    d = fresh_daemon("--compile-workers", "1", listen=["unix:" + str(tmp_path / "k.sock")])
    with kiln.connect(d.urls[0]) as s:
        before = s.stats()["compile"]["cancelled"]
        big = np.ones(kiln.nd._chunk_bytes(s) // 4, "float32")
        t = kiln.nd.empty(big.shape, "float32", s.cpu(0))
        busy = s.compile_batch_async([(_slow(200 + i), "cpu") for i in range(30)])
        os.kill(d.pid, signal.SIGSTOP)
        resumed = threading.Event()

        def resume():  # only a safety net: the test fails if it was needed
            resumed.set()
            os.kill(d.pid, signal.SIGCONT)
        safety = threading.Timer(60, resume)
        safety.start()
        try:
            async def main():
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(s.compile_async(quick(950), target="cpu"), 0.2)
            asyncio.run(main())
            assert not resumed.is_set(), "the event loop waited for kilnd"
            f = s.compile_async(quick(951), target="cpu")
            assert f.cancel() is True and f.cancelled() and f.done()
            with pytest.raises(kiln.Cancelled):
                f.result(0)
            assert f.cancel() is False  # a finished request has nothing to cancel
            assert busy.cancel() is False  # a batch still completes, its queued items cancelled
            # with the send lock held by a thread stuck in a large send, too: the cancel
            # waits in the queue of fire-and-forget messages, sent when the lock is free
            g = s.compile_async(quick(952), target="cpu")
            sender, sent = _sender_blocked(s, t, big, reading=False)
            assert g.cancel() is True and g.cancelled()
            assert not resumed.is_set() and not sent.is_set(), "cancel() waited for kilnd"
        finally:
            safety.cancel()
            os.kill(d.pid, signal.SIGCONT)
        sender.join(60)
        assert sent.is_set()
        res = busy.result(timeout=120)
        assert any(isinstance(r, kiln.Cancelled) for r in res)
        s.sync(60)  # every cancel was sent and answered
        assert s.stats()["compile"]["cancelled"] > before
        assert s.compile(quick(950), target="cpu").id  # the session still works
