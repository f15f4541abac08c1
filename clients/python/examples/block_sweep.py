#!/usr/bin/env python3
"""A timing sweep over block sizes: the vector add of vadd.ll on one device, timed on the
device with TVM's time_evaluator semantics for each work-group size.

    python3 block_sweep.py [DEVICE] [N]      # DEVICE default: the first GPU, else cpu:0

Exit status 77 means "skipped": the daemon lacks a method this example needs.
"""

import os
import sys

import numpy as np

import kiln

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    s = kiln.connect()
    dev = s.device(argv[1]) if len(argv) > 1 else s.default_device()
    n = int(argv[2]) if len(argv) > 2 else 1 << 22
    m = s.compile(open(os.path.join(HERE, "vadd.ll")).read(), target=dev)
    a = kiln.nd.array(np.random.uniform(size=n).astype("float32"), dev)
    b = kiln.nd.array(np.random.uniform(size=n).astype("float32"), dev)
    c = kiln.nd.empty((n,), "float32", dev)
    limit = dev.max_block or 1024
    print("vector add of %d floats on %s (%s)" % (n, dev, dev.name))
    print("%6s %10s %10s %10s %8s %9s" % ("block", "min us", "median us", "mean us", "cv", "GB/s"))
    best = None
    block = 32
    while block <= limit:
        grid = (n + block - 1) // block
        r = m.time_evaluator("myadd", dev, number=20, repeat=5, min_repeat_ms=10)(a, b, c, n, grid=grid, block=block)
        gbs = 3 * 4 * n / r.median / 1e9
        print("%6d %10.1f %10.1f %10.1f %8.3f %9.2f" % (block, r.min * 1e6, r.median * 1e6, r.mean * 1e6, r.cv, gbs))
        if best is None or r.median < best[1]:
            best = (block, r.median)
        block *= 2
    np.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())
    print("fastest: block %d (%.1f us)" % (best[0], best[1] * 1e6))
    s.close()


if __name__ == "__main__":
    try:
        main(sys.argv)
    except kiln.NoMethod as e:
        print("SKIP: kilnd lacks a method this example needs: %s" % e.message)
        sys.exit(77)
