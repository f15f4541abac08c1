"""Shared by the te, tvm and topi tests: the probe that says whether kilnd lowers te
programs, and building + running a schedule on fresh random inputs."""

import os
import subprocess
import tempfile

import numpy as np
import pytest

import kiln
from kiln import te

GPU_TARGETS = ("gfx942", "sm_90")
PTXAS = "/usr/local/cuda/bin/ptxas"


def ptxas_verbose(ptx, arch="sm_90"):
    """CUDA's assembler run on ``ptx`` with -v: the CompletedProcess (stderr has its
    registers and spill report per entry function)."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        return subprocess.run([PTXAS, "-arch=" + arch, "-v", src, "-o", os.path.join(d, "k.o")],
                              capture_output=True, text=True)


def vadd_schedule():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    return s, [A, B, C]


def require_te(s):
    """xfails the calling test while kilnd refuses the te format (compiler/te not built in)."""
    sch, args = vadd_schedule()
    try:
        kiln.build(sch, args, "llvm", name="probe", session=s)
    except kiln.InvalidArgument as e:
        if "format" in e.message and "te" in e.message:
            pytest.xfail("kilnd does not lower te programs yet: %s" % e.message)
        raise


def rand(shape, dtype="float32", rng=None, lo=-1.0, hi=1.0):
    rng = rng or np.random.default_rng()
    if np.dtype(dtype).kind == "f":
        return rng.uniform(lo, hi, size=shape).astype(dtype)
    return rng.integers(-50, 50, size=shape).astype(dtype)


def run(s, sched, args, inputs, out_shapes, target="llvm", dev=None, name="f", extra=()):
    """Builds ``sched`` for ``target``, uploads ``inputs`` (numpy arrays, one per leading
    tensor argument), allocates outputs (``out_shapes``: (shape, dtype) per trailing tensor
    argument), runs, returns the outputs as numpy arrays. ``extra``: scalar arguments
    appended (shape vars passed explicitly)."""
    dev = dev or s.cpu(0)
    f = kiln.build(sched, args, target, name=name, session=s)
    nd_in = [kiln.nd.array(x, dev) for x in inputs]
    nd_out = [kiln.nd.empty(shape, dt, dev) for shape, dt in out_shapes]
    f(*(nd_in + nd_out + list(extra)))
    return [o.numpy() for o in nd_out], f
