#!/usr/bin/env python3
"""A kernel written in C (softmax.c, with kiln/kernel.h), compiled here with clang to kiln's
kernel dialect, sent to kilnd, run on a device and checked against numpy.

    python3 c_kernel.py [DEVICE]          # DEVICE default: cpu:0

clang: $KILN_CLANG, else clang-22 .. clang-19 (or LLVM 22's bin directory), else clang.
kernel.h: $KILN_INCLUDE, else the one the kiln package ships (kiln.get_include()).
Exit status 77 means "skipped" (no clang, no kernel.h, or the daemon lacks a method).
"""

import os
import shutil
import subprocess
import sys

import numpy as np

import kiln

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 256


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


def find_clang():
    env = os.environ.get("KILN_CLANG")
    if env:
        return env
    for v in range(22, 18, -1):
        for cand in ("clang-%d" % v, "/usr/lib/llvm-%d/bin/clang" % v):
            p = shutil.which(cand)
            if p:
                return p
    return shutil.which("clang")


def find_include():
    for d in (os.environ.get("KILN_INCLUDE"), kiln.get_include()):
        if d and os.path.isfile(os.path.join(d, "kiln", "kernel.h")):
            return os.path.abspath(d)
    return None


def compile_c(src):
    clang, inc = find_clang(), find_include()
    if clang is None:
        skip("no clang found (set KILN_CLANG)")
    if inc is None:
        skip("kiln/kernel.h not found (set KILN_INCLUDE to the directory holding kiln/kernel.h)")
    cmd = [clang, "-O2", "-emit-llvm", "-S", "-I", inc, "-o", "-", src]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("clang failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return r.stdout


def main(argv):
    ir = compile_c(os.path.join(HERE, "softmax.c"))
    s = kiln.connect()
    dev = s.device(argv[1]) if len(argv) > 1 else s.cpu(0)
    m = s.compile(ir, target=dev)
    print("kernels:", m.kernels)

    rows, cols = 64, 1000
    x = np.random.default_rng(0).normal(0, 3, size=(rows, cols)).astype(np.float32)
    xd = kiln.nd.array(x, dev)
    yd = kiln.nd.empty((rows, cols), "float32", dev)
    m["softmax_rows"](xd, yd, cols, grid=rows, block=BLOCK)

    got = yd.numpy()
    e = np.exp(x - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    print("softmax of %d rows x %d columns on %s: ok (row sums %.6f .. %.6f)"
          % (rows, cols, dev, got.sum(axis=1).min(), got.sum(axis=1).max()))
    s.close()


if __name__ == "__main__":
    try:
        main(sys.argv)
    except kiln.NoMethod as e:
        skip("kilnd lacks a method this example needs: %s" % e.message)
