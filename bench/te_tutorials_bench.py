#!/usr/bin/python3
"""TVM's tutorial schedules in kiln beside apache-tvm 0.27 running the same schedules, in one run.

    /usr/bin/python3 bench/te_tutorials_bench.py [--kilnd build/server/kilnd] [--out FILE] [--n 1024]

kiln runs the schedules of tests/python/tutorials.py (TVM's tutorials in kiln.te); TVM runs the
same schedules written with tvm.s_tir (TVM 0.27 has no te schedules: create_prim_func, then
split, reorder, vectorize, unroll, parallel, cache_write + reverse_compute_at where the
tutorial has compute_at of a cache_write stage), in a venv this script makes
($XDG_CACHE_HOME/kiln-te-bench: apache-tvm 0.27, apache-tvm-ffi pinned to 0.1.14.post0 since
0.1.15.post2 segfaults in save_json, cloudpickle for its RPC). TVM targets llvm with the host's
CPU name and 2 cores. Measurements alternate kiln and TVM one at a time so that load on the
machine falls on both; each is the minimum over repeats of device-timed runs (time_evaluator
on both sides), results checked against numpy first.

1. opt_gemm ("How to optimize GEMM on CPU"), every step at n x n (bar: kiln within 1.2x of
   TVM or faster), plus the last step without unroll(ki) (unroll must not make it slower).
2. A tuning batch of 16 configurations of the last step (bn in 8 16 32 64, kfactor in 2 4 8 16):
   each configuration's time (bar: within 1.5x of TVM), and the batch end to end (compile,
   upload, measure): kiln's compile_batch against TVM's hand loop of tvm.compile +
   time_evaluator (bar: kiln faster; goal 3x).
3. A loop of 262,144 iterations marked parallel (bar: within 2x of TVM).
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
STEPS = ("default", "blocking", "vectorization", "permutation", "packing", "write_cache", "parallel")
TRIALS = [(bn, kf) for bn in (8, 16, 32, 64) for kf in (2, 4, 8, 16)]
PAR_N = 262144
PINS = ["apache-tvm==0.27.*", "apache-tvm-ffi==0.1.14.post0", "cloudpickle"]


# -- TVM (runs in the venv) -------------------------------------------------------------------

def tvm_target(tvm):
    cpu = "generic"
    r = subprocess.run(["/usr/lib/llvm-22/bin/llc", "--version"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if "Host CPU:" in line:
            cpu = line.split(":", 1)[1].strip()
    return tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-pc-linux-gnu", "mcpu": cpu, "num-cores": 2})


def tvm_opt_gemm(tvm, step, n, bn=32, kf=4, unroll=True):
    """TVM's opt_gemm tutorial schedule of `step` in s_tir."""
    from tvm import te
    k = te.reduce_axis((0, n), "k")
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    if step in STEPS[:4]:
        C = te.compute((n, n), lambda x, y: te.sum(A[x, k] * B[k, y], axis=k), name="C")
        sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
        if step == "default":
            return sch
        i, j, kk = sch.get_loops(sch.get_sblock("C"))
        mo, mi = sch.split(i, [None, bn])
        no, ni = sch.split(j, [None, bn])
        ko, ki = sch.split(kk, [None, kf])
        sch.reorder(*((mo, no, ko, mi, ki, ni) if step == "permutation" else (mo, no, ko, ki, mi, ni)))
        if step != "blocking":
            sch.vectorize(ni)
        return sch
    packedB = te.compute((n // bn, n, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute((n, n), lambda x, y: te.sum(A[x, k] * packedB[y // bn, k, y % bn], axis=k), name="C")
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    mo, mi = sch.split(i, [None, bn])
    no, ni = sch.split(j, [None, bn])
    if step == "packing":
        ko, ki = sch.split(kk, [None, kf])
        sch.reorder(mo, no, ko, mi, ki, ni)
        sch.vectorize(ni)
    else:
        sch.reorder(mo, no, mi, ni, kk)
        cw = sch.cache_write(blk, 0, "global")
        sch.reverse_compute_at(cw, no)
        ko, ki = sch.split(kk, [None, kf])
        sch.reorder(ko, mi, ki, ni)
        sch.vectorize(ni)
        if unroll:
            sch.unroll(ki)
        if step == "parallel":
            sch.parallel(mo)
    x, _, z = sch.get_loops(sch.get_sblock("packedB"))
    sch.vectorize(z)
    sch.parallel(x)
    return sch


def tvm_parallel(tvm, n):
    from tvm import te
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B])}))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.parallel(i)
    return sch


def tvm_time(tvm, sch, args, number, repeat):
    lib = tvm.compile(sch.mod, target=tvm_target(tvm))
    lib = lib.jit() if hasattr(lib, "jit") else lib
    dev = tvm.cpu(0)
    return lib, min(lib.time_evaluator("main", dev, number=number, repeat=repeat)(*args).results)


def peer(kind, spec):
    import numpy as np
    import tvm
    dev = tvm.cpu(0)
    spec = json.loads(spec)
    if kind == "par":
        n = spec["n"]
        a = tvm.runtime.tensor(np.random.rand(n).astype("float32"), dev)
        b = tvm.runtime.tensor(np.zeros(n, "float32"), dev)
        _, t = tvm_time(tvm, tvm_parallel(tvm, n), (a, b), 100, 5)
        return {"seconds": t, "correct": bool(np.allclose(b.numpy(), a.numpy() * 2 + 1))}
    n = spec["n"]
    rng = np.random.default_rng(0)
    an, bn_ = rng.uniform(-1, 1, (n, n)).astype("float32"), rng.uniform(-1, 1, (n, n)).astype("float32")
    a, b = tvm.runtime.tensor(an, dev), tvm.runtime.tensor(bn_, dev)
    c = tvm.runtime.tensor(np.zeros((n, n), "float32"), dev)
    if kind == "gemm":
        repeat = 1 if spec["step"] in ("default", "blocking") else 3
        sch = tvm_opt_gemm(tvm, spec["step"], n, spec.get("bn", 32), spec.get("kf", 4), spec.get("unroll", True))
        _, t = tvm_time(tvm, sch, (a, b, c), 1, repeat)
        ok = bool(np.allclose(c.numpy(), an @ bn_, rtol=1e-3, atol=1e-3))
        return {"seconds": t, "correct": ok, "version": tvm.__version__}
    # kind == "batch": TVM's hand loop over the trials, end to end
    t0 = time.perf_counter()
    times = []
    for bn, kf in spec["trials"]:
        _, t = tvm_time(tvm, tvm_opt_gemm(tvm, "parallel", n, bn, kf), (a, b, c), 1, 3)
        times.append(t)
    return {"seconds": time.perf_counter() - t0, "trials": times}


def ensure_venv(path, log):
    py = os.path.join(path, "bin", "python")
    if not os.path.exists(py):
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", path], check=True)
    if subprocess.run([py, "-c", "import tvm, cloudpickle"], capture_output=True).returncode != 0:
        log("venv: pip install %s" % " ".join(PINS))
        r = subprocess.run([py, "-m", "pip", "install", "-q"] + PINS, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("pip install failed: %s" % (r.stderr.strip().splitlines() or ["?"])[-1])
    v = subprocess.run([py, "-c", "import tvm, tvm_ffi; print(tvm.__version__, tvm_ffi.__version__)"],
                       capture_output=True, text=True).stdout.split()
    return py, v


def run_peer(py, kind, spec, timeout=1800):
    r = subprocess.run([py, os.path.abspath(__file__), "--peer", kind, json.dumps(spec)], capture_output=True,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


# -- kiln -------------------------------------------------------------------------------------

def kiln_gemm(kiln, T, s, dev, data, step, n, bn=32, kf=4, unroll=True):
    import numpy as np
    sch, args = T.opt_gemm(step, n, n, n, bn, kf, unroll)
    f = kiln.build(sch, args, "llvm", name="mmult", session=s)
    a, b, c = data
    f(a, b, c)
    ok = bool(np.allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-3, atol=1e-3))
    repeat = 1 if step in ("default", "blocking") else 3
    return {"seconds": min(f.time_evaluator(f.entry_name, dev, number=1, repeat=repeat)(a, b, c).results),
            "correct": ok}


def kiln_batch(kiln, T, s, dev, n):
    """A tuner's batch: every trial lowered, one compile_batch, upload, measure each."""
    import numpy as np
    from kiln.te.build import TeModule
    from kiln.te.payload import lower
    t0 = time.perf_counter()
    progs = [lower(*T.opt_gemm("parallel", n, n, n, bn, kf), name="mmult") for bn, kf in TRIALS]
    mods = s.compile_batch([{"ir": p.payload, "target": "cpu", "format": "te"} for p in progs])
    rng = np.random.default_rng(0)
    a = kiln.nd.array(rng.uniform(-1, 1, (n, n)).astype("float32"), dev)
    b = kiln.nd.array(rng.uniform(-1, 1, (n, n)).astype("float32"), dev)
    c = kiln.nd.empty((n, n), "float32", dev)
    times = []
    for p, m in zip(progs, mods):
        if isinstance(m, Exception):
            raise m
        f = TeModule(s, p, m, "cpu")
        times.append(min(f.time_evaluator(f.entry_name, dev, number=1, repeat=3)(a, b, c).results))
    return {"seconds": time.perf_counter() - t0, "trials": times}


def kiln_parallel(kiln, T, s, dev):
    import numpy as np
    sch, args = T.parallel_loop(PAR_N)
    f = kiln.build(sch, args, "llvm", session=s)
    a = kiln.nd.array(np.random.rand(PAR_N).astype("float32"), dev)
    b = kiln.nd.empty((PAR_N,), "float32", dev)
    f(a, b)
    ok = bool(np.allclose(b.numpy(), a.numpy() * 2 + 1))
    return {"seconds": min(f.time_evaluator(f.entry_name, dev, number=100, repeat=5)(a, b).results), "correct": ok}


def verdict(ratio, bar):
    return "met" if ratio <= bar else "**not met**"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", default=os.environ.get("KILND") or os.path.join(ROOT, "build", "server", "kilnd"))
    ap.add_argument("--out", default=None, help="also write the report here")
    ap.add_argument("--venv", default=os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                   os.path.expanduser("~/.cache"), "kiln-te-bench"))
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--parts", default="steps,trials,parallel")
    ap.add_argument("--peer", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:
        print(json.dumps(peer(*a.peer)))
        return
    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import numpy as np
    import kiln
    import tutorials as T
    lines = []

    def out(line=""):
        lines.append(line)
        print(line, flush=True)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    py, versions = ensure_venv(a.venv, log)
    d = kiln.start_daemon(a.kilnd)
    s = kiln.connect(d.urls[0])
    dev = s.cpu(0)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next((x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo") if x.startswith("model name")),
               platform.processor())
    n = a.n
    parts = set(a.parts.split(","))
    out("### TVM tutorials, kiln beside TVM %s (apache-tvm-ffi %s), n = %d" % tuple(versions[:2] + [n]))
    out()
    out("- date: %s UTC; kiln %s; `bench/te_tutorials_bench.py --n %d --parts %s`"
        % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), commit, n, a.parts))
    out("- machine: %s, %d cores; kiln's pool: %s work-items; load average at start: %.2f %.2f %.2f"
        % ((cpu, os.cpu_count(), s._device_info()[dev.id].get("compute_units")) + os.getloadavg()))
    out()
    rng = np.random.default_rng(0)
    data = (kiln.nd.array(rng.uniform(-1, 1, (n, n)).astype("float32"), dev),
            kiln.nd.array(rng.uniform(-1, 1, (n, n)).astype("float32"), dev), kiln.nd.empty((n, n), "float32", dev))
    if "steps" in parts:
        out("| opt_gemm step | kiln s | TVM s | kiln / TVM | bar 1.2x |")
        out("|---|---|---|---|---|")
        rows = [(st, True) for st in STEPS] + [("parallel", False)]
        for step, unroll in rows:
            k = kiln_gemm(kiln, T, s, dev, data, step, n, unroll=unroll)
            t = run_peer(py, "gemm", {"step": step, "n": n, "unroll": unroll})
            name = step + ("" if unroll else " without unroll(ki)")
            if "error" in t or not k["correct"] or not t.get("correct"):
                out("| %s | %.4f%s | %s | | |" % (name, k["seconds"], "" if k["correct"] else " (WRONG)",
                                                   t.get("error") or "wrong result"))
                continue
            r = k["seconds"] / t["seconds"]
            out("| %s | %.4f | %.4f | %.2fx | %s |" % (name, k["seconds"], t["seconds"], r, verdict(r, 1.2)))
        out()
    if "trials" in parts:
        kb = kiln_batch(kiln, T, s, dev, n)
        tb = run_peer(py, "batch", {"n": n, "trials": TRIALS})
        out("Tuning batch: opt_gemm's last step, 16 configurations (bn, kfactor), each the minimum of 3 runs.")
        out()
        out("| bn | kfactor | kiln s | TVM s | kiln / TVM | bar 1.5x |")
        out("|---|---|---|---|---|---|")
        for (bn, kf), kt, tt in zip(TRIALS, kb["trials"], tb.get("trials") or [float("nan")] * 16):
            out("| %d | %d | %.4f | %.4f | %.2fx | %s |" % (bn, kf, kt, tt, kt / tt, verdict(kt / tt, 1.5)))
        r = kb["seconds"] / tb["seconds"] if "seconds" in tb else float("nan")
        out()
        out("Batch end to end (lower, compile, upload, measure): kiln %.2f s (compile_batch), TVM %.2f s "
            "(tvm.compile + time_evaluator per trial): kiln / TVM %.2fx (bar: below 1; goal 0.33)"
            % (kb["seconds"], tb.get("seconds", float("nan")), r))
        out()
    if "parallel" in parts:
        k = kiln_parallel(kiln, T, s, dev)
        t = run_peer(py, "par", {"n": PAR_N})
        r = k["seconds"] / t["seconds"]
        out("Parallel loop of %d iterations (B = A * 2 + 1): kiln %.1f us, TVM %.1f us: %.2fx (bar 2x: %s)%s"
            % (PAR_N, k["seconds"] * 1e6, t["seconds"] * 1e6, r, verdict(r, 2.0),
               "" if k["correct"] and t["correct"] else " (a WRONG result)"))
        out()
    s.close()
    d.stop()
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
