"""Writes the te programs of kiln.topi's GPU schedules as payload files (msgpack), one per
operator case of tests/python/test_topi.py plus 256^3 GEMMs with the default and with
32x32 / 4x4 / k 16 knobs: the te/topi corpus of tests/softgpu/isa (built for gfx942 and gfx90a
by kiln-test-kernelc). Usage: gen_te.py OUT_DIR NAME...; each NAME.te is written (no daemon needed)."""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "..", "clients", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))

from kiln import te, topi  # noqa: E402
from kiln.te.payload import lower  # noqa: E402


def gemm(n, **knobs):
    def make():
        A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
        C = topi.matmul(A, B)
        return [A, B, C], topi.schedule_matmul(C, "gpu", **knobs)
    return make


def programs():
    import test_topi
    out = {}
    for name, (make, sched) in test_topi.CASES.items():
        def mk(make=make, sched=sched):
            ins, o, _, _ = make()
            return ins + [o], sched(o, "gpu")
        out["topi_" + name] = mk
    g = gemm(256)
    out["gemm256"] = lambda: (lambda r: (r[0], r[1]))(g())
    g2 = gemm(256, block_m=32, block_n=32, thread_m=4, thread_n=4, k_tile=16)
    out["gemm256_small"] = lambda: (lambda r: (r[0], r[1]))(g2())
    return out


def main():
    outdir, names = sys.argv[1], sys.argv[2:]
    progs = programs()
    for name in names:
        args, s = progs[name]()
        prog = lower(s, args, name)
        with open(os.path.join(outdir, name + ".te"), "wb") as f:
            f.write(prog.payload)


if __name__ == "__main__":
    main()
