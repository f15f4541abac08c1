#!/usr/bin/python3
"""kiln.autotune on one device, beside the peer library, in one run (issue 15).

    /usr/bin/python3 bench/autotune.py [--kilnd build/server/kilnd | --url URL] [--device cpu:0]
        [--n 1024] [--trials 80] [--out bench/results/autotune.md] [--parts sgemm,curves,conv]

- SGEMM n x n x n float32: the model tuner for --trials trials, and its best against the peer
  (numpy/OpenBLAS in a child process with as many threads as the device's pool on cpu:N;
  cuBLAS through ctypes on cuda:N, TF32 off: the default math mode) and against the
  template's default knobs.
- curves: the random tuner on the same task and trial count; best-so-far after N trials of
  both, and how many trials the model took to reach random's final best (conv-curves: the
  same for the conv2d layer, with --parts conv).
- conv: ResNet-50's 3x3 64->64 56x56 layer tuned likewise, then side by side with onnxruntime's
  Conv (one-node model, intra_op_num_threads = the pool's threads, sequential) run by the
  python of --ort-python (default build/onnx-venv/bin/python: bash .ci/onnx-venv makes it).
- trial throughput: trials per second with the breakdown (compile: the rounds' compile_batch
  wall time; check: the correctness run with its transfers; time: the `time` requests).

Writes a markdown report (appended section) to --out and prints it. Each tuner run uses its
own records file in a temporary folder and a fresh daemon cache when --kilnd starts one.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import kiln  # noqa: E402
from kiln import autotune as at  # noqa: E402
from kiln.autotune.plot import curve  # noqa: E402


CONV = (1, 64, 56, 56, 64, 3, 3, 1, 1)  # ResNet-50's 3x3 layer of its first stage


def loadavg():
    try:
        return open("/proc/loadavg").read().split()[:3]
    except OSError:
        return ["?"] * 3


def start_pinned(kilnd, tmp, pin=None):
    """One kilnd on a unix socket in tmp, its cache there too; pin "KERNEL,COMPILE" puts cpu:0
    on core KERNEL and the compile workers on COMPILE (None: unpinned)."""
    pins = []
    if pin:
        k, c = pin.split(",")
        pins = ["--pin", "cpu:0=" + k, "--pin", "compile=" + c]
    return kiln.start_daemon(kilnd, listen=["unix:" + os.path.join(tmp, "k.sock")],
                             cache_dir=os.path.join(tmp, "cache"), args=pins)


def commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return "?"


# The peers' timing loop (numpy's and onnxruntime's programs start with it): after a warm-up
# call, 5 times: enough calls for about 0.3 s, their mean; the median of the 5.
PEER_TIMER = r"""
import json, sys, time


def seconds(fn):
    fn()
    means = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        reps = max(1, int(0.3 / max(1e-6, time.perf_counter() - t0)))
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        means.append((time.perf_counter() - t0) / reps)
    return sorted(means)[len(means) // 2]
"""

PEER_NUMPY = PEER_TIMER + r"""
import numpy as np
n = int(sys.argv[1])
a = np.random.rand(n, n).astype("float32"); b = np.random.rand(n, n).astype("float32")
cfg = ""
try:
    import io, contextlib
    f = io.StringIO()
    with contextlib.redirect_stdout(f):
        np.show_config()
    cfg = "openblas" if "openblas" in f.getvalue().lower() else "?"
except Exception:
    pass
print(json.dumps({"seconds": seconds(lambda: a @ b), "numpy": np.__version__, "blas": cfg}))
"""


def peer_numpy(n, threads):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    p = subprocess.run(["/usr/bin/python3", "-c", PEER_NUMPY, str(n)], capture_output=True, text=True, env=env,
                       timeout=600)
    if p.returncode:
        return {"error": p.stderr[-300:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


PEER_ORT = PEER_TIMER + r"""
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, numpy_helper, TensorProto
threads = int(sys.argv[1])
N, C, H, W, O, KH, KW, stride, pad = [int(v) for v in sys.argv[2].split(",")]
OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
w = np.random.rand(O, C, KH, KW).astype("float32")
node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[KH, KW], pads=[pad] * 4, strides=[stride] * 2)
g = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, H, W])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, O, OH, OW])],
                      initializer=[numpy_helper.from_array(w, "w")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
m.ir_version = 8
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
feed = {"x": np.random.rand(N, C, H, W).astype("float32")}
print(json.dumps({"seconds": seconds(lambda: sess.run(None, feed)), "onnxruntime": ort.__version__}))
"""


def peer_ort(python, shapes, threads):
    if not os.access(python, os.X_OK):
        return {"error": "no %s (bash .ci/onnx-venv makes it)" % python}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run([python, "-c", PEER_ORT, str(threads), ",".join(map(str, shapes))], capture_output=True,
                       text=True, env=env, timeout=600)
    if p.returncode:
        return {"error": p.stderr[-300:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def peer_cublas(n):
    sys.path.insert(0, HERE)
    from te_bench import cublas_sgemm
    return cublas_sgemm(n)


def best_after(recs, ns):
    c = curve(recs)
    out = {}
    for n in ns:
        pts = [x for x in c if x[0] <= n]
        out[n] = pts[-1][2] if pts else 0.0
    return out


def trials_to_reach(recs, target):
    for t, _, b in curve(recs):
        if b >= target:
            return t
    return None


def compile_wait(recs):
    """What the loop waited for compiles: each trial's compile_wait_s (records with
    compile_items; in older ones every trial of a round repeated the round's wait)."""
    if all("compile_items" in r["result"] for r in recs if "compile_wait_s" in r["result"]):
        return sum(r["result"].get("compile_wait_s") or 0 for r in recs)
    rounds = {}
    for r in recs:
        res = r["result"]
        if "compile_s_batch" in res:
            rounds[(r.get("round"), r.get("runner"))] = res.get("compile_wait_s", res["compile_s_batch"])
    return sum(rounds.values())


def breakdown(recs, wall_s):
    """Seconds of a run's trials by stage: compile (what the loop waited for the rounds'
    compile_batch), check (output reset, run, download; and the comparison), time (the `time`
    requests), other (the rest of the wall time: the tuner, records, leases, uploads)."""
    oks = [r["result"] for r in recs if r["result"].get("ok")]
    compile_s = compile_wait(recs)
    check_s = sum(x.get("check_s", 0) + x.get("compare_s", 0) for x in oks)
    time_s = sum(x.get("time_s", 0) for x in oks)
    return {"trials": len(recs), "wall_s": wall_s, "per_s": len(recs) / wall_s if wall_s else 0,
            "compile_s": compile_s, "check_s": check_s, "time_s": time_s,
            "other_s": max(0.0, wall_s - compile_s - check_s - time_s)}


class Report:
    """A markdown report: out(line) prints it and keeps it; write(path) appends the whole."""

    def __init__(self):
        self.lines = []

    def __call__(self, line=""):
        self.lines.append(line)
        print(line, flush=True)

    def write(self, path):
        if path:
            with open(path, "a") as f:
                f.write("\n".join(self.lines) + "\n")


def side_by_side(s, dev, r, n, threads, rounds, peer=None):
    """The tuned and default knobs built again and timed in alternation with the peer, `rounds`
    times: each figure is the median over the rounds (the tuning run's own figures are the
    best of many noisy measurements, and the peer ran at another moment). `peer`: a function
    returning {"seconds": ...} (default: SGEMM n's peer of the device kind)."""
    import numpy as np
    sp = r.task.space
    mods = {}
    for name, cfg in (("tuned", r.best["knobs"]), ("default", sp.default())):
        sch, args = sp.build(cfg)
        mods[name] = kiln.build(sch, args, dev, session=s, options={"fast_math": True})
    ins = sp.inputs()
    xs = [kiln.nd.array(x, dev) for x in ins] + [kiln.nd.empty(sp.output_shape(), "float32", dev)]
    mods["tuned"](*xs)
    err = float(np.abs(xs[-1].numpy() - sp.reference(ins)).max())
    times = {"tuned": [], "default": [], "peer": []}
    for _ in range(rounds):
        for name in ("tuned", "default"):
            times[name].append(mods[name].time_evaluator(number=1, repeat=5, min_repeat_ms=200)(*xs).median)
        p = peer() if peer else peer_cublas(n) if dev.kind == "cuda" else peer_numpy(n, threads)
        times["peer"].append(p.get("seconds"))
        times["peer_info"] = p
    med = {k: sorted(v)[len(v) // 2] if v and None not in v else None for k, v in times.items() if k != "peer_info"}
    return med, times, err


def side_table(out, med, times, flop, pname, what, short):
    """The side-by-side table of side_by_side's figures, and the ratio line."""
    out("| | time | GFLOP/s | rounds (ms) |")
    out("|---|---|---|---|")
    for k, name in (("tuned", "kiln tuned"), ("default", "kiln default knobs"), ("peer", pname)):
        if med.get(k):
            out("| %s | %.3f ms | %.1f | %s |" % (name, med[k] * 1e3, flop / med[k] / 1e9,
                                                 " ".join("%.2f" % (x * 1e3) for x in times[k])))
        else:
            out("| %s | – | – | %s |" % (name, times["peer_info"].get("error")))
    if med.get("peer") and med.get("tuned"):
        out()
        out("%s is **%.0f%%** of %s; %.2fx its default knobs." % (
            what, 100 * med["peer"] / med["tuned"], short, med["default"] / med["tuned"]))
    out()


def curves(out, rm, rr, what, n_trials):
    """Best GFLOP/s after N trials of the model and the random tuner on one task, and the
    trial at which the model reached random's final best."""
    marks = [n for n in (8, 16, 24, 32, 48, 64, 80, 120, 160, 200) if n <= n_trials]
    bm, br = best_after(rm.records, marks), best_after(rr.records, marks)
    out("### Model against random, %s (best GFLOP/s after N trials, same task)" % what)
    out()
    out("| N | " + " | ".join(str(n) for n in marks) + " |")
    out("|---|" + "---|" * len(marks))
    out("| model | " + " | ".join("%.1f" % bm[n] for n in marks) + " |")
    out("| random | " + " | ".join("%.1f" % br[n] for n in marks) + " |")
    final = br[marks[-1]]
    reach = trials_to_reach(rm.records, final)
    out()
    out("The model reached random's best after %d trials (%.1f GFLOP/s) %s." % (
        marks[-1], final, "at trial %d" % reach if reach else "not within its %d trials" % n_trials))
    out()


def run_tuner(s, dev, op, shapes, tuner, trials, tmp, log, **kw):
    rec = os.path.join(tmp, "%s-%s-%s.jsonl" % (op, "x".join(map(str, shapes)), tuner))
    task = at.Task(op, shapes, "float32", dev)
    t0 = time.monotonic()
    r = at.tune(task, s, trials=trials, tuner=tuner, records=rec, progress=sys.stderr, **kw)
    wall = time.monotonic() - t0
    log("%s %s %s: %d trials in %.1f s, best %s" % (op, shapes, tuner, len(r.trials), wall,
                                                  r.best and r.best["result"]["gflops"]))
    return r, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", default=os.path.join(ROOT, "build", "server", "kilnd"))
    ap.add_argument("--url", default=None, help="measure on a running kilnd instead of starting one")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--trials", type=int, default=80)
    ap.add_argument("--conv-trials", type=int, default=40)
    ap.add_argument("--parts", default="sgemm,curves,conv")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "autotune.md"))
    ap.add_argument("--note", default="", help="a line about the machine's conditions")
    ap.add_argument("--rounds", type=int, default=3, help="side-by-side rounds after tuning")
    ap.add_argument("--ort-python", default=os.path.join(ROOT, "build", "onnx-venv", "bin", "python"),
                    help="a python with onnxruntime and onnx: the conv2d peer")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    out = Report()

    def log(msg):
        sys.stderr.write("bench: %s\n" % msg)

    tmp = tempfile.mkdtemp(prefix="kiln-autotune-bench-")
    d = None
    if a.url:
        s = kiln.connect(a.url)
    else:
        d = kiln.start_daemon(a.kilnd, listen=["unix:" + os.path.join(tmp, "k.sock")],
                              cache_dir=os.path.join(tmp, "cache"))
        s = kiln.connect(d.urls[0])
    try:
        dev = s.device(a.device)
        threads = int(dev.compute_units or 1)
        load0 = loadavg()
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        res = {}
        if "sgemm" in parts or "curves" in parts:
            res["model"] = run_tuner(s, dev, "matmul", (a.n, a.n, a.n), "model", a.trials, tmp, log)
        if "curves" in parts:
            res["random"] = run_tuner(s, dev, "matmul", (a.n, a.n, a.n), "random", a.trials, tmp, log)
        if "conv" in parts:
            res["conv"] = run_tuner(s, dev, "conv2d", CONV, "model", a.conv_trials, tmp, log)
        if "conv-curves" in parts:
            res["conv random"] = run_tuner(s, dev, "conv2d", CONV, "random", a.conv_trials, tmp, log)
        final = final_conv = None
        if "sgemm" in parts and "model" in res:
            final = side_by_side(s, dev, res["model"][0], a.n, threads, a.rounds)
        if "conv" in res and dev.kind == "cpu":
            final_conv = side_by_side(s, dev, res["conv"][0], 0, threads, a.rounds,
                                      peer=lambda: peer_ort(a.ort_python, CONV, threads))
        load1 = loadavg()

        out("## %s, %s (%s, %s), %s, %d cores, kiln %s" % (started, a.device, dev.name, dev.arch, platform.node(),
                                                         os.cpu_count(), commit()))
        out()
        out("`/usr/bin/python3 bench/autotune.py %s` — load average %s at the start, %s at the end%s." % (
            " ".join(sys.argv[1:]), "/".join(load0), "/".join(load1), (". " + a.note) if a.note else ""))
        try:
            import sklearn
            model = "scikit-learn %s" % sklearn.__version__
        except ImportError:
            model = "absent: the model tuner proposed at random"
        out("Cost model: %s. Threads: the device's pool has %d; a CPU peer runs with OPENBLAS_NUM_THREADS=%d."
            % (model, threads, threads))
        out()
        if "model" in res:
            r, wall = res["model"]
            b, df = r.best["result"], r.default and r.default["result"]
            out("### SGEMM %d float32, model tuner, %d trials (%.0f s)" % (a.n, len(r.records), wall))
            out()
            out("| | time | GFLOP/s | |")
            out("|---|---|---|---|")
            out("| tuned: `%s` | %.3f ms | %.1f | found at trial %d |" % (
                json.dumps(r.best["knobs"], sort_keys=True), b["mean"] * 1e3, b["gflops"], r.best["trial"]))
            if df:
                out("| default knobs | %.3f ms | %.1f | tuned is %.2fx |" % (df["mean"] * 1e3, df["gflops"],
                                                                         df["mean"] / b["mean"]))
            failed = sum(1 for x in r.records if not x["result"].get("ok"))
            out()
            out("%d of %d trials failed (%s)." % (failed, len(r.records), ", ".join(sorted(set(
                x["result"]["error"] for x in r.records if not x["result"].get("ok")))) or "none"))
            out()
        if final:
            med, times, err = final
            flop = 2.0 * a.n ** 3
            peer = times["peer_info"]
            pname = "cuBLAS (TF32 off: default math mode)" if dev.kind == "cuda" else \
                "numpy %s/OpenBLAS, %d threads" % (peer.get("numpy"), threads)
            out("Side by side after tuning: the tuned and default builds and the peer, alternated %d times "
                "(kiln: time_evaluator median of 5 repeats of at least 200 ms; peer: its own loop); medians of "
                "the rounds. Tuned build's max abs error against numpy: %.2g." % (a.rounds, err))
            out()
            side_table(out, med, times, flop, pname, "Tuned kiln", pname.split(" (")[0])
        for mk, rk, what, n_trials in (("model", "random", "SGEMM %d" % a.n, a.trials),
                                       ("conv", "conv random", "conv2d", a.conv_trials)):
            if mk in res and rk in res:
                curves(out, res[mk][0], res[rk][0], what, n_trials)
        if "conv" in res:
            r, wall = res["conv"]
            b, df = r.best["result"], r.default and r.default["result"]
            out("### conv2d 3x3 64->64 56x56 (ResNet-50 layer), model tuner, %d trials (%.0f s)" % (
                len(r.records), wall))
            out()
            out("tuned `%s`: %.3f ms, %.1f GFLOP/s%s." % (
                json.dumps(r.best["knobs"], sort_keys=True), b["mean"] * 1e3, b["gflops"],
                "; default knobs %.3f ms (tuned %.2fx)" % (df["mean"] * 1e3, df["mean"] / b["mean"]) if df else ""))
            out()
        if final_conv:
            med, times, err = final_conv
            flop = res["conv"][0].task.space.flops
            peer = times["peer_info"]
            pname = "onnxruntime %s Conv, %d threads" % (peer.get("onnxruntime"), threads)
            out("Side by side after tuning, alternated %d times as for SGEMM (onnxruntime: a one-node model, "
                "intra_op_num_threads %d, sequential, its own loop). Tuned build's max abs error against numpy: "
                "%.2g." % (a.rounds, threads, err))
            out()
            side_table(out, med, times, flop, pname, "Tuned kiln conv2d", pname)
        if res:
            out("### Trial throughput")
            out()
            out("| run | trials | wall s | trials/s | compile s | check s | time s | other s |")
            out("|---|---|---|---|---|---|---|---|")
            for name, (r, wall) in res.items():
                bd = breakdown(r.trials, wall)
                out("| %s | %d | %.1f | %.2f | %.1f | %.1f | %.1f | %.1f |" % (
                    name, bd["trials"], wall, bd["per_s"], bd["compile_s"], bd["check_s"], bd["time_s"],
                    bd["other_s"]))
            out()
            out("compile: how long the loop waited for the rounds' `compile_batch` (lowering included); check: "
                "output reset, one run and download (one wait), and the comparison; time: the `time` requests "
                "(repeat 3, min_repeat_ms 50); other: leases, uploads, records, the tuner.")
            out()
    finally:
        s.close()
        if d is not None:
            d.stop()
    out.write(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
