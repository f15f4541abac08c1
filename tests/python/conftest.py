"""Fixtures: one real kilnd per test session, started with --ready-fd in its own temp dir.

kilnd is $KILND, else build*/server/kilnd of this repository. The package under test is
clients/python (put on sys.path here, so PYTHONPATH is optional), or with
KILN_TEST_INSTALLED=1 the installed package (.ci/install), which must then not be the
source tree's.
"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALLED = os.environ.get("KILN_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import kiln  # noqa: E402

if INSTALLED and os.path.abspath(kiln.__file__).startswith(ROOT + os.sep):
    raise RuntimeError("KILN_TEST_INSTALLED=1 but kiln is imported from the source tree (%s)" % kiln.__file__)
# what child processes of the tests put on PYTHONPATH to import the package under test
PKG_PYTHONPATH = "" if INSTALLED else os.path.join(ROOT, "clients", "python")


def kilnd_path():
    p = os.environ.get("KILND")
    if p:
        return p
    for cand in (os.path.join(ROOT, "build", "server", "kilnd"),):
        if os.access(cand, os.X_OK):
            return cand
    return kiln.find_kilnd()


@pytest.fixture(scope="session")
def kilnd_bin():
    p = kilnd_path()
    if not p or not os.access(p, os.X_OK):
        pytest.skip("no kilnd binary: build the repository (build/server/kilnd) or set KILND")
    return p


@pytest.fixture(scope="session")
def kilnd(kilnd_bin, tmp_path_factory):
    """The shared daemon: a unix socket and a TCP port, both reported through --ready-fd."""
    tmp = tmp_path_factory.mktemp("kilnd")
    d = kiln.start_daemon(kilnd_bin, tmpdir=str(tmp),
                          listen=["unix:" + str(tmp / "kiln.sock"), "tcp:127.0.0.1:0"])
    yield d
    status = d.stop()
    assert status == 0, "kilnd exited with status %s; log:\n%s" % (status, d.log()[-4000:])


@pytest.fixture(scope="session")
def unix_url(kilnd):
    return next(u for u in kilnd.urls if u.startswith("unix:"))


@pytest.fixture(scope="session")
def tcp_url(kilnd):
    return next(u for u in kilnd.urls if u.startswith("tcp:"))


@pytest.fixture
def s(unix_url):
    with kiln.connect(unix_url) as sess:
        yield sess


@pytest.fixture
def dev(s):
    return s.cpu(0)


class Daemons:
    """Private kilnds: calling it starts one (kiln.start_daemon); stop_all() stops them and
    returns what went wrong with those still running (an exit status other than 0, a
    sanitizer report in the log), for fixtures that assert a clean exit."""

    def __init__(self, exe):
        self.exe = exe
        self.started = []

    def __call__(self, *args, listen=None):
        d = kiln.start_daemon(self.exe, listen=listen, args=args)
        self.started.append(d)
        return d

    def stop_all(self):
        bad = []
        for d in self.started:
            was_alive = d.alive()
            status = d.stop(grace=5)
            log = d.log()
            if was_alive and (status != 0 or "Sanitizer" in log or "runtime error" in log):
                bad.append("kilnd %s: status %s; log ends:\n%s" % (d.url, status, log[-3000:]))
        return bad


@pytest.fixture
def fresh_daemon(kilnd_bin):
    """A private daemon for tests that change options or stop it."""
    ds = Daemons(kilnd_bin)
    yield ds
    ds.stop_all()


def needs(method):
    """Turns E_NO_METHOD into a skip naming the method: the server does not have it yet."""
    class _Ctx:
        def __enter__(self):
            return self

        def __exit__(self, et, ev, tb):
            if et is not None and issubclass(et, kiln.NoMethod):
                pytest.skip("kilnd has no '%s' method yet (%s)" % (method, ev.message))
            return False
    return _Ctx()
