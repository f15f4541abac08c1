"""Real redis-server processes and kilnds sharing them, for the fleet tests (issue 17).

A Redis is started per test in its own temp dir on a unix socket (or a free TCP port), with
no persistence, and killed for real (SIGKILL) by the outage tests. Tests skip when Debian's
redis-server or python3-redis is missing (.ci/setup installs both)."""

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

import kiln
from conftest import Daemons

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
VADD = open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "clients", "python", "examples", "vadd.ll")).read()


def rodata_ir(kib, salt):
    """vadd that also reads a zeroinitializer constant table of kib KiB (a power of two): the
    table is emitted into the code object's .rodata (a volatile load keeps it: a load from an
    all-zero constant would fold away, and the table with it), so the artifact is about kib KiB
    while the request is about 1.5 KB of IR. salt makes another build key."""
    n = kib * 1024 // 4
    return (VADD.replace("%sum = fadd float %a, %b",
                         "%%jm = and i64 %%j, %d\n"
                         "  %%tp = getelementptr inbounds [%d x i32], ptr @tbl, i64 0, i64 %%jm\n"
                         "  %%tv = load volatile i32, ptr %%tp, align 4\n  %%tf = sitofp i32 %%tv to float\n"
                         "  %%s0 = fadd float %%a, %%b\n  %%sum = fadd float %%s0, %%tf" % (n - 1, n))
            + "\n@tbl = internal constant [%d x i32] zeroinitializer, align 64\n; table %s\n" % (n, salt))


def table_ir(kib, salt):
    """vadd that also reads a constant table of kib KiB of varied values (salt changes them):
    the table lands in the IR text, so the request is about 4 times kib KiB (210: 0.8 MB), and
    in the assembly and the code object (210: an artifact of about 1 MiB)."""
    n = kib * 1024 // 4
    vals = ", ".join("i32 %d" % v for v in table_values(kib, salt))
    return (VADD.replace("%sum = fadd float %a, %b",
                         "%%tp = getelementptr inbounds [%d x i32], ptr @tbl, i64 0, i64 %%j\n"
                         "  %%tv = load i32, ptr %%tp, align 4\n  %%tf = sitofp i32 %%tv to float\n"
                         "  %%s0 = fadd float %%a, %%b\n  %%sum = fadd float %%s0, %%tf" % n)
            + "\n@tbl = internal constant [%d x i32] [%s]\n" % (n, vals))


def table_values(kib, salt):
    """The table of table_ir(kib, salt), as the kernel reads it."""
    n = kib * 1024 // 4
    return [(i * 2654435761 + salt) & 0x7fffffff for i in range(n)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """One redis-server; url is what kilnd's --cache-remote takes."""

    def __init__(self, tmp, tcp=False, password=None, port=None):
        self.dir = str(tmp)
        os.makedirs(self.dir, exist_ok=True)
        self.sock = os.path.join(self.dir, "redis.sock")
        self.tcp = tcp
        self.port = port or (free_port() if tcp else 0)
        self.password = password
        self.proc = None
        self.start()

    @property
    def url(self):
        return "redis://127.0.0.1:%d/0" % self.port if self.tcp else "unix:" + self.sock

    def start(self):
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--unixsocket", self.sock,
                "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--daemonize", "no", "--maxmemory-policy", "allkeys-lru", "--loglevel", "warning"]
        if self.password:
            args += ["--requirepass", self.password]
        self.log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    return
            except Exception:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited: " + open(os.path.join(self.dir, "redis.log")).read())
            time.sleep(0.02)
        raise RuntimeError("redis-server did not answer within 10 s")

    def client(self):
        import redis
        return redis.Redis(unix_socket_path=self.sock, password=self.password, socket_timeout=5)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        if os.path.exists(self.sock):
            os.unlink(self.sock)

    def stop_process(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def cont_process(self):
        os.kill(self.proc.pid, signal.SIGCONT)


@pytest.fixture
def redis_server(tmp_path):
    if not os.access(REDIS_SERVER, os.X_OK):
        pytest.skip("no redis-server (Debian's redis-server package; .ci/setup installs it)")
    pytest.importorskip("redis", reason="no python3-redis (Debian; .ci/setup installs it)")
    started = []

    def start(**kw):
        r = Redis(tmp_path / ("redis%d" % len(started)), **kw)
        started.append(r)
        return r
    yield start
    for r in started:
        r.kill()


@pytest.fixture
def fleet_secret(tmp_path):
    p = tmp_path / "fleet.secret"
    p.write_bytes(os.urandom(32))
    os.chmod(p, 0o600)
    return str(p)


@pytest.fixture
def kilnds(kilnd_bin):
    """Starts kilnds like conftest's fresh_daemon (its Daemons); at the end each one still
    running must stop with status 0 and a log free of sanitizer reports (the ASan build runs
    these too)."""
    ds = Daemons(kilnd_bin)
    yield ds
    bad = ds.stop_all()
    assert not bad, "\n".join(bad)


@pytest.fixture
def kiln_cli(kilnd_bin):
    """The kiln CLI of the build kilnd comes from (its `fleet` and `fleet-key` commands)."""
    p = os.path.join(os.path.dirname(os.path.dirname(kilnd_bin)), "clients", "c", "kiln")
    if not os.access(p, os.X_OK):
        pytest.skip("no kiln CLI beside %s" % kilnd_bin)
    return p


def remote_stats(sess):
    return sess.stats()["cache_remote"]


def wait_until(pred, timeout=10.0, every=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    return pred()


def kilnd_args(redis_url, secret, *extra):
    return ("--cache-remote", redis_url, "--fleet-secret-file", secret, "--compile-workers", "1") + tuple(extra)


def connect(d):
    return kiln.connect(d.urls[0])
