"""The kiln CLI does the whole job (issue 16, item 10): the README's quick start (compile,
launch, download and time of a C kernel) run as written, and the command line itself:
getopt_long everywhere, `kiln CMD --help`, numbers checked, the Python client's URL forms,
source, lease, cache, completion."""

import os
import re
import subprocess

import numpy as np
import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def kiln_bin(kilnd_bin):
    p = os.path.join(os.path.dirname(os.path.dirname(kilnd_bin)), "clients", "c", "kiln")
    if not os.access(p, os.X_OK):
        pytest.skip("no kiln CLI beside %s" % kilnd_bin)
    return p


def kiln(kiln_bin, url, *args, check=True, **kw):
    env = dict(os.environ, **kw.pop("env", {}))
    env.pop("KILN_URL", None)
    r = subprocess.run([kiln_bin] + ([] if url is None else ["--url", url]) + list(args), capture_output=True,
                       text=True, timeout=120, env=env, **kw)
    if check:
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def test_readme_quick_start_cli(kiln_bin, unix_url, tmp_path):
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"<!-- cli-quick-start -->\n```sh\n(.*?)```", readme, re.S).group(1)
    env = dict(os.environ, KILN_URL=unix_url)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = re.search(r"^(/tmp/\S+)$", r.stdout, re.M)
    assert "elapsed" in r.stdout and "mean" in r.stdout, r.stdout
    c = np.load(os.path.join(out.group(1), "c.npy"))
    np.testing.assert_array_equal(c, np.arange(1024, dtype=np.float32) + 1)


def test_options_anywhere_and_help(kiln_bin, unix_url):
    r = kiln(kiln_bin, None, "ping", "--url=" + unix_url)
    assert r.stdout.startswith("pong from " + unix_url)
    r = kiln(kiln_bin, None, "--url", unix_url, "devices", "--json")
    assert '"cpu:0"' in r.stdout
    assert kiln(kiln_bin, None, "--version").stdout.strip().startswith("kiln ")
    r = kiln(kiln_bin, None, "launch", "--help")
    assert r.stdout.startswith("usage: kiln launch MODULE KERNEL") and "@FILE.npy" in r.stdout
    r = kiln(kiln_bin, None, "--help")
    for c in ("compile", "launch", "time", "source", "lease", "cache", "token", "alloc"):
        assert "\n  %s " % c in r.stdout
    comp = kiln(kiln_bin, None, "--complete").stdout
    assert re.search(r"^launch .*--grid .*--block", comp, re.M) and re.search(r"^ping --url", comp, re.M)


@pytest.mark.parametrize("args,why", [
    (["bogus"], "unknown command 'bogus'"),
    (["ping", "--bogus"], "unknown option --bogus"),
    (["ping", "--json"], "takes no --json"),
    (["ping", "extra"], "wants no arguments"),
    (["--timeout", "soon", "ping"], "--timeout 'soon' is not a whole number"),
    (["--timeout", "-5", "ping"], "is not a whole number"),
    (["launch", "m", "k", "--grid", "0", "--block", "1"], "--grid '0' is not 1 to 3 sizes"),
    (["launch", "m", "k", "--grid", "1,2,3,4", "--block", "1"], "is not 1 to 3 sizes"),
    (["launch", "m", "k", "--block", "1"], "--grid is required"),
    (["launch", "m", "k", "--grid", "1", "--block", "1", "x1"], "argument 'x1' is not t:ID"),
    (["time", "m", "k", "--grid", "1", "--block", "1", "--repeat", "1.5"], "--repeat '1.5'"),
    (["compile", "f.ll", "--opt-level", "4"], "--opt-level '4'"),
    (["source", "m", "--kind", "ptx"], "--kind is llvm, asm or binary"),
    (["lease", "--seconds", "0"], "--seconds '0'"),
    (["get", "x", "f.npy"], "'x' is not a tensor id"),
    (["ping", "--url"], "--url needs a value"),
    (["alloc", "float33", "4"], "'float33' is not a dtype"),
    (["cache", "bogus"], "the subcommand is size, list or prune, not 'bogus'"),
    (["cache", "list", "extra"], "list takes no arguments"),
    (["cache", "list", "--dry-run"], "--dry-run goes with cache prune"),
    (["cache", "--stale"], "--stale goes with cache list and prune"),
    (["cache", "size", "--limit", "3"], "--limit goes with cache list"),
    (["cache", "list", "--limit", "0"], "--limit '0' is not a whole number"),
    (["cache", "prune"], "prune wants one of --stale, --unused AGE, --all or KEY..."),
    (["cache", "prune", "--stale", "--all"], "prune wants one of"),
    (["cache", "prune", "--unused", "3w"], "--unused '3w' is an age like"),
    (["cache", "prune", "--unused", "0"], "--unused '0' is an age like"),
    (["cache", "prune", "abc"], "'abc' is not a module id"),
])
def test_usage_errors_exit_2(kiln_bin, unix_url, args, why):
    r = kiln(kiln_bin, unix_url, *args, check=False)
    assert r.returncode == 2 and why in r.stderr, (r.returncode, r.stderr)


def test_url_forms(kiln_bin, unix_url, tcp_url):
    path = unix_url[len("unix:"):]
    kiln(kiln_bin, "unix://" + path, "ping")
    host_port = tcp_url[len("tcp:"):]
    kiln(kiln_bin, "tcp://" + host_port, "ping")
    kiln(kiln_bin, "tcp://" + host_port + "/", "ping")
    r = kiln(kiln_bin, "http://" + host_port, "ping", check=False)
    assert r.returncode == 2


def test_compile_launch_source_and_errors(kiln_bin, unix_url, tmp_path):
    vadd = os.path.join(ROOT, "clients", "python", "examples", "vadd.ll")
    r = kiln(kiln_bin, unix_url, "compile", vadd, "--target", "cpu")
    mod = r.stdout.splitlines()[0]
    assert re.fullmatch(r"[0-9a-f]{64}", mod) and "kernel " in r.stdout
    asm = kiln(kiln_bin, unix_url, "source", mod, "--kind", "asm").stdout
    assert len(asm) > 100
    kiln(kiln_bin, unix_url, "source", mod, "--kind", "binary", "--output", str(tmp_path / "m.so"))
    assert (tmp_path / "m.so").read_bytes()[:4] == b"\x7fELF"
    bad = tmp_path / "bad.ll"
    bad.write_text("this is not IR\n")
    r = kiln(kiln_bin, unix_url, "compile", str(bad), check=False)
    assert r.returncode == 1 and "E_COMPILE" in r.stderr
    r = kiln(kiln_bin, unix_url, "compile", str(tmp_path / "missing.ll"), check=False)
    assert r.returncode == 4
    r = kiln(kiln_bin, unix_url, "launch", "0" * 64, "k", "--grid", "1", "--block", "1", check=False)
    assert r.returncode == 1 and "E_NOT_FOUND" in r.stderr


def test_launch_with_uploads_and_numbers(kiln_bin, unix_url, tmp_path):
    src = os.path.join(ROOT, "clients", "include", "kiln", "examples", "vadd.c")
    mod = kiln(kiln_bin, unix_url, "compile", src).stdout.splitlines()[0]
    np.save(tmp_path / "a.npy", np.full(64, 2, np.float32))
    c = kiln(kiln_bin, unix_url, "alloc", "float32", "64").stdout.strip()
    kiln(kiln_bin, unix_url, "launch", mod, "vadd", "--grid=1", "--block=64", "@%s" % (tmp_path / "a.npy"),
         "@%s" % (tmp_path / "a.npy"), "t:" + c, "64")
    kiln(kiln_bin, unix_url, "get", c, str(tmp_path / "c.npy"))
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.full(64, 4, np.float32))
    # a negative count after `--`: no element is written
    kiln(kiln_bin, unix_url, "launch", mod, "vadd", "--grid", "1", "--block", "64", "t:" + c, "t:" + c, "t:" + c,
         "--", "-1")
    kiln(kiln_bin, unix_url, "free", c)


def test_lease_holds_while_a_command_runs(kiln_bin, unix_url):
    r = kiln(kiln_bin, unix_url, "lease", "--device", "cpu:0", "--seconds", "30", "--",
             kiln_bin, "--url", unix_url, "stats", "--json", check=False)
    assert r.returncode == 0, r.stderr
    assert re.search(r"lease \d+ of cpu:0 for 30 s", r.stderr)
    r = kiln(kiln_bin, unix_url, "lease", "--seconds", "5", "--", "sh", "-c", "exit 7", check=False)
    assert r.returncode == 7
    # the tenant's own launches from another connection run under its lease
    src = os.path.join(ROOT, "clients", "include", "kiln", "examples", "vadd.c")
    mod = kiln(kiln_bin, unix_url, "compile", src).stdout.splitlines()[0]
    c = kiln(kiln_bin, unix_url, "alloc", "float32", "8").stdout.strip()
    r = kiln(kiln_bin, unix_url, "lease", "--seconds", "30", "--no-wait", "--", kiln_bin, "--url", unix_url,
             "launch", mod, "vadd", "--grid", "1", "--block", "8", "t:" + c, "t:" + c, "t:" + c, "8",
             "--launch-timeout", "10000")
    assert "elapsed" in r.stdout
    kiln(kiln_bin, unix_url, "free", c)


def test_cache(kiln_bin, unix_url):
    r = kiln(kiln_bin, unix_url, "cache")
    assert r.stdout.startswith("disk: ") and "hits" in r.stdout
    assert '"entries_disk"' in kiln(kiln_bin, unix_url, "cache", "--json").stdout


def test_cache_size_list_and_prune(kiln_bin, fresh_daemon, tmp_path):
    import json
    d = fresh_daemon("--compile-workers", "1", listen=["unix:" + str(tmp_path / "k.sock")])
    url = d.urls[0]
    ids = []
    for i in range(3):
        src = tmp_path / ("k%d.ll" % i)
        src.write_text('define void @k(ptr %%p) section "kiln.kernel" {\n  store i32 %d, ptr %%p\n  ret void\n}\n' % i)
        ids.append(kiln(kiln_bin, url, "compile", str(src)).stdout.split()[0])
    r = kiln(kiln_bin, url, "cache", "size").stdout
    assert r.startswith("entries: 3, ") and "stale:   0 entries" in r and "compiler: kiln " in r
    lines = kiln(kiln_bin, url, "cache", "list").stdout.splitlines()
    assert lines[0].split() == ["KEY", "BYTES", "LAST", "USED", "WHERE", "STALE"]
    assert sorted(l.split()[0] for l in lines[1:]) == sorted(ids)
    assert len(kiln(kiln_bin, url, "cache", "list", "--limit", "2").stdout.splitlines()) == 3
    items = json.loads(kiln(kiln_bin, url, "cache", "list", "--json").stdout)
    assert sorted(i["key"] for i in items) == sorted(ids) and not any(i["stale"] for i in items)
    assert kiln(kiln_bin, url, "cache", "list", "--stale").stdout.splitlines()[1:] == []
    assert kiln(kiln_bin, url, "cache", "prune", "--all", "--dry-run").stdout.startswith("would remove 3 entries")
    assert kiln(kiln_bin, url, "cache", "prune", ids[0]).stdout.startswith("removed 1 entry,")
    assert kiln(kiln_bin, url, "cache", "prune", "--stale").stdout.startswith("removed 0 entries")
    assert kiln(kiln_bin, url, "cache", "prune", "--unused", "1d").stdout.startswith("removed 0 entries")
    assert kiln(kiln_bin, url, "cache", "prune", "--all").stdout.startswith("removed 2 entries")
    assert kiln(kiln_bin, url, "cache", "size").stdout.startswith("entries: 0, ")


def test_cache_list_is_the_operators(kiln_bin, fresh_daemon, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("alice-token-0123456789 alice\n")
    d = fresh_daemon("--tokens", str(tokens), listen=["unix:" + str(tmp_path / "k.sock")])
    for args in (("cache", "list"), ("cache", "size"), ("cache", "prune", "--all")):
        r = kiln(kiln_bin, d.urls[0], *args, check=False, env={"KILN_TOKEN": "alice-token-0123456789"})
        assert r.returncode == 1 and "E_PERMISSION" in r.stderr and "stats=all" in r.stderr, r.stderr
    r = kiln(kiln_bin, d.urls[0], "cache", env={"KILN_TOKEN": "alice-token-0123456789"})
    assert r.stdout.startswith("disk: ")   # the counters are everyone's


def test_bash_completion(kiln_bin, tmp_path):
    comp = os.path.join(ROOT, "clients", "c", "kiln.bash")
    script = ("source %s\nCOMP_WORDS=(%s l); COMP_CWORD=1; _kiln; echo \"${COMPREPLY[*]}\"\n"
              "COMP_WORDS=(%s launch --gr); COMP_CWORD=2; _kiln; echo \"${COMPREPLY[*]}\"\n"
              "COMP_WORDS=(%s cache ''); COMP_CWORD=2; _kiln; echo \"${COMPREPLY[*]}\"\n"
              "COMP_WORDS=(%s cache prune --st); COMP_CWORD=3; _kiln; echo \"${COMPREPLY[*]}\"\n"
              % (comp, kiln_bin, kiln_bin, kiln_bin, kiln_bin))
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.stdout.splitlines() == ["launch lease", "--grid", "size list prune", "--stale"], r.stdout + r.stderr


def test_readme_running_kilnd(kilnd_bin, kiln_bin, tmp_path):
    # the README's block as written, in a shell whose XDG_RUNTIME_DIR and TMPDIR are private
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"<!-- running-kilnd -->\n```sh\n(.*?)```", readme, re.S).group(1)
    # the binaries under test (a sanitizer build's in those CI stages)
    block = block.replace("build/server/kilnd", kilnd_bin).replace("build/clients/c/kiln", kiln_bin)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path), TMPDIR=str(tmp_path), XDG_CACHE_HOME=str(tmp_path))
    env.pop("KILN_URL", None)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", block + "wait $! || true\n"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stdout.startswith("unix:%s/kiln.sock\n" % tmp_path) and "tcp:" not in r.stdout, r.stdout  # no TCP
    assert "pong from unix:%s/kiln.sock" % tmp_path in r.stdout


def test_large_put_and_get_in_chunks(kiln_bin, unix_url, tmp_path):
    # past 64 MiB both go in 32 MiB writes and reads (get takes dtype and shape from `tensors`)
    x = np.arange(17 * (1 << 20) + 3, dtype=np.float32).reshape(-1, 1)
    np.save(tmp_path / "x.npy", x)
    tid = kiln(kiln_bin, unix_url, "put", str(tmp_path / "x.npy")).stdout.strip()
    import json
    reads = lambda: json.loads(kiln(kiln_bin, unix_url, "stats", "--json").stdout)["requests"].get("read", 0)
    try:
        before = reads()
        kiln(kiln_bin, unix_url, "get", tid, str(tmp_path / "y.npy"))
        assert reads() - before == 3          # 68 MiB in 32 MiB reads
        y = np.load(tmp_path / "y.npy")
        assert y.shape == x.shape and y.dtype == x.dtype and np.array_equal(x, y)
    finally:
        kiln(kiln_bin, unix_url, "free", tid)


def _stop_midway(proc, s, method, before):
    """SIGSTOPs the CLI process ``proc`` for 1.2 s once kilnd has answered the first of its
    32 MiB ``method`` requests (the transfer has begun, 2 more to go): the transfer then
    takes more than a second however fast the machine is."""
    import signal
    import time
    deadline = time.monotonic() + 60
    while s.stats()["requests"].get(method, 0) <= before:
        assert proc.poll() is None and time.monotonic() < deadline, "the transfer never began"
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(1.2)
    os.kill(proc.pid, signal.SIGCONT)
    return proc.communicate(timeout=120)


def test_progress_of_a_long_transfer(kiln_bin, unix_url, tmp_path):
    # Item 10: a put or get that takes more than a second shows its progress on stderr; a
    # quick one says nothing there.
    import kiln as kiln_py
    x = np.arange(17 << 20, dtype=np.float32)  # 68 MiB: 3 writes, 3 reads
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "small.npy", x[:1024])
    r = kiln(kiln_bin, unix_url, "put", str(tmp_path / "small.npy"))
    assert r.stderr == ""
    kiln(kiln_bin, unix_url, "free", r.stdout.strip())
    env = dict(os.environ)
    env.pop("KILN_URL", None)
    with kiln_py.connect(unix_url) as s:
        counts = s.stats()["requests"]
        p = subprocess.Popen([kiln_bin, "--url", unix_url, "put", str(tmp_path / "x.npy")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = _stop_midway(p, s, "write", counts.get("write", 0))
        assert p.returncode == 0, err
        tid = out.strip()
        assert re.search(r"kiln: .*x\.npy: \d+ of 71 MB \(\d+%\), \d+ MB/s", err), err
        assert "71 of 71 MB (100%)" in err and err.endswith("\n"), err
        counts = s.stats()["requests"]
        p = subprocess.Popen([kiln_bin, "--url", unix_url, "get", tid, str(tmp_path / "y.npy")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = _stop_midway(p, s, "read", counts.get("read", 0))
        kiln(kiln_bin, unix_url, "free", tid)
        assert p.returncode == 0, err
        assert re.search(r"kiln: .*y\.npy: \d+ of 71 MB \(\d+%\), \d+ MB/s", err), err
    assert np.array_equal(np.load(tmp_path / "y.npy"), x)
