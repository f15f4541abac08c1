"""The fleet registry and placement (issue 17 §2-3): kilnds publishing themselves in a real
redis-server, kiln.fleet reading it, sessions placed by device kind and load, and the
`python3 -m kiln.fleet` table. Records are checked as Redis holds them."""

import os
import signal
import subprocess
import sys
import time

import msgpack
import pytest
import redis

import kiln
from conftest import PKG_PYTHONPATH
from fleet_helpers import kilnds, free_port, redis_server, wait_until  # noqa: F401


def host(kilnds, r, *extra, ttl="1"):
    port = free_port()
    url = "tcp:127.0.0.1:%d" % port
    d = kilnds("--fleet", r.url, "--advertise", url, "--fleet-ttl", ttl, "--compile-workers", "1",
                     *extra, listen=["tcp:127.0.0.1:%d" % port])
    d.advertised = url
    return d


def live(r, n, timeout=10):
    hs = wait_until(lambda: (lambda h: h if len(h) == n else None)(kiln.fleet.hosts(r.url)), timeout)
    assert hs and len(hs) == n, kiln.fleet.hosts(r.url)
    return hs


def test_hosts_publish_and_a_dead_one_disappears_within_the_ttl(kilnds, redis_server):
    r = redis_server()
    a, b = host(kilnds, r), host(kilnds, r)
    hs = live(r, 2)
    assert sorted(h.url for h in hs) == sorted([a.advertised, b.advertised])
    for h in hs:
        assert h.version == kiln.__version__ or h.version
        assert h.identity.startswith("kiln ") and not h.identity_differs
        cpu = [d for d in h.devices if d["id"] == "cpu:0"]
        assert cpu and cpu[0]["kind"] == "cpu" and cpu[0]["capacity"] > 0 and cpu[0]["leased"] is False
        assert h.compile["workers"] == 1 and h.ttl_ms == 1000
    os.kill(a.pid, signal.SIGKILL)
    a.proc.wait()
    t0 = time.monotonic()
    hs = live(r, 1, timeout=5)
    assert hs[0].url == b.advertised and time.monotonic() - t0 < 2.5
    # b's heartbeat prunes the set too
    assert wait_until(lambda: r.client().smembers("kiln:hosts") == {b.advertised.encode()}, 5)


def test_the_registry_holds_no_secrets(kilnds, redis_server, tmp_path):
    r = redis_server()
    tokens = tmp_path / "tokens"
    tokens.write_text("sekrit-token-of-alice-0123456789 alice\n")
    os.chmod(tokens, 0o600)
    a = host(kilnds, r, "--tokens", str(tokens))
    live(r, 1)
    raw = r.client().get("kiln:host:" + a.advertised)
    assert b"sekrit" not in raw and b"alice" not in raw
    rec = msgpack.unpackb(raw, raw=False)
    assert set(rec) == {"v", "url", "host", "version", "identity", "started", "time", "ttl_ms", "connections",
                        "tenants", "compile", "devices"}


def test_connect_places_on_the_least_loaded_host_of_the_kind(kilnds, redis_server):
    r = redis_server()
    a, b = host(kilnds, r), host(kilnds, r)
    live(r, 2)
    furl = "fleet:" + r.url
    seen = set()
    for _ in range(16):  # equal loads: placements spread over both
        with kiln.connect(furl, device="cpu") as s:
            assert s.fleet_device.id == "cpu:0" and s.ping() is not None
            seen.add(s.fleet_host.url)
    assert seen == {a.advertised, b.advertised}
    with pytest.raises(kiln.Unavailable):
        kiln.connect(furl, device="cuda")
    with pytest.raises(kiln.InvalidArgument):
        kiln.connect(a.advertised, device="cpu")
    # a lease on a's cpu:0: every placement goes to b once the heartbeat says so
    with kiln.connect(a.advertised) as sa, sa.lease("cpu:0", 30):
        assert wait_until(lambda: any(h.url == a.advertised and h.devices[0]["leased"]
                                      for h in kiln.fleet.hosts(r.url)), 5)
        for _ in range(6):
            with kiln.connect(furl, device="cpu") as s:
                assert s.fleet_host.url == b.advertised


def test_sessions_fan_out_one_per_device(kilnds, redis_server):
    r = redis_server()
    a, b = host(kilnds, r), host(kilnds, r)
    live(r, 2)
    ss = kiln.fleet.sessions(r.url, "cpu")
    try:
        assert sorted(s.fleet_host.url for s in ss) == sorted([a.advertised, b.advertised])
        assert all(s.fleet_device.id == "cpu:0" for s in ss)
    finally:
        for s in ss:
            s.close()
    assert kiln.fleet.sessions(r.url, "gpu") == []


def test_a_tuning_run_measures_across_the_fleet(kilnds, redis_server):
    from kiln import autotune as at
    from kiln import topi
    from kiln.topi.space import Space
    r = redis_server()
    a, b = host(kilnds, r), host(kilnds, r)
    live(r, 2)
    rs = kiln.fleet.runners(r.url, "cpu")
    try:
        assert len(rs) == 2
        sp = Space("matmul", "cpu", (32, 32, 16), "float32", topi.space("matmul", "cpu", (1, 1, 1)).limits)
        sp.knobs = {"bm": [2, 4, 8], "bn": [8, 32], "bk": [4], "order": ["ji"], "unroll_k": [False]}
        task = at.Task("matmul", (32, 32, 16), "float32", rs[0][1], space=sp)
        res = at.tune(task, rs, trials=5, tuner="random", batch=4, repeat=1, min_repeat_ms=0, lease_s=0,
                      progress=None)
        assert len(res.trials) == 5 and {x["runner"] for x in res.trials[1:]} == {0, 1}
    finally:
        for s, _ in rs:
            s.close()


def fake_record(url, identity, **over):
    rec = {"v": 1, "url": url, "host": "elsewhere", "version": "0.0.9", "identity": identity, "started": 1,
           "time": 1, "ttl_ms": 60000, "connections": 0, "tenants": 0,
           "compile": {"workers": 1, "busy": 0, "queued": 0},
           "devices": [{"id": "cuda:0", "kind": "cuda", "arch": "sm_90", "capacity": 1, "used": 0,
                        "launches": 0, "leased": False, "info": {}}]}
    rec.update(over)
    return msgpack.packb(rec)


def test_the_table_flags_a_differing_compiler_identity(kilnds, redis_server):
    r = redis_server()
    a = host(kilnds, r)
    b = host(kilnds, r)
    live(r, 2)
    rc = r.client()
    rc.set("kiln:host:tcp:10.9.9.9:7070", fake_record("tcp:10.9.9.9:7070", "kiln 0.0.9; llvm 17; other"), px=60000)
    rc.sadd("kiln:hosts", "tcp:10.9.9.9:7070")
    out = subprocess.run([sys.executable, "-m", "kiln.fleet", r.url], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=PKG_PYTHONPATH or os.environ.get("PYTHONPATH", "")))
    assert out.returncode == 0, out.stderr
    assert a.advertised in out.stdout and b.advertised in out.stdout and "cuda:0(sm_90" in out.stdout
    assert "identity differs" in out.stdout and "tcp:10.9.9.9:7070: kiln 0.0.9" in out.stdout
    differ = [h.url for h in kiln.fleet.hosts(r.url) if h.identity_differs]
    assert differ == ["tcp:10.9.9.9:7070"]
    # placement by kind reaches the (fake) cuda host, and skips it when it does not answer
    with pytest.raises(kiln.Unavailable) as e:
        kiln.connect("fleet:" + r.url, device="cuda", timeout=1)
    assert "10.9.9.9" in str(e.value)


def test_hostile_records_are_skipped(kilnds, redis_server):
    r = redis_server()
    a = host(kilnds, r)
    live(r, 1)
    rc = r.client()
    bad = {"tcp:h:1": os.urandom(200), "tcp:h:2": msgpack.packb([1, 2, 3]),
           "tcp:h:3": fake_record("tcp:h:elsewhere", "x"),            # names another host
           "tcp:h:4": fake_record("tcp:h:4", "x", v=2),
           "tcp:h:5": fake_record("tcp:h:5", "x", devices="many"),
           "tcp:h:6": b"\xdf\xff\xff\xff\xff",                         # a map claiming 4G entries
           "tcp:h:7": fake_record("tcp:h:7", "x", devices=[{"id": 5}])}
    for k, v in bad.items():
        rc.set("kiln:host:" + k, v)
        rc.sadd("kiln:hosts", k)
    rc.sadd("kiln:hosts", "tcp:h:no-record")
    rc.set("kiln:host:tcp:h:8", b"x" * (2 << 20))
    rc.sadd("kiln:hosts", "tcp:h:8")
    hs = kiln.fleet.hosts(r.url)
    urls = [h.url for h in hs]
    assert a.advertised in urls and "tcp:h:7" in urls  # h:7 is kept, its bad device dropped
    assert [h.devices for h in hs if h.url == "tcp:h:7"] == [[]]
    assert not any(u.startswith("tcp:h:") and u != "tcp:h:7" for u in urls)
    # the set itself of the wrong type: Unavailable, not a crash
    rc.delete("kiln:hosts")
    rc.set("kiln:hosts", b"not a set")
    with pytest.raises(kiln.Unavailable):
        kiln.fleet.hosts(r.url)


@pytest.mark.parametrize("args", [("--fleet", "redis://127.0.0.1:1/0"),
                                  ("--fleet", "redis://127.0.0.1:1/0", "--advertise", "http://x:1"),
                                  ("--fleet", "nope://x", "--advertise", "tcp:127.0.0.1:1")])
def test_bad_registry_options_refuse_to_start(kilnds, args):
    with pytest.raises(kiln.KilnError):
        kilnds(*args)


def test_the_client_imports_without_redis():
    code = ("import sys; sys.modules['redis'] = None\n"
            "import kiln, kiln.fleet\n"
            "try:\n    kiln.fleet.hosts('redis://127.0.0.1:1/0')\n"
            "except kiln.Unavailable as e:\n    print('unavailable:', e.message)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=PKG_PYTHONPATH or os.environ.get("PYTHONPATH", "")))
    assert out.returncode == 0, out.stderr
    assert "python3-redis" in out.stdout


def test_a_fleet_url_that_does_not_answer_is_unavailable():
    with pytest.raises(kiln.Unavailable):
        kiln.connect("fleet:redis://127.0.0.1:1/0", device="cpu")


def test_a_forged_tcp_host_never_receives_a_token(kilnds, redis_server):
    """REVIEW F4: records are not signed, so a Redis writer can add a host of its own. With a
    token, placement takes only tls: and unix: hosts: a forged tcp: one is skipped, its listener
    receives nothing; insecure_tcp=True opts back in (and shows the listener would hear it)."""
    import socket
    import threading
    r = redis_server()
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(4)
    lst.settimeout(0.2)
    url = "tcp:127.0.0.1:%d" % lst.getsockname()[1]
    got, stop = [], []

    def grab():
        while not stop:
            try:
                c, _ = lst.accept()
            except OSError:
                continue
            c.settimeout(2)
            try:
                got.append(c.recv(4096))
            except OSError:
                pass
            c.close()
    t = threading.Thread(target=grab, daemon=True)
    t.start()
    try:
        rc = r.client()
        rc.set("kiln:host:" + url, fake_record(url, "x"), px=60000)
        rc.sadd("kiln:hosts", url)
        furl = "fleet:" + r.url
        for call in (lambda: kiln.connect(furl, device="cuda", token="TENANT-SECRET", timeout=1),
                     lambda: kiln.fleet.sessions(r.url, "cuda", token="TENANT-SECRET", timeout=1)):
            with pytest.warns(UserWarning, match="skipped " + url):
                try:
                    assert call() == []
                except kiln.Unavailable as e:
                    assert url not in str(e)
        time.sleep(0.3)
        assert got == []
        with pytest.raises(kiln.Unavailable):  # the opt-in: it goes there (and gets no answer)
            kiln.connect(furl, device="cuda", token="TENANT-SECRET", timeout=1, insecure_tcp=True)
        assert wait_until(lambda: got, 3) and b"TENANT-SECRET" in got[0]
    finally:
        stop.append(1)
        lst.close()
        t.join(2)


def test_a_huge_or_bad_set_member_is_skipped_and_the_good_hosts_listed(redis_server):
    # Review finding G3: SMEMBERS sent a member of any size whole. Members are filtered in
    # Redis (an SSCAN in a script): the good hosts are listed, the bad members are warnings.
    r = redis_server()
    rc = r.client()
    rc.set("kiln:host:tcp:good:1", fake_record("tcp:good:1", "x"))
    rc.sadd("kiln:hosts", "tcp:good:1", b"", b"y" * 256)
    slow = redis.Redis(unix_socket_path=r.sock, socket_timeout=120)  # a 64 MiB string in Lua: seconds
    slow.eval("redis.call('SADD', KEYS[1], 'tcp:huge:' .. string.rep('x', tonumber(ARGV[1])))", 1, "kiln:hosts",
              64 << 20)
    with pytest.warns(UserWarning) as ws:
        hs = kiln.fleet.hosts(r.url)
    assert [h.url for h in hs] == ["tcp:good:1"]
    notes = [str(w.message) for w in ws]
    assert any("of %d bytes beginning b'tcp:huge:xxx" % ((64 << 20) + 9) in n for n in notes), notes
    assert any("of 256 bytes" in n for n in notes) and any("of 0 bytes" in n for n in notes), notes
    rc.sadd("kiln:hosts", *["z" * (300 + i) for i in range(20)])
    with pytest.warns(UserWarning, match="skipped 7 more members"):
        assert [h.url for h in kiln.fleet.hosts(r.url)] == ["tcp:good:1"]


@pytest.mark.parametrize("reply", [
    None, b"x", [], [1, 0], [1, 0, "1"],                      # not the shape
    [0, 0, 1],                                                 # shows more than it refused
    [1, 0, 1, 5],                                              # a shown member cut off
    [1, 0, 1, b"5", b"abc"],                                   # its length not an integer
    [1, 0, 1, 300, b"y" * 81],                                 # its head over 80 bytes
    [17, 0, 17] + [3, b"abc"] * 17,                            # more shown than the bound
    [0, 0, 0, b""], [0, 0, 0, b"y" * 256], [0, 0, 0, 7],       # a good member that is not
    [0, 0, 0] + [b"tcp:h:1"] * 4097,                           # more than MAX_HOSTS
    [-1, 0, 0],                                                # a negative count
])
def test_a_forged_members_reply_is_refused_whole(reply):
    with pytest.raises(kiln.Unavailable, match="unexpected reply to the members script"):
        kiln.fleet._members(reply)


def test_many_huge_records_are_read_in_batches(redis_server):
    """Review H7: hosts() held every record's raw bytes at once (400 x 1 MiB: 841 MiB). Read
    32 a pipeline, each at most 64 KiB, a child's max RSS stays small; good hosts are listed."""
    r = redis_server()
    rc = r.client()
    huge = b"\x80" * (1 << 20)
    p = rc.pipeline(transaction=False)
    for i in range(400):
        p.set("kiln:host:tcp:huge:%d" % i, huge)
        p.sadd("kiln:hosts", "tcp:huge:%d" % i)
    for u in ("tcp:good:1", "tcp:good:2"):
        p.set("kiln:host:" + u, fake_record(u, "x"))
        p.sadd("kiln:hosts", u)
    p.execute()
    code = ("import resource, sys, kiln.fleet\n"
            "hs = kiln.fleet.hosts(sys.argv[1])\n"
            "print(sorted(h.url for h in hs), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", code, r.url], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=PKG_PYTHONPATH or os.environ.get("PYTHONPATH", "")))
    assert out.returncode == 0, out.stderr
    urls, rss_kib = out.stdout.rsplit(" ", 1)
    assert urls == "['tcp:good:1', 'tcp:good:2']"
    # 862 MiB before (1 MiB records, all at once); 52 MiB measured alone, 228 MiB once inside the
    # whole fleet run (not understood yet: the bound is loose, still far below the old figure)
    assert int(rss_kib) < 400 << 10, rss_kib
