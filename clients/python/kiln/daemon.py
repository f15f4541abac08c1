"""Finding and starting a private kilnd.

``kiln.connect()`` with nothing listening starts one of these so that a notebook works with
nothing set up: its own unix socket and cache directory in a fresh temporary directory,
stopped (SIGTERM, then SIGKILL after a grace period) when the Python process exits.
Tests use ``start_daemon`` directly. Readiness comes from kilnd's ``--ready-fd``: kilnd
writes one line per listener with its bound address once every listener is up.
"""

import atexit
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from .errors import Unavailable

__all__ = ["find_kilnd", "start_daemon", "Daemon", "default_socket_path"]


def default_socket_path():
    """The daemon's default unix socket (docs/protocol.md §1)."""
    rd = os.environ.get("XDG_RUNTIME_DIR")
    if rd:
        return os.path.join(rd, "kiln.sock")
    return "/tmp/kiln-%d/kiln.sock" % os.getuid()


def _build_tree_candidates():
    # clients/python/kiln/daemon.py -> repository root is three levels above the package.
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    out = []
    if os.path.isfile(os.path.join(root, "meson.build")):
        try:
            names = sorted(os.listdir(root))
        except OSError:
            names = []
        names = ["build"] + [n for n in names if n.startswith("build") and n != "build"]
        for n in names:
            out.append(os.path.join(root, n, "server", "kilnd"))
    return out


def find_kilnd():
    """The kilnd binary to start: ``$KILND``, else a build tree around this package
    (``build*/server/kilnd`` at the repository root), else ``kilnd`` on PATH. None if none."""
    env = os.environ.get("KILND")
    if env:
        return env if os.access(env, os.X_OK) else None
    for c in _build_tree_candidates():
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which("kilnd")


class Daemon:
    """A kilnd process this Python process started. ``urls`` are its bound listeners
    (``url`` the first); ``stop()`` drains it with SIGTERM and returns its exit status."""

    def __init__(self, proc, urls, tmpdir, log_path, own_tmpdir):
        self.proc = proc
        self.urls = urls
        self.url = urls[0] if urls else None
        self.tmpdir = tmpdir
        self.log_path = log_path
        self._own_tmpdir = own_tmpdir
        self._lock = threading.Lock()
        self._owner = os.getpid()  # a forked child neither stops it nor waits for it

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        if os.getpid() != self._owner:  # not our child: ask the kernel
            try:
                os.kill(self.proc.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                pass
            return True
        return self.proc.poll() is None

    def log(self):
        """kilnd's stderr so far; after stop() what it had written (its folder is gone)."""
        if getattr(self, "_final_log", None) is not None:
            return self._final_log
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, grace=10.0):
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL. Returns the exit status.
        In a process forked from the one that started it, does nothing and returns None:
        the daemon is the parent's."""
        if os.getpid() != self._owner:
            return None
        with self._lock:
            if self.proc.poll() is None:
                try:
                    self.proc.send_signal(signal.SIGTERM)
                    self.proc.wait(grace)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                except ProcessLookupError:
                    pass
            if self._own_tmpdir and self.tmpdir:
                self._final_log = self.log()
                shutil.rmtree(self.tmpdir, ignore_errors=True)
                self.tmpdir = None
            return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        return "<kiln.Daemon pid=%d %s>" % (self.proc.pid, " ".join(self.urls))


def start_daemon(kilnd=None, listen=None, cache_dir=None, tmpdir=None, args=(), log_level=None,
                 ready_timeout=60.0, env=None):
    """Starts ``kilnd`` and returns a Daemon once every listener is up.

    ``listen``: list of ``--listen`` values; default one unix socket in ``tmpdir``.
    ``tmpdir``: a directory for the socket, cache and log; default a new temporary
    directory, removed by ``stop()``. ``cache_dir`` defaults to ``tmpdir/cache``. Extra
    command-line arguments go in ``args``. kilnd's stdout and stderr go to ``tmpdir/kilnd.log``.
    """
    exe = kilnd or find_kilnd()
    if not exe:
        raise Unavailable("no kilnd binary found: set KILND to its path, build the repository "
                          "(build/server/kilnd), or put kilnd on PATH")
    own = tmpdir is None
    if own:
        tmpdir = tempfile.mkdtemp(prefix="kiln-")
    if listen is None:
        listen = ["unix:" + os.path.join(tmpdir, "kiln.sock")]
    if cache_dir is None:
        cache_dir = os.path.join(tmpdir, "cache")
    log_path = os.path.join(tmpdir, "kilnd.log")
    cmd = [exe]
    for l in listen:
        cmd += ["--listen", l]
    rfd, wfd = os.pipe()
    cmd += ["--ready-fd", str(wfd), "--cache-dir", cache_dir]
    if log_level:
        cmd += ["--log-level", log_level]
    cmd += list(args)
    try:
        with open(log_path, "ab") as logf:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                    pass_fds=(wfd,), env=env, start_new_session=True)
    except BaseException:
        os.close(rfd)
        os.close(wfd)
        if own:
            shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    os.close(wfd)
    lines, data = [], b""
    deadline = time.monotonic() + ready_timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            r, _, _ = select.select([rfd], [], [], left)
            if not r:
                break
            chunk = os.read(rfd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(rfd)
    lines = [l.strip() for l in data.decode("utf-8", "replace").splitlines() if l.strip()]
    d = Daemon(proc, lines or [], tmpdir, log_path, own)
    if len(lines) < len(listen):
        try:  # the ready pipe closed: kilnd is exiting (a refused start); its status says why
            status = proc.wait(5)
        except subprocess.TimeoutExpired:
            status = None
        log = d.log()
        d.stop(grace=2)
        why = ("it exited with status %s" % status) if status is not None else \
            ("it reported %d of %d listeners within %g s" % (len(lines), len(listen), ready_timeout))
        raise Unavailable("kilnd (%s) did not become ready: %s; its log ends:\n%s" % (exe, why, log[-4000:]))
    return d


_private = None
_private_lock = threading.Lock()


def private_daemon():
    """The process-wide private daemon, started on first use and stopped at exit."""
    global _private
    with _private_lock:
        if _private is not None and _private.alive():
            return _private
        _private = start_daemon(args=["--devices", "cpu"])  # CPU-only: connect() says so
        atexit.register(_stop_private)
        return _private


def _stop_private():
    global _private
    d, _private = _private, None
    if d is not None:
        d.stop(grace=5)
