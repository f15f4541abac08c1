"""The examples of clients/python/examples run against the test daemon. An example exits
with status 77 and a "SKIP: reason" line when it cannot run here (no compile method yet,
no clang, no kernel.h): that is a skip with that reason, never a pass."""

import os
import subprocess
import sys

import pytest

from conftest import PKG_PYTHONPATH

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "clients", "python", "examples")


def run_example(url, name, *args):
    env = dict(os.environ, KILN_URL=url, PYTHONPATH=PKG_PYTHONPATH)
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)] + list(args), env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode == 77:
        why = [l for l in r.stdout.splitlines() if l.startswith("SKIP:")]
        pytest.skip("%s: %s" % (name, why[-1][5:].strip() if why else "skipped"))
    assert r.returncode == 0, "%s failed (%d):\n%s\n%s" % (name, r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return r.stdout


def test_vadd_walkthrough(unix_url):
    out = run_example(unix_url, "vadd_walkthrough.py")
    assert "vector add on cpu:0: ok" in out
    assert "---- LLVM IR (gfx942) ----" in out and "define" in out
    asm = out.split("---- GPU assembly (gfx942) ----", 1)[1]
    assert "s_endpgm" in asm  # real AMDGPU assembly


def test_c_kernel(unix_url):
    out = run_example(unix_url, "c_kernel.py")
    assert "softmax_rows" in out and "softmax of 64 rows x 1000 columns on cpu:0: ok" in out


def test_block_sweep(unix_url):
    out = run_example(unix_url, "block_sweep.py", "cpu:0", "65536")
    assert "fastest: block" in out
