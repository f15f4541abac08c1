"""Tasks and the tuning loop (docs/autotune.md).

Each round: the tuner proposes a batch; every runner (a session and a device) compiles its
share with one ``compile_batch`` (kiln.te.build_batch: every compile worker busy) and, under a
lease of its device, runs each build once on fresh inputs, checks the output against numpy
(a wrong answer is a failed trial, never a fast one) and times it with ``time`` (repeat,
number, min_repeat_ms, flush). Compile errors, timeouts and faults are recorded trials.
"""

import json
import sys
import threading
import time

import numpy as np

from .. import __version__ as KILN_VERSION
from .. import nd
from ..errors import KilnError, DeviceFault, Timeout, NotFound, PermissionDenied, ResourceExhausted
from ..te.build import build_batch
from ..topi.space import space as make_space
from . import records as R
from .tuners import make_tuner

__all__ = ["Task", "Runner", "tune", "TuneResult"]


class Task:
    """A template instance to tune: ``op`` and ``shapes`` (kiln.topi.space's), ``dtype``, and
    the device it is for (a Device, whose arch and limits shape the space; or a target name,
    "cpu"/"gpu", for a task without a device). ``space`` replaces the topi space (a custom
    template: any object with Space's methods)."""

    def __init__(self, op, shapes, dtype="float32", device=None, target=None, space=None):
        self.op = op
        self.shapes = tuple(int(x) for x in shapes)
        self.dtype = dtype
        self.device = device
        info = getattr(device, "info", None) or {}
        self.arch = info.get("arch") or (target or "cpu")
        if target is None:
            target = "cpu" if self.arch == "cpu" else "gpu"
        self.space = space or make_space(op, target, self.shapes, dtype, device=info or None)
        self.target = self.space.target

    def key(self):
        info = getattr(self.device, "info", None) or {}
        return {"op": self.op, "shapes": list(self.shapes), "dtype": self.dtype, "target": self.target,
                "arch": self.arch, "device": getattr(self.device, "id", None), "device_name": info.get("name"),
                "signature": json.loads(json.dumps(self.space.signature())), "kiln": KILN_VERSION}

    def __repr__(self):
        return "<kiln.autotune.Task %s %s %s on %s>" % (self.op, self.shapes, self.dtype,
                                                       getattr(self.device, "id", self.target))


# The last tasks' inputs and numpy answers (a 4096^3 SGEMM's reference is a large float64
# product): a loop that calls tune() again for the same task (more trials, resumed from the
# records) computes them once.
_REFERENCES = {}


def _reference(space, seed):
    key = (type(space), repr(space.signature()), space.op, tuple(space.shapes), space.dtype, seed)
    hit = _REFERENCES.get(key)
    if hit is None:
        inputs = space.inputs(seed)
        hit = (inputs, space.reference(inputs))
        if len(_REFERENCES) >= 2:
            _REFERENCES.pop(next(iter(_REFERENCES)))
        _REFERENCES[key] = hit
    return hit


class Runner:
    """One place trials are measured: a session and one of its devices. Holds the inputs on
    the device and the reference answer."""

    def __init__(self, session, device, task, seed=0):
        self.session = session
        self.device = session.device(device) if isinstance(device, str) else device
        self.task = task
        self.inputs, self.ref = _reference(task.space, seed)
        self.scale = max(1.0, float(np.abs(self.ref).max()))
        self._args = None

    def args(self):
        if self._args is None:
            ins = [nd.array(a, self.device) for a in self.inputs]
            out = nd.empty(self.ref.shape, self.task.dtype, self.device)
            self._args = ins + [out]
        return self._args

    def lost(self):
        """A timeout or fault ended the device worker and its tensors with it."""
        self._args = None

    def check(self, m, timeout_ms):
        args = self.args()
        args[-1].copyfrom(np.full(self.ref.shape, np.nan, self.task.dtype))
        m.run(*args, timeout_ms=timeout_ms)
        got = args[-1].numpy()
        if not np.allclose(got, self.ref, rtol=1e-3, atol=1e-4 * self.scale):
            bad = ~np.isclose(got, self.ref, rtol=1e-3, atol=1e-4 * self.scale)
            return "wrong answer: %d of %d elements differ from numpy (first at %s: %r, want %r)" % (
                int(bad.sum()), bad.size, tuple(int(i) for i in np.argwhere(bad)[0]),
                float(got[tuple(np.argwhere(bad)[0])]), float(self.ref[tuple(np.argwhere(bad)[0])]))
        return None


def _error_kind(e):
    return getattr(e, "name", None) or type(e).__name__


class TuneResult:
    """What ``tune`` found: ``best`` (its record), ``default`` (the default knobs' record),
    ``records`` (this task's, old and new), ``trials`` (new this run)."""

    def __init__(self, task, records, new):
        self.task = task
        self.records = records
        self.trials = new
        self.best = R.best(records, task)
        self.default = next((r for r in records if r.get("tuner") == "default" and r["result"].get("ok")), None)

    @property
    def speedup(self):
        if not self.best or not self.default:
            return None
        return self.default["result"]["mean"] / self.best["result"]["mean"]


def _measure(runner, task, cfgs, opts, lease_s):
    """Compiles cfgs with one compile_batch on the runner's session and measures each under
    a lease; returns one result map per cfg."""
    sp = task.space
    t0 = time.monotonic()
    built = []
    for c in cfgs:
        try:
            built.append(sp.build(c))
        except KilnError as e:
            built.append(e)
    schedules = [b for b in built if not isinstance(b, Exception)]
    mods = build_batch(schedules, runner.device, session=runner.session, options=opts["options"]) \
        if schedules else []
    compile_s = time.monotonic() - t0
    it = iter(mods)
    mods = [b if isinstance(b, Exception) else next(it) for b in built]
    out = [None] * len(cfgs)
    for i, m in enumerate(mods):
        if isinstance(m, Exception):
            out[i] = {"ok": False, "error": _error_kind(m), "message": str(m)[:500], "stage": "compile"}
            continue
        out[i] = {"module": m, "compile_ms": getattr(m.module, "compile_ms", None)}

    lease = None
    if lease_s:
        try:
            lease = runner.session.lease(runner.device, lease_s).acquire()
        except (PermissionDenied, ResourceExhausted, NotFound, KilnError) as e:
            lease = None
            if not getattr(runner, "_lease_warned", False):
                sys.stderr.write("autotune: measuring without a lease (%s)\n" % e)
                runner._lease_warned = True
    try:
        for i, r in enumerate(out):
            if "module" not in r:
                continue
            m = r.pop("module")
            try:
                t1 = time.monotonic()
                why = runner.check(m, opts["timeout_ms"])
                t2 = time.monotonic()
                if why:
                    out[i] = {"ok": False, "error": "wrong", "message": why, "stage": "check"}
                    continue
                b = m.time_evaluator(number=opts["number"], repeat=opts["repeat"],
                                     min_repeat_ms=opts["min_repeat_ms"], flush=opts["flush"],
                                     timeout_ms=opts["timeout_ms"])(*runner.args())
                mean = float(b.mean)
                out[i] = {"ok": True, "times": list(b.results), "mean": mean, "median": float(b.median),
                          "min": float(b.min), "cv": float(b.cv), "number": int(b.raw.get("number", opts["number"])),
                          "repeat": len(b.results), "gflops": task.space.flops / mean / 1e9 if mean > 0 else None,
                          "compile_ms": r.get("compile_ms"), "check_s": round(t2 - t1, 4),
                          "time_s": round(time.monotonic() - t2, 4)}
            except (Timeout, DeviceFault, NotFound) as e:
                runner.lost()
                out[i] = {"ok": False, "error": _error_kind(e), "message": str(e)[:500], "stage": "run"}
            except KilnError as e:
                out[i] = {"ok": False, "error": _error_kind(e), "message": str(e)[:500], "stage": "run"}
    finally:
        if lease is not None:
            lease.release()
    for r in out:
        r.setdefault("compile_s_batch", round(compile_s, 4))
    return out


class _Progress:
    def __init__(self, total, stream, default_mean):
        self.total = total
        self.stream = stream
        self.t0 = time.monotonic()
        self.done = 0
        self.failed = 0
        self.best = None
        self.default_mean = default_mean

    def add(self, rec, flops):
        self.done += 1
        res = rec["result"]
        if not res.get("ok"):
            self.failed += 1
        elif self.best is None or res["mean"] < self.best:
            self.best = res["mean"]
        if rec.get("tuner") == "default" and res.get("ok"):
            self.default_mean = res["mean"]
        if self.stream is None:
            return
        el = time.monotonic() - self.t0
        eta = el / self.done * (self.total - self.done) if self.done else 0
        best = "-" if self.best is None else "%.4g ms %.1f GFLOP/s" % (self.best * 1e3, flops / self.best / 1e9)
        ratio = "" if not (self.best and self.default_mean) else " (%.2fx default)" % (self.default_mean / self.best)
        self.stream.write("\r[%d/%d] failed %d  best %s%s  ETA %ds   " % (
            self.done, self.total, self.failed, best, ratio, eta))
        self.stream.flush()

    def end(self):
        if self.stream is not None:
            self.stream.write("\n")
            self.stream.flush()


def tune(task, runners, trials=100, tuner="model", records=None, batch=None, number=None, repeat=3,
         min_repeat_ms=50, flush=False, timeout_ms=10000, lease_s=60, seed=0, progress=sys.stderr,
         callback=None, options=None):
    """Tunes ``task`` on ``runners`` (a Session measuring on task.device, a (session, device)
    pair, or a list of them: each round's batch is split between them) until the records hold
    ``trials`` trials of the task (a records file resumes: its trials count, its
    configurations are not tried again, and the model learns from them). The default knobs are
    measured first (tuner "default"). ``batch``: configurations per round (default 8, or 2
    per runner if more). ``options``: the compile options (default ``{"fast_math": True}``:
    fused multiply-adds, as TVM's LLVM backend makes). Returns a TuneResult."""
    if hasattr(runners, "call") or isinstance(runners, Runner) or (
            isinstance(runners, tuple) and len(runners) == 2 and hasattr(runners[0], "call")):
        runners = [runners]  # one session, or one (session, device)
    rs = []
    for r in runners:
        if isinstance(r, Runner):
            rs.append(r)
        elif isinstance(r, (list, tuple)):
            rs.append(Runner(r[0], r[1], task, seed))
        else:
            rs.append(Runner(r, task.device, task, seed))
    key = task.key()
    old = [r for r in R.load(records) if R.same_task(r["task"], key)] if records else []
    related = [r for r in R.load(records) if r["task"].get("op") == task.op and
               r["task"].get("target") == task.target and not R.same_task(r["task"], key)] if records else []
    warm = _warm(task, related)
    tn = make_tuner(tuner, task.space, seed, warm=warm) if isinstance(tuner, str) else tuner
    for r in old:
        res = r["result"]
        try:
            tn.update([(r["knobs"], (res.get("gflops") or 0.0) if res.get("ok") else 0.0)])
        except (KeyError, ValueError):
            continue
    if batch is None:
        batch = max(8, 2 * len(rs))
    opts = {"number": number or 1, "repeat": repeat, "min_repeat_ms": min_repeat_ms, "flush": flush,
            "timeout_ms": timeout_ms, "options": {"fast_math": True} if options is None else options}
    all_recs = list(old)
    new = []
    left = trials - len(old)
    prog = _Progress(max(left, 0), progress, None)
    t_start = time.time()
    default = task.space.default()
    have_default = any(r.get("tuner") == "default" for r in old) or not task.space.valid(default)
    d = next((r for r in old if r.get("tuner") == "default"), None)
    if d is not None:
        prog.default_mean = d["result"].get("mean")
    trial_no = len(old)
    round_no = max([r.get("round", 0) for r in old] + [0])
    first = True
    while left > 0:
        if first and not have_default:
            cfgs = [default]
            tn.mark(default)
            who = ["default"]
        else:
            cfgs = tn.next_batch(min(batch, left))
            who = [tn.name] * len(cfgs)
        first = False
        if not cfgs:
            break  # the space is exhausted
        round_no += 1
        shares = [cfgs[i::len(rs)] for i in range(len(rs))]
        results = [None] * len(rs)

        def work(i):
            results[i] = _measure(rs[i], task, shares[i], opts, lease_s) if shares[i] else []
        if len(rs) == 1:
            work(0)
        else:
            ths = [threading.Thread(target=work, args=(i,)) for i in range(len(rs))]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
        done = []
        for i, share in enumerate(shares):
            for j, (cfg, res) in enumerate(zip(share, results[i])):
                trial_no += 1
                k = dict(key)
                k["device"] = rs[i].device.id
                k["options"] = opts["options"]
                rec = {"v": R.SCHEMA_VERSION, "task": k, "knobs": cfg, "result": res,
                       "tuner": who[cfgs.index(cfg)] if cfg in cfgs else tn.name, "trial": trial_no,
                       "round": round_no, "runner": i,
                       "t": round(time.time(), 3), "elapsed_s": round(time.time() - t_start, 3)}
                if records:
                    R.append(records, rec)
                all_recs.append(rec)
                new.append(rec)
                prog.add(rec, task.space.flops)
                done.append((cfg, (res.get("gflops") or 0.0) if res.get("ok") else 0.0))
                if callback:
                    callback(rec)
        tn.update(done)
        left -= len(cfgs)
    prog.end()
    return TuneResult(task, all_recs, new)


def _warm(task, related):
    """(features, score relative to its task's best) of records of the same op with other
    shapes: what the model starts from."""
    by_task = {}
    for r in related:
        by_task.setdefault(json.dumps(r["task"].get("shapes")), []).append(r)
    out = []
    for recs in by_task.values():
        top = max([(r["result"].get("gflops") or 0) for r in recs if r["result"].get("ok")] + [1e-9])
        for r in recs:
            try:
                if not task.space.valid(r["knobs"]):
                    continue
                f = task.space.features(r["knobs"])
            except Exception:
                continue
            s = (r["result"].get("gflops") or 0) / top if r["result"].get("ok") else 0.0
            out.append((f, s))
    return out
