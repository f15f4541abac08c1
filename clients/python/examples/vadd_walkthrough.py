#!/usr/bin/env python3
"""The vector add of TVM's ROCm walkthrough ("Bringing AMD GPUs into the TVM stack"), on kiln.

TVM built the kernel from a tensor expression; here it is the same kernel in kiln's portable
kernel dialect (vadd.ll, LLVM IR). It runs on the default device (cpu:0, which every kilnd
serves), is checked against numpy, and then, as in the walkthrough, the LLVM IR and the GPU
assembly for gfx942 are printed; compiling for a GPU needs no GPU.

    python3 vadd_walkthrough.py          # KILN_URL, the default socket, or a private kilnd

Exit status 77 means "skipped": the daemon lacks a method this example needs.
"""

import os
import sys

import numpy as np

import kiln

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    s = kiln.connect()
    ctx = s.cpu(0)  # the default device; s.rocm(0) on an AMD GPU box

    ir = open(os.path.join(HERE, "vadd.ll")).read()
    fadd = s.compile(ir, target=ctx)
    print("compiled:", fadd, "cached" if fadd.cached else "in %.1f ms" % (fadd.compile_ms or 0))

    n = 1024
    a = kiln.nd.array(np.random.uniform(size=n).astype("float32"), ctx)
    b = kiln.nd.array(np.random.uniform(size=n).astype("float32"), ctx)
    c = kiln.nd.array(np.zeros(n, dtype="float32"), ctx)

    fadd(a, b, c, n, grid=(n + 63) // 64, block=64)  # TVM: split by 64, bind to block/thread
    np.testing.assert_allclose(c.asnumpy(), a.asnumpy() + b.asnumpy())
    print("vector add on %s: ok" % ctx)

    dev_module = s.compile(ir, target="gfx942")
    print("\n---- LLVM IR (gfx942) ----")
    print(dev_module.get_source("llvm"))
    print("---- GPU assembly (gfx942) ----")
    print(dev_module.get_source("asm"))
    s.close()


if __name__ == "__main__":
    try:
        main()
    except kiln.NoMethod as e:
        print("SKIP: kilnd lacks a method this example needs: %s" % e.message)
        sys.exit(77)
