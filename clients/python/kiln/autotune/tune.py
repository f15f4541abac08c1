"""Tasks and the tuning loop (docs/autotune.md).

Each round: the tuner proposes a batch; every runner (a session and a device) compiles its
share with one ``compile_batch`` (kiln.te.build_batch: every compile worker busy) and, under a
lease of its device, runs each build once on fresh inputs, checks the output against numpy
(a wrong answer is a failed trial, never a fast one) and times it with ``time`` (repeat,
number, min_repeat_ms, flush). Compile errors, timeouts and faults are recorded trials.
"""

import json
import math
import sys
import threading
import time

import numpy as np

from .. import __version__ as KILN_VERSION
from .. import nd
from ..errors import KilnError, DeviceFault, Timeout, NotFound, PermissionDenied, ResourceExhausted
from ..module import BenchmarkResult
from ..te.build import build_batch
from ..topi.space import space as make_space
from . import records as R
from .tuners import make_tuner

__all__ = ["Task", "Runner", "tune", "TuneResult", "shares_compile_cores"]


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
    the device (uploaded once, again only after a timeout or fault lost them) and the
    reference answer."""

    def __init__(self, session, device, task, seed=0):
        self.session = session
        self.device = session.device(device) if isinstance(device, str) else device
        self.task = task
        self.inputs, self.ref = _reference(task.space, seed)
        self.scale = max(1.0, float(np.abs(self.ref).max()))
        self.nan = np.full(self.ref.shape, np.nan, task.dtype)
        self._args = None
        self._ratios = []   # a timed run's seconds over the checked run's, the last trials'

    def args(self):
        if self._args is None:
            ins = [nd.array(a, self.device) for a in self.inputs]
            out = nd.empty(self.ref.shape, self.task.dtype, self.device)
            self._args = ins + [out]
        return self._args

    def lost(self):
        """A timeout or fault ended the device worker and its tensors with it."""
        self._args = None

    def wrong(self, got):
        """Why ``got`` is not the reference answer, or None."""
        if np.allclose(got, self.ref, rtol=1e-3, atol=1e-4 * self.scale):
            return None
        bad = ~np.isclose(got, self.ref, rtol=1e-3, atol=1e-4 * self.scale)
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        return "wrong answer: %d of %d elements differ from numpy (first at %s: %r, want %r)" % (
            int(bad.sum()), bad.size, first, float(got[first]), float(self.ref[first]))

    def trial(self, m, opts):
        """Checks and times build ``m``: the output reset to NaN, one run and the download are
        sent together (one in-order queue on the device, so one wait), the output compared with
        numpy, then the kernels timed with ``time``. The checked run is the timing's warm-up
        (``warmup`` 0: the caches it leaves are what a warm-up run would leave). Returns the
        result map; raises the KilnError of a run that failed."""
        args = self.args()
        launches, dev = m._params(args)
        launches = [x for x in launches if min(x[2]) >= 1 and min(x[3]) >= 1]  # empty tensors: nothing to run
        fns = [m.module.get_function(name) for name, _, _, _ in launches]
        t0 = time.monotonic()
        futs = [args[-1].copyfrom_async(self.nan)]
        futs += [f.launch_async(*p, grid=g, block=b, device=dev, timeout_ms=opts["timeout_ms"])
                 for f, (_, p, g, b) in zip(fns, launches)]
        futs.append(args[-1].numpy_async())
        answers = _results(futs)
        got = answers[-1]
        t1 = time.monotonic()
        why = self.wrong(got)
        t2 = time.monotonic()
        if why:
            return {"ok": False, "error": "wrong", "message": why, "stage": "check", "check_s": round(t2 - t0, 4)}
        elapsed = [_elapsed(a) for a in answers[1:-1]]
        shares = _min_repeat_shares(opts["min_repeat_ms"], elapsed)
        seeds = [opts["number"] or self.seed_number(e, ms, opts["timeout_ms"]) for e, ms in zip(elapsed, shares)]
        futs = [f.time_async(*p, grid=g, block=b, device=dev, number=n, repeat=opts["repeat"],
                             min_repeat_ms=ms, warmup=0, flush=opts["flush"], timeout_ms=opts["timeout_ms"])
                for f, (_, p, g, b), ms, n in zip(fns, launches, shares, seeds)]
        bs = _results(futs)
        t3 = time.monotonic()
        self.learn(elapsed, bs)
        per = [sum(x) for x in zip(*(b.results for b in bs))]
        b = bs[0] if len(bs) == 1 else BenchmarkResult({"results": per})
        mean = float(b.mean)
        return {"ok": True, "times": list(b.results), "mean": mean, "median": float(b.median), "min": float(b.min),
                "cv": float(b.cv), "number": int(bs[-1].raw.get("number", seeds[-1])), "number_seed": int(seeds[-1]),
                "first_run_s": elapsed[-1], "repeat": len(b.results),
                "gflops": self.task.space.flops / mean / 1e9 if mean > 0 else None,
                "check_s": round(t1 - t0, 4), "compare_s": round(t2 - t1, 4), "time_s": round(t3 - t2, 4)}


    def seed_number(self, elapsed, min_repeat_ms, timeout_ms):
        """The ``number`` a kernel's ``time`` starts from when the caller set none: runs for
        SEED_SHARE of ``min_repeat_ms`` at the rate the checked run predicts (its seconds,
        scaled by the median of what a timed run took over its checked run in this runner's
        last SEED_KEEP trials; 1 before any). kilnd continues a measurement of a quarter of
        ``min_repeat_ms`` or more with the runs it lacks, and times a shorter one again with
        up to 4x the runs (docs/protocol.md `time`): from 1 run, the steps thrown away were up
        to a third of ``min_repeat_ms`` (1, 4 and 16 runs of a 0.3 ms kernel, 6.3 ms); from
        the seed, none unless a run is 1.6x faster than predicted. A guess too slow makes the
        repeat longer only past 2.5x (a repeat is at least its first measurement). At most
        half of ``timeout_ms`` by the estimate."""
        ratios = sorted(self._ratios)
        per = elapsed * (ratios[len(ratios) // 2] if ratios else 1.0)
        if per <= 0 or not min_repeat_ms:
            return 1
        n = math.ceil(round(min_repeat_ms * 1e-3 * SEED_SHARE / per, 9))
        return int(max(1, min(n, 0.5 * timeout_ms * 1e-3 / per, 1 << 30)))

    def learn(self, elapsed, results):
        """Keeps each kernel's median timed run over its checked run (the last SEED_KEEP)."""
        for e, r in zip(elapsed, results):
            per = float(r.median) if r.results else 0.0
            if e > 0 and per > 0:
                self._ratios.append(per / e)
        del self._ratios[:-SEED_KEEP]


# seed_number's first measurement, in units of min_repeat_ms, and how many ratios it keeps:
# kilnd continues one of 0.25 or more, so 0.4 leaves room for a guess 1.6x too slow.
SEED_SHARE = 0.4
SEED_KEEP = 8


def _elapsed(answer):
    try:
        return max(0.0, float(answer.get("elapsed") or 0.0))
    except (AttributeError, TypeError, ValueError):
        return 0.0


def _min_repeat_shares(min_repeat_ms, elapsed):
    """Each kernel's ``min_repeat_ms`` in a trial of several kernels (a packing kernel and the
    matmul): the trial's, shared in proportion to what each took in the checked run, at least
    1 ms each, so that one repeat of all of them lasts about ``min_repeat_ms``, as one repeat
    of the whole function does in TVM's time_evaluator (each kernel given the whole of it
    measured a two-kernel trial twice as long)."""
    if len(elapsed) <= 1 or not min_repeat_ms:
        return [min_repeat_ms] * len(elapsed)
    total = sum(elapsed)
    if total <= 0:
        return [max(1, -(-min_repeat_ms // len(elapsed)))] * len(elapsed)
    return [max(1, math.ceil(round(min_repeat_ms * e / total, 9))) for e in elapsed]


def _results(futs):
    """Every future's result, in order, after all of them ended (none left in flight); the
    first error is raised."""
    out, err = [], None
    for f in futs:
        try:
            out.append(f.result())
        except KilnError as e:
            out.append(None)
            err = err or e
    if err is not None:
        raise err
    return out


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


class _Batch:
    """One runner's share of a round in flight: its configurations lowered (in the client)
    and sent as one ``compile_batch``, or with ``stream`` as one ``compile_batch`` each, all
    sent at once (the daemon compiles a tenant's items in order), so that a trial can be
    measured as soon as its own build is ready. ``entry(i)`` waits for configuration i's."""

    def __init__(self, runner, task, cfgs, opts, stream=False):
        self.runner = runner
        self.cfgs = cfgs
        self.stream = stream
        self.t0 = time.monotonic()
        self.items = []
        for c in cfgs:
            try:
                self.items.append(task.space.build(c))
            except KilnError as e:
                self.items.append(e)
        schedules = [b for b in self.items if not isinstance(b, Exception)]
        self.compiles = bool(schedules)
        groups = [[b] for b in schedules] if stream else ([schedules] if schedules else [])
        self.requests = []   # per compile_batch: [finish, done_at, items, modules or None]
        for g in groups:
            fut, finish = build_batch(g, runner.device, session=runner.session, options=opts["options"], future=True)
            req = [finish, None, len(g), None]
            fut.add_done_callback(lambda _, req=req: req.__setitem__(1, time.monotonic()))
            self.requests.append(req)
        self.where = []   # configuration index -> (request, index in it), or None
        k = 0
        for b in self.items:
            if isinstance(b, Exception):
                self.where.append(None)
            else:
                self.where.append((k, 0) if stream else (0, k))
                k += 1

    def entry(self, i):
        """Configuration i's build: {"module", "compile_ms"}, or a failed trial's result; with
        ``compile_s_batch`` (from sending its ``compile_batch`` to the answer, lowering
        included), ``compile_items`` (the items of that batch) and ``compile_wait_s`` (how long
        the loop waited for this trial's build: a batch is waited for once, by its first trial;
        nothing when it compiled while earlier trials were measured)."""
        where = self.where[i]
        if where is None:
            e = self.items[i]
            return {"ok": False, "error": _error_kind(e), "message": str(e)[:500], "stage": "compile",
                    "compile_s_batch": 0.0, "compile_items": 0, "compile_wait_s": 0.0}
        req = self.requests[where[0]]
        t = time.monotonic()
        if req[3] is None:
            req[3] = req[0]()
        now = time.monotonic()
        m = req[3][where[1]]
        out = ({"ok": False, "error": _error_kind(m), "message": str(m)[:500], "stage": "compile"}
               if isinstance(m, Exception) else {"module": m, "compile_ms": getattr(m.module, "compile_ms", None)})
        out["compile_s_batch"] = round((req[1] or now) - self.t0, 4)
        out["compile_items"] = req[2]
        out["compile_wait_s"] = round(now - t, 4)
        return out

    def built(self):
        """Every configuration's entry, in order (waits for all of them)."""
        return [self.entry(i) for i in range(len(self.cfgs))]


def _measure(runner, batch, opts, lease_s):
    """Checks and times the builds of one runner's share under a lease of its device; returns
    one result map per configuration. A streamed batch is measured build by build as each is
    ready; a batch of one ``compile_batch`` is waited for whole before the lease is taken."""
    built = None if batch.stream else batch.built()
    lease = None
    if lease_s and (batch.compiles if built is None else any("module" in r for r in built)):
        try:
            lease = runner.session.lease(runner.device, lease_s).acquire()
        except (PermissionDenied, ResourceExhausted, NotFound, KilnError) as e:
            lease = None
            if not getattr(runner, "_lease_warned", False):
                sys.stderr.write("autotune: measuring without a lease (%s)\n" % e)
                runner._lease_warned = True
    out = []
    try:
        for i in range(len(batch.cfgs)):
            r = batch.entry(i) if built is None else built[i]
            if "module" not in r:
                out.append(r)
                continue
            m = r.pop("module")
            try:
                res = runner.trial(m, opts)
            except (Timeout, DeviceFault, NotFound) as e:
                runner.lost()
                res = {"ok": False, "error": _error_kind(e), "message": str(e)[:500], "stage": "run"}
            except KilnError as e:
                res = {"ok": False, "error": _error_kind(e), "message": str(e)[:500], "stage": "run"}
            if res.get("ok"):
                res["compile_ms"] = r.get("compile_ms")
            for k in ("compile_s_batch", "compile_items", "compile_wait_s"):
                res[k] = r[k]
            out.append(res)
    finally:
        if lease is not None:
            lease.release()
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
         callback=None, options=None, pipeline=None):
    """Tunes ``task`` on ``runners`` (a Session measuring on task.device, a (session, device)
    pair, or a list of them: each round's batch is split between them) until the records hold
    ``trials`` trials of the task (a records file resumes: its trials count, its
    configurations are not tried again, and the model learns from them). The default knobs are
    measured first (tuner "default"). ``batch``: configurations per round (default 8, or 2
    per runner if more). ``options``: the compile options (default ``{"fast_math": True}``:
    fused multiply-adds, as TVM's LLVM backend makes). ``pipeline``: compile the next round
    while this one is measured (the tuner proposes it from the results before this round);
    default: on unless a runner's device is a CPU device whose cores the compile workers
    share (``shares_compile_cores`` in its `devices` entry: false when kilnd pins the device
    and its compile workers to cores that do not meet); a round whose results the tuner asks
    for first (``wants_results()``: the model tuner, until it has results enough to fit its
    model) is not overlapped with the next. Returns a TuneResult."""
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
    opts = {"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms, "flush": flush,
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
    if pipeline is None:
        pipeline = not any(shares_compile_cores(r.device) for r in rs)
    first = [not have_default]

    def propose(n):
        """(configurations, tuner names) of the next round."""
        if first[0]:
            first[0] = False
            tn.mark(default)
            return [default], ["default"]
        cfgs = tn.next_batch(min(batch, n))
        return cfgs, [tn.name] * len(cfgs)

    def start(cfgs):
        """Each runner's share lowered and its compiles sent; indices into cfgs."""
        idx = [list(range(i, len(cfgs), len(rs))) for i in range(len(rs))]
        return [(ix, _Batch(rs[i], task, [cfgs[j] for j in ix], opts, stream=pipeline) if ix else None)
                for i, ix in enumerate(idx)]

    cfgs, who = propose(left) if left > 0 else ([], [])
    pending = start(cfgs) if cfgs else None
    while cfgs:   # empty: the space is exhausted, or the trials are done
        round_no += 1
        left -= len(cfgs)
        nxt = None
        if pipeline and left > 0 and not _wants_results(tn):
            # the next round compiles while this one is measured (compile workers and the
            # device are different resources; on a CPU device they share the cores unless
            # kilnd pins them apart, so pipeline is off there by default): sent now, behind
            # this round's compiles, and each trial measured as soon as its build is ready
            ncfgs, nwho = propose(left)
            nxt = (ncfgs, nwho, start(ncfgs) if ncfgs else None)
        results = [None] * len(rs)

        def work(i):
            b = pending[i][1]
            results[i] = _measure(rs[i], b, opts, lease_s) if b else []
        if len(rs) == 1:
            work(0)
        else:
            ths = [threading.Thread(target=work, args=(i,)) for i in range(len(rs))]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
        done = []
        for i, (ix, _) in enumerate(pending):
            for j, res in zip(ix, results[i]):
                cfg = cfgs[j]
                trial_no += 1
                k = dict(key)
                k["device"] = rs[i].device.id
                k["options"] = opts["options"]
                rec = {"v": R.SCHEMA_VERSION, "task": k, "knobs": cfg, "result": res, "tuner": who[j],
                       "trial": trial_no, "round": round_no, "runner": i,
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
        if nxt is not None:
            cfgs, who, pending = nxt
        else:
            cfgs, who = propose(left) if left > 0 else ([], [])
            pending = start(cfgs) if cfgs else None
    prog.end()
    return TuneResult(task, all_recs, new)


def _wants_results(tn):
    """Whether the tuner asks to learn this round's results before it proposes the next: a
    pipelined round is proposed from the results before this one, which costs a model that
    has too few of them yet its first guided rounds (``Tuner.wants_results``)."""
    fn = getattr(tn, "wants_results", None)
    return bool(fn()) if fn else False


def shares_compile_cores(device):
    """Whether a compile on ``device``'s daemon runs on the cores its kernels are timed on: a
    CPU device, unless kilnd pins it and its compile workers to cores that do not meet
    (``--pin cpu:0=0 --pin compile=1``: its `devices` entry says ``shares_compile_cores``
    false; a daemon that does not say is taken to share them). A GPU's kernels never do."""
    if getattr(device, "kind", "cpu") != "cpu":
        return False
    info = getattr(device, "info", None) or {}
    return info.get("shares_compile_cores", True) is not False


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
