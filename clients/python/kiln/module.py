"""Compiled modules, their kernels, launches and timing (TVM's Module / PackedFunc /
time_evaluator spelling).

    m = s.compile(open("vadd.ll").read(), target=dev)
    print(m.get_source("asm"))
    m["vadd"](a, b, c, n, grid=(n + 63) // 64, block=64)
    t = m.time_evaluator("vadd", dev, number=10, repeat=3)(a, b, c, n, grid=.., block=..)
    print(t.mean, t.results)
"""

import math
import os
from typing import Any, Callable

import numpy as np

from .errors import InvalidArgument, InternalError, KilnError, error_from_wire

__all__ = ["Module", "Function", "Kernel", "KernelArg", "BenchmarkResult"]

_TARGET_ALIASES = {"llvm": "cpu", "host": "cpu", "rocm": "hsa:0", "cuda": "cuda:0"}
_INT_TYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
_FLOAT_TYPES = {"float16", "bfloat16", "float32", "float64"}


_PATH_SUFFIXES = (".ll", ".bc", ".c", ".hsaco", ".co", ".ptx", ".cubin", ".so", ".o", ".te")


def _looks_like_path(s):
    # one word with a folder or a payload's file suffix: IR text always has a blank
    return (len(s) < 4096 and s and not any(c.isspace() for c in s)
            and (os.sep in s or s.endswith(_PATH_SUFFIXES)))


def _read_payload(ir, fmt):
    """str IR text, bytes, or a path (os.PathLike, a str naming an existing file, or a str
    that looks like a path: one that does not exist raises FileNotFoundError)."""
    path = None
    if isinstance(ir, os.PathLike):
        path = os.fspath(ir)
    elif isinstance(ir, str) and "\n" not in ir and len(ir) < 4096 and (os.path.isfile(ir) or _looks_like_path(ir)):
        path = ir
    if path is not None:
        with open(path, "rb") as f:
            data = f.read()
        # The daemon sniffs the kind (ELF, PTX text, else LLVM); naming it here would only
        # change the cache key of an identical build.
        if fmt in ("llvm", "ptx") or fmt is None:
            try:
                text = data.decode("utf-8")
                if not text.startswith("BC") and "\x00" not in text:
                    return text, fmt
            except UnicodeDecodeError:
                pass
        return data, fmt
    if isinstance(ir, (bytes, bytearray, memoryview)):
        return bytes(ir), fmt
    if isinstance(ir, str):
        return ir, fmt
    raise InvalidArgument("compile takes IR text (str), bytes, or a path, not %s" % type(ir).__name__)


def target_name(session, target):
    from .session import Device
    if target is None:
        return "cpu:0"
    if isinstance(target, Device):
        return target.id
    if not isinstance(target, str):
        raise InvalidArgument("a target is a Device, a device id or a target name, not %r" % (target,))
    t = _TARGET_ALIASES.get(target, target)
    kind, sep, n = t.partition(":")
    if sep and kind in ("rocm", "gpu") and n.isdigit():
        t = "hsa:" + n
    return t


def compile_params(session, ir, target=None, format=None, options=None):
    payload, fmt = _read_payload(ir, format)
    p = {"ir": payload, "target": target_name(session, target)}
    if fmt is not None:
        p["format"] = fmt
    if options:
        p["options"] = dict(options)
    return p


class KernelArg:
    __slots__ = ("name", "type", "info")

    def __init__(self, info):
        self.info = info if isinstance(info, dict) else {"type": info}
        self.name = self.info.get("name") or ""
        self.type = self.info.get("type")

    def __repr__(self):
        return "%s %s" % (self.type, self.name) if self.name else str(self.type)


class Kernel:
    """A kernel's signature as the daemon reported it: ``name``, ``args`` (KernelArg with
    ``name`` and ``type``: "ptr", "int32", "float32", ...), and ``info`` (the whole map)."""

    __slots__ = ("name", "args", "info")

    def __init__(self, info):
        self.info = info
        self.name = info.get("name")
        self.args = [KernelArg(a) for a in info.get("args") or []]

    def __repr__(self):
        return "%s(%s)" % (self.name, ", ".join(map(repr, self.args)))


class BenchmarkResult:
    """TVM's time_evaluator result: ``results`` (seconds per repeat, each the mean over
    ``number`` runs), ``mean``, ``median``, ``min``, ``max``, ``std``, and ``cv``."""

    def __init__(self, raw):
        self.raw = raw
        res = raw.get("results") or []
        self.results = tuple(float(x) for x in res)

        def pick(key, fn):
            v = raw.get(key)
            if v is not None:
                return float(v)
            return fn(self.results) if self.results else float("nan")
        self.mean = pick("mean", lambda r: float(np.mean(r)))
        self.median = pick("median", lambda r: float(np.median(r)))
        self.min = pick("min", min)
        self.max = pick("max", max)
        self.std = pick("std", lambda r: float(np.std(r)))
        self.cv = pick("cv", lambda r: (float(np.std(r)) / float(np.mean(r))) if np.mean(r) else float("nan"))

    def to_dict(self) -> "dict[str, Any]":
        """The numbers as a plain dict (seconds): ``mean median min max std cv`` and
        ``results``, plus ``number`` and ``repeat`` as kilnd ran them (for JSON, pandas)."""
        d = {k: getattr(self, k) for k in ("mean", "median", "min", "max", "std", "cv")}
        d["results"] = list(self.results)
        for k in ("number", "repeat"):
            if self.raw.get(k) is not None:
                d[k] = int(self.raw[k])
        return d

    def __repr__(self):
        return ("BenchmarkResult(min=%.6g, mean=%.6g, median=%.6g, max=%.6g, std=%.6g, results=%r)"
                % (self.min, self.mean, self.median, self.max, self.std, self.results))

    def __str__(self):
        ms = lambda v: v * 1e3
        return ("Execution time summary:\n %-10s %-10s %-10s %-10s %-10s\n %-10.4f %-10.4f %-10.4f %-10.4f %-10.4f"
                % ("mean (ms)", "median (ms)", "max (ms)", "min (ms)", "std (ms)",
                   ms(self.mean), ms(self.median), ms(self.max), ms(self.min), ms(self.std)))


def _dim3(v, what):
    if v is None:
        raise InvalidArgument("a launch needs %s= (an int or up to 3 ints)" % what)
    if isinstance(v, (int, np.integer)):
        v = (int(v),)
    v = [int(x) for x in v]
    if not 1 <= len(v) <= 3 or any(x < 1 for x in v):
        raise InvalidArgument("%s=%r: give 1 to 3 positive ints" % (what, v))
    return v + [1] * (3 - len(v))


class Function:
    """One kernel of a Module; call it like a function (TVM's PackedFunc):
    ``f(a, b, c, n, grid=.., block=..)``. Tensors are NDArrays, scalars plain numbers."""

    def __init__(self, module, name, kernel=None):
        self.module = module
        self.name = name
        self.kernel = kernel

    def _params(self, args, grid, block, shared=None, device=None, timeout_ms=None):
        from .nd import NDArray
        sig = self.kernel.args if self.kernel is not None and self.kernel.args else None
        if sig is not None and len(args) != len(sig):
            raise InvalidArgument("kernel %s takes %d arguments (%s), %d given"
                                  % (self.name, len(sig), ", ".join(map(repr, sig)), len(args)))
        wire = []
        dev = None
        for i, a in enumerate(args):
            typ = sig[i].type if sig is not None else None
            if isinstance(a, NDArray):
                a._check()
                if dev is None:
                    dev = a.device
                wire.append({"tensor": a.id})
                continue
            if isinstance(a, np.generic):
                a = a.item()
            if isinstance(a, bool):
                a = int(a)
            if isinstance(a, int):
                wire.append(float(a) if typ in _FLOAT_TYPES else a)
            elif isinstance(a, float):
                if typ in _INT_TYPES:
                    raise InvalidArgument("argument %d of %s is %s; got the float %r" % (i, self.name, typ, a))
                wire.append(a)
            else:
                raise InvalidArgument("argument %d of %s: pass an NDArray or a number, not %s"
                                      % (i, self.name, type(a).__name__))
        if device is not None:
            dev_id = device.id if hasattr(device, "id") else str(device)
        elif dev is not None:
            dev_id = dev.id
        else:
            dev_id = self.module.device_id()
        p = {"module": self.module.id, "kernel": self.name, "device": dev_id,
             "grid": _dim3(grid, "grid"), "block": _dim3(block, "block"), "args": wire}
        if shared:
            p["shared"] = int(shared)
        if timeout_ms is not None:
            p["timeout_ms"] = int(timeout_ms)
        return p

    def launch_async(self, *args, grid=None, block=None, shared=None, device=None, timeout_ms=None):
        """As calling the function; returns a Future of the daemon's answer."""
        return self.module.session._conn.request("launch", self._params(args, grid, block, shared, device,
                                                                         timeout_ms))

    def __call__(self, *args, grid=None, block=None, shared=None, device=None, timeout_ms=None):
        """Launches the kernel and waits until it finished; returns the daemon's answer.
        ``timeout_ms``: the kernel's deadline (default: the daemon's --launch-timeout); past it
        the launch raises kiln.Timeout and the tenant's tensors on that device are lost."""
        return self.launch_async(*args, grid=grid, block=block, shared=shared, device=device,
                                 timeout_ms=timeout_ms).result()

    def time_async(self, *args, grid=None, block=None, shared=None, device=None, number=10, repeat=3,
                   min_repeat_ms=0, warmup=None, flush=None, timeout_ms=None):
        p = self._params(args, grid, block, shared, device, timeout_ms)
        p.update(number=int(number), repeat=int(repeat), min_repeat_ms=int(min_repeat_ms))
        if warmup is not None:
            p["warmup"] = int(warmup)
        if flush is not None:
            p["flush"] = bool(flush)
        return self.module.session._conn.request("time", p, transform=BenchmarkResult)

    def time(self, *args, **kw):
        """Times the kernel on the device (TVM's time_evaluator) -> BenchmarkResult."""
        return self.time_async(*args, **kw).result()

    def __repr__(self):
        return "<kiln.Function %r of module %s>" % (self.kernel or self.name, self.module.short_id)


class Module:
    """A compiled module: ``id`` (the daemon's module id, the content hash of the build),
    ``target``, ``kernels`` (Kernel list), ``cached``, ``compile_ms``, ``log``."""

    def __init__(self, session, info, target=None, name=None):
        if not isinstance(info, dict) or "module" not in info:
            raise InternalError("compile answered %r, not a module map" % (info,))
        self.session = session
        self.info = info
        self.id = info["module"]
        self.requested_target = target          # as asked: "cpu:0", "hsa:0", "gfx942", ...
        self.target = info.get("target") or target  # canonical, from the daemon: "gfx90a:sramecc+:xnack-"
        self.kernels = [Kernel(k) for k in info.get("kernels") or [] if isinstance(k, dict)]
        self.cached = info.get("cached")
        self.compile_ms = info.get("compile_ms")
        self.log = info.get("log") or ""
        self.entry_name = name or (self.kernels[0].name if len(self.kernels) == 1 else None)
        self._sources = {}

    @property
    def short_id(self):
        i = self.id
        if isinstance(i, (bytes, bytearray)):
            i = i.hex()
        return str(i)[:16]

    @property
    def imported_modules(self):
        """TVM's ``mod.imported_modules[0]`` is the device module; here the module is both."""
        return [self]

    @property
    def type_key(self):
        """TVM's module type: "llvm" (cpu), "rocm" or "cuda"."""
        t = str(self.target)
        return "llvm" if t == "cpu" else "rocm" if t.startswith("gfx") else "cuda" if t.startswith("sm_") else t

    def device_id(self):
        """The device a launch without tensors or device= goes to: the device the module was
        compiled for, cpu:0 for "cpu", else the first device whose arch matches."""
        r = self.requested_target
        if r and ":" in r and r.split(":")[1].isdigit():
            return r
        t = self.target or "cpu"
        if t == "cpu":
            return "cpu:0"
        # A target name (gfx942, sm_90): the first device whose arch matches it.
        for did, d in sorted(self.session._device_info().items()):
            arch = str(d.get("arch") or "")
            if arch == t or arch.split(":")[0] == t.split(":")[0]:
                return did
        raise InvalidArgument("module %s was built for %s and no device of the daemon has that arch; "
                              "pass device=" % (self.short_id, t))

    def get_source(self, fmt="llvm"):
        """"llvm" (lowered LLVM IR), "asm" (assembly), "hsaco"/"ptx"/"so"/"binary" (the code
        object: bytes; PTX as str). Like TVM's get_source."""
        return self.get_source_async(fmt).result()

    def get_source_async(self, fmt="llvm"):
        from ._rpc import completed_future
        kinds = {"llvm": "llvm", "ll": "llvm", "asm": "asm", "s": "asm", "hsaco": "binary", "ptx": "binary",
                 "so": "binary", "cpu-so": "binary", "binary": "binary", "obj": "binary", "co": "binary"}
        kind = kinds.get(fmt)
        if kind is None:
            raise InvalidArgument("get_source(%r): choose llvm, asm, hsaco, ptx, so or binary" % (fmt,))
        if kind in self._sources:
            return completed_future(self.session._conn, self._sources[kind], method="source")

        def conv(v):
            if fmt == "ptx" and isinstance(v, (bytes, bytearray)):
                v = bytes(v).decode("utf-8", "replace").rstrip("\x00")
            elif kind != "binary" and isinstance(v, (bytes, bytearray)):
                v = bytes(v).decode("utf-8", "replace")
            self._sources[kind] = v
            return v
        return self.session._conn.request("source", {"module": self.id, "kind": kind}, transform=conv)

    def kernel(self, name):
        for k in self.kernels:
            if k.name == name:
                return k
        return None

    def get_function(self, name):
        k = self.kernel(name)
        if k is None and self.kernels:
            raise KeyError("module %s has no kernel %r; it has %s"
                           % (self.short_id, name, ", ".join(k.name for k in self.kernels)))
        return Function(self, name, k)

    __getitem__ = get_function

    def __contains__(self, name):
        return self.kernel(name) is not None

    def __call__(self, *args, **kw):
        """Calls the module's only kernel (TVM's built function)."""
        if self.entry_name is None:
            raise InvalidArgument("module %s has %d kernels; pick one with m[name]" % (self.short_id, len(self.kernels)))
        return self.get_function(self.entry_name)(*args, **kw)

    def time_evaluator(self, func_name: str, dev=None, number: int = 10, repeat: int = 3, min_repeat_ms: int = 0,
                       warmup=None, flush=None, grid=None, block=None, shared=None) -> Callable[..., "BenchmarkResult"]:
        """TVM's time_evaluator: returns ``evaluator(*args, grid=.., block=..)`` ->
        BenchmarkResult. The launch geometry may be given here or to the evaluator."""
        f = self.get_function(func_name)

        def evaluator(*args, **kw):
            g = kw.pop("grid", grid)
            b = kw.pop("block", block)
            sh = kw.pop("shared", shared)
            if kw:
                raise InvalidArgument("unexpected arguments %s" % ", ".join(kw))
            return f.time(*args, grid=g, block=b, shared=sh, device=dev, number=number, repeat=repeat,
                          min_repeat_ms=min_repeat_ms, warmup=warmup, flush=flush)
        return evaluator

    def __repr__(self):
        return "<kiln.Module %s target=%s kernels=%s>" % (self.short_id, self.target,
                                                          [k.name for k in self.kernels])


def batch_results(session, r, targets):
    """compile_batch's answer -> list of Module or KilnError, in item order."""
    items = r
    if isinstance(r, dict):
        for key in ("results", "items", "modules"):
            if key in r:
                items = r[key]
                break
    if not isinstance(items, list):
        raise InternalError("compile_batch answered %r" % (type(r).__name__,))
    out = []
    for i, it in enumerate(items):
        tgt = targets[i] if i < len(targets) else None
        if isinstance(it, dict) and it.get("error") is not None:
            out.append(error_from_wire(it["error"]))
        elif isinstance(it, (list, tuple)) and len(it) == 2 and isinstance(it[0], int):
            out.append(error_from_wire(it))
        elif isinstance(it, dict) and "module" in it:
            out.append(Module(session, it, tgt))
        else:
            out.append(InternalError("compile_batch item %d: unexpected answer %r" % (i, it)))
    return out
