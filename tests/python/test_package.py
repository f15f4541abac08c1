"""The installable package (issue 16, item 1): every subpackage ships, kernel.h comes with
it (kiln.get_include()), ``python3 -m kiln`` checks the connection, py.typed marks the
type hints. .ci/install runs the whole suite against an installed copy; here one fresh
venv install proves the package imports outside the source tree."""

import os
import shutil
import subprocess
import sys

import pytest

import kiln
from conftest import INSTALLED, PKG_PYTHONPATH, ROOT

PKG = os.path.join(ROOT, "clients", "python")


def _env(**kw):
    env = dict(os.environ, PYTHONPATH=PKG_PYTHONPATH, **kw)
    env.pop("KILN_URL", None)
    return env


def test_get_include_has_kernel_h():
    inc = kiln.get_include()
    h = os.path.join(inc, "kiln", "kernel.h")
    assert os.path.isfile(h)
    with open(h) as f, open(os.path.join(ROOT, "clients", "include", "kiln", "kernel.h")) as g:
        assert f.read() == g.read()
    assert os.path.isfile(os.path.join(os.path.dirname(kiln.__file__), "py.typed"))


def test_main_checks_the_connection(unix_url):
    r = subprocess.run([sys.executable, "-m", "kiln", "--url", unix_url], env=_env(), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("kiln %s (" % kiln.__version__)
    assert "include: " + kiln.get_include() in r.stdout
    assert "kilnd: " in r.stdout and "cpu:0" in r.stdout


def test_main_without_a_daemon(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kiln", "--url", "unix:%s/none.sock" % tmp_path], env=_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "not reachable" in r.stderr, (r.stdout, r.stderr)
    r = subprocess.run([sys.executable, "-m", "kiln", "--version"], env=_env(), capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == kiln.__version__
    r = subprocess.run([sys.executable, "-m", "kiln", "--include"], env=_env(), capture_output=True, text=True)
    assert r.stdout.strip() == kiln.get_include()
    r = subprocess.run([sys.executable, "-m", "kiln", "--bogus"], env=_env(), capture_output=True, text=True)
    assert r.returncode == 2


@pytest.mark.skipif(INSTALLED, reason="already running against an installed package")
def test_fresh_venv_install_imports_everything(tmp_path):
    if subprocess.run(["/usr/bin/python3", "-c", "import venv, ensurepip"], capture_output=True).returncode:
        pytest.skip("python3-venv is not installed")
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    src = tmp_path / "src"   # a copy, so the build's folders stay out of the checkout
    shutil.copytree(PKG, src, symlinks=False, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation", "--no-index", str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # from an empty folder, without PYTHONPATH: the installed copy only
    code = ("import kiln, kiln.te, kiln.topi, kiln.onnx, kiln.tvm, os, pkgutil;"
            "print(kiln.__file__);"
            "print(os.path.isfile(os.path.join(kiln.get_include(), 'kiln', 'kernel.h')));"
            "print(sorted(m.name for m in pkgutil.walk_packages(kiln.__path__, 'kiln.') if m.ispkg))")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=str(tmp_path), capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=""), timeout=120)
    assert r.returncode == 0, r.stderr
    path, has_h, pkgs = r.stdout.splitlines()
    assert path.startswith(str(venv)) and has_h == "True"
    want = sorted("kiln." + os.path.relpath(d, os.path.join(PKG, "kiln")).replace(os.sep, ".")
                  for d, _, files in os.walk(os.path.join(PKG, "kiln")) if "__init__.py" in files and d != os.path.join(PKG, "kiln"))
    assert eval(pkgs) == want  # noqa: S307 (our own child's repr of a list of names)


def test_type_hints_resolve():
    # py.typed promises hints; the annotated public functions' hints must evaluate
    import typing
    import numpy as np
    from kiln import nd, module
    assert typing.get_type_hints(nd.array)["return"] is nd.NDArray
    assert typing.get_type_hints(nd.NDArray.numpy)["return"] is np.ndarray
    assert typing.get_type_hints(kiln.get_include)["return"] is str
    typing.get_type_hints(module.BenchmarkResult.to_dict)
    typing.get_type_hints(module.Module.time_evaluator)
