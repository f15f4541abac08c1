"""`kiln fleet` (clients/c/fleet.c, issue 17 §3): the C CLI reading a real redis-server's
registry that real kilnds publish to, and the same registry with hostile entries beside them
(garbage, huge, wrong Redis types, records naming another host, control bytes): each is
skipped with a note, never a crash, and a registry that cannot be read is a clear error."""

import json
import os
import subprocess
import tempfile

import msgpack
import pytest
import redis

from fleet_helpers import kiln_cli, kilnds, free_port, redis_server, wait_until  # noqa: F401


def fleet(kiln_cli, *args, env=None):
    e = dict(os.environ)
    e.pop("KILN_FLEET", None)
    e.pop("KILN_FLEET_AUTH_FILE", None)
    e.update(env or {})
    return subprocess.run([kiln_cli, "fleet"] + list(args), capture_output=True, text=True, timeout=60, env=e)


def host(kilnds, r, *extra):
    port = free_port()
    d = kilnds("--fleet", r.url, "--advertise", "tcp:127.0.0.1:%d" % port, "--fleet-ttl", "2",
               "--compile-workers", "1", *extra, listen=["tcp:127.0.0.1:%d" % port])
    d.advertised = "tcp:127.0.0.1:%d" % port
    return d


def listed(kiln_cli, r, n):
    def ok():
        p = fleet(kiln_cli, r.url, "--json")
        return p if p.returncode == 0 and len(json.loads(p.stdout)) == n else None
    p = wait_until(ok, 10)
    assert p, fleet(kiln_cli, r.url, "--json")
    return p


def test_lists_live_kilnds_their_devices_load_and_versions(kiln_cli, kilnds, redis_server):
    r = redis_server()
    a, b = host(kilnds, r), host(kilnds, r)
    hs = json.loads(listed(kiln_cli, r, 2).stdout)
    assert [h["url"] for h in hs] == sorted([a.advertised, b.advertised])
    for h in hs:
        assert h["version"] and h["identity"].startswith("kiln ") and not h["identity_differs"]
        assert h["compile"]["workers"] == 1 and h["ttl_ms"] == 2000
        cpu = [d for d in h["devices"] if d["id"] == "cpu:0"]
        assert cpu and cpu[0]["kind"] == "cpu" and cpu[0]["capacity"] > 0 and cpu[0]["leased"] is False
    p = fleet(kiln_cli, "fleet:" + r.url)  # the table; kiln.connect's spelling is accepted too
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:3] == ["HOST", "VERSION", "IDENTITY"]
    assert a.advertised in p.stdout and b.advertised in p.stdout and "cpu:0 (" in p.stdout
    assert "differs" not in p.stdout and p.stderr == ""
    # --device: a kind nobody serves leaves the table empty; $KILN_FLEET stands for the URL
    p = fleet(kiln_cli, "--device", "cuda", env={"KILN_FLEET": r.url})
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 1, p
    p = fleet(kiln_cli, "--device", "cpu", "--json", env={"KILN_FLEET": r.url})
    assert len(json.loads(p.stdout)) == 2


def test_a_host_whose_compiler_identity_differs_is_marked(kiln_cli, kilnds, redis_server):
    r = redis_server()
    a, b = host(kilnds, r), host(kilnds, r)
    listed(kiln_cli, r, 2)
    # a third record, as a host of another compiler would write it (no kilnd builds one here)
    rec = msgpack.unpackb(r.client().get("kiln:host:" + a.advertised), raw=False)
    odd = "tcp:127.0.0.1:%d" % free_port()
    rec.update(url=odd, identity="kiln 0.0 llvm 1 build other")
    cli = r.client()
    cli.set("kiln:host:" + odd, msgpack.packb(rec), px=60000)
    cli.sadd("kiln:hosts", odd)
    hs = {h["url"]: h for h in json.loads(fleet(kiln_cli, r.url, "--json").stdout)}
    assert hs[odd]["identity_differs"] and not hs[a.advertised]["identity_differs"]
    p = fleet(kiln_cli, r.url)
    assert "compiler identity differs" in p.stdout and "%s: kiln 0.0 llvm 1 build other" % odd in p.stdout


def test_hostile_registry_entries_are_skipped_with_a_note(kiln_cli, kilnds, redis_server):
    r = redis_server()
    a = host(kilnds, r)
    listed(kiln_cli, r, 1)
    c = r.client()
    good = msgpack.unpackb(c.get("kiln:host:" + a.advertised), raw=False)

    def rec(url, **kw):
        d = dict(good, url=url)
        d.update(kw)
        return msgpack.packb(d)
    bad = {
        "tcp:garbage:1": b"\xc1\xff not msgpack",
        "tcp:huge:1": b"\x80" * (3 << 20),                          # 3 MiB: read as 64 KiB + 1, skipped
        "tcp:twovalues:1": msgpack.packb(1) + msgpack.packb(2),
        "tcp:notamap:1": msgpack.packb([1, 2, 3]),
        "tcp:v2:1": rec("tcp:v2:1", v=2),
        "tcp:otherurl:1": rec(a.advertised),                        # someone else's record copied
        "tcp:badtype:1": rec("tcp:badtype:1", connections="many"),
        "tcp:baddevs:1": rec("tcp:baddevs:1", devices={"id": 1}),
        "tcp:baddev:1": rec("tcp:baddev:1", devices=[{"id": 7, "kind": None}]),
        "tcp:longid:1": rec("tcp:longid:1", identity="x" * 100000),
        "tcp:deep:1": b"\x91" * 60000,                              # arrays in arrays
    }
    for k, v in bad.items():
        c.set("kiln:host:" + k, v)
        c.sadd("kiln:hosts", k)
    c.rpush("kiln:host:tcp:alist:1", "x")                            # another Redis type
    c.hset("kiln:host:tcp:ahash:1", "a", "b")
    c.sadd("kiln:hosts", "tcp:alist:1", "tcp:ahash:1", "x" * 300, "tcp:gone:1")  # too long; no record
    esc = "tcp:esc\x1b[2J:1"                  # control bytes reach no terminal: in an address,
    c.set("kiln:host:" + esc, rec(esc))      # skipped (no address has them); in a field, shown as ?
    c.set("kiln:host:tcp:ctl:1", rec("tcp:ctl:1", host="h\x1b]0;pwned\x07", version="1\x1b[31m"))
    c.sadd("kiln:hosts", esc, "tcp:ctl:1")
    p = fleet(kiln_cli, r.url)
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout + p.stderr and "\x07" not in p.stdout + p.stderr
    notes = p.stderr.splitlines()
    for k in list(bad) + ["tcp:alist:1", "tcp:ahash:1", "tcp:esc?[2J:1"]:
        assert any(k in n and "skipped" in n for n in notes), (k, p.stderr)
    assert any("not a host address" in n for n in notes)
    assert not any("tcp:gone:1" in n for n in notes)  # expired: gone, not an error
    assert "larger than 64 KiB" in p.stderr and "another type" in p.stderr
    hosts = [ln.split()[0] for ln in p.stdout.splitlines()[1:] if ln.startswith("tcp:")]
    assert sorted(hosts) == sorted([a.advertised, "tcp:ctl:1"]), p.stdout
    assert "1?[31m" in p.stdout
    assert "registry entries skipped" in p.stdout
    js = json.loads(fleet(kiln_cli, r.url, "--json").stdout)
    assert sorted(h["url"] for h in js) == sorted([a.advertised, "tcp:ctl:1"])
    assert [h["host"] for h in js if h["url"] == "tcp:ctl:1"] == ["h?]0;pwned?"]


def test_registry_errors_are_clear(kiln_cli, redis_server, tmp_path):
    r = redis_server()
    c = r.client()
    c.set("kiln:hosts", "not a set")
    p = fleet(kiln_cli, r.url)
    assert p.returncode == 3 and "kiln:hosts is not a set" in p.stderr, p
    c.delete("kiln:hosts")
    p = fleet(kiln_cli, r.url)  # an empty registry: the header alone
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 1
    p = fleet(kiln_cli, "redis://127.0.0.1:%d/0" % free_port(), "--timeout", "2000")
    assert p.returncode == 3 and "cannot be reached" in p.stderr
    for url in ("http://x", "redis://user:pw@127.0.0.1/0", "unix:", "redis://h:99999/0", "unix:/x?db=a"):
        p = fleet(kiln_cli, url)
        assert p.returncode == 2 and "E_INVALID_ARGUMENT" in p.stderr, (url, p)
    p = fleet(kiln_cli)
    assert p.returncode == 2 and "registry" in p.stderr
    # Redis with a password: refused without it, read with the AUTH file
    rp = redis_server(password="pw-of-the-fleet-123")
    p = fleet(kiln_cli, rp.url)
    assert p.returncode == 3 and ("NOAUTH" in p.stderr or "Authentication" in p.stderr), p.stderr
    auth = tmp_path / "auth"
    auth.write_text("pw-of-the-fleet-123\n")
    os.chmod(auth, 0o644)
    p = fleet(kiln_cli, rp.url, "--auth-file", str(auth))
    assert p.returncode == 4 and "chmod 600" in p.stderr
    os.chmod(auth, 0o600)
    p = fleet(kiln_cli, rp.url, env={"KILN_FLEET_AUTH_FILE": str(auth)})
    assert p.returncode == 0 and p.stdout.startswith("HOST"), p.stderr
    auth.write_text("wrong-password\n")
    p = fleet(kiln_cli, rp.url, "--auth-file", str(auth))
    assert p.returncode == 3 and "refused AUTH" in p.stderr
    p = fleet(kiln_cli, rp.url, "--auth-file", str(tmp_path / "nope"))
    assert p.returncode == 4


def test_a_registry_set_past_the_bound_is_sampled(kiln_cli, redis_server):
    r = redis_server()
    c = r.client()
    c.sadd("kiln:hosts", *["tcp:h%d:1" % i for i in range(5000)])
    p = fleet(kiln_cli, r.url)
    assert p.returncode == 0 and "showing 4096" in p.stderr, p.stderr[-500:]


def test_a_huge_or_bad_set_member_is_skipped_and_the_good_hosts_listed(kiln_cli, kilnds, redis_server):
    # Review finding G3: SMEMBERS sent a 303 MiB member whole; the CLI buffered it (303 MiB
    # RSS) and failed the whole listing. Members are filtered in Redis now: the good hosts are
    # listed, each bad member is a note (its length and first bytes), and the CLI's memory
    # stays far below the member's size.
    r = redis_server()
    a = host(kilnds, r)
    listed(kiln_cli, r, 1)
    c = r.client()
    good = dict(msgpack.unpackb(c.get("kiln:host:" + a.advertised), raw=False), url="tcp:good:1")
    a.stop()  # its heartbeat prunes members without a record: the bad ones below would go
    c.delete("kiln:host:" + a.advertised)
    c.srem("kiln:hosts", a.advertised)
    c.set("kiln:host:tcp:good:1", msgpack.packb(good))  # a copy of its record, with no TTL
    c.sadd("kiln:hosts", "tcp:good:1")
    e = dict(os.environ)
    e.pop("KILN_FLEET", None)
    e.pop("KILN_FLEET_AUTH_FILE", None)

    def listing():
        """The CLI's exit status, output, notes and peak RSS. A child's peak RSS counts its
        parent's from before exec: a small python in between measures the CLI alone."""
        rss = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); _, s, ru = os.wait4(p.pid, 0); "
               "print('maxrss_kib=%d' % ru.ru_maxrss, file=sys.stderr); sys.exit(os.waitstatus_to_exitcode(s))")
        with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
            p = subprocess.run(["/usr/bin/python3", "-c", rss, kiln_cli, "fleet", r.url], stdout=fo, stderr=fe,
                               env=e, timeout=120)
            fo.seek(0)
            fe.seek(0)
            out, err = fo.read().decode(), fe.read().decode()
        return p.returncode, out, err, int(err.rsplit("maxrss_kib=", 1)[1].split()[0]) << 10
    rc0, _, err0, base = listing()
    assert rc0 == 0, err0
    huge = 72 << 20  # over the CLI's 64 MiB reply bound: the old listing failed whole (exit 3)
    slow = redis.Redis(unix_socket_path=r.sock, socket_timeout=120)  # a 72 MiB string in Lua: seconds
    slow.eval("redis.call('SADD', KEYS[1], 'tcp:huge:' .. string.rep('\\27', tonumber(ARGV[1])))", 1, "kiln:hosts",
              huge - 9)  # made in Redis: this process stays small (its peak RSS would pass to the CLI's)
    c.sadd("kiln:hosts", b"", b"y" * 256, b"\xff" * 255)
    rc, out, err, maxrss = listing()
    assert rc == 0, err[-2000:]
    assert maxrss < base + (16 << 20), (base, maxrss)
    notes = err.splitlines()
    assert any("of %d bytes beginning 'tcp:huge:???" % huge in n for n in notes), err[-2000:]
    assert any("of 256 bytes beginning 'yyy" in n for n in notes)
    assert any("of 0 bytes beginning ''" in n for n in notes)
    assert "\x1b" not in out + err
    # 3 refused members; \xff * 255 has the right size, and its GETRANGE finds no record (gone)
    assert "(3 registry entries skipped" in out, out
    # More bad members than are shown: a count of the rest
    c.sadd("kiln:hosts", *["x" * (300 + i) for i in range(20)])
    p = fleet(kiln_cli, r.url)
    assert p.returncode == 0 and "tcp:good:1" in p.stdout, p.stderr[-2000:]
    assert "skipped 7 more members of kiln:hosts" in p.stderr and "(23 registry entries skipped" in p.stdout


def fake_redis(path, eval_reply):
    """A fake Redis on a unix socket answering PING, SCARD (:1) and EVAL (eval_reply), each
    command parsed as RESP; for the members script's hostile replies."""
    import socket
    import threading
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(4)

    def serve():
        c, _ = srv.accept()
        f = c.makefile("rb")
        try:
            while True:
                head = f.readline()
                if not head.startswith(b"*"):
                    return
                args = []
                for _ in range(int(head[1:])):
                    n = int(f.readline()[1:])
                    args.append(f.read(n + 2)[:-2])
                cmd = args[0].upper()
                c.sendall(b"+PONG\r\n" if cmd == b"PING" else b":1\r\n" if cmd == b"SCARD" else
                          eval_reply if cmd == b"EVAL" else b"$-1\r\n")
        except (OSError, ValueError):
            pass
        finally:
            c.close()
            srv.close()
    threading.Thread(target=serve, daemon=True).start()


@pytest.mark.parametrize("reply", [
    b"-ERR unknown command 'EVAL'\r\n",                          # no scripting, or an ACL without +eval
    b"*1\r\n:0\r\n",                                             # not the shape
    b"*3\r\n:0\r\n:0\r\n$1\r\n1\r\n",                            # a count that is no integer
    b"*3\r\n:0\r\n:0\r\n:1\r\n",                                 # shows one it did not send
    b"*3\r\n:-5\r\n:0\r\n:0\r\n",                                # a negative count
    b"*5\r\n:1\r\n:0\r\n:1\r\n:300\r\n$81\r\n" + b"y" * 81 + b"\r\n",  # a shown head over 80 bytes
    b"*4\r\n:0\r\n:0\r\n:0\r\n$0\r\n\r\n",                       # an empty "good" member
    b"*4\r\n:0\r\n:0\r\n:0\r\n$256\r\n" + b"y" * 256 + b"\r\n",  # a "good" member too long
    b"*4\r\n:0\r\n:0\r\n:0\r\n:7\r\n",                           # a "good" member not a string
    b"*9000\r\n",                                                # an array past the bound
    b"*4\r\n:0\r\n:0\r\n:0\r\n$200",                             # cut off
])
def test_a_forged_members_reply_is_refused_whole(kiln_cli, tmp_path, reply):
    path = str(tmp_path / "fake.sock")
    fake_redis(path, reply)
    p = fleet(kiln_cli, "unix:" + path, "--timeout", "2000")
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert "kiln: fleet: E_UNAVAILABLE" in p.stderr and "Traceback" not in p.stderr, p.stderr
