#!/usr/bin/env python3
"""The seed's second network: 4x super-resolution (PyTorch's tutorial net: three Conv+ReLU,
a Conv to 16 channels, DepthToSpace 4), 64x64 -> 256x256, on kiln.

No trained super-resolution model ships with a usable licence, so the weights are
He-initialised random numbers (kiln.onnx.models.super_resolution, seed 0): the output is not
a nicer picture, but every number is checked against onnxruntime when it is installed.

    PYTHONPATH=clients/python python3 clients/python/examples/super_resolution.py [--device ID] [--save out.png]

Input: the Y (luma) channel of scikit-image's astronaut photo resized to 64x64. Exit status
77 with a "SKIP:" line when a package it needs is missing.
"""

import argparse
import sys
import time

import numpy as np


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(77)


def main(argv):
    ap = argparse.ArgumentParser(description="4x super-resolution on kiln")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--save", help="write the 256x256 Y channel as a PNG")
    a = ap.parse_args(argv[1:])
    try:
        import onnx  # noqa: F401
    except ImportError:
        skip("the onnx package is not installed (Debian: python3-onnx)")
    try:
        import skimage.data
        import skimage.color
        import skimage.transform
    except ImportError:
        skip("scikit-image is not installed (Debian: python3-skimage)")
    import kiln
    import kiln.onnx
    from kiln.onnx import models

    img = skimage.transform.resize(skimage.data.astronaut(), (64, 64), order=1, anti_aliasing=True)
    y = skimage.color.rgb2ycbcr(img)[..., 0]                  # 16..235
    x = ((y - 16.0) / 219.0).astype(np.float32)[None, None]   # 1 x 1 x 64 x 64 in [0, 1]
    model = models.super_resolution(seed=0)
    s = kiln.connect()
    dev = s.device(a.device)
    t0 = time.perf_counter()
    g = kiln.onnx.import_model(model, dev)
    t1 = time.perf_counter()
    (out,) = g.run(x)
    print(g)
    print("super-resolution on %s: %s -> %s, import+compile %.1f s, run %.1f ms"
          % (dev.id, list(x.shape), list(out.shape), t1 - t0, (time.perf_counter() - t1) * 1e3))
    print("output: min %.4f max %.4f mean %.4f" % (out.min(), out.max(), out.mean()))
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if ort is not None:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        ref = sess.run(None, {"input": x})[0]
        print("max |kiln - onnxruntime| = %.3g" % float(np.abs(ref - out).max()))
    else:
        print("onnxruntime is not installed: no comparison (bash .ci/onnx-venv)")
    if a.save:
        import skimage.io
        skimage.io.imsave(a.save, (np.clip(out[0, 0], 0, 1) * 255).astype(np.uint8))
    g.free()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
