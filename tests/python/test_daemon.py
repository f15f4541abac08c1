"""Private daemons: start with --ready-fd and stop; kiln.connect()'s auto-start."""

import os
import subprocess
import sys

import pytest

import kiln

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "clients", "python")


def run_python(code, env):
    e = {k: v for k, v in os.environ.items() if k not in ("KILN_URL", "KILN_AUTOSTART", "KILND")}
    e.update(env)
    if "XDG_RUNTIME_DIR" in env:  # only the test's user socket: never a daemon of this box
        e["KILN_SEARCH"] = "unix:%s/kiln.sock" % env["XDG_RUNTIME_DIR"]
    e["PYTHONPATH"] = PKG
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_start_and_stop(kilnd_bin):
    d = kiln.start_daemon(kilnd_bin, listen=None)
    assert d.alive() and d.url.startswith("unix:") and os.path.exists(d.url[5:])
    tmp = d.tmpdir
    with kiln.connect(d.url) as s:
        assert s.ping() == "pong"
    assert d.stop() == 0
    assert not d.alive() and not os.path.exists(tmp)


def test_ready_fd_reports_every_listener(kilnd_bin, tmp_path):
    d = kiln.start_daemon(kilnd_bin, listen=["tcp:127.0.0.1:0", "unix:" + str(tmp_path / "a.sock"),
                                             "tcp:127.0.0.1:0"])
    try:
        assert len(d.urls) == 3
        assert d.urls[1] == "unix:" + str(tmp_path / "a.sock")
        assert d.urls[0].startswith("tcp:127.0.0.1:") and not d.urls[0].endswith(":0")
        for u in d.urls:
            with kiln.connect(u) as s:
                assert s.ping() == "pong"
    finally:
        assert d.stop() == 0


def test_connect_autostarts_a_private_daemon_and_stops_it_at_exit(kilnd_bin, tmp_path):
    code = ("import kiln\n"
            "s = kiln.connect()\n"
            "t = kiln.connect()\n"
            "assert s.daemon is not None and t.daemon is s.daemon, 'one private daemon per process'\n"
            "print(s.daemon.pid, s.daemon.tmpdir, s.url)\n"
            "print(s.ping(), t.ping())\n")
    r = run_python(code, {"KILND": kilnd_bin, "XDG_RUNTIME_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    pid, tmpdir, url = first.split()
    assert second == "pong pong"
    assert url.startswith("unix:" + tmpdir)
    assert gone(int(pid)), "the private kilnd outlived its Python process"
    assert not os.path.exists(tmpdir)


def test_connect_uses_the_default_socket_when_a_daemon_is_there(kilnd_bin, tmp_path):
    d = kiln.start_daemon(kilnd_bin, listen=["unix:" + str(tmp_path / "kiln.sock")])
    try:
        r = run_python("import kiln\ns = kiln.connect()\nprint(s.url, s.daemon)\n",
                       {"KILND": kilnd_bin, "XDG_RUNTIME_DIR": str(tmp_path)})
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["unix:" + str(tmp_path / "kiln.sock"), "None"]
    finally:
        d.stop()


def test_autostart_off_or_no_binary(tmp_path):
    r = run_python("import kiln\ntry:\n    kiln.connect()\nexcept kiln.Unavailable as e:\n    print('U', e)\n",
                   {"KILN_AUTOSTART": "0", "XDG_RUNTIME_DIR": str(tmp_path)})
    assert r.stdout.startswith("U E_UNAVAILABLE"), (r.stdout, r.stderr)
    r = run_python("import kiln\ntry:\n    kiln.connect()\nexcept kiln.Unavailable as e:\n    print('U', e)\n",
                   {"KILND": str(tmp_path / "missing"), "XDG_RUNTIME_DIR": str(tmp_path), "PATH": "/nonexistent"})
    assert r.stdout.startswith("U E_UNAVAILABLE") and "KILND" in r.stdout, (r.stdout, r.stderr)


def test_a_daemon_that_fails_to_start_is_reported(tmp_path):
    with pytest.raises(kiln.Unavailable) as e:
        kiln.start_daemon("/bin/false")
    assert "did not become ready" in e.value.message


def test_kilnd_is_found_in_the_build_tree(monkeypatch):
    if os.environ.get("KILN_TEST_INSTALLED") == "1":
        pytest.skip("the installed package is in no build tree (.ci/install)")
    monkeypatch.delenv("KILND", raising=False)
    found = kiln.find_kilnd()
    if os.access(os.path.join(ROOT, "build", "server", "kilnd"), os.X_OK):
        assert found == os.path.join(ROOT, "build", "server", "kilnd")
    else:
        pytest.skip("no build/server/kilnd in this checkout")
