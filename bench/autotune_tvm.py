#!/usr/bin/python3
"""Trial throughput: kiln.autotune's loop beside apache-tvm's own tuning infrastructure (issue 15).

    /usr/bin/python3 bench/autotune_tvm.py [--kilnd build/server/kilnd] [--n 256] [--trials 33]
        [--batch 8] [--passes 2] [--runners rpc,local] [--pin KERNEL,COMPILE] [--pipeline]
        [--out FILE]

Both sides measure the same configurations of kiln.topi's CPU matmul template (the template's
default knobs, then --trials - 1 drawn from its space with --seed), in the same rounds (the
default alone, then --batch a round), with the same measurement settings (repeat 3, each
repeat grown until it takes min_repeat_ms 50; each side by its own rule: TVM's time_evaluator
from number 1, kiln.autotune from the number its checked run predicts for 0.3 of
min_repeat_ms, grown by kilnd's rule, docs/protocol.md `time` and docs/autotune.md):

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

With --pin KERNEL,COMPILE (two cores, e.g. 0,1) the kernels run on one core, one thread, on
both sides: kilnd with ``--pin cpu:0=KERNEL --pin compile=COMPILE`` (its compile workers on
the other core, so kiln.autotune's default is to compile round N+1 while round N is measured);
TVM with TVM_NUM_THREADS=1 and TVM_BIND_THREADS=0, its RPC server (and the session processes
it forks) on KERNEL by sched_setaffinity, its LocalRunner's pool processes moving themselves
there before they fill the arguments; its builder (a pool of as many processes as cores) is
left free, as it ships. "kiln" is kiln.autotune's default either way; --pipeline adds the
other mode ("kiln pipelined" when the default does not pipeline, "kiln not pipelined" when
it does).

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


def _pinned(f):
    """``f`` run after moving the calling process (a LocalRunner pool process, which then runs
    the kernels on its calling thread: TVM_NUM_THREADS=1) to $KILN_TVM_PIN's core."""
    def g(*args):
        core = os.environ.get("KILN_TVM_PIN")
        if core:
            os.sched_setaffinity(0, {int(core)})
        return f(*args)
    return g


def _pin_rpc_server(rpc, core):
    """The RPC server's process and its children (a session forks one per connection, and
    inherits this) on ``core``; returns their pids and Cpus_allowed_list."""
    import psutil
    root = psutil.Process(rpc.server.proc._proc.pid)
    out = []
    for p in [root] + root.children(recursive=True):
        os.sched_setaffinity(p.pid, {core})
        for t in os.listdir("/proc/%d/task" % p.pid):
            os.sched_setaffinity(int(t), {core})
        out.append((p.pid, sorted(os.sched_getaffinity(p.pid))))
    return out


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
                                 f_alloc_argument=_pinned(_timed("fill args", lr.default_alloc_argument)),
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
    pin = os.environ.get("KILN_TVM_PIN")
    if pin:
        os.environ["TVM_NUM_THREADS"] = "1"
        os.environ["TVM_BIND_THREADS"] = "0"   # taskset's core, not TVM's choice of one
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
        pinned = _pin_rpc_server(rpc, int(pin)) if pin else None
        print(json.dumps({"version": [tvm.__version__, __import__("tvm_ffi").__version__], "pinned": pinned}),
              flush=True)
        for line in sys.stdin:
            req = json.loads(line)
            if req.get("op") == "info":
                print(json.dumps({"pinned": pinned, "threads": os.environ.get("TVM_NUM_THREADS")}), flush=True)
                continue
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
    """One pass through kiln.autotune.tune on a fresh kilnd (an empty artifact cache);
    ``pipeline`` None: tune's default."""
    pins = ["--pin", "cpu:0=%d" % a.pin[0], "--pin", "compile=%d" % a.pin[1]] if a.pin else []
    d = kiln.start_daemon(kilnd, cache_dir=tempfile.mkdtemp(dir=tmp), args=pins)
    try:
        if a.compile_rt:
            raise_compile_workers(d.pid)
        s = kiln.connect(d.urls[0])
        dev = s.cpu(0)
        apart = not at.shares_compile_cores(dev)
        assert apart == bool(a.pin), "kilnd says its compile workers %s cpu:0's cores" % (
            "do not share" if apart else "share")
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


def raise_compile_workers(kilnd_pid):
    """--compile-rt: kilnd's compile workers (which make themselves SCHED_BATCH at nice 5, so
    that compiles yield to kilnd's event loop) at this process's real-time policy, which TVM's
    builder processes inherit: both sides' compilers at the same priority."""
    policy = os.sched_getscheduler(0)
    if policy not in (os.SCHED_FIFO, os.SCHED_RR):
        raise SystemExit("--compile-rt: run the bench under chrt -f N")
    param = os.sched_getparam(0)
    kids = []
    for t in os.listdir("/proc/%d/task" % kilnd_pid):
        with open("/proc/%d/task/%s/children" % (kilnd_pid, t)) as f:
            kids += [int(x) for x in f.read().split()]
    n = 0
    for pid in kids:
        with open("/proc/%d/comm" % pid) as f:
            if not f.read().startswith("kiln-compile-wo"):
                continue
        for t in os.listdir("/proc/%d/task" % pid):
            os.sched_setscheduler(int(t), policy, param)
        n += 1
    if not n:
        raise RuntimeError("--compile-rt: no compile worker under kilnd %d" % kilnd_pid)


def kiln_breakdown(recs, wall):
    sumr = lambda k: sum(x.get(k) or 0 for x in (r["result"] for r in recs))
    # each trial's wait for its build (a batch is waited for once); the compile workers' own
    # seconds (the daemon's compile_ms of each module: a streamed batch's compile_s_batch counts
    # its time queued behind the others too)
    out = {"compile wait": sumr("compile_wait_s"), "compile (workers)": sumr("compile_ms") / 1e3,
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
    ap.add_argument("--pipeline", action="store_true",
                    help="also kiln in the other mode than tune's default (pipelined or not)")
    ap.add_argument("--pin", default=None, metavar="KERNEL,COMPILE",
                    help="two cores: the kernels on KERNEL, one thread, on both sides; kiln's compile workers "
                         "on COMPILE")
    ap.add_argument("--compile-rt", action="store_true",
                    help="kilnd's compile workers at the bench's real-time priority, as TVM's builder is")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also append the report here")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.pin:
        a.pin = [int(x) for x in a.pin.split(",")]
        if len(a.pin) != 2 or a.pin[0] == a.pin[1]:
            ap.error("--pin: two different cores, KERNEL,COMPILE")
        os.environ["KILN_TVM_PIN"] = str(a.pin[0])   # the TVM process (peer_serve) reads it
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
    peer_info = peer.ask(op="info")
    tmp = tempfile.mkdtemp(prefix="kiln-autotune-tvm-")
    # "kiln": tune's default, which pipelines when kilnd's compile workers are pinned apart
    other = ("kiln not pipelined" if a.pin else "kiln pipelined") if a.pipeline else None
    sides = ["kiln"] + ([other] if other else []) + ["tvm " + r for r in a.runners.split(",") if r]
    res = {k: [] for k in sides}
    load0 = loadavg()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    try:
        for p in range(a.passes):
            order = sides if p % 2 == 0 else sides[::-1]
            for side in order:
                la = loadavg()
                if side.startswith("kiln"):
                    r = kiln_pass(kiln, at, a.kilnd, cfgs, a, {"kiln": None, "kiln pipelined": True,
                                                                "kiln not pipelined": False}[side], tmp)
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
    chrt = ""
    if os.sched_getscheduler(0) == os.SCHED_FIFO:
        chrt = "chrt -f %d " % os.sched_getparam(0).sched_priority
    if a.pin:
        where = ("cpu:0 pinned to core %d (1 pool thread), kilnd's compile workers to core %d (`--pin cpu:0=%d "
                 "--pin compile=%d`; kiln.autotune's default then pipelines); TVM: TVM_NUM_THREADS=1, "
                 "TVM_BIND_THREADS=0, its RPC server on core %d (pids and cores: %s), its LocalRunner's processes "
                 "moving to core %d, LocalBuilder with %d workers on any core, build function %s"
                 % (a.pin[0], a.pin[1], a.pin[0], a.pin[1], a.pin[0], peer_info.get("pinned"), a.pin[0],
                    os.cpu_count(), a.tvm_build))
        where += ("; kiln's compile workers at the bench's real-time priority like TVM's builder (--compile-rt; "
                  "they make themselves SCHED_BATCH at nice 5)" if a.compile_rt else
                  "; kiln's compile workers SCHED_BATCH at nice 5, as they make themselves, TVM's builder at the "
                  "bench's priority")
    else:
        where = ("cpu:0 (2 pool threads; TVM: TVM_NUM_THREADS=2, LocalBuilder with %d workers, build function %s)"
                 % (os.cpu_count(), a.tvm_build))
    out("`%s/usr/bin/python3 bench/autotune_tvm.py %s` — %s, %d cores; load average %s at the start, %s at the end. "
        "apache-tvm %s (apache-tvm-ffi %s); matmul %d x %d x %d float32 on %s; %d configurations (the default knobs, "
        "then %d drawn from the space with seed %d), rounds of %d; number grown until a repeat takes "
        "min_repeat_ms %d (each side by its own rule: TVM from 1, kiln from the number its checked run "
        "predicts), repeat %d on both sides."
        % (chrt, " ".join(sys.argv[1:]), cpu, os.cpu_count(), load0, load1, peer.versions[0], peer.versions[1], a.n,
           a.n, a.n, where, len(cfgs), len(cfgs) - 1, a.seed, a.batch, a.min_repeat_ms, a.repeat))
    out()
    out("| side | pass | load (1 min) | trials (failed) | wall s | trials/s |")
    out("|---|---|---|---|---|---|")
    for side in sides:
        for i, r in enumerate(res[side]):
            out("| %s | %d | %s | %d (%d) | %.2f | %.2f |" % (side, i + 1, r["load"].split()[0], r["trials"], r["failed"],
                                                           r["seconds"], r["trials"] / r["seconds"]))
    out()
    rate = {side: median([r["trials"] / r["seconds"] for r in res[side]]) for side in sides}
    per = {side: sum(r["seconds"] for r in res[side]) / sum(r["trials"] for r in res[side]) for side in sides}
    for side in sides:
        if side.startswith("tvm"):
            out("kiln / %s: **%.2fx** by the mean seconds a trial over the passes (kiln %.3f s, %s %.3f s); "
                "%.2fx by the median trials/s of the passes (kiln %.2f, %s %.2f)%s." % (
                    side.replace("tvm", "TVM"), per[side] / per["kiln"], per["kiln"], side, per[side],
                    rate["kiln"] / rate[side], rate["kiln"], side, rate[side],
                    "; %s %.2fx" % (other, per[side] / per[other]) if other else ""))
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
    # Kernel times: each configuration's minimum and coefficient of variation over its repeats, all
    # passes; medians over them. Was the measurement disturbed by the compile next to it?
    def kernel_stats(side):
        mins, cvs = {}, []
        for i, p in enumerate(res[side]):
            if side.startswith("kiln"):
                ts = [r["result"]["times"] if r["result"].get("ok") else None for r in p["records"]]
            else:   # failed builds are listed first: no order to match the configurations by
                ts = [t if isinstance(t, list) else None for t in p["times"]] if not p["failed"] else []
            for j, t in enumerate(ts):
                if t:
                    mins.setdefault(j, []).append(min(t))
                    m = sum(t) / len(t)
                    cvs.append((sum((x - m) ** 2 for x in t) / len(t)) ** 0.5 / m if m > 0 else 0.0)
        return {j: min(v) for j, v in mins.items()}, cvs
    ks = {side: kernel_stats(side) for side in sides}
    out("Kernel times, each configuration's fastest repeat over all passes (median over the configurations), and "
        "the coefficient of variation of its repeats (median and 90th percentile over every trial): %s. TVM's "
        "runners measure with arguments filled at random and check nothing; kiln checks every build's output "
        "against numpy before timing it." % "; ".join(
            "%s %.3f ms, cv %.3f / %.3f" % (side, median(list(ks[side][0].values())) * 1e3, median(ks[side][1]),
                                            sorted(ks[side][1])[int(0.9 * (len(ks[side][1]) - 1))])
            for side in sides if ks[side][1]))
    if other:
        a_, b_ = ks["kiln"][0], ks[other][0]
        q = sorted(a_[j] / b_[j] for j in a_ if j in b_ and b_[j] > 0)
        if q:
            out()
            out("kiln / %s, the same configuration's fastest repeat: median %.3f, range %.3f-%.3f over %d "
                "configurations." % (other, median(q), q[0], q[-1], len(q)))
    if a.pin and ks["kiln"][0]:
        for side in sides:
            if side.startswith("tvm") and ks[side][0]:
                a_, b_ = ks["kiln"][0], ks[side][0]
                q = sorted(a_[j] / b_[j] for j in a_ if j in b_ and b_[j] > 0)
                out()
                out("kiln / %s, the same configuration's fastest repeat: median %.3f, range %.3f-%.3f." % (
                    side, median(q), q[0], q[-1]))
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
