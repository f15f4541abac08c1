"""kiln.topi's GPU schedules of fused convolutions (topi/conv_gpu.py, what kiln.onnx uses for a
GPU target): 1x1 convolutions as shared-memory GEMMs and direct convolutions with the input
patch in shared memory, with a bias + ReLU (and a residual add) epilogue. The GPU schedule is
portable kernel code: it runs on cpu:0 (work-groups on the pool, shared memory and barriers
as the cpu backend has them) against numpy, and compiles for sm_90 and gfx942; on a daemon
with a CUDA or ROCm device it runs there too. The tile chooser is checked on ResNet-50's
layers: enough work-groups for a batch-1 7x7 map, the shared copies within bounds."""

import os

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.topi import conv_gpu
from te_helpers import GPU_TARGETS, PTXAS, ptxas_verbose, require_te
from test_topi import conv_ref


@pytest.fixture
def ts(s):
    require_te(s)
    return s


def fused_conv(C, H, O, k, stride, pad, residual=False):
    """The te of one ResNet-style kernel: conv (pointwise GEMM for a 1x1 stride-1 one) + bias
    (+ residual) + ReLU, as kiln.onnx builds it; its inputs and numpy's answer."""
    rng = np.random.default_rng(C * 1000 + H * 10 + O)
    x = rng.standard_normal((1, C, H, H)).astype("float32")
    w = rng.standard_normal((O, C, k, k)).astype("float32")
    b = rng.standard_normal(O).astype("float32")
    OH = (H + 2 * pad - k) // stride + 1
    if k == 1 and stride == 1 and pad == 0:
        X, Wt = te.placeholder((1, C, H * H), name="X"), te.placeholder((O, C), name="W")
        T, arrays, oshape = topi.conv2d_pointwise(X, Wt), [x.reshape(1, C, H * H), w.reshape(O, C)], (1, O, H * H)
    else:
        X, Wt = te.placeholder((1, C, H, H), name="X"), te.placeholder((O, C, k, k), name="W")
        T, arrays, oshape = topi.conv2d_nchw(X, Wt, stride, pad), [x, w], (1, O, OH, OH)
    bshape = (O,) + (1,) * (len(oshape) - 2)
    B = te.placeholder(bshape, name="B")
    ins, arrays = [X, Wt, B], arrays + [b.reshape(bshape)]
    want = conv_ref(x, w, stride, pad, 1).reshape(oshape) + b.reshape(bshape)
    zero = (0,) * (len(oshape) - 2)
    if residual:
        R = te.placeholder(oshape, name="R")
        r = rng.standard_normal(oshape).astype("float32")
        ins, arrays, want = ins + [R], arrays + [r], want + r
        out = te.compute(oshape, lambda *i: te.max(T[i] + B[(i[1],) + zero] + R[i], 0.0), name="out",
                         tag="injective")
    else:
        out = te.compute(oshape, lambda *i: te.max(T[i] + B[(i[1],) + zero], 0.0), name="out", tag="injective")
    return ins, out, arrays, np.maximum(want, 0)


# (C, H, O, k, stride, pad, residual): odd sizes and partial tiles of every kind
SMALL = [(16, 8, 24, 1, 1, 0, False), (16, 7, 40, 1, 1, 0, True), (8, 10, 12, 3, 1, 1, False),
         (8, 9, 20, 3, 2, 1, True), (3, 17, 8, 7, 2, 3, False), (16, 8, 32, 1, 2, 0, False),
         (5, 6, 3, 3, 1, 1, False)]


def _run(s, case, target, dev):
    ins, out, arrays, want = fused_conv(*case)
    f = kiln.build(topi.schedule_fused(out, "gpu"), ins + [out], target, name="conv", session=s)
    o = kiln.nd.empty(want.shape, "float32", dev)
    f(*([kiln.nd.array(a, dev) for a in arrays] + [o]))
    np.testing.assert_allclose(o.numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("case", SMALL, ids=lambda c: "C%d_H%d_O%d_k%d_s%d_p%d%s" % (c[:6] + ("_res" if c[6] else "",)))
def test_gpu_schedule_runs_on_cpu(ts, case):
    _run(ts, case, "llvm", ts.cpu(0))


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
def test_gpu_schedule_runs_on_gpu(ts, kind):
    dev = getattr(ts, kind)(0)
    if not dev.exist:
        pytest.skip("the daemon has no %s device" % kind)
    for case in SMALL:
        _run(ts, case, dev, dev)


# ResNet-50's convolutions at batch 1 (C, H, O, k, stride, pad)
RESNET50 = [(3, 224, 64, 7, 2, 3), (64, 56, 64, 1, 1, 0), (64, 56, 64, 3, 1, 1), (64, 56, 256, 1, 1, 0),
            (256, 56, 64, 1, 1, 0), (256, 56, 128, 1, 1, 0), (128, 56, 128, 3, 2, 1), (128, 28, 512, 1, 1, 0),
            (256, 56, 512, 1, 2, 0), (512, 28, 128, 1, 1, 0), (128, 28, 128, 3, 1, 1), (512, 28, 256, 1, 1, 0),
            (256, 28, 256, 3, 2, 1), (256, 14, 1024, 1, 1, 0), (512, 28, 1024, 1, 2, 0), (1024, 14, 256, 1, 1, 0),
            (256, 14, 256, 3, 1, 1), (1024, 14, 512, 1, 1, 0), (512, 14, 512, 3, 2, 1), (512, 7, 2048, 1, 1, 0),
            (1024, 14, 2048, 1, 2, 0), (2048, 7, 512, 1, 1, 0), (512, 7, 512, 3, 1, 1)]


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_resnet50_layers_compile_with_enough_groups(ts, target):
    """Every ResNet-50 layer compiles for the GPU targets with at least 96 work-groups (so
    the 7x7 and 14x14 maps of batch 1 spread over the SMs), at most 256 work-items each, and
    shared copies the target allows (the compiler refuses more)."""
    for case in RESNET50:
        ins, out, _, _ = fused_conv(*case, residual=case[3] == 1 and case[4] == 1)
        f = kiln.build(topi.schedule_fused(out, "gpu"), ins + [out], target, name="conv", session=ts)
        kernels = f.module.kernels
        # the 3x3 convs with a map of at most 14x14 are split in input-channel slices (two
        # kernels: the partials, then their sum with the epilogue); the others, strided 1x1
        # ones included, are one kernel
        split = case[3] != 1 and (case[1] + 2 * case[5] - case[3]) // case[4] + 1 <= 14
        assert len(kernels) == (2 if split else 1), (case, kernels)
        grid, block = kernels[0].info["launch"]["grid"], kernels[0].info["launch"]["block"]
        groups = int(np.prod(grid))
        assert groups >= (384 if split else 96), (case, grid, block)
        assert 32 <= int(np.prod(block)) <= 256, (case, grid, block)


def test_tile_chooser_and_knobs():
    # a 56x56 GEMM takes large tiles; a 7x7 one small tiles, to fill the GPU
    bm, bn, tm, tn = conv_gpu.pointwise_tiles(256, 3136, 1, 64, topi.knobs("fused_pointwise", "gpu"))
    assert bm * bn >= 64 * 64 and tm * tn >= 4
    bm7, bn7, _, _ = conv_gpu.pointwise_tiles(2048, 49, 1, 512, topi.knobs("fused_pointwise", "gpu"))
    assert (2048 // bm7) * -(-49 // bn7) >= 96
    # given knobs win
    k = dict(topi.knobs("fused_pointwise", "gpu"), block_m=32, block_n=32, thread_m=2, thread_n=2)
    assert conv_gpu.pointwise_tiles(256, 3136, 1, 64, k) == (32, 32, 2, 2)
    bf, by, bx, tf = conv_gpu.direct_tiles(64, 112, 112, 1, 147, topi.knobs("fused_conv2d", "gpu"), (7, 7), 2)
    patch = ((by - 1) * 2 + 7) * ((bx - 1) * 2 + 7)
    assert 4 * 4 * (patch + bf * 49) <= 24 * 1024
    assert set(topi.knobs("fused_conv2d", "gpu")) == {"block_f", "block_y", "block_x", "thread_f", "k_tile", "split"}
    assert topi.knobs("fused_pointwise", "cpu") == topi.knobs("fused_matmul", "cpu")
    X, W = te.placeholder((1, 8, 16), name="X"), te.placeholder((4, 8), name="W")
    with pytest.raises(kiln.InvalidArgument, match="no knob"):
        topi.schedule_fused(topi.conv2d_pointwise(X, W), "gpu", num_thread=64)


@pytest.mark.skipif(not os.path.exists(PTXAS), reason="no ptxas (/usr/local/cuda/bin)")
def test_resnet50_layers_fit_sm90_registers(ts):
    """ptxas (CUDA's assembler) takes every layer's PTX for sm_90 without spilling more than a
    few words to the stack."""
    import re
    for case in RESNET50:
        ins, out, _, _ = fused_conv(*case)
        f = kiln.build(topi.schedule_fused(out, "gpu"), ins + [out], "sm_90", name="conv", session=ts)
        r = ptxas_verbose(f.get_source("asm"))
        assert r.returncode == 0, r.stderr
        spill = [int(x) for x in re.findall(r"(\d+) bytes spill stores", r.stderr)]
        assert max(spill or [0]) <= 64, (case, r.stderr)


# (C, H, O, k, stride, pad, residual, split knob): small maps split in input-channel slices,
# by the chooser (0) or a knob, slices that do not divide the channels, a strided conv
SPLIT = [(64, 7, 64, 3, 1, 1, False, 0), (64, 7, 48, 3, 1, 1, True, 0), (32, 9, 24, 3, 2, 1, False, 0),
         (20, 6, 8, 3, 1, 1, True, 3), (24, 14, 16, 3, 1, 1, False, 2)]


@pytest.mark.parametrize("case", SPLIT, ids=lambda c: "C%d_H%d_O%d_k%d_s%d_p%d%s_split%d" % (
    c[:6] + ("_res" if c[6] else "", c[7])))
def test_split_k_runs_on_cpu(ts, case):
    """conv_gpu.direct_split_k: the partials of each slice by the direct schedule, their sum
    and the epilogue in a second kernel; on cpu:0 against numpy."""
    _run_split(ts, case, "llvm", ts.cpu(0))


def _run_split(s, case, target, dev):
    ins, out, arrays, want = fused_conv(*case[:7])
    knobs = {"split": case[7]} if case[7] else {}
    f = kiln.build(topi.schedule_fused(out, "gpu", **knobs), ins + [out], target, name="conv", session=s)
    assert len(f.module.kernels) == 2
    o = kiln.nd.empty(want.shape, "float32", dev)
    f(*([kiln.nd.array(a, dev) for a in arrays] + [o]))
    np.testing.assert_allclose(o.numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
def test_split_k_runs_on_gpu(ts, kind):
    dev = getattr(ts, kind)(0)
    if not dev.exist:
        pytest.skip("the daemon has no %s device" % kind)
    for case in SPLIT:
        _run_split(ts, case, dev, dev)
    # ResNet-50's 3x3 conv on a 7x7 map, split in 4 by the chooser
    _run_split(ts, (512, 7, 512, 3, 1, 1, True, 0), dev, dev)


def test_split_chooser():
    k = topi.knobs("fused_conv2d", "gpu")

    def split(C, H, O, stride=1, **knobs):
        X, W = te.placeholder((1, C, H, H), name="X"), te.placeholder((O, C, 3, 3), name="W")
        T = topi.conv2d_nchw(X, W, stride, 1)
        return conv_gpu.direct_split(T, T.op.input_tensors[0], dict(k, **knobs))
    # ResNet-50's 3x3 convs on 14x14 and 7x7 maps: 128 work-groups each, split in 4
    assert split(256, 14, 256) == 4 and split(512, 7, 512) == 4 and split(512, 14, 512, stride=2) == 4
    assert split(128, 28, 128) == 1            # a 28x28 map: not split
    # a strided 1x1 conv onto a 14x14 map (ResNet-50's downsample): whole, as it is faster
    X, W = te.placeholder((1, 512, 28, 28), name="X"), te.placeholder((1024, 512, 1, 1), name="W")
    T = topi.conv2d_nchw(X, W, 2, 0)
    assert conv_gpu.direct_split(T, T.op.input_tensors[0], k) == 1
    assert split(8, 7, 8) == 1                 # too few channels to slice
    assert split(512, 7, 512, split=2) == 2    # the knob wins
    assert split(512, 28, 128, split=8) == 8
