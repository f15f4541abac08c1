"""kiln.topi: operator templates on kiln.te, each with a CPU and a GPU schedule and named
tuning knobs (docs/te_python.md lists them).

    >>> import kiln
    >>> from kiln import te, topi
    >>> A = te.placeholder((256, 256), name="A")
    >>> B = te.placeholder((256, 256), name="B")
    >>> C = topi.matmul(A, B)
    >>> topi.knobs("matmul", "gpu")
    {'block_m': 64, 'block_n': 64, 'thread_m': 16, 'thread_n': 16, 'k_tile': 8, 'vec': 1, 'double_buffer': False, 'vthread_m': 1, 'vthread_n': 1, 'min_blocks': 0, 'k_major': False}
    >>> s = topi.schedule_matmul(C, "gpu", block_m=64, block_n=64, thread_m=4, thread_n=4, k_tile=8)
    >>> f = kiln.build(s, [A, B, C], "sm_90")   # compiled by kilnd; runs where a CUDA GPU is
    >>> f.module.target
    'sm_90'

Every ``schedule_*`` takes the op's output tensor, ``target`` ("cpu", or "gpu" for AMD and
NVIDIA; TVM target strings "llvm", "rocm", "cuda" also work) and its knobs as keywords;
``knobs(name)`` returns a template's knobs and their defaults.
"""

from .ops import (matmul, dense, batch_matmul, pad, conv2d_nchw, depthwise_conv2d_nchw, pool2d, softmax,
                  layer_norm, elementwise, broadcast, add, subtract, multiply, divide, maximum, minimum, relu,
                  exp, tanh, sigmoid, sqrt, negative)
from .schedules import (schedule_matmul, schedule_dense, schedule_batch_matmul, schedule_conv2d_nchw,
                        schedule_depthwise_conv2d_nchw, schedule_pool2d, schedule_softmax, schedule_layer_norm,
                        schedule_injective, schedule_elementwise, schedule_broadcast, knobs, KNOBS, is_gpu)
from .nn import (group_conv2d_nchw, conv2d_pointwise, gemm, matmul_broadcast, pool2d_nchw, global_pool, reduce,
                 softmax_axis, transpose, concatenate, pad_mode, depth_to_space, resize2d, gather, slice_nd, cast,
                 conv2d_transpose_nchw, pooled_size)
from .fused import schedule_fused, schedule_generic, anchor_of
from .space import space, Space

__all__ = ["matmul", "dense", "batch_matmul", "pad", "conv2d_nchw", "depthwise_conv2d_nchw", "pool2d", "softmax",
           "layer_norm", "elementwise", "broadcast", "add", "subtract", "multiply", "divide", "maximum", "minimum",
           "relu", "exp", "tanh", "sigmoid", "sqrt", "negative", "schedule_matmul", "schedule_dense",
           "schedule_batch_matmul", "schedule_conv2d_nchw", "schedule_depthwise_conv2d_nchw", "schedule_pool2d",
           "schedule_softmax", "schedule_layer_norm", "schedule_injective", "schedule_elementwise",
           "schedule_broadcast", "knobs", "KNOBS", "is_gpu",
           # importer operators (nn.py) and fused-kernel schedules (fused.py)
           "group_conv2d_nchw", "conv2d_pointwise", "gemm", "matmul_broadcast", "pool2d_nchw", "global_pool",
           "reduce", "softmax_axis", "transpose", "concatenate", "pad_mode", "depth_to_space", "resize2d", "gather",
           "slice_nd", "cast", "conv2d_transpose_nchw", "pooled_size", "schedule_fused", "schedule_generic",
           "anchor_of",
           # search spaces (space.py)
           "space", "Space"]
