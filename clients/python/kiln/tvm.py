"""kiln.tvm: the old TVM spellings, so TVM-era scripts run with ``import kiln.tvm as tvm``.

    n = tvm.var("n")
    A = tvm.placeholder((n,), name="A")
    C = tvm.compute(A.shape, lambda i: A[i] * 2, name="C")
    s = tvm.create_schedule(C.op)
    f = tvm.build(s, [A, C], "rocm", target_host="llvm", name="double")   # gfx942 unless -mcpu=
    ctx = tvm.rocm(0)                                                     # tvm.cpu(0) for "llvm"
    a = tvm.nd.array(np.ones(8, "float32"), ctx)

Everything is kiln.te and kiln.nd under TVM's names; the daemon is the process's default
session (``kiln.connect()``: $KILN_URL, the default socket, or a private kilnd).
"""

from . import te as _te
from . import nd  # noqa: F401  (tvm.nd.array, tvm.nd.empty)
from .te import (var, size_var, placeholder, compute, reduce_axis, thread_axis, create_schedule, sum, max, min,
                 prod, comm_reducer, if_then_else, all, any, exp, exp2, log, log2, sqrt, rsqrt, tanh, sigmoid, erf,
                 abs, floor, ceil, round, power, sin, cos, const, max_value, min_value, floordiv, floormod,
                 truncdiv, truncmod, indexdiv, indexmod, lower)
from .te.build import build
from .session import default_session as _default_session

te = _te


class tir:  # noqa: N801 (TVM's module name)
    """``tvm.tir``: the index arithmetic TVM's tutorials spell through it."""
    indexmod = staticmethod(indexmod)
    indexdiv = staticmethod(indexdiv)
    floordiv = staticmethod(floordiv)
    floormod = staticmethod(floormod)
    truncdiv = staticmethod(truncdiv)
    truncmod = staticmethod(truncmod)
    const = staticmethod(const)
    if_then_else = staticmethod(if_then_else)
    all = staticmethod(all)
    any = staticmethod(any)
    exp = staticmethod(exp)
    sqrt = staticmethod(sqrt)
    max_value = staticmethod(max_value)
    min_value = staticmethod(min_value)


class runtime:  # noqa: N801 (TVM's module name)
    """``tvm.runtime.load_module(path)``: a module export_library wrote."""
    @staticmethod
    def load_module(path, session=None):
        from .te.export import load_module as load
        return load(path, session)


class rpc:  # noqa: N801 (TVM's module name)
    """``tvm.rpc.connect(host, port)``: a kiln session with TVM's RPC surface: ``remote.cpu(0)``,
    ``remote.upload(path)`` (kept by the client: kilnd takes the code object when the module
    is loaded) and ``remote.load_module(name)``."""

    class RPCSession:
        def __init__(self, session):
            self._session = session
            self._files = {}

        def __getattr__(self, name):
            return getattr(self._session, name)

        def upload(self, path, target=None):
            import os
            with open(path, "rb") as f:
                self._files[target or os.path.basename(path)] = f.read()

        def load_module(self, name):
            from .te.export import load_module as load
            if name not in self._files:
                raise KeyError("load_module: %s was not uploaded to this session" % name)
            return load(self._files[name], self._session)

    @staticmethod
    def connect(url, port=None, key=None, session_timeout=0):
        from .session import connect as kconnect
        if port is not None:
            url = "tcp:%s:%d" % (url, port)
        return rpc.RPCSession(kconnect(url, token=key) if key else kconnect(url))


class testing:  # noqa: N801 (TVM's module name)
    @staticmethod
    def assert_allclose(actual, desired, rtol=1e-7, atol=0):
        import numpy as np
        np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol, verbose=True)


def cpu(dev_id=0):
    return _default_session().cpu(dev_id)


def rocm(dev_id=0):
    return _default_session().rocm(dev_id)


def cuda(dev_id=0):
    return _default_session().cuda(dev_id)


gpu = cuda


def context(dev_type, dev_id=0):
    """``tvm.context("rocm", 0)`` / ``tvm.device``."""
    return _default_session().device("%s:%d" % (dev_type, dev_id))


device = context


class _Target:
    """``tvm.target.rocm()`` etc.: a target string holder."""

    def __init__(self, s):
        self.kiln_target = s

    def __str__(self):
        return self.kiln_target


class target:  # noqa: N801 (TVM's module name)
    Target = _Target

    @staticmethod
    def rocm(options=""):
        return _Target(("rocm " + options).strip())

    @staticmethod
    def cuda(options=""):
        return _Target(("cuda " + options).strip())

    @staticmethod
    def create(s):
        return _Target(s)


__all__ = ["var", "size_var", "placeholder", "compute", "reduce_axis", "thread_axis", "create_schedule", "sum",
           "max", "min", "prod", "comm_reducer", "if_then_else", "all", "any", "exp", "exp2", "log", "log2", "sqrt",
           "rsqrt", "tanh", "sigmoid", "erf", "abs", "floor", "ceil", "round", "power", "sin", "cos", "const",
           "max_value", "min_value", "floordiv", "floormod", "truncdiv", "truncmod", "indexdiv", "indexmod",
           "lower", "build", "cpu", "rocm", "cuda", "gpu", "context", "device", "target", "nd", "te", "tir",
           "testing", "runtime", "rpc"]
