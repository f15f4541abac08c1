#!/usr/bin/python3
"""TVM's tutorial schedules in kiln beside apache-tvm 0.27 running the same schedules, in one run.

    /usr/bin/python3 bench/te_tutorials_bench.py [--kilnd build/server/kilnd] [--out FILE] [--n 1024]
        [--parts steps,trials,parallel,batch] [--rounds 3]

kiln runs the schedules of tests/python/tutorials.py (TVM's tutorials in kiln.te); TVM runs the
same schedules written with tvm.s_tir (TVM 0.27 has no te schedules: create_prim_func, then
split, reorder, vectorize, unroll, parallel, cache_write + reverse_compute_at where the
tutorial has compute_at of a cache_write stage), in a venv this script makes
($XDG_CACHE_HOME/kiln-te-bench: apache-tvm 0.27, apache-tvm-ffi pinned to 0.1.14.post0 since
0.1.15.post2 segfaults in save_json, cloudpickle for its RPC; tornado and psutil for the RPC
tracker and server bench/autotune_tvm.py starts). TVM targets llvm with the host's
CPU name and 2 cores. Both sides first build every measurement (each result checked against
numpy); the TVM side is one process kept for the run. Then --rounds rounds time each
measurement on one side right after the other (which side goes first alternates by round);
a figure is the minimum over the rounds of time_evaluator's minimum (device-timed on both
sides), so load on a shared machine that comes and goes falls on both sides alike.

1. opt_gemm ("How to optimize GEMM on CPU"), every step at n x n (bar: kiln within 1.2x of
   TVM or faster), plus the last step without unroll(ki) (unroll must not make it slower).
2. A tuning batch of 16 configurations of the last step (bn in 8 16 32 64, kfactor in 2 4 8 16):
   each configuration's time (bar: within 1.5x of TVM), and the batch end to end (compile,
   upload, measure): kiln's compile_batch against TVM's hand loop of tvm.compile +
   time_evaluator (bar: kiln faster; goal 3x).
3. A loop of 262,144 iterations marked parallel (bar: within 2x of TVM).
The batch end to end (part "batch") runs once per side, after the rounds.
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
PINS = ["apache-tvm==0.27.*", "apache-tvm-ffi==0.1.14.post0", "cloudpickle", "tornado", "psutil"]


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


def peer_build(tvm, np, dev, spec, data, check=True):
    """Builds one measurement (its schedule compiled; with check, run once and checked):
    (function, args, correct)."""
    if spec["kind"] == "par":
        n = spec["n"]
        a = tvm.runtime.tensor(np.random.rand(n).astype("float32"), dev)
        b = tvm.runtime.tensor(np.zeros(n, "float32"), dev)
        lib = tvm.compile(tvm_parallel(tvm, n).mod, target=tvm_target(tvm))
        lib = lib.jit() if hasattr(lib, "jit") else lib
        lib["main"](a, b)
        return lib, (a, b), bool(np.allclose(b.numpy(), a.numpy() * 2 + 1))
    an, bn_, a, b, c = data
    sch = tvm_opt_gemm(tvm, spec["step"], spec["n"], spec.get("bn", 32), spec.get("kf", 4), spec.get("unroll", True))
    lib = tvm.compile(sch.mod, target=tvm_target(tvm))
    lib = lib.jit() if hasattr(lib, "jit") else lib
    if not check:  # the batch: compile and measure only, as kiln_batch does
        return lib, (a, b, c), None
    lib["main"](a, b, c)
    return lib, (a, b, c), bool(np.allclose(c.numpy(), an @ bn_, rtol=1e-3, atol=1e-3))


def peer_serve(n):
    """The TVM side as a process that keeps what it built: one JSON request per stdin line,
    one JSON reply per stdout line. {"op": "build", "key", "spec"} compiles, runs once and
    checks; {"op": "time", "key", "number", "repeat"} measures with time_evaluator (minimum of
    the repeats); {"op": "batch", "trials"} is TVM's hand loop end to end."""
    import numpy as np
    import tvm
    dev = tvm.cpu(0)
    rng = np.random.default_rng(0)
    an, bn_ = rng.uniform(-1, 1, (n, n)).astype("float32"), rng.uniform(-1, 1, (n, n)).astype("float32")
    data = (an, bn_, tvm.runtime.tensor(an, dev), tvm.runtime.tensor(bn_, dev),
            tvm.runtime.tensor(np.zeros((n, n), "float32"), dev))
    built = {}
    print(json.dumps({"version": [tvm.__version__, __import__("tvm_ffi").__version__]}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "build":
                lib, args, ok = peer_build(tvm, np, dev, req["spec"], data)
                built[req["key"]] = (lib, args)
                rep = {"correct": ok}
            elif req["op"] == "time":
                lib, args = built[req["key"]]
                ev = lib.time_evaluator("main", dev, number=req["number"], repeat=req["repeat"])
                rep = {"seconds": min(ev(*args).results)}
            else:  # batch: compile and measure each trial, as a hand-written tuning loop does
                t0 = time.perf_counter()
                times = []
                for bn, kf in req["trials"]:
                    lib, args, _ = peer_build(tvm, np, dev, {"kind": "gemm", "step": "parallel", "n": n,
                                                             "bn": bn, "kf": kf}, data, check=False)
                    times.append(min(lib.time_evaluator("main", dev, number=1, repeat=3)(*args).results))
                rep = {"seconds": time.perf_counter() - t0, "trials": times}
        except Exception as e:  # reported in the table, not fatal to the run
            rep = {"error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(rep), flush=True)


def ensure_venv(path, log):
    py = os.path.join(path, "bin", "python")
    if not os.path.exists(py):
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", path], check=True)
    if subprocess.run([py, "-c", "import tvm, cloudpickle, tornado, psutil"], capture_output=True).returncode != 0:
        log("venv: pip install %s" % " ".join(PINS))
        r = subprocess.run([py, "-m", "pip", "install", "-q"] + PINS, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("pip install failed: %s" % (r.stderr.strip().splitlines() or ["?"])[-1])
    return py


class Peer:
    """The TVM side: `peer_serve` of this script (or of `script`: bench/autotune_tvm.py) in the
    venv's python, kept for the whole run."""

    def __init__(self, py, n, script=None):
        self.proc = subprocess.Popen([py, script or os.path.abspath(__file__), "--serve", str(n)],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.versions = json.loads(self.proc.stdout.readline())["version"]

    def ask(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"error": "the TVM process exited (%s)" % self.proc.wait()}

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


# -- kiln -------------------------------------------------------------------------------------

def kiln_build(kiln, T, s, dev, spec, data):
    """kiln's side of peer_build: (function, args, correct)."""
    import numpy as np
    if spec["kind"] == "par":
        sch, args = T.parallel_loop(spec["n"])
        f = kiln.build(sch, args, "llvm", session=s)
        a = kiln.nd.array(np.random.rand(spec["n"]).astype("float32"), dev)
        b = kiln.nd.empty((spec["n"],), "float32", dev)
        f(a, b)
        return f, (a, b), bool(np.allclose(b.numpy(), a.numpy() * 2 + 1))
    n = spec["n"]
    sch, args = T.opt_gemm(spec["step"], n, n, n, spec.get("bn", 32), spec.get("kf", 4), spec.get("unroll", True))
    f = kiln.build(sch, args, "llvm", name="mmult", session=s)
    an, bn_, a, b, c = data
    f(a, b, c)
    return f, (a, b, c), bool(np.allclose(c.numpy(), an @ bn_, rtol=1e-3, atol=1e-3))


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


def verdict(ratio, bar):
    return "met" if ratio <= bar else "**not met**"


def plan(n, parts):
    """(key, spec, number, repeat) of every measurement of the parts asked for."""
    out = []
    if "steps" in parts:
        for step, unroll in [(st, True) for st in STEPS] + [("parallel", False)]:
            rep = 1 if step in ("default", "blocking") else 3
            out.append((("step", step, unroll), {"kind": "gemm", "step": step, "n": n, "unroll": unroll}, 1, rep))
    if "trials" in parts:
        for bn, kf in TRIALS:
            out.append((("trial", bn, kf), {"kind": "gemm", "step": "parallel", "n": n, "bn": bn, "kf": kf}, 1, 3))
    if "parallel" in parts:
        out.append((("par",), {"kind": "par", "n": PAR_N}, 100, 5))
    return out


def measure(kiln, T, s, dev, peer, n, parts, rounds, log):
    """Builds every measurement on both sides, then `rounds` rounds in which each is timed on one
    side right after the other (the side that goes first alternates by round); each side's
    figure is its minimum over the rounds, so load that comes and goes falls on both."""
    import numpy as np
    rng = np.random.default_rng(0)
    an, bn_ = rng.uniform(-1, 1, (n, n)).astype("float32"), rng.uniform(-1, 1, (n, n)).astype("float32")
    data = (an, bn_, kiln.nd.array(an, dev), kiln.nd.array(bn_, dev), kiln.nd.empty((n, n), "float32", dev))
    res = {}
    for key, spec, number, repeat in plan(n, parts):
        f, args, ok = kiln_build(kiln, T, s, dev, spec, data)
        t = peer.ask(op="build", key=repr(key), spec=spec)
        res[key] = {"kiln": float("inf"), "tvm": float("inf"), "kiln_ok": ok, "tvm_ok": t.get("correct", False),
                    "error": t.get("error"), "f": (f, args, number, repeat)}
    for r in range(rounds):
        log("round %d of %d" % (r + 1, rounds))
        for key, m in res.items():
            f, args, number, repeat = m["f"]
            for side in (("kiln", "tvm") if r % 2 == 0 else ("tvm", "kiln")):
                if side == "kiln":
                    ev = f.time_evaluator(f.entry_name, dev, number=number, repeat=repeat)
                    m["kiln"] = min(m["kiln"], min(ev(*args).results))
                elif not m["error"]:
                    t = peer.ask(op="time", key=repr(key), number=number, repeat=repeat)
                    m["error"] = t.get("error")
                    m["tvm"] = min(m["tvm"], t.get("seconds", float("inf")))
    return res


def row(m, bar):
    """kiln s | TVM s | ratio | verdict, or what went wrong."""
    if m["error"] or not m["kiln_ok"] or not m["tvm_ok"]:
        return "%.4g%s | %s | | " % (m["kiln"], "" if m["kiln_ok"] else " (WRONG)",
                                    m["error"] or ("TVM: wrong result" if not m["tvm_ok"] else ""))
    r = m["kiln"] / m["tvm"]
    return "%.4g | %.4g | %.2fx | %s" % (m["kiln"], m["tvm"], r, verdict(r, bar))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", default=os.environ.get("KILND") or os.path.join(ROOT, "build", "server", "kilnd"))
    ap.add_argument("--out", default=None, help="also write the report here")
    ap.add_argument("--venv", default=os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                   os.path.expanduser("~/.cache"), "kiln-te-bench"))
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--parts", default="steps,trials,parallel,batch")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; each figure is the minimum")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        peer_serve(a.serve)
        return
    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import kiln
    import tutorials as T
    lines = []

    def out(line=""):
        lines.append(line)
        print(line, flush=True)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    py = ensure_venv(a.venv, log)
    d = kiln.start_daemon(a.kilnd)
    s = kiln.connect(d.urls[0])
    dev = s.cpu(0)
    n = a.n
    peer = Peer(py, n)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next((x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo") if x.startswith("model name")),
               platform.processor())
    parts = set(a.parts.split(","))
    out("### TVM tutorials, kiln beside TVM %s (apache-tvm-ffi %s), n = %d" % tuple(peer.versions[:2] + [n]))
    out()
    out("- date: %s UTC; kiln %s; `bench/te_tutorials_bench.py --n %d --parts %s --rounds %d`"
        % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), commit, n, a.parts, a.rounds))
    out("- machine: %s, %d cores; kiln's pool: %s work-items; load average at start: %.2f %.2f %.2f"
        % ((cpu, os.cpu_count(), s._device_info()[dev.id].get("compute_units")) + os.getloadavg()))
    res = measure(kiln, T, s, dev, peer, n, parts, a.rounds, log)
    out("- load average at the end of the rounds: %.2f %.2f %.2f" % os.getloadavg())
    out()
    if "steps" in parts:
        out("| opt_gemm step | kiln s | TVM s | kiln / TVM | bar 1.2x |")
        out("|---|---|---|---|---|")
        for key, m in res.items():
            if key[0] == "step":
                out("| %s | %s |" % (key[1] + ("" if key[2] else " without unroll(ki)"), row(m, 1.2)))
        out()
    if "trials" in parts:
        out("Tuning batch: opt_gemm's last step, 16 configurations (bn, kfactor), each the minimum of "
            "%d rounds of 3 runs." % a.rounds)
        out()
        out("| bn | kfactor | kiln s | TVM s | kiln / TVM | bar 1.5x |")
        out("|---|---|---|---|---|---|")
        met = 0
        for key, m in res.items():
            if key[0] == "trial":
                out("| %d | %d | %s |" % (key[1], key[2], row(m, 1.5)))
                met += not m["error"] and m["kiln_ok"] and m["tvm_ok"] and m["kiln"] <= 1.5 * m["tvm"]
        out()
        out("%d of 16 configurations within 1.5x." % met)
        out()
    if "parallel" in parts:
        m = res[("par",)]
        out("| parallel loop of %d iterations (B = A * 2 + 1) | kiln s | TVM s | kiln / TVM | bar 2x |" % PAR_N)
        out("|---|---|---|---|---|")
        out("| | %s |" % row(m, 2.0))
        out()
    if "batch" in parts:
        kb = kiln_batch(kiln, T, s, dev, n)
        tb = peer.ask(op="batch", trials=TRIALS)
        r = kb["seconds"] / tb["seconds"] if "seconds" in tb else float("nan")
        out("Batch end to end (lower, compile, upload, measure 16 trials x 3 runs): kiln %.2f s (compile_batch), "
            "TVM %s (tvm.compile + time_evaluator per trial): kiln / TVM %.2fx (bar: below 1; goal 0.33)"
            % (kb["seconds"], "%.2f s" % tb["seconds"] if "seconds" in tb else tb.get("error"), r))
        out()
    peer.close()
    s.close()
    d.stop()
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
