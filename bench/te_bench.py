#!/usr/bin/python3
"""te benchmarks: kiln.topi templates beside their peers, measured in one run.

    /usr/bin/python3 bench/te_bench.py [--kilnd build/server/kilnd] [--out bench/results/te.md]

- SGEMM float32 1024/2048/4096 with topi.matmul and its best knobs (a few knob sets tried at
  1024) vs numpy's BLAS (OpenBLAS on Debian with libopenblas0-pthread) in this process; on a
  CUDA device of the daemon (if any) the GPU template vs cuBLAS (through ctypes, if
  libcublas is present).
- conv2d 3x3 64->64 56x56 batch 1 (stride 1, pad 1) with topi.conv2d_nchw vs onnxruntime
  and, where apache-tvm installs, TVM's own build of the same compute and schedule. Both
  peers run in a venv (``--venv``, default $XDG_CACHE_HOME/kiln-te-bench) made with
  ``/usr/bin/python3 -m venv --system-site-packages`` and ``pip install onnxruntime onnx
  apache-tvm``; a peer that does not install is reported as such.

Times are medians of device-timed repeats (kiln: time_evaluator; numpy/onnxruntime/TVM:
wall time of calls in a loop). Prints a markdown report and writes it to --out.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# "pack": B copied into bn-wide column panels first (topi.matmul(A, B, pack=bn))
CPU_KNOBS = [
    {"pack": True, "bm": 8, "bn": 32, "bk": 4, "order": "ji", "unroll_k": False},
    {"pack": True, "bm": 4, "bn": 64, "bk": 4, "order": "ji", "unroll_k": False},
    {"pack": True, "bm": 8, "bn": 32, "bk": 1, "order": "ji", "unroll_k": False},
    {"pack": False, "bm": 8, "bn": 32, "bk": 4, "order": "ji", "unroll_k": False},
]
GPU_KNOBS = [
    {"block_m": 64, "block_n": 64, "thread_m": 16, "thread_n": 16, "k_tile": 8},
    {"block_m": 128, "block_n": 128, "thread_m": 16, "thread_n": 16, "k_tile": 8},
    {"block_m": 128, "block_n": 64, "thread_m": 16, "thread_n": 16, "k_tile": 16},
]
CONV_KNOBS = [
    {"oc_block": 16, "ow_block": 8, "vec": 8, "inline_pad": False, "unroll": True},
    {"oc_block": 8, "ow_block": 8, "vec": 8, "inline_pad": False, "unroll": True},
    {"oc_block": 4, "ow_block": 0, "vec": 8, "inline_pad": False, "unroll": True},
    {"oc_block": 16, "ow_block": 8, "vec": 8, "inline_pad": True, "unroll": True},
]
# fused multiply-adds (LLVM contracts a*b+c only under fast-math flags; TVM's LLVM backend
# contracts by default)
FAST = {"fast_math": True}
CONV = dict(N=1, C=64, H=56, W=56, O=64, K=3, pad=1)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def wall(fn, min_s=0.3, repeat=5):
    fn()
    n, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= min_s / repeat or n >= 1 << 16:
            break
        n *= 2
    res = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        res.append((time.perf_counter() - t0) / n)
    return median(res)


# -- peers in the venv --------------------------------------------------------------------

def conv_onnx_model():
    """The conv2d layer as ONNX bytes (needs the onnx package)."""
    import numpy as np
    from onnx import helper, TensorProto
    c = CONV
    w = np.random.default_rng(1).uniform(-1, 1, (c["O"], c["C"], c["K"], c["K"])).astype("float32")
    x_shape = (c["N"], c["C"], c["H"], c["W"])
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def peer_ort(threads, model_path=None):
    import numpy as np
    import onnxruntime as ort
    c = CONV
    x = np.random.default_rng(2).uniform(-1, 1, (c["N"], c["C"], c["H"], c["W"])).astype("float32")
    if model_path:
        with open(model_path, "rb") as f:
            model = f.read()
    else:
        model = conv_onnx_model()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    t = wall(lambda: sess.run(None, {"x": x}))
    return {"seconds": t, "version": ort.__version__}


def _tvm_target(tvm):
    """The host CPU as LLVM names it (TVM's wheel refuses "native" with its conda triple)."""
    cpu = "generic"
    for llc in ("/usr/lib/llvm-22/bin/llc", "llc"):
        try:
            v = subprocess.run([llc, "--version"], capture_output=True, text=True).stdout
        except OSError:
            continue
        for line in v.splitlines():
            if "Host CPU:" in line:
                cpu = line.split(":", 1)[1].strip()
        break
    return tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-pc-linux-gnu", "mcpu": cpu, "num-cores": 2})


def peer_tvm_conv(knobs_json):
    """TVM (s_tir, the TensorIR schedule that replaced te schedules) with the kiln CPU
    conv2d schedule's structure: local accumulation block of oc_block x ow_block per
    (n, channel block, row, column block), parallel rows, vectorized columns."""
    import numpy as np
    import tvm
    from tvm import te, topi
    k = json.loads(knobs_json)
    c = CONV
    X = te.placeholder((c["N"], c["C"], c["H"], c["W"]), name="X")
    W = te.placeholder((c["O"], c["C"], c["K"], c["K"]), name="W")
    Y = topi.nn.conv2d_nchw(X, W, 1, 1, 1)
    mod = tvm.IRModule({"main": te.create_prim_func([X, W, Y])})
    sch = tvm.s_tir.Schedule(mod)
    pad = sch.get_sblock("pad_temp")
    conv = sch.get_sblock("conv2d_nchw")
    n, f, y, x, rc, ry, rx = sch.get_loops(conv)
    fo, fi = sch.split(f, [None, k["oc_block"]])
    xo, xi = sch.split(x, [None, k["ow_block"] or c["W"]])
    xio, xii = sch.split(xi, [None, k["vec"]])
    sch.reorder(n, fo, y, xo, rc, ry, rx, fi, xio, xii)
    cw = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(cw, xo)
    g = sch.fuse(n, fo, y)
    sch.parallel(g)
    sch.vectorize(xii)
    sch.unroll(xio)
    sch.unroll(fi)
    sch.vectorize(sch.get_loops(cw)[-1])
    if k.get("inline_pad"):
        sch.compute_inline(pad)
    else:
        sch.parallel(sch.get_loops(pad)[1])
    target = _tvm_target(tvm)
    lib = tvm.compile(sch.mod, target=target)
    dev = tvm.cpu(0)
    xa = tvm.runtime.tensor(np.random.rand(*[int(d) for d in X.shape]).astype("float32"), dev)
    wa = tvm.runtime.tensor(np.random.rand(*[int(d) for d in W.shape]).astype("float32"), dev)
    ya = tvm.runtime.tensor(np.zeros([int(d) for d in Y.shape], "float32"), dev)
    lib = lib.jit() if hasattr(lib, "jit") else lib
    ev = lib.time_evaluator("main", dev, number=10, repeat=5)
    r = ev(xa, wa, ya)
    return {"seconds": float(np.median(r.results)), "version": tvm.__version__}


def peer_tvm_sgemm(n, knobs_json):
    """TVM's build of the kiln CPU matmul schedule (tiles bm x bn, k split by bk, local
    accumulation, vectorized bn, parallel row tiles) for one size."""
    import numpy as np
    import tvm
    from tvm import te
    k = json.loads(knobs_json)
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    r = te.reduce_axis((0, n), name="k")
    bn = k["bn"]
    if k.get("pack"):
        # as topi.matmul(pack=bn): B in column panels first
        PB = te.compute((n // bn, n, bn), lambda jo, kk, ji: B[kk, jo * bn + ji], name="PB")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, r] * PB[j // bn, r, j % bn], axis=r), name="C")
    else:
        C = te.compute((n, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
    if k.get("pack"):
        pb = sch.get_sblock("PB")
        p0, _, p2 = sch.get_loops(pb)
        sch.parallel(p0)
        sch.vectorize(p2)
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    io, ii = sch.split(i, [None, k["bm"]])
    jo, ji = sch.split(j, [None, k["bn"]])
    ko, ki = sch.split(kk, [None, k["bk"]])
    # kiln's order: column panels over the pool ("ji") or row tiles ("ij"); k, then the
    # bm x bn accumulators
    outer, inner = (jo, io) if k.get("order", "ij") == "ji" else (io, jo)
    sch.reorder(outer, inner, ko, ki, ii, ji)
    sch.unroll(ii)
    cw = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(cw, inner)
    sch.parallel(outer)
    sch.vectorize(sch.get_loops(cw)[-1])
    init = sch.decompose_reduction(blk, ko)
    sch.vectorize(sch.get_loops(init)[-1])
    # s_tir refuses vectorize on a loop over a reduction block's update; LLVM's loop
    # vectorizer takes the innermost (contiguous) ji loop instead.
    if k.get("unroll_k"):
        sch.unroll(ki)
    lib = tvm.compile(sch.mod, target=_tvm_target(tvm))
    dev = tvm.cpu(0)
    a = tvm.runtime.tensor(np.random.rand(n, n).astype("float32"), dev)
    b = tvm.runtime.tensor(np.random.rand(n, n).astype("float32"), dev)
    c = tvm.runtime.tensor(np.zeros((n, n), "float32"), dev)
    lib = lib.jit() if hasattr(lib, "jit") else lib
    ev = lib.time_evaluator("main", dev, number=1, repeat=3)
    res = ev(a, b, c)
    ok = np.allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-3, atol=1e-3)
    return {"seconds": float(np.median(res.results)), "version": tvm.__version__, "correct": bool(ok)}


def ensure_venv(path, log):
    py = os.path.join(path, "bin", "python")
    if not os.path.exists(py):
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", path], check=True)
    status = {}
    for pkg, mod in (("onnxruntime", "onnxruntime"), ("onnx", "onnx"), ("apache-tvm", "tvm")):
        r = subprocess.run([py, "-c", "import %s" % mod], capture_output=True)
        if r.returncode != 0:
            r = subprocess.run([py, "-m", "pip", "install", "-q", pkg], capture_output=True, text=True)
            if r.returncode != 0:
                status[pkg] = "did not install: " + (r.stderr.strip().splitlines() or ["?"])[-1]
                log("venv: %s %s" % (pkg, status[pkg]))
                continue
        status[pkg] = "ok"
    return py, status


def run_peer(py, args, timeout=600):
    r = subprocess.run([py, os.path.abspath(__file__), "--peer"] + args, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


# -- kiln ---------------------------------------------------------------------------------

def kiln_sgemm(s, dev, n, knobs, target):
    import numpy as np
    import kiln
    from kiln import te, topi
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    knobs = dict(knobs)
    pack = knobs.pop("pack", False)
    C = topi.matmul(A, B, pack=knobs["bn"] if pack else None)
    sch = topi.schedule_matmul(C, "gpu" if target != "llvm" else "cpu", **knobs)
    f = kiln.build(sch, [A, B, C], target, name="sgemm", session=s, options=FAST)
    rng = np.random.default_rng(n)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    A_, B_, C_ = kiln.nd.array(a, dev), kiln.nd.array(b, dev), kiln.nd.empty((n, n), "float32", dev)
    f(A_, B_, C_)
    err = float(np.abs(C_.numpy() - a @ b).max())
    number = 1 if n >= 2048 else 3
    r = f.time_evaluator(f.entry_name, dev, number=number, repeat=3)(A_, B_, C_)
    return {"seconds": r.median, "max_err": err, "compile_ms": f.module.compile_ms}


def kiln_conv(s, dev, knobs):
    import numpy as np
    import kiln
    from kiln import te, topi
    c = CONV
    X = te.placeholder((c["N"], c["C"], c["H"], c["W"]), name="X")
    W = te.placeholder((c["O"], c["C"], c["K"], c["K"]), name="W")
    Y = topi.conv2d_nchw(X, W, 1, c["pad"], 1)
    f = kiln.build(topi.schedule_conv2d_nchw(Y, "cpu", **knobs), [X, W, Y], "llvm", name="conv", session=s,
                   options=FAST)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (c["N"], c["C"], c["H"], c["W"])).astype("float32")
    w = rng.uniform(-1, 1, (c["O"], c["C"], c["K"], c["K"])).astype("float32")
    xa, wa = kiln.nd.array(x, dev), kiln.nd.array(w, dev)
    ya = kiln.nd.empty((c["N"], c["O"], c["H"], c["W"]), "float32", dev)
    f(xa, wa, ya)
    ref = np.zeros((c["O"], c["H"], c["W"]), "float64")
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    for ry in range(3):
        for rx in range(3):
            ref += np.einsum("chw,oc->ohw", xp[:, ry:ry + c["H"], rx:rx + c["W"]], w[:, :, ry, rx])
    err = float(np.abs(ya.numpy()[0] - ref).max())
    r = f.time_evaluator(f.entry_name, dev, number=10, repeat=5)(xa, wa, ya)
    return {"seconds": r.median, "max_err": err}


def gflops(n, t):
    return 2.0 * n ** 3 / t / 1e9


def cublas_sgemm(n):
    """cuBLAS SGEMM time through ctypes (libcublas + libcudart), or an error string."""
    import ctypes
    try:
        rt = ctypes.CDLL("libcudart.so")
        bl = ctypes.CDLL("libcublas.so")
    except OSError as e:
        return {"error": "no libcublas/libcudart: %s" % e}
    ptrs = [ctypes.c_void_p() for _ in range(3)]
    for p in ptrs:
        if rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n * n * 4)):
            return {"error": "cudaMalloc failed"}
    h = ctypes.c_void_p()
    bl.cublasCreate_v2(ctypes.byref(h))
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def call():
        bl.cublasSgemm_v2(h, 0, 0, n, n, n, ctypes.byref(one), ptrs[0], n, ptrs[1], n, ctypes.byref(zero),
                          ptrs[2], n)
    ev = [ctypes.c_void_p(), ctypes.c_void_p()]
    for e in ev:
        rt.cudaEventCreate(ctypes.byref(e))
    call()
    rt.cudaDeviceSynchronize()
    res = []
    reps = 20 if n <= 2048 else 5
    for _ in range(3):
        rt.cudaEventRecord(ev[0], None)
        for _ in range(reps):
            call()
        rt.cudaEventRecord(ev[1], None)
        rt.cudaEventSynchronize(ev[1])
        ms = ctypes.c_float()
        rt.cudaEventElapsedTime(ctypes.byref(ms), ev[0], ev[1])
        res.append(ms.value / 1e3 / reps)
    for p in ptrs:
        rt.cudaFree(p)
    bl.cublasDestroy_v2(h)
    return {"seconds": median(res)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", default=os.environ.get("KILND") or os.path.join(ROOT, "build", "server", "kilnd"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "te.md"))
    ap.add_argument("--venv", default=os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                   os.path.expanduser("~/.cache"), "kiln-te-bench"))
    ap.add_argument("--sizes", default="1024,2048,4096")
    ap.add_argument("--no-peers", action="store_true", help="skip the venv (onnxruntime, TVM)")
    ap.add_argument("--gpu-only", action="store_true", help="= --parts gpu")
    ap.add_argument("--parts", default="sgemm,conv,gpu", help="which of sgemm (CPU), conv (CPU), gpu to run")
    ap.add_argument("--peer", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--peer-python", help="run onnxruntime with this python instead of the venv (machines "
                    "without network: with --onnx-model, a model file made by --peer onnx-model PATH)")
    ap.add_argument("--onnx-model")
    a = ap.parse_args()
    if a.peer:
        kind = a.peer[0]
        if kind == "ort":
            out = peer_ort(int(a.peer[1]), a.peer[2] if len(a.peer) > 2 else None)
        elif kind == "onnx-model":
            with open(a.peer[1], "wb") as f:
                f.write(conv_onnx_model())
            out = {"written": a.peer[1]}
        elif kind == "tvm-conv":
            out = peer_tvm_conv(a.peer[1])
        else:
            out = peer_tvm_sgemm(int(a.peer[1]), a.peer[2])
        print(json.dumps(out))
        return

    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
    import numpy as np
    import kiln
    lines = []

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    def out(line=""):
        lines.append(line)
        print(line, flush=True)

    sizes = [int(x) for x in a.sizes.split(",")]
    parts = {"gpu"} if a.gpu_only else set(a.parts.split(","))
    d = kiln.start_daemon(a.kilnd)
    s = kiln.connect(d.urls[0])
    commit = os.environ.get("KILN_COMMIT") or subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
                     platform.processor())
    import io
    import contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        np.show_config()
    blas = "OpenBLAS" if "openblas" in buf.getvalue().lower() or os.path.realpath(
        "/usr/lib/x86_64-linux-gnu/libblas.so.3").find("openblas") >= 0 else "reference BLAS"
    out("# te benchmarks (bench/te_bench.py)")
    out()
    out("- date: %s UTC; kiln %s" % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), commit))
    out("- machine: %s, %d cores (%s); numpy %s with %s (libblas.so.3 -> %s)"
        % (cpu_model, os.cpu_count(), platform.platform(), np.__version__, blas,
           os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")))
    out("- load average at start: %.2f %.2f %.2f (other work on the machine slows both sides)" % os.getloadavg())
    devs = s.devices_info()
    out("- kilnd devices: %s" % ", ".join("%s (%s)" % (x["id"], x.get("name")) for x in devs))
    out()

    venv_py, venv_status = (None, {})
    if a.peer_python:
        venv_py = a.peer_python
        ok = subprocess.run([venv_py, "-c", "import onnxruntime"], capture_output=True).returncode == 0
        venv_status = {"onnxruntime": "ok" if ok else "not importable", "onnx": "ok" if ok else "-",
                       "apache-tvm": "not installed on this machine"}
        out("- peers: %s (%s)" % (venv_py, ", ".join("%s %s" % kv for kv in venv_status.items())))
        out()
    elif not a.no_peers and parts & {"sgemm", "conv"}:
        try:
            venv_py, venv_status = ensure_venv(a.venv, log)
        except Exception as e:  # noqa: BLE001 (reported)
            venv_status = {"venv": "failed: %s" % e}
        out("- peers venv (%s): %s" % (a.venv, ", ".join("%s %s" % kv for kv in venv_status.items())))
        out()

    dev = s.cpu(0)
    if "sgemm" in parts:
        out("## SGEMM float32 on the CPU: kiln topi.matmul vs numpy (%s)" % blas)
        out()
        best, best_t = None, None
        out("Knob search at 1024 (median seconds):")
        out()
        for kn in CPU_KNOBS:
            try:
                r = kiln_sgemm(s, dev, 1024, kn, "llvm")
                out("- %s: %.4f s (%.1f GFLOP/s), max err %.1e" % (kn, r["seconds"], gflops(1024, r["seconds"]),
                                                                    r["max_err"]))
                if best_t is None or r["seconds"] < best_t:
                    best, best_t = kn, r["seconds"]
            except kiln.KilnError as e:
                out("- %s: failed: %s" % (kn, e))
        out()
        out("| n | kiln s | kiln GFLOP/s | numpy s | numpy GFLOP/s | kiln/numpy | TVM s (same schedule) | bar 40% |")
        out("|---|---|---|---|---|---|---|---|")
        for n in sizes:
            if best is None:
                break
            r = kiln_sgemm(s, dev, n, best, "llvm")
            x = np.random.rand(n, n).astype("float32")
            y = np.random.rand(n, n).astype("float32")
            tn = wall(lambda: x @ y, min_s=1.0 if n < 4096 else 2.0, repeat=3)
            tv = "-"
            if venv_py and venv_status.get("apache-tvm") == "ok":
                p = run_peer(venv_py, ["tvm-sgemm", str(n), json.dumps(best)])
                tv = ("%.4f" % p["seconds"]) if "seconds" in p else "failed: %s" % p["error"][:80]
            ratio = tn / r["seconds"]
            out("| %d | %.4f | %.1f | %.4f | %.1f | %.0f%% | %s | %s |" % (
                n, r["seconds"], gflops(n, r["seconds"]), tn, gflops(n, tn), ratio * 100, tv,
                "met" if ratio >= 0.4 else "below"))
        out()
        out("Best CPU knobs: %s" % (best,))
        out()

    if "conv" in parts:
        out("## conv2d 3x3 64->64 56x56 batch 1 (pad 1) on the CPU: kiln topi.conv2d_nchw vs onnxruntime")
        out()
        cbest, cbest_t = None, None
        for kn in CONV_KNOBS:
            try:
                r = kiln_conv(s, dev, kn)
                out("- %s: %.3f ms, max err %.1e" % (kn, r["seconds"] * 1e3, r["max_err"]))
                if cbest_t is None or r["seconds"] < cbest_t:
                    cbest, cbest_t = kn, r["seconds"]
            except kiln.KilnError as e:
                out("- %s: failed: %s" % (kn, e))
        out()
        flop = 2.0 * 64 * 64 * 9 * 56 * 56
        ort_r = run_peer(venv_py, ["ort", "2"] + ([a.onnx_model] if a.onnx_model else [])) if venv_py and venv_status.get("onnxruntime") == "ok" \
            and venv_status.get("onnx") == "ok" else {"error": "onnxruntime not installed"}
        tvm_r = run_peer(venv_py, ["tvm-conv", json.dumps(cbest or CONV_KNOBS[0])]) \
            if venv_py and venv_status.get("apache-tvm") == "ok" else {"error": "apache-tvm not installed"}
        out("| | ms | GFLOP/s | kiln / peer |")
        out("|---|---|---|---|")
        if cbest_t:
            out("| kiln (%s) | %.3f | %.1f | |" % (cbest, cbest_t * 1e3, flop / cbest_t / 1e9))
        for name, r in (("onnxruntime %s (2 threads)" % ort_r.get("version", ""), ort_r),
                        ("TVM %s, same schedule" % tvm_r.get("version", ""), tvm_r)):
            if "seconds" in r:
                out("| %s | %.3f | %.1f | %s |" % (name, r["seconds"] * 1e3, flop / r["seconds"] / 1e9,
                                                   "%.0f%%" % (r["seconds"] / cbest_t * 100) if cbest_t else "-"))
            else:
                out("| %s | failed: %s | | |" % (name, r["error"][:120]))
        out()

    gdev = s.cuda(0)
    if "gpu" in parts and gdev.exist:
        out("## SGEMM float32 on %s: kiln topi.matmul (GPU template) vs cuBLAS" % gdev.name)
        out()
        gbest, gbest_t = None, None
        for kn in GPU_KNOBS:
            try:
                r = kiln_sgemm(s, gdev, 2048, kn, gdev)
                out("- %s at 2048: %.3f ms (%.0f GFLOP/s), max err %.1e" % (kn, r["seconds"] * 1e3,
                                                                           gflops(2048, r["seconds"]), r["max_err"]))
                if gbest_t is None or r["seconds"] < gbest_t:
                    gbest, gbest_t = kn, r["seconds"]
            except kiln.KilnError as e:
                out("- %s: failed: %s" % (kn, e))
        out()
        out("| n | kiln ms | kiln GFLOP/s | cuBLAS ms | cuBLAS GFLOP/s | kiln/cuBLAS | bar 60% |")
        out("|---|---|---|---|---|---|---|")
        for n in sizes:
            if gbest is None:
                break
            r = kiln_sgemm(s, gdev, n, gbest, gdev)
            cb = cublas_sgemm(n)
            if "seconds" in cb:
                ratio = cb["seconds"] / r["seconds"]
                out("| %d | %.3f | %.0f | %.3f | %.0f | %.0f%% | %s |" % (
                    n, r["seconds"] * 1e3, gflops(n, r["seconds"]), cb["seconds"] * 1e3, gflops(n, cb["seconds"]),
                    ratio * 100, "met" if ratio >= 0.6 else "below"))
            else:
                out("| %d | %.3f | %.0f | %s | | | |" % (n, r["seconds"] * 1e3, gflops(n, r["seconds"]), cb["error"]))
        out()
        out("Best GPU knobs: %s" % (gbest,))
        out()
    s.close()
    d.stop()
    if a.out:
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
