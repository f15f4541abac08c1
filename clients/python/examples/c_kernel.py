#!/usr/bin/env python3
"""A kernel written in C (block_sum.c, with kiln/kernel.h), compiled here with clang to kiln's
kernel dialect, sent to kilnd, run on a device and checked against numpy.

    python3 c_kernel.py [DEVICE]          # DEVICE default: cpu:0

clang: $KILN_CLANG, else clang-22 .. clang-19 (or LLVM 22's bin directory), else clang.
kernel.h: $KILN_INCLUDE, else the repository's clients/include, else the system's.
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
    for d in (os.environ.get("KILN_INCLUDE"), os.path.join(HERE, "..", "..", "include"), "/usr/local/include",
              "/usr/include"):
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
    ir = compile_c(os.path.join(HERE, "block_sum.c"))
    s = kiln.connect()
    dev = s.device(argv[1]) if len(argv) > 1 else s.cpu(0)
    m = s.compile(ir, target=dev)
    print("kernels:", m.kernels)

    n = 100000
    x = np.random.default_rng(0).uniform(-1, 1, size=n).astype(np.float32)
    groups = (n + BLOCK - 1) // BLOCK
    xd = kiln.nd.array(x, dev)
    partial = kiln.nd.empty((groups,), "float32", dev)
    m["block_sum"](xd, partial, n, grid=groups, block=BLOCK)

    got = partial.numpy()
    want = np.add.reduceat(x, np.arange(0, n, BLOCK))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    print("sum of %d floats on %s in %d work-groups: %.6f (numpy %.6f)" % (n, dev, groups, got.sum(), x.sum()))
    s.close()


if __name__ == "__main__":
    try:
        main(sys.argv)
    except kiln.NoMethod as e:
        skip("kilnd lacks a method this example needs: %s" % e.message)
