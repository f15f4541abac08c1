"""GPU schedule of few-row dense products (kiln.topi.fused calls it for GPU targets): an fc
layer at batch 1, out[i, j] = sum_k A[i, k] * B[k, j] with M (the rows) of at most
MAX_ROWS and K x N weights, is a matrix-vector product that reads all of B once and does
two flops per word read: its time is the time to stream B, and that takes the whole device.
fused_matmul's GPU schedule gives each work-item one output column and the whole K loop:
ResNet-50's fc (K 2048, N 1000) ran in 16 work-groups, 0.27 ms of a 3.6 ms network
(bench/results/graph.md).

``split_k`` splits the reduction in ``split`` slices (TVM's rfactor): a first kernel writes
partial[s, i, j], the sum over slice s, with a work-group per (slice, num_thread columns),
neighbouring work-items reading neighbouring words of B; a second kernel sums the slices and
runs the element-wise epilogue (bias, activation) per output element. The partials are a
temporary of split x M x N words (kiln.onnx makes it a graph value).
"""

from .. import te
from ..te.expr import IntImm

__all__ = ["GEMV_GPU_KNOBS", "fits", "split_k", "choose_split"]

GEMV_GPU_KNOBS = {"num_thread": 64, "split": 0}   # split 0: chosen from the shape

MAX_ROWS = 4
_MIN_K = 256          # a shorter reduction is one work-item's loop anyway
_MIN_SLICE = 64       # words of B per work-item and row: fewer do not pay for the partials' traffic
_GROUPS = 512         # work-groups to aim at: 132 SMs of an H200 with 4 groups each, about


def _const(d):
    return d.value if isinstance(d, IntImm) else None


def fits(anchor):
    """True when anchor (a matmul- or dense-tagged 2-d product) is a few-row product with
    constant shapes whose reduction is long enough to split."""
    if anchor.op.tag not in ("matmul", "dense") or len(anchor.shape) != 2 or len(anchor.op.reduce_axis) != 1:
        return False
    M, N = (_const(d) for d in anchor.shape)
    (k,) = anchor.op.reduce_axis
    K = _const(k.dom.extent)
    return None not in (M, N, K) and M <= MAX_ROWS and K >= _MIN_K


def choose_split(K, N, num_thread):
    """The number of K slices: a power of two that brings the work-groups near _GROUPS while
    each work-item keeps at least _MIN_SLICE words of B per row."""
    col_groups = -(-N // num_thread)
    split = 1
    while split * 2 * col_groups <= _GROUPS and K // (split * 2) >= _MIN_SLICE:
        split *= 2
    return split


def split_k(s, out, anchor, k):
    """Schedules the product ``anchor`` and its epilogue ``out`` (element-wise stages between
    them inlined by the caller) in s as two kernels; returns s."""
    num_thread = k["num_thread"]
    (red,) = s[anchor].op.reduce_axis
    K, N = _const(red.dom.extent), _const(anchor.shape[1])
    split = k["split"] or choose_split(K, N, num_thread)
    sa = s[anchor]
    ko, _ = sa.split(sa.op.reduce_axis[0], nparts=split)
    part = s.rfactor(anchor, ko)      # part[s, i, j] = sum over slice s
    # the first kernel: a work-group per (slice, num_thread columns); each work-item sums
    # its M partials over the slice (the rfactor stage has no cache_write: its accumulators
    # are the output words, which LLVM keeps in registers across the loop, the pointers
    # being noalias) and stores them
    sp = s[part]
    ps, pi, pj = sp.op.axis
    jo, ji = sp.split(pj, factor=num_thread)
    (kr,) = sp.op.reduce_axis
    sp.reorder(ps, jo, ji, kr, pi)
    sp.bind(ps, te.thread_axis("blockIdx.y"))
    sp.bind(jo, te.thread_axis("blockIdx.x"))
    sp.bind(ji, te.thread_axis("threadIdx.x"))
    sp.unroll(pi)
    # the second kernel: the slices summed and the epilogue, an element per work-item
    so = s[out]
    i, j = so.op.axis
    g = so.fuse(i, j)
    bx, tx = so.split(g, factor=num_thread)
    so.bind(bx, te.thread_axis("blockIdx.x"))
    so.bind(tx, te.thread_axis("threadIdx.x"))
    if out.op is not anchor.op:
        s[anchor].compute_at(so, tx)
    return s
