"""``kiln.build``: a te schedule compiled by kilnd into a callable module (TVM's tvm.build).

    fadd = kiln.build(s, [A, B, C], "llvm", name="myadd")
    fadd(a, b, c)                 # grid and block worked out from the argument shapes
    fadd.time_evaluator(fadd.entry_name, dev, number=10)(a, b, c).mean
"""

import numpy as np

from ..errors import InvalidArgument, InternalError
from .. import dtypes as _dt
from . import expr as X
from .tensor import Tensor
from .payload import lower

__all__ = ["build", "TeModule", "resolve_target", "eval_wire"]

DEFAULT_ROCM = "gfx942"
DEFAULT_CUDA = "sm_90"


def _option(parts, key):
    for p in parts:
        if p.startswith(key + "="):
            return p.split("=", 1)[1]
    return None


def resolve_target(session, target):
    """TVM target strings to kiln targets: "llvm" -> "cpu"; "rocm" -> the arch of the
    daemon's first ROCm device, else gfx942 (``-mcpu=`` wins); "cuda"/"nvptx" -> the first
    CUDA device's arch, else sm_90 (``-arch=`` wins). Device objects, device ids ("cuda:0")
    and arch names ("gfx90a", "sm_80") pass through."""
    from ..session import Device
    if target is None:
        return "cpu"
    if isinstance(target, Device):
        return target.id
    if hasattr(target, "kiln_target"):
        target = target.kiln_target
    if not isinstance(target, str):
        raise InvalidArgument("a target is a string (\"llvm\", \"rocm\", \"cuda\", \"gfx942\", \"sm_90\") or a "
                              "Device, not %r" % (target,))
    parts = target.split()
    kind = parts[0] if parts else ""
    if kind in ("llvm", "cpu", "host", "c", "stackvm"):
        return "cpu"
    if kind == "rocm":
        mcpu = _option(parts, "-mcpu")
        if mcpu:
            return mcpu
        return _device_arch(session, "hsa:0") or DEFAULT_ROCM
    if kind in ("cuda", "nvptx"):
        arch = _option(parts, "-arch") or _option(parts, "-mcpu")
        if arch:
            return arch
        return _device_arch(session, "cuda:0") or DEFAULT_CUDA
    return target


def _device_arch(session, did):
    info = session._device_info().get(did)
    if info and info.get("available", True) is not False:
        return info.get("arch")
    return None


def eval_wire(e, env):
    """Evaluates a launch-recipe expression (ints, vars, add sub mul floordiv floormod min max)."""
    if isinstance(e, bool):
        return int(e)
    if isinstance(e, int):
        return e
    if isinstance(e, (list, tuple)) and e:
        op = e[0]
        if op == "var":
            if e[1] not in env:
                raise InvalidArgument("the launch needs shape variable %s; pass it as an argument" % e[1])
            return env[e[1]]
        if op == "const":
            return int(e[2])
        a, b = eval_wire(e[1], env), eval_wire(e[2], env) if len(e) > 2 else None
        if op == "add":
            return a + b
        if op == "sub":
            return a - b
        if op == "mul":
            return a * b
        if op == "floordiv":
            return a // b
        if op == "floormod":
            return a % b
        if op == "min":
            return min(a, b)
        if op == "max":
            return max(a, b)
    raise InternalError("launch recipe has an expression kiln's client does not know: %r" % (e,))


def _eval_expr(e, env):
    """A shape expression (te expr over shape Vars) with var values by id."""
    e = X.as_expr(e)
    if isinstance(e, X.IntImm):
        return e.value
    if isinstance(e, X.Var):
        if id(e) not in env:
            raise InvalidArgument("shape variable %s has no value: no argument's shape gives it; pass it"
                                  % e.name)
        return env[id(e)]
    if isinstance(e, X.BinaryOp):
        a, b = _eval_expr(e.a, env), _eval_expr(e.b, env)
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "floordiv": lambda: a // b,
                "floormod": lambda: a % b, "truncdiv": lambda: int(a / b), "truncmod": lambda: int(np.fmod(a, b)),
                "min": lambda: min(a, b), "max": lambda: max(a, b)}[e.op]()
    if isinstance(e, X.Cast):
        return _eval_expr(e.value, env)
    raise InvalidArgument("cannot evaluate shape expression %r" % (e,))


class TeModule:
    """A built te program: call it like the function (``f(a, b, c)``), ``get_source``,
    ``imported_modules``, ``time_evaluator``. ``module`` is the kiln Module, ``program``
    the payload map, ``entry_name`` the kernel name."""

    def __init__(self, session, prog, module, target, recipes=None):
        self.session = session
        self.prog = prog
        self.program = prog.program
        self.module = module
        self.target = target
        self.entry_name = prog.kernels[0]["name"] if len(prog.kernels) == 1 else prog.kernels[-1]["name"]
        self._temps = {}
        self._recipes = []
        for k in prog.kernels:
            info = module.kernel(k["name"])
            recipe = (recipes or {}).get(k["name"]) or (info.info.get("launch") if info is not None else None)
            if info is None or recipe is None:
                raise InternalError("kilnd's compile answer has no launch recipe for kernel %s" % k["name"])
            self._recipes.append((k["name"], info, recipe))

    # -- TVM's Module surface ---------------------------------------------------------------

    @property
    def type_key(self):
        return self.module.type_key

    @property
    def imported_modules(self):
        """TVM: the device module of a GPU build (its LLVM IR and assembly); none for "llvm"."""
        return [] if self.module.target == "cpu" else [self.module]

    def get_source(self, fmt="llvm"):
        return self.module.get_source(fmt)

    def export_library(self, path):
        """Writes the module (its code object, launch recipes and program) to ``path``;
        ``kiln.load_module(path)`` loads it elsewhere without compiling (kiln.te.export)."""
        from .export import export_library
        export_library(self, path)

    def get_function(self, name):
        if name != self.entry_name and name not in [k for k, _, _ in self._recipes]:
            raise KeyError("module has no function %r (it has %s)" % (name, self.entry_name))
        return self

    __getitem__ = get_function

    # -- launches ---------------------------------------------------------------------------

    def _bind(self, args):
        from ..nd import NDArray
        p = self.prog
        if len(args) != len(p.args):
            raise InvalidArgument("%s takes %d arguments (%s), %d given" % (
                self.entry_name, len(p.args), ", ".join(p.names[id(a)] for a in p.args), len(args)))
        env = {}
        dev = None
        for a, v in zip(p.args, args):
            if isinstance(a, X.Var):
                if isinstance(v, np.generic):
                    v = v.item()
                if not isinstance(v, int) or isinstance(v, bool):
                    raise InvalidArgument("argument %s is an integer shape variable, not %r" % (a.name, v))
                env[id(a)] = v
            elif not isinstance(v, NDArray):
                raise InvalidArgument("argument %s is a tensor: pass a kiln.nd.array, not %s"
                                      % (a.name, type(v).__name__))
            elif dev is None:
                dev = v.device
            elif v.device != dev:
                raise InvalidArgument("argument %s is on %s, the others on %s" % (a.name, v.device, dev))
        for a, v in zip(p.args, args):
            if isinstance(a, Tensor):
                if v.dtype != a.dtype:
                    raise InvalidArgument("argument %s is %s; the program declares %s" % (a.name, v.dtype, a.dtype))
                if len(v.shape) != len(a.shape):
                    raise InvalidArgument("argument %s has %d dimensions; the program declares %d"
                                          % (a.name, len(v.shape), len(a.shape)))
                for d, n in zip(a.shape, v.shape):
                    if isinstance(d, X.Var):
                        if env.setdefault(id(d), n) != n:
                            raise InvalidArgument("shape variable %s is %d by an earlier argument and %d by %s"
                                                  % (d.name, env[id(d)], n, a.name))
        for a, v in zip(p.args, args):
            if isinstance(a, Tensor):
                want = tuple(_eval_expr(d, env) for d in a.shape)
                if want != tuple(v.shape):
                    raise InvalidArgument("argument %s has shape %s; the program wants %s"
                                          % (a.name, tuple(v.shape), want))
        if dev is None:
            raise InvalidArgument("%s: no tensor argument, so no device to run on" % self.entry_name)
        t = str(self.module.target)
        kind = dev.id.partition(":")[0]
        ok = (t == "cpu" and kind == "cpu") or (t.startswith("gfx") and kind == "hsa") or \
             (t.startswith("sm_") and kind == "cuda")
        if not ok:
            raise InvalidArgument("this module was built for %s; its arguments are on %s" % (t, dev.id))
        return env, dev

    def _params(self, args):
        env, dev = self._bind(args)
        p = self.prog
        values = list(args)
        key = (dev.id,) + tuple(sorted((p.names[i], v) for i, v in env.items()))
        temps = self._temps.get(key)
        if temps is None:
            from .. import nd
            temps = [nd.empty(tuple(_eval_expr(d, env) for d in t.shape), t.dtype, dev) for t in p.temps]
            self._temps = {key: temps}   # keep the latest shapes only
        values += temps
        wenv = {p.names[i]: v for i, v in env.items()}
        launches = []
        for name, kinfo, recipe in self._recipes:
            nparams = len(kinfo.args)
            params = values[:len(values)] + [None] * (nparams - len(values))
            for vr in recipe.get("vars") or []:
                if vr["name"] not in wenv:
                    raise InvalidArgument("shape variable %s has no value: pass it as an argument" % vr["name"])
                params[vr["arg"]] = wenv[vr["name"]]
            grid = [eval_wire(g, wenv) for g in recipe["grid"]]
            block = [eval_wire(b, wenv) for b in recipe["block"]]
            for d in recipe.get("parallel") or []:
                # a parallel loop runs in shares of any grid: one group per pool thread
                grid[d] = min(grid[d], self._pool_threads(dev))
            if any(x is None for x in params) or len(params) != nparams:
                raise InternalError("kernel %s: the launch recipe leaves parameters unset" % name)
            launches.append((name, params, grid, block))
        return launches, dev

    def _pool_threads(self, dev):
        info = self.session._device_info().get(dev.id) or {}
        if not dev.id.startswith("cpu:"):
            return 1 << 30
        return max(1, int(info.get("compute_units") or 1))

    def __call__(self, *args):
        """Runs the kernels on the arguments' device and waits until they finished."""
        self.run(*args)

    def run(self, *args, timeout_ms=None):
        """As calling it, with each kernel's deadline (``launch``'s ``timeout_ms``)."""
        launches, dev = self._params(args)
        futs = []
        for name, params, grid, block in launches:
            if min(grid) < 1 or min(block) < 1:
                continue   # an empty tensor: nothing to compute
            futs.append(self.module.get_function(name).launch_async(*params, grid=grid, block=block, device=dev,
                                                                    timeout_ms=timeout_ms))
        for f in futs:
            f.result()

    def time_evaluator(self, func_name=None, dev=None, number=10, repeat=3, min_repeat_ms=0, warmup=None,
                       flush=None, timeout_ms=None):
        """TVM's time_evaluator: ``evaluator(*args)`` -> BenchmarkResult; with several
        kernels (intermediate stages at the root), each repeat is the sum of theirs."""
        from ..module import BenchmarkResult
        if func_name is not None:
            self.get_function(func_name)

        def evaluator(*args):
            launches, d = self._params(args)
            per = None
            for name, params, grid, block in launches:
                r = self.module.get_function(name).time(*params, grid=grid, block=block, device=dev or d,
                                                        number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                                                        warmup=warmup, flush=flush, timeout_ms=timeout_ms)
                per = list(r.results) if per is None else [x + y for x, y in zip(per, r.results)]
            if len(launches) == 1:
                return r
            return BenchmarkResult({"results": per or []})
        return evaluator

    def __repr__(self):
        return "<kiln.TeModule %s target=%s kernels=%s>" % (self.entry_name, self.module.target,
                                                            [k for k, _, _ in self._recipes])


def build(s, args=None, target="llvm", target_host=None, name="default_function", session=None, options=None):
    """Compiles schedule ``s`` with arguments ``args`` for ``target`` ("llvm" = the CPU,
    "rocm" = AMD (gfx942 unless ``-mcpu=``), "cuda" = NVIDIA (sm_90 unless ``-arch=``), or
    any kiln target / Device). ``target_host`` is accepted for TVM's spelling; kiln's host
    side is the client. Returns a TeModule."""
    from ..session import default_session
    if args is None:
        raise InvalidArgument("kiln.build needs the argument list: kiln.build(s, [A, B, C], target)")
    session = session or default_session()
    tgt = resolve_target(session, target)
    prog = lower(s, args, name)
    module = session.compile(prog.payload, target=tgt, format="te", options=options)
    return TeModule(session, prog, module, tgt)


def build_batch(schedules, target="llvm", session=None, options=None, progress=None, future=False):
    """Compiles many te programs in one ``compile_batch`` (a tuner's trial builds: every
    compile worker busy, results in item order). ``schedules``: ``(s, args)`` or
    ``(s, args, name)`` tuples. Returns a list holding, per item, a TeModule (call it, or
    ``time_evaluator``) or the KilnError of an item that did not lower or compile (not
    raised). ``progress(p)`` gets the batch's ``progress`` notifications. With
    ``future=True`` returns ``(kiln.Future, finish)`` instead: ``finish()`` waits and gives the
    list, and ``fut.cancel()`` drops the items not yet compiling."""
    from ..errors import KilnError
    from ..session import default_session
    session = session or default_session()
    tgt = resolve_target(session, target)
    progs, items, where = [], [], []
    for i, sch in enumerate(schedules):
        s, args = sch[0], sch[1]
        name = sch[2] if len(sch) > 2 else "default_function"
        try:
            prog = lower(s, args, name)
        except KilnError as e:
            progs.append(e)
            continue
        progs.append(prog)
        where.append(i)
        items.append({"ir": prog.payload, "target": tgt, "format": "te", "options": options})
    fut = session.compile_batch_async(items, progress=progress)

    def finish(timeout=None):
        mods = fut.result(timeout) if items else []
        out = list(progs)
        for i, m in zip(where, mods):
            out[i] = m if isinstance(m, KilnError) else TeModule(session, progs[i], m, tgt)
        return out
    if future:
        return fut, finish
    return finish()
