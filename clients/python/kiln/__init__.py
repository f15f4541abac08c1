"""kiln: the Python client of kilnd, a compile-and-execute daemon for GPUs.

    import kiln, numpy as np
    with kiln.connect() as s:                 # KILN_URL, the default socket, or a private kilnd
        dev = s.cpu(0)                        # s.rocm(0), s.cuda(0); dev.exist
        a = kiln.nd.array(np.arange(4, dtype="float32"), dev)
        print(a.numpy())

docs/python.md is the reference; docs/protocol.md the wire contract.
"""

from .errors import (KilnError, InvalidArgument, NoMethod, Unauthenticated, PermissionDenied, NotFound,
                     ResourceExhausted, CompileError, CompilerCrashed, DeviceError, DeviceFault, Timeout,
                     Cancelled, Unavailable, InternalError, ERROR_CLASSES)
from ._rpc import Future, tls_context
from .session import Session, Device, connect, default_session
from .module import Module, Function, Kernel, KernelArg, BenchmarkResult
from .daemon import Daemon, start_daemon, find_kilnd
from . import nd
from . import fleet  # imports redis only when used
from . import dtypes
from . import te
from .te.build import build
from .te.export import load_module

__version__ = "0.1.0"


def get_include() -> str:
    """The folder holding ``kiln/kernel.h`` (shipped with the package): pass it to the C
    compiler as ``-I`` to write kernels in C on a machine without kiln's sources
    (``clang -I$(python3 -m kiln --include) ...``)."""
    import os
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def cpu(n=0):
    """``default_session().cpu(n)``: TVM's ``tvm.cpu(0)``."""
    return default_session().cpu(n)


def rocm(n=0):
    return default_session().rocm(n)


def cuda(n=0):
    return default_session().cuda(n)


def device(device_id):
    return default_session().device(device_id)


def wait(futures, timeout=None):
    """Waits for every future; returns their results in order (raises the first error)."""
    return [f.result(timeout) for f in futures]


__all__ = ["te", "build", "connect", "Session", "Device", "Module", "Function", "Kernel", "KernelArg", "BenchmarkResult",
           "Future", "Daemon", "start_daemon", "find_kilnd", "default_session", "nd", "dtypes", "fleet",
           "cpu", "rocm", "cuda", "device", "wait", "get_include",
           "KilnError", "InvalidArgument", "NoMethod", "Unauthenticated", "PermissionDenied", "NotFound",
           "ResourceExhausted", "CompileError", "CompilerCrashed", "DeviceError", "DeviceFault", "Timeout",
           "Cancelled", "Unavailable", "InternalError", "ERROR_CLASSES"]
