"""A box shared by several users (docs/operations.md "Listening", docs/protocol.md §1): kilnd's
default listener is a private unix socket, never TCP; a tokenless TCP listener beyond loopback
is refused and one on loopback is warned about. Another user is played by other uids through
setpriv, which needs root: those tests skip otherwise."""

import os
import pathlib
import shutil
import stat
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOBODY = 65534

as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                             reason="playing another user takes root and setpriv")


def as_uid(uid, cmd):
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups"] + cmd


def start(kilnd_bin, tmp_path, *args, env=None, uid=None, expect_ready=True):
    """kilnd with --ready-fd (as uid when given): (process, listener lines), or when it exits
    at once (returncode, stderr)."""
    r, w = os.pipe()
    cmd = [kilnd_bin, "--ready-fd", str(w), "--devices", "cpu", "--compile-workers", "1",
           "--cache-dir", str(tmp_path / "cache")] + list(args)
    e = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "KILN_URL")}
    e.update(env or {})
    p = subprocess.Popen(as_uid(uid, cmd) if uid is not None else cmd, pass_fds=(w,), env=e,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd="/")
    os.close(w)
    with os.fdopen(r) as f:
        lines = f.read().split()
    if not expect_ready:
        _, err = p.communicate(timeout=60)
        return p.returncode, err
    assert lines, p.communicate(timeout=60)
    return p, lines


def stop(p):
    p.terminate()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    return err


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
    assert "event=anonymous_tcp listener=%s" % lines[0] in err, err
    assert "every local user of this machine can connect" in err, err
    # with tokens it is quiet
    tokens = tmp_path / "tokens"
    tokens.write_text("tok-0123456789abcdef default\n")
    tokens.chmod(0o600)
    p, lines = start(kilnd_bin, tmp_path, "--listen", "tcp:127.0.0.1:0", "--tokens", str(tokens))
    assert "anonymous_tcp" not in stop(p)
