"""TVM's classic tutorials in kiln's spelling (``import kiln.tvm as tvm``), written as the
tutorials have them: the tests (test_tvm_tutorials.py) check each for correctness and the
emitted IR's structure, and bench/te_tutorials_bench.py times them beside TVM 0.27 running the
same schedules.

opt_gemm follows "How to optimize GEMM on CPU" step by step (blocking, vectorization, loop
permutation, array packing, write cache, parallel); ``opt_gemm(step, M, N, K, bn, kfactor,
unroll)`` returns the schedule and its arguments.
"""

import kiln.tvm as tvm
from kiln import te

OPT_GEMM_STEPS = ("default", "blocking", "vectorization", "permutation", "packing", "write_cache", "parallel")


def opt_gemm(step, M=1024, N=1024, K=1024, bn=32, kfactor=4, unroll=True, dtype="float32"):
    k = te.reduce_axis((0, K), "k")
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    if step in ("default", "blocking", "vectorization", "permutation"):
        C = te.compute((M, N), lambda x, y: te.sum(A[x, k] * B[k, y], axis=k), name="C")
        s = te.create_schedule(C.op)
        if step == "default":
            return s, [A, B, C]
        mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
        (kaxis,) = s[C].op.reduce_axis
        ko, ki = s[C].split(kaxis, factor=kfactor)
        if step == "permutation":
            s[C].reorder(mo, no, ko, mi, ki, ni)
        else:
            s[C].reorder(mo, no, ko, ki, mi, ni)
        if step != "blocking":
            s[C].vectorize(ni)
        return s, [A, B, C]
    # array packing: B rearranged into bn-wide column panels
    packedB = te.compute((N / bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute((M, N), lambda x, y: te.sum(A[x, k] * packedB[y // bn, k, tvm.tir.indexmod(y, bn)], axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    if step == "packing":
        mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
        (kaxis,) = s[C].op.reduce_axis
        ko, ki = s[C].split(kaxis, factor=kfactor)
        s[C].reorder(mo, no, ko, mi, ki, ni)
        s[C].vectorize(ni)
    else:
        CC = s.cache_write(C, "global")
        mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
        s[CC].compute_at(s[C], no)
        mc, nc = s[CC].op.axis
        (kaxis,) = s[CC].op.reduce_axis
        ko, ki = s[CC].split(kaxis, factor=kfactor)
        s[CC].reorder(ko, mc, ki, nc)
        s[CC].vectorize(nc)
        if unroll:
            s[CC].unroll(ki)
        if step == "parallel":
            s[C].parallel(mo)
    x, y, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    s[packedB].parallel(x)
    return s, [A, B, C]


def vector_add(n=None):
    """"Working with Operators Using Tensor Expression": C = A + B, split by 64, the outer
    loop parallel and the inner one vectorized (the CPU schedule of the tutorial)."""
    n = n if n is not None else te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=64)
    s[C].parallel(outer)
    s[C].vectorize(inner)
    return s, [A, B, C]


def parallel_loop(n=262144):
    """One loop of n iterations marked parallel (issue 18's measurement): every iteration a
    work-group in kiln before, shares of the pool now."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    return s, [A, B]


def reduction_rfactor(n=None, m=None, factor=16, attach=True):
    """"Reduction": B[i] = sum_k A[i, k], the reduce axis split by 16 and its inner part
    factored out into BF (rfactor), which is computed at B's row (``attach``)."""
    n = n if n is not None else te.var("n")
    m = m if m is not None else te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=factor)
    BF = s.rfactor(B, ki)
    if attach:
        s[BF].compute_at(s[B], s[B].op.axis[0])
    return s, [A, B], BF


def comm_reducer_product(n=None, m=None):
    """"Reduction", Define General Commutative Reduction Operation: a product reducer."""
    n = n if n is not None else te.var("n")
    m = m if m is not None else te.var("m")
    product = te.comm_reducer(lambda x, y: x * y, lambda t: tvm.tir.const(1, dtype=t), name="product")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: product(A[i, k], axis=k), name="B")
    return te.create_schedule(B.op), [A, B]
