"""A box shared by several users (docs/operations.md "Listening", docs/protocol.md §1): kilnd's
default listener is a private unix socket, never TCP; a tokenless TCP listener beyond loopback
is refused and one on loopback admits only kilnd's user and root; and a client searching for a daemon uses none
that another user runs (one could listen first on the port or the socket path and receive the
user's kernels, inputs and token). Another user is played by other uids through setpriv,
which needs root: those tests skip otherwise."""

import atexit
import os
import pathlib
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest

import kiln
from fleet_helpers import kiln_cli  # noqa: F401 (a fixture)
from kilnd_helpers import start_kilnd, stop_kilnd as stop

NOBODY = 65534

as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                             reason="playing another user takes root and setpriv")


def as_uid(uid, cmd):
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups"] + cmd


def start(kilnd_bin, tmp_path, *args, env=None, uid=None, expect_ready=True):
    """kilnd_helpers.start_kilnd (as uid when given) with its cache in tmp_path, and neither
    $XDG_RUNTIME_DIR nor $KILN_URL unless env gives them."""
    e = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "KILN_URL")}
    e.update(env or {})
    return start_kilnd(kilnd_bin, "--cache-dir", str(tmp_path / "cache"), *args, cwd="/", env=e,
                       prefix=as_uid(uid, []) if uid is not None else (), expect_ready=expect_ready)


def tcp_listen_inodes():
    out = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            for line in list(f)[1:]:
                p = line.split()
                if p[3] == "0A":  # LISTEN
                    out.add(p[9])
    return out


def socket_inodes(pid):
    out = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if t.startswith("socket:["):
            out.add(t[8:-1])
    return out


def test_the_default_listener_is_a_private_unix_socket(kilnd_bin, tmp_path):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    p, lines = start(kilnd_bin, tmp_path, env={"XDG_RUNTIME_DIR": str(run)})
    try:
        assert lines == ["unix:%s/kiln.sock" % run]  # no tcp: line
        st = os.stat(run / "kiln.sock")
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
        assert st.st_uid == os.geteuid()
        # and no TCP socket of kilnd's listens anywhere
        assert not socket_inodes(p.pid) & tcp_listen_inodes()
    finally:
        stop(p)


def test_a_socket_mode_given_wins_over_the_private_default(kilnd_bin, tmp_path):
    old = os.umask(0)  # the umask no longer decides: 0600 under any umask
    try:
        p, lines = start(kilnd_bin, tmp_path, "--listen", "unix:%s/a.sock" % tmp_path)
    finally:
        os.umask(old)
    stop(p)
    p, lines = start(kilnd_bin, tmp_path, "--listen", "unix:%s/a.sock" % tmp_path, "--socket-mode", "0660")
    try:
        assert stat.S_IMODE(os.stat(tmp_path / "a.sock").st_mode) == 0o660
    finally:
        stop(p)


def test_a_default_socket_directory_others_may_write_is_refused(kilnd_bin, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o777)
    rc, err = start(kilnd_bin, tmp_path, env={"XDG_RUNTIME_DIR": str(run)}, expect_ready=False)
    assert rc == 1 and "refusing the default unix socket in %s" % run in err, err
    assert "mode 0777: others may write to it" in err and "--listen unix:PATH" in err, err
    assert not (run / "kiln.sock").exists()


@as_root
def test_a_default_socket_directory_of_another_user_is_refused(kilnd_bin, tmp_path):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    os.chown(run, NOBODY, NOBODY)
    rc, err = start(kilnd_bin, tmp_path, env={"XDG_RUNTIME_DIR": str(run)}, expect_ready=False)
    assert rc == 1 and "belongs to uid %d, not to kilnd's user (uid 0)" % NOBODY in err, err


@as_root
def test_without_a_runtime_dir_the_socket_is_in_a_private_tmp_directory(kilnd_bin, tmp_path):
    # a throw-away uid, so that no other run on this machine uses its /tmp/kiln-UID
    uid, other = 64911, 64912
    d = "/tmp/kiln-%d" % uid
    shutil.rmtree(d, ignore_errors=True)
    home = pathlib.Path(tempfile.mkdtemp(prefix="kiln-uid-"))  # a folder that uid can reach
    os.chown(home, uid, uid)
    try:
        # another user made the directory first (an empty one, or with a socket of theirs)
        subprocess.run(as_uid(other, ["mkdir", "-m", "0777", d]), check=True)
        rc, err = start(kilnd_bin, home, uid=uid, expect_ready=False)
        assert rc == 1 and "refusing the default unix socket in %s: it belongs to uid %d" % (d, other) in err, err
        shutil.rmtree(d)
        # a symbolic link to a directory of theirs is not followed
        os.symlink(str(home), d)
        rc, err = start(kilnd_bin, home, uid=uid, expect_ready=False)
        assert rc == 1 and "it is not a directory" in err, err
        os.unlink(d)
        p, lines = start(kilnd_bin, home, uid=uid)
        try:
            assert lines == ["unix:%s/kiln.sock" % d]
            st = os.lstat(d)
            assert stat.S_ISDIR(st.st_mode) and st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o700
            st = os.stat(d + "/kiln.sock")
            assert st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o600
        finally:
            stop(p)
    finally:
        if os.path.islink(d):
            os.unlink(d)
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def test_tokenless_tcp_beyond_loopback_is_refused_and_on_loopback_warned(kilnd_bin, tmp_path):
    for extra in ((), ("--insecure-tcp",)):
        rc, err = start(kilnd_bin, tmp_path, "--listen", "tcp:0.0.0.0:0", *extra, expect_ready=False)
        assert rc == 1 and "refusing to listen on tcp:0.0.0.0:0 without a tokens file" in err, err
        assert "anyone who can reach it could run code here" in err, err
    p, lines = start(kilnd_bin, tmp_path, "--listen", "tcp:127.0.0.1:0")
    err = stop(p)
    assert "event=anonymous_tcp listener=%s uid=%d" % (lines[0], os.geteuid()) in err, err
    assert "only kilnd's user (uid %d) and root may connect" % os.geteuid() in err, err
    # with tokens it is quiet
    tokens = tmp_path / "tokens"
    tokens.write_text("tok-0123456789abcdef default\n")
    tokens.chmod(0o600)
    p, lines = start(kilnd_bin, tmp_path, "--listen", "tcp:127.0.0.1:0", "--tokens", str(tokens))
    assert "anonymous_tcp" not in stop(p)


PING_AS = ("import kiln\ntry:\n    print('PONG', kiln.connect(%r).ping())\n"
           "except kiln.KilnError as e:\n    print('REFUSED', e)\n")


_public = []


def kiln_for_any_user():
    """A directory every uid can read holding a copy of the kiln under test, for clients run as
    another user: the suite may import kiln from a private place (.ci/install's venv is in a
    0700 directory). Removed at exit."""
    if not _public:
        d = tempfile.mkdtemp(prefix="kiln-public-")
        shutil.copytree(os.path.dirname(kiln.__file__), os.path.join(d, "kiln"), symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        for root, dirs, files in os.walk(d):
            os.chmod(root, 0o755)
            for f in files:
                if not os.path.islink(os.path.join(root, f)):
                    os.chmod(os.path.join(root, f), 0o644)
        atexit.register(shutil.rmtree, d, True)
        _public.append(d)
    return _public[0]


def ping_as(uid, url):
    """The Python client, run as uid, pings url: 'PONG ...' or 'REFUSED <the error>'."""
    r = subprocess.run(as_uid(uid, ["/usr/bin/python3", "-c", PING_AS % url]),
                       env=client_env(PYTHONPATH=kiln_for_any_user()),
                       capture_output=True, text=True, timeout=60, cwd="/")
    return r.stdout.strip() or r.stderr


@as_root
def test_tokenless_loopback_admits_only_kilnds_user_and_root(kilnd_bin):
    # kilnd run by an ordinary user (a throw-away uid), on IPv4 and IPv6 loopback
    uid = 64913
    home = pathlib.Path(tempfile.mkdtemp(prefix="kiln-uid-"))
    os.chown(home, uid, uid)
    p = None
    try:
        p, lines = start(kilnd_bin, home, "--listen", "tcp:127.0.0.1:0", "--listen", "tcp:[::1]:0", uid=uid)
        for url in lines:
            assert ping_as(uid, url) == "PONG pong"  # its own user
            assert ping_as(0, url) == "PONG pong"  # root
            out = ping_as(NOBODY, url)  # anyone else: refused, told why
            assert out.startswith("REFUSED E_UNAUTHENTICATED: %s has no tokens and admits only kilnd's "
                                  "user (uid %d) and root; this connection comes from uid %d"
                                  % (url, uid, NOBODY)), out
        err = stop(p)
        p = None
        for url in lines:
            assert "event=peer_refused conn=" in err and "listener=%s" % url in err, err
        assert err.count("uid=%d reason=" % NOBODY) == 2, err
    finally:
        if p:
            p.kill()
            p.wait()
        shutil.rmtree(home, ignore_errors=True)


# --- discovery: another user's daemon where a client looks ----------------------------------

SQUATTER = r"""
import os, socket, sys, msgpack
kind, where, log = sys.argv[1], sys.argv[2], open(sys.argv[3], "a", buffering=1)
if kind == "unix":
    s = socket.socket(socket.AF_UNIX); s.bind(where)
else:
    s = socket.socket(socket.AF_INET6 if ":" in where else socket.AF_INET)
    if ":" in where: s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # [::] takes IPv4 too
    s.bind((where, 0))
s.listen(8)
print(s.getsockname()[1] if kind != "unix" else where, flush=True)
while True:
    c, _ = s.accept(); log.write("accepted\n"); u = msgpack.Unpacker(raw=False)
    while True:
        d = c.recv(65536)
        if not d: break
        u.feed(d)
        for m in u:  # a fake kilnd: records what it gets, answers everything
            log.write("got %s %s\n" % (m[2], m[3]))
            c.sendall(msgpack.packb([1, m[1], None, {"server": "not kilnd", "version": 1, "limits": {}}]))
    c.close()
"""


@pytest.fixture
def squatter(tmp_path):
    """A fake kilnd run by another user (nobody): squatter(kind, where) -> (url, log path)."""
    procs, shared = [], tempfile.mkdtemp(prefix="kiln-squat-")
    os.chmod(shared, 0o777)

    def run(kind, where):
        log = os.path.join(shared, "log-%d" % len(procs))
        open(log, "w").close()
        os.chmod(log, 0o666)
        # Debian's python (with python3-msgpack): nobody may not reach a venv's
        p = subprocess.Popen(as_uid(NOBODY, ["/usr/bin/python3", "-c", SQUATTER, kind, where, log]),
                             stdout=subprocess.PIPE, text=True, cwd="/")
        procs.append(p)
        first = p.stdout.readline().strip()
        assert first, "the squatter did not start"
        return ("unix:" + first if kind == "unix" else "tcp:127.0.0.1:%s" % first), log

    yield run, shared
    for p in procs:
        p.kill()
        p.wait()
    shutil.rmtree(shared, ignore_errors=True)


def client_env(**kw):
    e = {k: v for k, v in os.environ.items() if k not in ("KILN_URL", "KILN_SEARCH", "KILN_TOKEN")}
    e["PYTHONPATH"] = os.path.dirname(os.path.dirname(kiln.__file__))  # the kiln under test
    e.update(kw)
    return e


CONNECT = ("import kiln\ntry:\n    s = kiln.connect(autostart=False)\n    print('CONNECTED', s.url)\n"
           "except kiln.Unavailable as e:\n    print('REFUSED', e)\n")


def received(log):
    time.sleep(0.2)
    with open(log) as f:
        return [l for l in f.read().splitlines() if l.startswith("got ")]


@as_root
@pytest.mark.parametrize("kind,where", [("tcp", "127.0.0.1"), ("tcp", "::"), ("unix", None)])
def test_discovery_uses_no_daemon_another_user_runs(kiln_cli, squatter, kind, where):
    run, shared = squatter
    if kind == "unix":  # a socket in a directory of theirs
        d = os.path.join(shared, "theirs")
        os.mkdir(d)
        os.chown(d, NOBODY, NOBODY)
        where = os.path.join(d, "kiln.sock")
    url, log = run(kind, where)
    # Python: searched, then refused before a byte is sent, saying why and what to do
    r = subprocess.run([sys.executable, "-c", CONNECT], env=client_env(KILN_SEARCH=url, KILN_TOKEN="secret-token"),
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith("REFUSED"), r.stdout + r.stderr
    assert "%s: not used: it runs as uid %d (nobody), not as you (uid 0), or root" % (url, NOBODY) in r.stdout
    assert "set KILN_URL=%s to use it anyway" % url in r.stdout
    # the C client and CLI alike
    r = subprocess.run([kiln_cli, "ping"], env=client_env(KILN_SEARCH=url, KILN_TOKEN="secret-token"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "%s: not used: it runs as uid %d (nobody)" % (url, NOBODY) in r.stderr, r.stderr
    assert received(log) == []  # neither the token nor anything else reached it
    # a URL the user names is used as given
    r = subprocess.run([kiln_cli, "ping"], env=client_env(KILN_URL=url), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "pong from %s" % url in r.stdout, r.stdout + r.stderr
    assert received(log) == ["got ping []"]


@as_root
def test_the_private_daemon_message_says_why_a_found_one_was_skipped(kilnd_bin, squatter, tmp_path):
    url, log = squatter[0]("tcp", "127.0.0.1")
    code = "import kiln\ns = kiln.connect()\nprint(s.url, s.daemon is not None)\ns.close()\n"
    r = subprocess.run([sys.executable, "-c", code], env=client_env(KILN_SEARCH=url, KILND=kilnd_bin),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("True"), r.stdout + r.stderr
    assert "not used: it runs as uid %d" % NOBODY in r.stderr and "starting a private" in r.stderr, r.stderr
    assert received(log) == []


@as_root
def test_discovery_moves_past_a_daemon_that_refuses_the_user(kilnd_bin, tmp_path):
    # root's tokenless loopback kilnd passes nobody's owner check (root is trusted) but admits
    # only root: nobody's search records the refusal and goes on, here to "none found"
    cache = tmp_path / "root"
    cache.mkdir()
    p, (url,) = start(kilnd_bin, cache, "--listen", "tcp:127.0.0.1:0")
    try:
        r = subprocess.run(as_uid(NOBODY, ["/usr/bin/python3", "-c", CONNECT]),
                           env=client_env(KILN_SEARCH=url, KILN_AUTOSTART="0", PYTHONPATH=kiln_for_any_user()),
                           capture_output=True,
                           text=True, timeout=60, cwd="/")
        assert r.stdout.startswith("REFUSED E_UNAVAILABLE: no kilnd found (%s has no tokens and admits only "
                                   "kilnd's user (uid 0) and root; this connection comes from uid %d"
                                   % (url, NOBODY)), r.stdout + r.stderr
        assert ping_as(0, url) == "PONG pong"  # root still is served
    finally:
        stop(p)


def test_discovery_uses_the_users_own_daemons(tcp_url, unix_url):
    # this user's daemon (the session's, started by the tests) on TCP and on a unix socket
    for url in (tcp_url, unix_url):
        r = subprocess.run([sys.executable, "-c", CONNECT], env=client_env(KILN_SEARCH=url),
                           capture_output=True, text=True, timeout=60)
        assert r.stdout.strip() == "CONNECTED " + url, r.stdout + r.stderr


def test_a_search_host_on_another_machine_has_no_local_owner_to_check():
    # (no second machine here: a socket that says where it is connected)
    from kiln import _rpc

    class Connected:
        def __init__(self, family, mine, theirs):
            self.family, self._mine, self._theirs = family, mine, theirs

        def getsockname(self):
            return self._mine

        def getpeername(self):
            return self._theirs

    v4, v6 = socket.AF_INET, socket.AF_INET6
    # another machine: the user listed it in KILN_SEARCH, it is their choice
    assert _rpc._tcp_peer_uid(Connected(v4, ("10.1.2.3", 40000), ("10.9.8.7", 7070))) == "remote"
    assert _rpc._tcp_peer_uid(Connected(v6, ("fd00::1", 40000, 0, 0), ("fd00::2", 7070, 0, 0))) == "remote"
    # loopback with no owner in the table (it went away) is refused, not waved through
    for fam, mine, theirs in ((v4, ("127.0.0.1", 1), ("127.0.0.1", 2)),
                              (v6, ("::1", 1, 0, 0), ("::1", 2, 0, 0)),
                              (v6, ("::ffff:127.0.0.1", 1, 0, 0), ("::ffff:127.0.0.2", 2, 0, 0))):
        assert _rpc._tcp_peer_uid(Connected(fam, mine, theirs)) is None
        with pytest.raises(kiln.Unavailable, match="cannot tell which user runs it"):
            _rpc.check_owner(Connected(fam, mine, theirs), "tcp:127.0.0.1:2")
