#!/usr/bin/python3
"""Trial throughput: kiln.autotune's loop beside apache-tvm's own tuning infrastructure (issue 15).

    /usr/bin/python3 bench/autotune_tvm.py [--kilnd build/server/kilnd] [--n 256] [--trials 33]
        [--batch 8] [--passes 2] [--runners rpc,local] [--out FILE]

Both sides measure the same configurations of kiln.topi's CPU matmul template (the template's
default knobs, then --trials - 1 drawn from its space with --seed), in the same rounds (the
default alone, then --batch a round), with the same measurement settings (number 1 grown
until a repeat takes min_repeat_ms 50, repeat 3; each side grows number by its own rule:
kiln's docs/protocol.md `time`, TVM's time_evaluator):

- kiln: ``kiln.autotune.tune`` on cpu:0 of a fresh kilnd (an empty artifact cache each pass),
  a tuner that proposes the list: each round lowered in the client, one ``compile_batch``, then
  under a lease each build checked against numpy (output reset, one run, download: one wait)
  and timed with ``time``; --pipeline also runs with the next round compiling while a round is
  measured.
- TVM (apache-tvm from PyPI, in the venv bench/te_tutorials_bench.py makes): the same schedules
  written in s_tir, built by meta_schedule's ``LocalBuilder`` (a process pool, ``tvm.compile``,
  exported as a tar of objects) and measured by its ``RPCRunner`` through a local RPC tracker
  and server (``meta_schedule.testing.local_rpc.LocalRPC``: what TVM's tests and tutorials use
  for remote measurement; a session a trial, the module uploaded and linked on the server,
  arguments filled at random, ``time_evaluator``) and by its ``LocalRunner`` (a process pool
  loading the artifact in place). TVM's runners do not check outputs; kiln's loop does.

The sides alternate pass by pass (kiln, TVM RPC, TVM local, kiln, ...), so load from the other
engineers on the machine falls on both. Trials per second count from the first lowering to
the last result (daemon, venv, tracker and server start-up excluded on both sides). The
breakdown: kiln's from its records (compile wait, check = reset + run + download, compare,
time); TVM's from its builder's and runner's functions wrapped with timers (build, export,
session, upload + link, argument fill, time_evaluator, cleanup) and the rounds' wall times.
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# -- TVM (runs in the venv) -------------------------------------------------------------------

def tvm_schedule(tvm, n, c):
    """kiln.topi's CPU matmul schedule (kiln/topi/schedules.py _matmul_cpu, and the packed B of
    topi.matmul(pack=bn)) in s_tir: the output tile in a local cache, written back by bm x bn
    tiles whose columns are vectorized, column panels (ji) or row tiles (ij) over the threads,
    k split by bk outside the unrolled tile rows, optionally k unrolled."""
    from tvm import te, tirx
    bm, bn, bk = c["bm"], c["bn"], c["bk"]
    k = te.reduce_axis((0, n), "k")
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    if c.get("pack"):
        PB = te.compute(((n + bn - 1) // bn, n, bn), lambda jo, kk, ji: tirx.if_then_else(
            jo * bn + ji < n, B[kk, jo * bn + ji], tirx.const(0, "float32")), name="PB")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * PB[j // bn, k, j % bn], axis=k), name="C")
    else:
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B, C])}))
    blk = sch.get_sblock("C")
    cw = sch.cache_write(blk, 0, "local")
    i, j = sch.get_loops(cw)
    io, ii = sch.split(i, [None, bm])
    jo, ji = sch.split(j, [None, bn])
    if c["order"] == "ji":
        sch.reorder(jo, io, ii, ji)
        sch.parallel(jo)
        at = io
    else:
        sch.reorder(io, jo, ii, ji)
        sch.parallel(io)
        at = jo
    sch.vectorize(ji)
    sch.compute_at(blk, at)
    inner = sch.get_loops(blk)[2:]   # under the two tile loops: [mc (absent when bm is 1),] nc, k
    ko, ki = sch.split(inner[-1], [None, bk])
    sch.reorder(ko, ki, *inner[:-1])
    sch.vectorize(inner[-2])
    if len(inner) == 3:
        sch.unroll(inner[0])
    if c["unroll_k"]:
        sch.unroll(ki)
    sch.decompose_reduction(blk, ko)
    if c.get("pack"):
        x, _, z = sch.get_loops(sch.get_sblock("PB"))
        sch.vectorize(z)
        sch.parallel(x)
    return sch


def _stage(name, t0):
    """Appends one stage's seconds to the log of $KILN_TVM_STAGES (from the builder's and the
    runner's pool processes)."""
    import time as _t
    with open(os.environ["KILN_TVM_STAGES"], "a") as f:
        f.write(json.dumps([name, _t.perf_counter() - t0]) + "\n")


def f_build(mod, target, params):
    """meta_schedule's default_build, the tensor intrinsics' import it starts with timed apart
    (in a fresh pool process, every batch, it is most of the builder's time)."""
    import time as _t
    t0 = _t.perf_counter()
    __import__("tvm.s_tir.tensor_intrin")
    _stage("import tensor_intrin", t0)
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build
    t0 = _t.perf_counter()
    r = default_build(mod, target, params)
    _stage("build", t0)
    return r


def f_build_lean(mod, target, params):
    """default_build without importing tvm.s_tir.tensor_intrin (a matmul of scalar and vector
    code needs none of them): the builder's cost with that import gone."""
    import time as _t
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    t0 = _t.perf_counter()
    r = tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)
    _stage("build", t0)
    return r


def f_export(mod):
    import time as _t
    from tvm.s_tir.meta_schedule.builder.local_builder import default_export
    t0 = _t.perf_counter()
    r = default_export(mod)
    _stage("export", t0)
    return r


def _timed(name, default):
    def f(*args):
        import time as _t
        t0 = _t.perf_counter()
        r = default(*args)
        _stage(name, t0)
        return r
    return f


def tvm_runners(ms, kind, ev, rpc):
    """meta_schedule's RPCRunner or LocalRunner with its default functions, each timed."""
    if kind == "rpc":
        from tvm.s_tir.meta_schedule.runner import rpc_runner as rr
        cfg = ms.runner.RPCConfig(tracker_host=rpc.tracker_host, tracker_port=rpc.tracker_port,
                                  tracker_key=rpc.tracker_key, session_timeout_sec=120)
        return ms.runner.RPCRunner(cfg, ev, f_create_session=_timed("session", rr.default_create_session),
                                   f_upload_module=_timed("upload+link", rr.default_upload_module),
                                   f_alloc_argument=_timed("fill args", rr.default_alloc_argument),
                                   f_run_evaluator=_timed("time_evaluator", rr.default_run_evaluator),
                                   f_cleanup=_timed("cleanup", rr.default_cleanup))
    from tvm.s_tir.meta_schedule.runner import local_runner as lr
    return ms.runner.LocalRunner(timeout_sec=120, evaluator_config=ev,
                                 f_alloc_argument=_timed("fill args", lr.default_alloc_argument),
                                 f_run_evaluator=_timed("time_evaluator", lr.default_run_evaluator),
                                 f_cleanup=_timed("cleanup", lr.default_cleanup))


def tvm_pass(tvm, ms, rpc, target, req, stages):
    """One pass of the configurations through TVM's builder and runner, round by round."""
    n = req["n"]
    ev = ms.runner.EvaluatorConfig(number=req["number"], repeat=req["repeat"], min_repeat_ms=req["min_repeat_ms"],
                                   enable_cpu_cache_flush=False)
    runner = tvm_runners(ms, req["runner"], ev, rpc)
    # timeout 600 s, not 30: at a load of 8-10 the default build's import alone outlasts 30 s
    builder = ms.builder.LocalBuilder(max_workers=req["workers"], timeout_sec=600, f_export=f_export,
                                      f_build=f_build if req["build"] == "default" else f_build_lean)
    open(stages, "w").close()
    cfgs = req["configs"]
    rounds = [cfgs[:1]] + [cfgs[i:i + req["batch"]] for i in range(1, len(cfgs), req["batch"])]
    wall = {"schedule": 0.0, "builder": 0.0, "runner": 0.0, "remove artifacts": 0.0}
    trials, failed = [], 0
    t_start = time.perf_counter()
    for rnd in rounds:
        t0 = time.perf_counter()
        mods = [tvm_schedule(tvm, n, c).mod for c in rnd]
        t1 = time.perf_counter()
        built = builder.build([ms.builder.BuilderInput(m, target) for m in mods])
        t2 = time.perf_counter()
        ins = [ms.runner.RunnerInput(b.artifact_path, "cpu", ms.arg_info.ArgInfo.from_prim_func(m["main"]))
               for m, b in zip(mods, built) if b.error_msg is None]
        res = [f.result() for f in runner.run(ins)]
        t3 = time.perf_counter()
        for b in built:   # meta_schedule's RemoveBuildArtifact measure callback
            if b.artifact_path:
                shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
        t4 = time.perf_counter()
        wall["schedule"] += t1 - t0
        wall["builder"] += t2 - t1
        wall["runner"] += t3 - t2
        wall["remove artifacts"] += t4 - t3
        failed += sum(1 for b in built if b.error_msg is not None) + sum(1 for r in res if r.error_msg is not None)
        trials += ["build: " + b.error_msg[-300:] for b in built if b.error_msg is not None]
        trials += [[float(x) for x in r.run_secs] if r.error_msg is None else "run: " + r.error_msg[-300:]
                   for r in res]
    total = time.perf_counter() - t_start
    per = {}
    for line in open(stages):
        name, s = json.loads(line)
        per[name] = per.get(name, 0.0) + s
    return {"seconds": total, "trials": len(cfgs), "failed": failed, "wall": wall, "stages": per,
            "times": trials}


def peer_serve(_n):
    """The TVM side, one JSON request per stdin line, one JSON reply per stdout line:
    {"op": "pass", "runner": "rpc"|"local", "configs", "n", "batch", "number", "repeat",
    "min_repeat_ms", "workers"} runs tvm_pass. A local RPC tracker and server are started once."""
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    stages = tempfile.mktemp(prefix="kiln-tvm-stages-")
    os.environ["KILN_TVM_STAGES"] = stages
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.testing.local_rpc import LocalRPC
    sys.path.insert(0, HERE)
    from te_tutorials_bench import tvm_target
    target = tvm_target(tvm)
    with LocalRPC(silent=True) as rpc:
        print(json.dumps({"version": [tvm.__version__, __import__("tvm_ffi").__version__]}), flush=True)
        for line in sys.stdin:
            req = json.loads(line)
            try:
                rep = tvm_pass(tvm, ms, rpc, target, req, stages)
            except Exception as e:  # reported in the table, not fatal to the run
                import traceback
                rep = {"error": "%s: %s" % (type(e).__name__, e), "trace": traceback.format_exc()[-2000:]}
            print(json.dumps(rep), flush=True)
    if os.path.exists(stages):
        os.unlink(stages)


# -- kiln -------------------------------------------------------------------------------------

class ListTuner:
    """Proposes a fixed list of configurations, in order (both sides measure the same)."""
    name = "list"

    def __init__(self, cfgs):
        self.left = list(cfgs)

    def mark(self, cfg):
        pass

    def update(self, results):
        pass

    def next_batch(self, n):
        out, self.left = self.left[:n], self.left[n:]
        return out


def kiln_pass(kiln, at, kilnd, cfgs, a, pipeline, tmp):
    """One pass through kiln.autotune.tune on a fresh kilnd (an empty artifact cache)."""
    d = kiln.start_daemon(kilnd, cache_dir=tempfile.mkdtemp(dir=tmp))
    try:
        s = kiln.connect(d.urls[0])
        dev = s.cpu(0)
        task = at.Task("matmul", (a.n, a.n, a.n), "float32", dev)
        rec = tempfile.mktemp(dir=tmp, suffix=".jsonl")
        t0 = time.monotonic()
        r = at.tune(task, s, trials=len(cfgs), tuner=ListTuner(cfgs[1:]), records=rec, batch=a.batch,
                    repeat=a.repeat, min_repeat_ms=a.min_repeat_ms, progress=None, pipeline=pipeline)
        wall = time.monotonic() - t0
        s.close()
    finally:
        d.stop()
    assert [x["knobs"] for x in r.trials] == cfgs, "kiln measured other configurations than the list"
    return {"seconds": wall, "trials": len(r.trials), "failed": sum(1 for x in r.trials if not x["result"]["ok"]),
            "breakdown": kiln_breakdown(r.trials, wall), "records": r.trials}


def kiln_breakdown(recs, wall):
    rounds = {}
    for r in recs:
        rounds[(r["round"], r["runner"])] = r["result"]
    sumr = lambda k: sum(x.get(k) or 0 for x in (r["result"] for r in recs))
    out = {"compile wait": sum(x.get("compile_wait_s") or 0 for x in rounds.values()),
           "compile (batch)": sum(x.get("compile_s_batch") or 0 for x in rounds.values()),
           "check": sumr("check_s"), "compare": sumr("compare_s"), "time": sumr("time_s")}
    out["other"] = max(0.0, wall - out["compile wait"] - out["check"] - out["compare"] - out["time"])
    return out


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def median(xs):
    """The middle value; the mean of the two middle ones for an even count (2 passes: their
    mean, not the better one)."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", default=os.environ.get("KILND") or os.path.join(ROOT, "build", "server", "kilnd"))
    ap.add_argument("--venv", default=os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                   os.path.expanduser("~/.cache"), "kiln-te-bench"))
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--trials", type=int, default=33, help="configurations, the default knobs first")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--min-repeat-ms", type=int, default=50)
    ap.add_argument("--passes", type=int, default=2, help="alternating passes of every side")
    ap.add_argument("--runners", default="rpc,local", help="TVM's runners to measure: rpc, local")
    ap.add_argument("--tvm-build", default="lean", choices=["lean", "default"],
                    help="TVM's build function: meta_schedule's default_build, or it without the tensor "
                         "intrinsics' import")
    ap.add_argument("--pipeline", action="store_true", help="also kiln with the next round compiling meanwhile")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also append the report here")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        peer_serve(a.serve)
        return 0
    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
    sys.path.insert(0, HERE)
    import numpy as np
    import kiln
    from kiln import autotune as at
    from kiln import topi
    import te_tutorials_bench as TB
    from autotune import Report

    def log(msg):
        print("bench: " + msg, file=sys.stderr, flush=True)

    out = Report()

    sp = topi.space("matmul", "cpu", (a.n, a.n, a.n))
    rng = np.random.default_rng(a.seed)
    cfgs, keys = [sp.default()], {sp.key(sp.default())}
    while len(cfgs) < min(a.trials, len(sp)):
        c = {k: v.item() if hasattr(v, "item") else v for k, v in sp.sample(rng).items()}  # numpy ints
        if sp.key(c) not in keys:
            keys.add(sp.key(c))
            cfgs.append(c)
    py = TB.ensure_venv(a.venv, log)
    peer = TB.Peer(py, a.n, script=os.path.abspath(__file__))
    tmp = tempfile.mkdtemp(prefix="kiln-autotune-tvm-")
    sides = ["kiln"] + (["kiln pipelined"] if a.pipeline else []) + ["tvm " + r for r in a.runners.split(",") if r]
    res = {k: [] for k in sides}
    load0 = loadavg()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    try:
        for p in range(a.passes):
            order = sides if p % 2 == 0 else sides[::-1]
            for side in order:
                la = loadavg()
                if side.startswith("kiln"):
                    r = kiln_pass(kiln, at, a.kilnd, cfgs, a, side == "kiln pipelined", tmp)
                else:
                    r = peer.ask(op="pass", runner=side.split()[1], configs=cfgs, n=a.n, batch=a.batch, number=1,
                                 repeat=a.repeat, min_repeat_ms=a.min_repeat_ms, workers=os.cpu_count(),
                                 build=a.tvm_build)
                    if "error" in r:
                        raise RuntimeError("TVM %s: %s\n%s" % (side, r["error"], r.get("trace", "")))
                r["load"] = la
                res[side].append(r)
                log("pass %d %s: %d trials in %.1f s (%.2f trials/s), load %s" % (
                    p + 1, side, r["trials"], r["seconds"], r["trials"] / r["seconds"], la))
    finally:
        peer.close()
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = loadavg()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next((x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo") if x.startswith("model name")), "?")
    out("## Trial throughput beside TVM %s's builder and runners: %s, kiln %s" % (peer.versions[0], started, commit))
    out()
    out("`/usr/bin/python3 bench/autotune_tvm.py %s` — %s, %d cores; load average %s at the start, %s at the end. "
        "apache-tvm %s (apache-tvm-ffi %s); matmul %d x %d x %d float32 on cpu:0 (2 pool threads; TVM: "
        "TVM_NUM_THREADS=2, LocalBuilder with %d workers, build function %s); %d configurations (the default knobs, then %d drawn "
        "from the space with seed %d), rounds of %d; number 1 grown until a repeat takes min_repeat_ms %d "
        "(each side by its own rule), repeat %d on both sides."
        % (" ".join(sys.argv[1:]), cpu, os.cpu_count(), load0, load1, peer.versions[0], peer.versions[1], a.n, a.n,
           a.n, os.cpu_count(), a.tvm_build, len(cfgs), len(cfgs) - 1, a.seed, a.batch, a.min_repeat_ms, a.repeat))
    out()
    out("| side | pass | load (1 min) | trials (failed) | wall s | trials/s |")
    out("|---|---|---|---|---|---|")
    for side in sides:
        for i, r in enumerate(res[side]):
            out("| %s | %d | %s | %d (%d) | %.2f | %.2f |" % (side, i + 1, r["load"].split()[0], r["trials"], r["failed"],
                                                           r["seconds"], r["trials"] / r["seconds"]))
    out()
    rate = {side: median([r["trials"] / r["seconds"] for r in res[side]]) for side in sides}
    for side in sides:
        if side.startswith("tvm"):
            out("kiln / %s: **%.2fx** (median trials/s of the passes: kiln %.2f, %s %.2f)%s." % (
                side.replace("tvm", "TVM"), rate["kiln"] / rate[side], rate["kiln"], side, rate[side],
                "; kiln pipelined %.2fx" % (rate["kiln pipelined"] / rate[side]) if a.pipeline else ""))
    out()
    out("Breakdown, seconds per trial (mean over the passes):")
    out()
    for side in sides:
        rs = res[side]
        tot = sum(r["trials"] for r in rs)
        if side.startswith("kiln"):
            parts = {}
            for r in rs:
                for k, v in r["breakdown"].items():
                    parts[k] = parts.get(k, 0) + v
            out("- %s: %s; per trial %.3f s. The modules stay in kilnd (no transfer); the inputs are uploaded "
                "once a pass; check = the output reset (%d KiB up), one run and the download, sent together."
                % (side, ", ".join("%s %.3f" % (k, v / tot) for k, v in parts.items()),
                   sum(r["seconds"] for r in rs) / tot, a.n * a.n * 4 // 1024))
        else:
            wall, st = {}, {}
            for r in rs:
                for k, v in r["wall"].items():
                    wall[k] = wall.get(k, 0) + v
                for k, v in r["stages"].items():
                    st[k] = st.get(k, 0) + v
            out("- %s: rounds' wall: %s; inside them (summed over pool processes): %s; per trial %.3f s."
                % (side, ", ".join("%s %.3f" % (k, v / tot) for k, v in wall.items()),
                   ", ".join("%s %.3f" % (k, v / tot) for k, v in st.items()), sum(r["seconds"] for r in rs) / tot))
    out()
    kt = [min(r["result"]["times"]) for r in res["kiln"][-1]["records"] if r["result"].get("ok")]
    tt = {side: [min(t) for t in res[side][-1]["times"] if isinstance(t, list)] for side in sides
          if side.startswith("tvm")}
    out("Kernel times (median over the configurations of each side's minimum, last pass): kiln %.3f ms; %s. "
        "TVM's runners measure with arguments filled at random and check nothing; kiln checks every "
        "build's output against numpy before timing it." % (
            median(kt) * 1e3, "; ".join("%s %.3f ms" % (k, median(v) * 1e3) for k, v in tt.items())))
    out()
    # how long kiln's repeats lasted against min_repeat_ms: `number` (the last repeat's) times
    # each repeat's seconds per call, over every trial of every kiln pass
    reps = [x * r["result"]["number"] * 1e3 for side in sides if side.startswith("kiln") for p in res[side]
            for r in p["records"] if r["result"].get("ok") for x in r["result"]["times"]]
    if reps:
        q = sorted(reps)
        out("kiln's repeats (number x seconds per call, %d repeats of all kiln passes; min_repeat_ms %d): "
            "median %.1f ms, 90th percentile %.1f ms, longest %.1f ms." % (
                len(q), a.min_repeat_ms, median(q), q[int(0.9 * (len(q) - 1))], q[-1]))
    out()
    out.write(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
