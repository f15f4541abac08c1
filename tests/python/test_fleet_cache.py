"""The remote artifact tier (issue 17 §1): kilnds sharing builds through a real redis-server.

Each test starts its own Redis (fleet_helpers.py) and kilnds with --cache-remote; outages are
real (SIGKILL, SIGSTOP). What a kilnd did is read from its `stats` (compile.compiles: builds
its compile workers ran; cache_remote: the tier's counters) and its log."""

import contextlib
import os
import re
import socket
import threading
import time

import numpy as np
import pytest

import kiln
from conftest import ROOT
from fleet_helpers import kilnds, fleet_secret, kilnd_args, redis_server, remote_stats, rodata_ir, table_ir, table_values, wait_until  # noqa: F401,E501

VADD = open(os.path.join(ROOT, "clients", "python", "examples", "vadd.ll")).read()


def ir(tag):
    """vadd with a comment: another payload, so another build key."""
    return VADD + "\n; fleet test %s %s\n" % (tag, os.urandom(8).hex())


def compiles(sess):
    return sess.stats()["compile"]["compiles"]


def start(kilnds, r, secret, *extra):
    return kilnds(*kilnd_args(r.url, secret, *extra))


def wait_up(sess, up=True, timeout=10):
    assert wait_until(lambda: remote_stats(sess)["up"] == up, timeout), remote_stats(sess)


def wait_puts(sess, n, timeout=10):
    assert wait_until(lambda: remote_stats(sess)["puts"] >= n, timeout), remote_stats(sess)


@contextlib.contextmanager
def two_hosts(kilnds, r, secret):
    """Sessions on two kilnds sharing Redis r, both connected to it."""
    a, b = start(kilnds, r, secret), start(kilnds, r, secret)
    with kiln.connect(a.url) as sa, kiln.connect(b.url) as sb:
        wait_up(sa)
        wait_up(sb)
        yield sa, sb


def test_a_build_on_one_host_is_a_remote_hit_on_another(kilnds, redis_server, fleet_secret):
    with two_hosts(kilnds, redis_server(), fleet_secret) as (sa, sb):
        src = ir("hit")
        ma = sa.compile(src, target="cpu")
        assert ma.cached is False and compiles(sa) == 1
        wait_puts(sa, 1)
        assert remote_stats(sa)["bytes_written"] > 0
        mb = sb.compile(src, target="cpu")
        assert mb.id == ma.id and mb.cached is True
        st = sb.stats()
        assert st["compile"]["compiles"] == 0, "B ran its compiler"
        assert st["cache_remote"]["hits"] == 1 and st["cache_remote"]["bytes_read"] > 0
        # the same artifact, byte for byte
        assert mb.get_source("so") == ma.get_source("so")
        assert mb.get_source("llvm") == ma.get_source("llvm")
        # and it runs on B
        dev = sb.cpu(0)
        x = np.arange(64, dtype=np.float32)
        ta, tb, tc = kiln.nd.array(x, dev), kiln.nd.array(2 * x, dev), kiln.nd.empty((64,), "float32", dev)
        mb["myadd"](ta, tb, tc, 64, grid=(1, 1, 1), block=(64, 1, 1))
        assert np.array_equal(tc.numpy(), 3 * x)
        # B now holds it locally: the next look-up never reaches Redis
        assert sb.compile(src, target="cpu").cached is True
        assert remote_stats(sb)["hits"] == 1


def payloads_taken(d):
    """How many `compile` payloads kilnd d kept in the request's own receive buffer (taken=1)
    and how many it copied (taken=0), from its debug log."""
    got = re.findall(r"event=compile_payload .*taken=(\d)", d.log())
    return got.count("1"), got.count("0")


def runs_with_table(sess, m, kib, salt):
    """Runs m's myadd on sess's cpu: the table's values are added in."""
    dev = sess.cpu(0)
    x = np.arange(64, dtype=np.float32)
    ta, tb, tc = kiln.nd.array(x, dev), kiln.nd.array(2 * x, dev), kiln.nd.empty((64,), "float32", dev)
    m["myadd"](ta, tb, tc, 64, grid=(1, 1, 1), block=(64, 1, 1))
    want = (x + 2 * x) + np.array(table_values(kib, salt)[:64], dtype=np.int32).astype(np.float32)
    assert np.array_equal(tc.numpy(), want)


def test_a_large_request_is_a_remote_hit_without_a_compile(kilnds, redis_server, fleet_secret):
    """`compile` requests carrying 0.8 MB of IR: kilnd keeps the payload in the request's own
    receive buffer (no copy) while it asks Redis. A remote miss (host A) compiles from it,
    correctly; a remote hit (host B) answers the same artifact, byte for byte, and B never
    runs its compiler."""
    r = redis_server()
    a = start(kilnds, r, fleet_secret, "--log-level", "debug")
    b = start(kilnds, r, fleet_secret, "--log-level", "debug")
    with kiln.connect(a.url) as sa, kiln.connect(b.url) as sb:
        wait_up(sa)
        wait_up(sb)
        for i in range(3):
            salt = 7000 + i
            src = table_ir(210, salt) + "; large %s\n" % os.urandom(8).hex()
            assert len(src) > 800_000
            ma = sa.compile(src, target="cpu")
            assert ma.cached is False
            wait_puts(sa, i + 1)
            mb = sb.compile(src, target="cpu")
            assert mb.cached is True and mb.id == ma.id
            assert mb.get_source("so") == ma.get_source("so")
            assert mb.get_source("llvm") == ma.get_source("llvm")
            runs_with_table(sa, ma, 210, salt)
            runs_with_table(sb, mb, 210, salt)
        assert compiles(sa) == 3 and compiles(sb) == 0, (sa.stats()["compile"], sb.stats()["compile"])
        assert remote_stats(sb)["hits"] == 3 and remote_stats(sa)["misses"] == 3
        # a small request's payload is copied: its buffer is one the reader keeps
        assert sb.compile(ir("small"), target="cpu").cached is False
    assert payloads_taken(a) == (3, 0), payloads_taken(a)
    assert payloads_taken(b) == (3, 1), payloads_taken(b)


def test_redis_gone_with_large_requests_waiting_on_it(kilnds, redis_server, fleet_secret):
    """Redis stopped (SIGSTOP) with large requests' look-ups sent to it, then killed: the
    look-ups end as misses, every request is compiled here from the payload its job kept,
    and nothing is lost or answered twice."""
    r = redis_server()
    a = start(kilnds, r, fleet_secret, "--cache-remote-timeout", "30", "--log-level", "debug")
    with kiln.connect(a.url) as sa:
        wait_up(sa)
        salts = [7100 + i for i in range(4)]
        srcs = [table_ir(210, s) + "; gone %s\n" % os.urandom(8).hex() for s in salts]
        r.stop_process()
        futs = [sa.compile_async(src, target="cpu") for src in srcs]
        # stats is answered after the compiles were read: their look-ups wait on Redis
        st = sa.stats()
        assert st["compile"]["compiles"] == 0 and st["cache_remote"]["misses"] == 0, st
        r.kill()  # SIGKILL while stopped: the connection goes with the look-ups in it
        ms = [f.result(timeout=60) for f in futs]
        assert all(m.cached is False for m in ms)
        assert compiles(sa) == 4
        for src, salt, m in zip(srcs, salts, ms):
            again = sa.compile(src, target="cpu")
            assert again.cached is True and again.id == m.id
            runs_with_table(sa, m, 210, salt)
        assert compiles(sa) == 4
    # each held as its own receive buffer or, where the pipelined requests shared a read, a copy
    assert sum(payloads_taken(a)) == 4, payloads_taken(a)


def test_a_large_request_cancelled_while_its_look_up_waits(kilnds, redis_server, fleet_secret):
    """A large `compile` whose look-up waits behind another host's lock is cancelled: cancel
    drops queued work only, and a job asking Redis is not queued, so kilnd drops nothing (as
    before this change); an identical request joins it. When the lock goes, the build runs
    here once, from the cancelled request's buffer, and answers the other request."""
    r = redis_server()
    salt = 7200
    src = table_ir(210, salt) + "; cancel %s\n" % os.urandom(8).hex()
    probe = start(kilnds, r, fleet_secret, "--cache-remote", "unix:/nonexistent/redis.sock")
    with kiln.connect(probe.url) as sp:  # learns the key (the module id) without Redis
        key = sp.compile(src, target="cpu").id
    rc = r.client()
    rc.set("kiln:lock:" + key, b"another-host", px=600000)
    b = start(kilnds, r, fleet_secret, "--log-level", "debug")
    with kiln.connect(b.url) as sb, kiln.connect(b.url) as sc:
        wait_up(sb)
        f = sb.compile_async(src, target="cpu")
        assert wait_until(lambda: remote_stats(sb)["lock_waits"] == 1), remote_stats(sb)
        assert f.cancel() and f.cancelled()
        g = sc.compile_async(src, target="cpu")
        st = sb.stats()  # after the cancel: the connection's requests are taken in order
        assert st["compile"]["cancelled"] == 0 and st["compile"]["compiles"] == 0, st["compile"]
        assert wait_until(lambda: sc.stats()["compile"]["single_flight_joins"] == 1)
        rc.delete("kiln:lock:" + key)
        m = g.result(timeout=60)
        assert m.id == key and m.cached is False
        sb.sync()  # the cancelled request's late answer came, and was dropped
        st = sb.stats()["compile"]
        assert st["compiles"] == 1 and st["cancelled"] == 0, st
        assert sb.compile(src, target="cpu").cached is True
        runs_with_table(sc, m, 210, salt)
    assert payloads_taken(b) == (1, 0), payloads_taken(b)


def test_large_hits_are_read_into_the_spare_byte_for_byte(kilnds, redis_server, fleet_secret):
    """A remote hit of 1 MiB or more is read into kilnd's prefaulted spare receive buffer
    (made on the thread pool; the first large reply sizes it): the same artifact, byte for
    byte, through the MAC check. Replies larger than the spare (2 MiB after 1 MiB) are read
    as without it and the spare is made again for them; back to back, the next one fits."""
    with two_hosts(kilnds, redis_server(), fleet_secret) as (sa, sb):
        kibs = [1024, 1024, 1024, 2048, 2048, 2048, 1024]
        for i, kib in enumerate(kibs):
            src = rodata_ir(kib, "spare %d %s" % (i, os.urandom(8).hex()))
            ma = sa.compile(src, target="cpu")
            wait_puts(sa, i + 1)
            mb = sb.compile(src, target="cpu")
            assert mb.cached is True and mb.id == ma.id
            so = mb.get_source("so")
            assert len(so) > kib * 1024 and so == ma.get_source("so")
        st = remote_stats(sb)
        assert st["hits"] == len(kibs) and st["corrupt"] == 0 and compiles(sb) == 0, st
        # each large reply either way; the first finds none
        assert st["spare_used"] + st["spare_missed"] == len(kibs) and st["spare_missed"] >= 1, st
        assert st["spare_used"] >= 1, st
        assert 0 < st["spare_bytes"] <= 8 << 20, st


def test_kilnd_stops_cleanly_right_after_a_large_hit(kilnds, redis_server, fleet_secret):
    """kilnd asked to stop right after a large remote hit, its next spare being made on the
    thread pool (or just made): it exits with status 0, and the ASan build reports nothing
    (the kilnds fixture checks both; tests/server/test_fleet_redis.c makes the cancelled case
    certain)."""
    r = redis_server()
    a = start(kilnds, r, fleet_secret)
    srcs = [rodata_ir(1024, "stop %d %s" % (i, os.urandom(8).hex())) for i in range(3)]
    with kiln.connect(a.url) as sa:
        wait_up(sa)
        for src in srcs:
            sa.compile(src, target="cpu")
        wait_puts(sa, len(srcs))
    for src in srcs:
        b = start(kilnds, r, fleet_secret)
        with kiln.connect(b.url) as sb:
            wait_up(sb)
            assert sb.compile(src, target="cpu").cached is True
        assert b.stop(grace=5) == 0
        assert "Sanitizer" not in b.log() and "runtime error" not in b.log()


def test_metrics_name_the_remote_tier(kilnds, redis_server, fleet_secret):
    import urllib.request
    r = redis_server()
    d = kilnds(*kilnd_args(r.url, fleet_secret, "--metrics", "tcp:127.0.0.1:0"))
    murl = next(u for u in d.urls if u.startswith("http"))
    with kiln.connect(d.url) as s:
        wait_up(s)
        s.compile(ir("metrics"), target="cpu")
        wait_puts(s, 1)
    text = urllib.request.urlopen(murl, timeout=10).read().decode()
    assert "kiln_cache_remote_up 1" in text
    assert 'kiln_cache_remote_lookups_total{result="miss"} 1' in text
    assert 'kiln_cache_remote_puts_total{result="ok"} 1' in text


@pytest.mark.parametrize("forgery", ["garbage", "flipped", "other_secret", "wrong_type", "oversized", "empty_header",
                                     "old_format"])
def test_a_forged_entry_is_rebuilt_never_served(kilnds, redis_server, fleet_secret, tmp_path, forgery):
    r = redis_server()
    a = start(kilnds, r, fleet_secret, "--cache-remote-max-bytes", "1048576")
    with kiln.connect(a.url) as sa:
        wait_up(sa)
        src = ir("forged")
        m = sa.compile(src, target="cpu")
        wait_puts(sa, 1)
        good_so = m.get_source("so")
    rc = r.client()
    name = "kiln:art:" + m.id
    good = rc.get(name)
    assert good[:8] == b"KILNRMT2"
    if forgery == "garbage":
        rc.set(name, os.urandom(len(good)))
    elif forgery == "flipped":  # one payload bit: the MAC fails
        bad = bytearray(good)
        bad[-10] ^= 1
        rc.set(name, bytes(bad))
    elif forgery == "other_secret":  # a well-formed entry whose tag no holder of the secret made
        rc.set(name, good[:64] + os.urandom(16) + good[80:])
    elif forgery == "old_format":  # the first format (KILNRMT1), MACed with our secret by an older kilnd
        import hashlib
        import hmac
        head = b"KILNRMT1" + good[8:48]
        payload = good[80:]
        with open(fleet_secret, "rb") as f:
            key = f.read()
        rc.set(name, head + hmac.new(key, head + payload, hashlib.sha256).digest() + payload)
    elif forgery == "wrong_type":
        rc.delete(name)
        rc.rpush(name, b"x", b"y")
    elif forgery == "oversized":  # past --cache-remote-max-bytes: GETRANGE cuts it, then refused
        rc.set(name, good[:80] + os.urandom(2 << 20))
    elif forgery == "empty_header":
        rc.set(name, b"KILNRMT2")
    b = start(kilnds, r, fleet_secret, "--cache-remote-max-bytes", "1048576")
    with kiln.connect(b.url) as sb:
        wait_up(sb)
        mb = sb.compile(src, target="cpu")
        assert mb.id == m.id and mb.cached is False
        st = sb.stats()
        assert st["compile"]["compiles"] == 1 and st["cache_remote"]["hits"] == 0
        assert st["cache_remote"]["corrupt"] == 1
        assert st["cache_remote"]["old_format"] == (1 if forgery == "old_format" else 0)
        assert mb.get_source("so") == good_so
        wait_puts(sb, 1)
    assert "cache_remote_corrupt" in b.log()
    # B's rebuild replaced the forgery: a third host gets a verified hit
    c = start(kilnds, r, fleet_secret)
    with kiln.connect(c.url) as sc:
        wait_up(sc)
        assert sc.compile(src, target="cpu").cached is True
        assert compiles(sc) == 0


def test_redis_killed_mid_run_then_restarted(kilnds, redis_server, fleet_secret):
    r = redis_server()
    a = start(kilnds, r, fleet_secret)
    with kiln.connect(a.url) as sa:
        wait_up(sa)
        first = ir("before")
        sa.compile(first, target="cpu")
        wait_puts(sa, 1)
        r.kill()
        wait_up(sa, False)
        # requests keep working: local cache, local compiles
        assert sa.compile(first, target="cpu").cached is True
        t0 = time.monotonic()
        m = sa.compile(ir("during"), target="cpu")
        assert m.cached is False and time.monotonic() - t0 < 5
        st = remote_stats(sa)
        assert st["up"] is False and st["skipped"] >= 1 and st["disconnects"] >= 1
        assert "redis_down" in a.log()
        # Redis comes back (empty: no persistence): the tier does too
        r.start()
        wait_up(sa, True, timeout=15)
        sa.compile(ir("after"), target="cpu")
        wait_puts(sa, 2)
        assert "redis_up" in a.log()


@contextlib.contextmanager
def during_an_outage(kilnds, r, secret):
    """A kilnd whose Redis (r) was just killed: (daemon, session)."""
    a = start(kilnds, r, secret)
    with kiln.connect(a.url) as sa:
        wait_up(sa)
        r.kill()
        wait_up(sa, False)
        yield a, sa


def test_builds_made_during_an_outage_are_put_when_redis_is_back(kilnds, redis_server, fleet_secret):
    r = redis_server()
    with during_an_outage(kilnds, r, fleet_secret) as (a, sa):
        during = [ir("outage %d" % i) for i in range(3)]
        ids = [sa.compile(src, target="cpu").id for src in during]
        st = remote_stats(sa)
        assert st["requeued"] == 3 and st["requeue_sent"] == 0 and st["puts"] == 0
        r.start()  # empty: no persistence
        wait_up(sa, True, timeout=15)
        assert wait_until(lambda: remote_stats(sa)["requeue_sent"] == 3, 10), remote_stats(sa)
        wait_puts(sa, 3)
        assert "event=cache_remote_requeue sent=3 left=0" in a.log()
        assert len(r.client().keys("kiln:art:*")) == 3
    # a host that never saw them gets them from Redis: no compiler runs there
    b = start(kilnds, r, fleet_secret)
    with kiln.connect(b.url) as sb:
        wait_up(sb)
        for src, mid in zip(during, ids):
            m = sb.compile(src, target="cpu")
            assert m.cached and m.id == mid
        assert compiles(sb) == 0 and remote_stats(sb)["hits"] == 3


def test_the_outage_queue_is_bounded(kilnds, redis_server, fleet_secret):
    r = redis_server()
    with during_an_outage(kilnds, r, fleet_secret) as (a, sa):
        n = 260  # past KILN_REMOTE_REQUEUE_ENTRIES (256): the oldest are dropped
        srcs = [ir("bound %d" % i) for i in range(n)]
        for f in [sa.compile_async(src, target="cpu") for src in srcs]:
            f.result()
        st = remote_stats(sa)
        assert st["requeued"] == n and st["requeue_dropped"] == n - 256
        r.start()
        wait_up(sa, True, timeout=15)
        assert wait_until(lambda: remote_stats(sa)["requeue_sent"] == 256, 20), remote_stats(sa)
        metrics = sa.stats()["cache_remote"]
        assert metrics["requeue_dropped"] == 4


def test_a_redis_that_stops_answering_costs_one_deadline(kilnds, redis_server, fleet_secret):
    r = redis_server()
    a = start(kilnds, r, fleet_secret, "--cache-remote-timeout", "0.3")
    with kiln.connect(a.url) as sa:
        wait_up(sa)
        r.stop_process()
        try:
            t0 = time.monotonic()
            m = sa.compile(ir("stopped"), target="cpu")
            took = time.monotonic() - t0
            assert m.cached is False
            assert took < 5, took
            st = remote_stats(sa)
            assert st["timeouts"] >= 1 and st["up"] is False
        finally:
            r.cont_process()
        wait_up(sa, True, timeout=15)


def test_a_wrong_password_leaves_kilnd_working(kilnds, redis_server, fleet_secret, tmp_path):
    r = redis_server(password="right-horse-battery")
    wrong = tmp_path / "wrong.auth"
    wrong.write_text("default wrong-password\n")
    os.chmod(wrong, 0o600)
    a = start(kilnds, r, fleet_secret, "--cache-remote-auth-file", str(wrong))
    with kiln.connect(a.url) as sa:
        assert wait_until(lambda: remote_stats(sa)["auth_failures"] >= 1)
        assert sa.compile(ir("wrongpw"), target="cpu").cached is False
        assert remote_stats(sa)["up"] is False
    log = a.log()
    assert "AUTH refused" in log and "wrong-password" not in log and "right-horse" not in log
    right = tmp_path / "right.auth"
    right.write_text("right-horse-battery\n")
    os.chmod(right, 0o600)
    b = start(kilnds, r, fleet_secret, "--cache-remote-auth-file", str(right))
    with kiln.connect(b.url) as sb:
        wait_up(sb)


def test_two_hosts_asking_at_once_build_once(kilnds, redis_server, fleet_secret):
    with two_hosts(kilnds, redis_server(), fleet_secret) as (sa, sb):
        for i in range(8):  # the lock's races: GET misses on both, one SET NX wins, the other waits
            src = ir("race%d" % i)
            fa = sa.compile_async(src, target="cpu")
            fb = sb.compile_async(src, target="cpu")
            assert fa.result().id == fb.result().id
        sta, stb = sa.stats(), sb.stats()
        assert sta["compile"]["compiles"] + stb["compile"]["compiles"] == 8
        assert sta["cache_remote"]["hits"] + stb["cache_remote"]["hits"] == 8


def test_a_vanished_lock_holder_costs_its_ttl_and_a_bounded_wait(kilnds, redis_server, fleet_secret):
    r = redis_server()
    src = ir("holder")
    probe = start(kilnds, r, fleet_secret, "--cache-remote", "unix:/nonexistent/redis.sock")
    with kiln.connect(probe.url) as sp:  # learns the key (the module id) without Redis
        key = sp.compile(src, target="cpu").id
    rc = r.client()
    rc.set("kiln:lock:" + key, b"a-host-that-died", px=1000)
    b = start(kilnds, r, fleet_secret)
    with kiln.connect(b.url) as sb:
        wait_up(sb)
        t0 = time.monotonic()
        assert sb.compile(src, target="cpu").cached is False
        assert 0.5 < time.monotonic() - t0 < 5
        st = remote_stats(sb)
        assert st["lock_waits"] == 1 and st["wait_timeouts"] == 0 and compiles(sb) == 1
    # a lock that never goes away: the wait is bounded by --cache-remote-wait
    src2 = ir("stuck")
    with kiln.connect(probe.url) as sp:
        key2 = sp.compile(src2, target="cpu").id
    rc.set("kiln:lock:" + key2, b"stuck", px=600000)
    c = start(kilnds, r, fleet_secret, "--cache-remote-wait", "0.5")
    with kiln.connect(c.url) as sc:
        wait_up(sc)
        t0 = time.monotonic()
        assert sc.compile(src2, target="cpu").cached is False
        assert 0.4 < time.monotonic() - t0 < 5
        assert remote_stats(sc)["wait_timeouts"] == 1


@pytest.mark.parametrize("case", ["no_secret", "short_secret", "open_secret", "bad_url", "url_password",
                                  "open_auth"])
def test_bad_fleet_options_refuse_to_start(kilnds, fleet_secret, tmp_path, case):
    args = ["--cache-remote", "redis://127.0.0.1:1/0", "--fleet-secret-file", fleet_secret]
    if case == "no_secret":
        args = args[:2]
    elif case == "short_secret":
        p = tmp_path / "short"
        p.write_bytes(b"x" * 16)
        os.chmod(p, 0o600)
        args[3] = str(p)
    elif case == "open_secret":
        os.chmod(fleet_secret, 0o644)
    elif case == "bad_url":
        args[1] = "http://127.0.0.1:6379"
    elif case == "url_password":
        args[1] = "redis://user:pw@127.0.0.1:6379/0"
    elif case == "open_auth":
        p = tmp_path / "auth"
        p.write_text("pw\n")
        os.chmod(p, 0o644)
        args += ["--cache-remote-auth-file", str(p)]
    with pytest.raises(kiln.KilnError) as e:
        kilnds(*args)
    if case == "url_password":
        assert "pw@" not in str(e.value)


class HostileRedis:
    """A fake Redis on a unix socket: answers the handshake, then `answer` to everything else."""

    def __init__(self, path, answer):
        self.answer = answer
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)
        self.sock.listen(8)
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        buf = b""
        try:
            while not self.stop:
                chunk = c.recv(65536)
                if not chunk:
                    return
                buf += chunk
                while b"\r\n" in buf:  # one reply per command; commands arrive whole here
                    n = buf.count(b"*")
                    if n == 0:
                        break
                    cmd = buf
                    buf = b""
                    for part in cmd.split(b"*")[1:]:
                        if b"PING" in part:
                            c.sendall(b"+PONG\r\n")
                        else:
                            self.answer(c)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.stop = True
        self.sock.close()


def huge_array(c):
    c.sendall(b"*2000000000\r\n")


def huge_bulk(c):
    c.sendall(b"$900000000\r\n")
    try:
        for _ in range(300):  # up to 19 MiB, then give up: kilnd must have dropped us by then
            c.sendall(b"\0" * 65536)
    except OSError:
        pass


def wrong_types(c):
    c.sendall(b":42\r\n")


def extra_replies(c):  # more replies than commands: hiredis 0.14 would abort on the spare ones
    c.sendall(b"$-1\r\n+OK\r\n:1\r\n$-1\r\n*1\r\n+x\r\n")


def garbage(c):
    c.sendall(b"\x00\xffnot resp at all\r\n")


def sends(c, head, piece, times):
    try:
        c.sendall(head)
        for _ in range(times):
            c.sendall(piece)
    except OSError:
        pass  # kilnd dropped us: what it should do


def nested_arrays(c):  # 4096 arrays of 4096 integers: 64 MiB of input that hiredis would keep
    sends(c, b"*4096\r\n", b"*4096\r\n" + b":1\r\n" * 4096, 4096)


def many_bulks(c):  # strings each under the 2 MiB reply bound, 600 MiB in all
    sends(c, b"*4096\r\n", b"$1500000\r\n" + b"x" * 1500000 + b"\r\n", 400)


def peak_rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024


@pytest.mark.parametrize("answer", [huge_array, huge_bulk, wrong_types, extra_replies, garbage,
                                    nested_arrays, many_bulks])
def test_a_hostile_redis_costs_only_a_local_compile(kilnds, fleet_secret, tmp_path, answer):
    path = str(tmp_path / "hostile.sock")
    h = HostileRedis(path, answer)
    try:
        a = kilnds(*kilnd_args("unix:" + path, fleet_secret, "--cache-remote-max-bytes", "1048576",
                                     "--cache-remote-timeout", "1"))
        with kiln.connect(a.url) as sa:
            wait_up(sa)
            rss0 = peak_rss_mib(a.pid)
            for i in range(2):
                t0 = time.monotonic()
                m = sa.compile(ir("hostile%d" % i), target="cpu")
                assert m.cached is False and time.monotonic() - t0 < 5
            assert compiles(sa) == 2
            assert sa.ping() is not None
            # REVIEW F2: the reply tree is bounded, not only the unparsed input (it was +420 MiB)
            grew = peak_rss_mib(a.pid) - rss0
            assert grew < 100, "kilnd's peak RSS grew %.0f MiB" % grew
        assert a.alive()
    finally:
        h.close()
