"""kilnd --config FILE (issue 16, item 6): every option as a `key = value` line, read before
the command line, which wins; a bad line stops kilnd naming the file and line."""

import os

import pytest

from kilnd_helpers import start_kilnd, stop_kilnd as stop


def start(kilnd_bin, tmp_path, *args, expect_ready=True):
    """kilnd_helpers.start_kilnd run in tmp_path."""
    return start_kilnd(kilnd_bin, *args, cwd=str(tmp_path), expect_ready=expect_ready, timeout=30)


def test_config_file_options(kilnd_bin, tmp_path):
    conf = tmp_path / "kilnd.conf"
    conf.write_text("# a comment\n\n  listen = unix:%s/a.sock  \nlisten=\"unix:%s/b.sock\"\n"
                    "cache-dir = %s/cache\nidle-timeout = 30\nallow-prebuilt-cpu = false\n"
                    % (tmp_path, tmp_path, tmp_path))
    p, lines = start(kilnd_bin, tmp_path, "--config", str(conf))
    try:
        assert lines == ["unix:%s/a.sock" % tmp_path, "unix:%s/b.sock" % tmp_path]
        assert (tmp_path / "cache").is_dir()
    finally:
        stop(p)
    # the command line wins, and its --listen replaces the file's
    p, lines = start(kilnd_bin, tmp_path, "--listen=unix:%s/c.sock" % tmp_path, "--config=%s" % conf)
    try:
        assert lines == ["unix:%s/c.sock" % tmp_path]
    finally:
        stop(p)
    # so does an abbreviation of it, which getopt_long takes as --listen
    p, lines = start(kilnd_bin, tmp_path, "--lis=unix:%s/d.sock" % tmp_path, "--config=%s" % conf)
    try:
        assert lines == ["unix:%s/d.sock" % tmp_path]
    finally:
        stop(p)


@pytest.mark.parametrize("text,why", [
    ("listen unix:/x\n", "expected `key = value`"),
    ("no-such-option = 1\n", "the line above is `no-such-option = 1`"),
    ("idle-timeout = soon\n", "bad value 'soon' for --idle-timeout"),
    ("config = /etc/other\n", "no place in a configuration file"),
    ("Listen = tcp:1.2.3.4:5\n", "a key is an option's long name"),
    ("x" * 5000 + " = 1\n", "line longer than 4095 bytes"),
    ("insecure-tcp = maybe\n", "insecure-tcp"),
    # false/no/off turn a flag off; an option with a value refuses them (before: line dropped)
    ("cache-dir = off\n", "this option takes a value"),
    ("listen = no\n", "this option takes a value"),
    ("idle = false\n", "this option takes a value"),   # an abbreviation of idle-timeout
    ("no-such-option = false\n", "the line above is `no-such-option = false`"),
])
def test_config_file_errors_name_the_line(kilnd_bin, tmp_path, text, why):
    conf = tmp_path / "bad.conf"
    conf.write_text("# first\nlog-level = warn\n" + text)
    rc, err = start(kilnd_bin, tmp_path, "--config", str(conf), expect_ready=False)
    assert rc == 2, err
    assert why in err, err
    assert "%s:3" % conf in err, err


def test_false_leaves_a_flag_off(kilnd_bin, tmp_path):
    # insecure-tcp = off (also as an abbreviation) keeps the refusal of a non-loopback tcp:
    # listener without tokens
    for key in ("insecure-tcp", "insecure"):
        conf = tmp_path / "off.conf"
        conf.write_text("%s = off\nallow-prebuilt-cpu = no\nlisten = tcp:0.0.0.0:0\ncache-dir = %s/c\n"
                        % (key, tmp_path))
        rc, err = start(kilnd_bin, tmp_path, "--config", str(conf), expect_ready=False)
        assert rc != 0 and "refusing to listen on tcp:0.0.0.0:0" in err, err


def test_config_file_missing(kilnd_bin, tmp_path):
    rc, err = start(kilnd_bin, tmp_path, "--config", str(tmp_path / "none.conf"), expect_ready=False)
    assert rc == 2 and "none.conf" in err and "No such file" in err, err
    rc, err = start(kilnd_bin, tmp_path, "--config", expect_ready=False)
    assert rc == 2, err


def test_installed_config_file_parses(kilnd_bin, tmp_path):
    # the file meson install puts in /etc/kiln, with its paths pointed here
    src = os.path.join(os.path.dirname(__file__), "..", "..", "server", "dist", "kilnd.conf")
    text = open(src).read().replace("/run/kiln", str(tmp_path)).replace("/var/cache/kiln", str(tmp_path / "c"))
    text = text.replace("tcp:127.0.0.1:7070", "tcp:127.0.0.1:0")
    text = "\n".join(l for l in text.splitlines() if not l.startswith("worker-dir"))  # the build's workers
    assert "\nlisten = " in text and "@" not in text
    conf = tmp_path / "kilnd.conf"
    conf.write_text(text)
    p, lines = start(kilnd_bin, tmp_path, "--config", str(conf))
    try:
        assert "unix:%s/kiln.sock" % tmp_path in lines
    finally:
        stop(p)
