"""Search spaces of the kiln.topi templates: ``space(op, target, shapes)``.

A space is the template's knobs, each with its candidates, and the rules a configuration must
keep on that target (tile divisibility where the schedule needs it, work-items per group
within the device's limit, shared memory within the device's, registers a thread's tile may
take). Every configuration a space yields (``configs()``, ``sample()``) keeps every rule;
``check(cfg)`` names the rule another one breaks. ``build(cfg)`` makes the schedule and
argument list for ``kiln.build`` / ``kiln.te.build_batch``; ``inputs()`` and ``reference()``
give data and the numpy answer to check a build against (docs/autotune.md).
"""

import itertools
import math
import random

import numpy as np

from .. import te
from ..errors import InvalidArgument
from . import ops as _ops
from . import schedules as _sch
from ..te.build import _eval_expr

__all__ = ["space", "Space", "OPS", "signature"]

# op -> (template of schedules.KNOBS, what `shapes` holds)
OPS = {
    "matmul": ("matmul", "M, N, K: A is M x K, B is K x N"),
    "dense": ("matmul", "M, N, K: data is M x K, weight is N x K"),
    "batch_matmul": ("batch_matmul", "B, M, N, K"),
    "conv2d": ("conv2d_nchw", "N, C, H, W, O, KH, KW[, stride[, pad]]"),
    "depthwise": ("depthwise_conv2d_nchw", "N, C, H, W, KH, KW[, stride[, pad]]"),
    "pool": ("pool2d", "N, C, H, W, K[, stride[, pad]] (max pooling)"),
    "softmax": ("softmax", "rows, columns"),
}

# Limits assumed for a GPU target named without a device (the smaller of AMD's and NVIDIA's).
GPU_DEFAULTS = {"max_block": 1024, "max_shared": 48 * 1024, "wave_size": 32,
                # an SM's (NVIDIA sm_80/sm_90: 2048 work-items, 227 KiB of shared memory for blocks)
                "max_threads_sm": 2048, "max_shared_sm": 227 * 1024}


def signature(out):
    """What identifies a template instance whatever the caller names it: the output's shape,
    its inputs' shapes and the dtype (kiln.autotune.apply matches tuned knobs by it)."""
    return (out.op.tag, dims(out), tuple(dims(t) for t in out.op.input_tensors), str(out.dtype))


def dims(t):
    """A tensor's shape as ints (constant shape expressions folded)."""
    return tuple(int(_eval_expr(d, {})) for d in t.shape)


def _staged(c):
    """Elements a work-item of the GPU matmul stages per k step (both tiles, whole vectors)."""
    threads = c["thread_m"] * c["thread_n"]
    per = [-(-(rows * cols // c["vec"]) // threads) * c["vec"]
           for rows, cols in ((c["block_m"], c["k_tile"]), (c["k_tile"], c["block_n"]))]
    return sum(per)


def _registers(c):
    """Registers a GPU matmul work-item needs, estimated: its accumulators, its A fragments
    (LLVM merges them into 128-bit shared loads along k, so more than one k step's are live:
    2 a row, fitted to ptxas -v on sm_90; 1 with k_major, whose loads run along the rows), a B fragment, the staging copies' elements, and 40 for
    addresses and indices."""
    rows, cols = c["block_m"] // c["thread_m"], c["block_n"] // c["thread_n"]
    return rows * cols + (1 if c.get("k_major") else 2) * rows + cols + _staged(c) + 40


def _hint_ok(c, L, esize, dense):
    """Does min_blocks make a different, still reasonable build (space rule "occupancy")?"""
    threads = c["thread_m"] * c["thread_n"]
    shared = _shared_bytes(c, esize, dense)
    if c["min_blocks"] * threads > L["max_threads_sm"] or c["min_blocks"] * shared > L["max_shared_sm"]:
        return False
    cap, est = min(255, 65536 // (c["min_blocks"] * threads)), _registers(c)
    return 0.7 * est <= cap < est


def _shared_bytes(c, esize, dense=False, pad=None):
    """Bytes of shared memory the GPU matmul's kernel declares (te_bounds.c's storage): the
    block_m x k_tile tile of A and the k_tile x block_n tile of B (k_major: A's, and dense's
    B's, k_tile rows of block_m padded to the next 4 mod 8 elements where kmajor_pad says);
    double-buffered, each tile twice, each half rounded up to a whole 16 elements (2 for 8-byte ones)."""
    q = 2 if esize >= 8 else 16
    km = c.get("k_major", False) and (pad if pad is not None else kmajor_pad(c, esize, dense))
    pad = lambda n: n + (4 - n) % 8 if km else n  # noqa: E731 (storage_align(k, 8, 4))
    total = 0
    for n in (pad(c["block_m"]) * c["k_tile"], (pad(c["block_n"]) if dense else c["block_n"]) * c["k_tile"]):
        total += (-(-n // q) * q * 2 if c["double_buffer"] else n) * esize
    return total


def kmajor_pad(c, dtype, dense=False):
    """Does the GPU matmul pad its k-major tiles (k_major)? Where the padded tiles stay within
    48 KiB, the smaller static limit (sm_*'s)."""
    esize = dtype if isinstance(dtype, int) else np.dtype(str(dtype)).itemsize
    return bool(c.get("k_major")) and _shared_bytes(c, esize, dense, pad=True) <= 48 * 1024


def static_shared(target):
    """Static work-group memory te allows a kernel on target (te_emit_nest.c): 48 KiB on NVIDIA
    (no opt-in), 64 KiB on AMD; the smaller for a GPU named without its kind; None on the CPU."""
    t = str(getattr(target, "id", target) or "cpu").split()[0]
    if t.startswith(("gfx", "hsa:")) or t in ("rocm", "amdgpu"):
        return 64 * 1024
    if _sch.is_gpu(t):
        return 48 * 1024
    return None


def _fit(cands, n):
    """Candidates no larger than the dimension (the smallest one always stays)."""
    keep = [c for c in cands if c <= n]
    return keep or cands[:1]


class Space:
    """The knob space of one template instance. ``knobs``: name -> candidates (in order);
    ``rules``: (name, description, fn(cfg) -> bool); ``default()``: the template's defaults;
    ``configs()``: every valid configuration (grid order); ``sample(rng)``; ``check(cfg)``;
    ``features(cfg)`` (numbers for a cost model); ``flops``; ``build(cfg)``."""

    def __init__(self, op, target, shapes, dtype, limits):
        if op not in OPS:
            raise InvalidArgument("no search space for op %r; kiln.topi.space has %s" % (op, ", ".join(OPS)))
        self.op = op
        self.template = OPS[op][0]
        self.gpu = _sch.is_gpu(target)
        self.target = "gpu" if self.gpu else "cpu"
        self.shapes = tuple(int(x) for x in shapes)
        self.dtype = dtype
        self.limits = dict(limits)
        self.knobs = {}
        self.rules = []
        self.fixed = {}  # knobs of the template this space does not search (their defaults)
        self.flops = 0
        self._declare()

    # -- declaring ----------------------------------------------------------------------------

    def _need(self, n, what):
        if len(self.shapes) < n:
            raise InvalidArgument("%s takes shapes %s; got %r" % (self.op, OPS[self.op][1], self.shapes))

    def _rule(self, name, text, fn):
        self.rules.append((name, text, fn))

    def _declare(self):
        getattr(self, "_declare_" + self.template)()
        defaults = _sch.knobs(self.template, self.target)
        for k, v in defaults.items():
            if k not in self.knobs:
                self.fixed[k] = v
            elif v not in self.knobs[k]:
                # the default stays a candidate (tiles larger than a dimension still work):
                # the tuner measures it first, as the ratio's base
                c = self.knobs[k] + [v]
                if all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in c):
                    c = sorted(c)
                self.knobs[k] = c

    def _declare_matmul(self):
        self._need(3, "M, N, K")
        M, N, K = self.shapes[:3]
        self.flops = 2.0 * M * N * K
        if not self.gpu:
            self.knobs = {"bm": _fit([1, 2, 4, 8, 16, 32], M), "bn": _fit([8, 16, 32, 64, 128], N),
                          "bk": _fit([1, 2, 4, 8, 16, 32], K), "order": ["ji", "ij"], "unroll_k": [False, True]}
            if self.op == "matmul":
                # B copied into bn-wide column panels first (topi.matmul(A, B, pack=bn)): a
                # second kernel, timed with the product; the best CPU layout (bench/results/te.md)
                self.knobs["pack"] = [False, True]
            # bm rows x bn/8 vectors of accumulators, plus a row of B: beyond ~32 vector
            # registers (AVX-512 has 32, AVX2 16) they spill every k step
            self._rule("registers", "bm * bn <= 512 (accumulators in vector registers)",
                       lambda c: c["bm"] * c["bn"] <= 512)
            return
        L = self.limits
        esize = np.dtype(self.dtype).itemsize
        dense = self.op == "dense"
        self.knobs = {"block_m": _fit([16, 32, 64, 128, 256], M), "block_n": _fit([16, 32, 64, 128, 256], N),
                      "thread_m": [4, 8, 16, 32], "thread_n": [4, 8, 16, 32], "k_tile": _fit([4, 8, 16, 32], K),
                      # 128-bit staging copies; double-buffered shared tiles (issue 15 item 6)
                      "vec": [1, 16 // esize] if esize < 16 else [1], "double_buffer": [False, True],
                      # strided thread tiles (te's vthread) and the occupancy hint (launch_bounds)
                      "vthread_m": [1, 2], "vthread_n": [1, 2], "min_blocks": [0, 2, 3, 4],
                      # A's shared tile stored k-major (te's storage_order): one k step's fragment a load
                      "k_major": [False, True]}
        self._rule("divisible", "block_m % thread_m == 0 and block_n % thread_n == 0 (whole thread tiles)",
                   lambda c: c["block_m"] % c["thread_m"] == 0 and c["block_n"] % c["thread_n"] == 0)
        self._rule("threads", "thread_m * thread_n <= max_block (%d) and >= wave_size (%d)"
                   % (L["max_block"], L["wave_size"]),
                   lambda c: L["wave_size"] <= c["thread_m"] * c["thread_n"] <= L["max_block"])
        self._rule("vector", "k_tile % vec == 0 and block_n % vec == 0 (the staging copies in whole vectors)",
                   lambda c: c["k_tile"] % c["vec"] == 0 and c["block_n"] % c["vec"] == 0)
        self._rule("shared", "(block_m + block_n) * k_tile * %d bytes (double-buffered: each tile twice, its halves "
                   "rounded up to 16 elements; k_major: A's rows of block_m, dense's B's of block_n, padded to 4 mod 8 "
                   "elements) <= max_shared (%d: the device's, at most the static work-group memory "
                   "te allows the target)" % (esize, L["max_shared"]),
                   lambda c: _shared_bytes(c, esize, dense) <= L["max_shared"])
        # vec 1 keeps the old space's bound (blocks up to 128, 64 accumulators); with vec the
        # estimate of _registers() within what the block leaves a thread (ptxas -v, sm_90:
        # 8 x 16 tiles fit 255 registers without spills, 32-row tiles and 1024-thread blocks do not)
        self._rule("registers", "vec 1: (block_m / thread_m) * (block_n / thread_n) <= 64 and blocks <= 128; "
                   "vec > 1: thread tiles of at most 16 x 16, accumulators + 2 (k_major: 1) * tile rows + tile columns + "
                   "staged elements + 40 <= min(255, 65536 / threads)",
                   lambda c: max(c["block_m"] // c["thread_m"], c["block_n"] // c["thread_n"]) <= 16
                   and _registers(c) <= min(255, 65536 // (c["thread_m"] * c["thread_n"])) if c["vec"] > 1
                   else (c["block_m"] // c["thread_m"]) * (c["block_n"] // c["thread_n"]) <= 64
                   and max(c["block_m"], c["block_n"]) <= 128)
        # ptxas on sm_90: column runs of 2 turn the B fragments' 128-bit shared loads into
        # 64-bit ones; runs of 4 keep them and make neighbouring work-items' reads adjacent
        self._rule("vthread", "thread tile rows % vthread_m == 0 and columns % vthread_n == 0; with vthreads, runs "
                   "of at least 2 rows and 4 columns (a tile is vthread_m x vthread_n sub-tiles strided across "
                   "the block; 4 columns keep the 128-bit fragment loads)",
                   lambda c: all(t % v == 0 and (v == 1 or t // v >= least) for t, v, least in
                                 ((c["block_m"] // c["thread_m"], c["vthread_m"], 2),
                                  (c["block_n"] // c["thread_n"], c["vthread_n"], 4))))
        self._rule("occupancy", "min_blocks 0, or: min_blocks * threads <= %d (work-items an SM holds), min_blocks "
                   "times the shared tiles <= %d bytes, and the register cap it sets, 65536 / (min_blocks * threads), "
                   "below the estimate (else the hint changes nothing) and at least 0.7 of it (else it spills much)"
                   % (L["max_threads_sm"], L["max_shared_sm"]),
                   lambda c: not c["min_blocks"] or _hint_ok(c, L, esize, dense))
        self._rule("prefetch", "double-buffered: (block_m + block_n) * k_tile / threads <= 32 elements a thread "
                   "prefetches in registers",
                   lambda c: not c["double_buffer"] or _staged(c) <= 32)

    def _declare_batch_matmul(self):
        self._need(4, "B, M, N, K")
        Bt, M, N, K = self.shapes[:4]
        self.flops = 2.0 * Bt * M * N * K
        if not self.gpu:
            self.knobs = {"bm": _fit([1, 2, 4, 8, 16, 32], M), "bn": _fit([8, 16, 32, 64], N)}
            self._rule("registers", "bm * bn <= 512", lambda c: c["bm"] * c["bn"] <= 512)
            return
        L = self.limits
        self.knobs = {"tile": [4, 8, 16, 32]}
        self._rule("threads", "tile * tile <= max_block (%d)" % L["max_block"],
                   lambda c: c["tile"] * c["tile"] <= L["max_block"])

    def _conv_dims(self, depthwise):
        self._need(6 if depthwise else 7, OPS[self.op][1])
        if depthwise:
            N, C, H, W, KH, KW = self.shapes[:6]
            rest = self.shapes[6:]
            O = C
        else:
            N, C, H, W, O, KH, KW = self.shapes[:7]
            rest = self.shapes[7:]
        stride = rest[0] if len(rest) > 0 else 1
        pad = rest[1] if len(rest) > 1 else 0
        OH = (H + 2 * pad - KH) // stride + 1
        OW = (W + 2 * pad - KW) // stride + 1
        if OH < 1 or OW < 1:
            raise InvalidArgument("%s: the window is larger than the padded input" % self.op)
        return N, C, H, W, O, KH, KW, stride, pad, OH, OW

    def _declare_conv2d_nchw(self):
        N, C, H, W, O, KH, KW, stride, pad, OH, OW = self._conv_dims(False)
        self.flops = 2.0 * N * O * OH * OW * C * KH * KW
        if not self.gpu:
            self.knobs = {"oc_block": _fit([1, 2, 4, 8, 16, 32], O), "ow_block": _fit([4, 8, 16, 32], OW) + [0],
                          "vec": [4, 8, 16], "inline_pad": [False, True], "unroll": [True, False]}
            self._rule("vector", "ow_block is 0 (the whole row) or a multiple of vec",
                       lambda c: c["ow_block"] == 0 or c["ow_block"] % c["vec"] == 0 or c["ow_block"] < c["vec"])
            self._rule("registers", "oc_block * ow_block <= 512 accumulators",
                       lambda c: c["oc_block"] * (c["ow_block"] or min(OW, 64)) <= 512)
            return
        L = self.limits
        self.knobs = {"num_thread": [32, 64, 128, 256, 512, 1024], "oc_block": _fit([1, 2, 4, 8, 16], O)}
        self._rule("threads", "num_thread <= max_block (%d)" % L["max_block"],
                   lambda c: c["num_thread"] <= L["max_block"])
        self._rule("divisible", "oc_block divides the output channels (%d)" % O, lambda c: O % c["oc_block"] == 0)

    def _declare_window(self, depthwise):
        if depthwise:
            N, C, H, W, O, KH, KW, stride, pad, OH, OW = self._conv_dims(True)
            self.flops = 2.0 * N * C * OH * OW * KH * KW
        else:
            self._need(5, OPS[self.op][1])
            N, C, H, W, K = self.shapes[:5]
            stride = self.shapes[5] if len(self.shapes) > 5 else K
            pad = self.shapes[6] if len(self.shapes) > 6 else 0
            OH, OW = (H + 2 * pad - K) // stride + 1, (W + 2 * pad - K) // stride + 1
            self.flops = 1.0 * N * C * OH * OW * K * K
        if not self.gpu:
            self.knobs = {"ow_block": _fit([1, 2, 4, 8, 16, 32], OW)}
            return
        L = self.limits
        self.knobs = {"num_thread": [32, 64, 128, 256, 512, 1024]}
        self._rule("threads", "num_thread <= max_block (%d)" % L["max_block"],
                   lambda c: c["num_thread"] <= L["max_block"])

    def _declare_depthwise_conv2d_nchw(self):
        self._declare_window(True)

    def _declare_pool2d(self):
        self._declare_window(False)

    def _declare_softmax(self):
        self._need(2, "rows, columns")
        M, N = self.shapes[:2]
        self.flops = 5.0 * M * N
        if not self.gpu:
            self.knobs = {"vec": [4, 8, 16, 32]}
            return
        L = self.limits
        self.knobs = {"num_thread": [32, 64, 128, 256, 512, 1024]}
        self._rule("threads", "num_thread <= max_block (%d)" % L["max_block"],
                   lambda c: c["num_thread"] <= L["max_block"])

    # -- configurations -----------------------------------------------------------------------

    def check(self, cfg):
        """None when cfg is a configuration of this space, else why not (the rule it breaks)."""
        for k, v in cfg.items():
            if k not in self.knobs:
                return "%s has no knob %r (knobs: %s)" % (self.op, k, ", ".join(self.knobs))
            if v not in self.knobs[k]:
                return "knob %s=%r is not one of its candidates %r" % (k, v, self.knobs[k])
        for k in self.knobs:
            if k not in cfg:
                return "knob %s is missing" % k
        for name, text, fn in self.rules:
            if not fn(cfg):
                return "breaks rule %s: %s" % (name, text)
        return None

    def valid(self, cfg):
        return self.check(cfg) is None

    def default(self):
        """The template's default knobs (kiln.topi's), as this space's knobs."""
        d = dict(_sch.knobs(self.template, self.target), pack=False)
        return {k: d[k] for k in self.knobs}

    def configs(self):
        """Every valid configuration, in grid order (the knobs' candidates, first knob slowest)."""
        names = list(self.knobs)
        for vals in itertools.product(*(self.knobs[n] for n in names)):
            c = dict(zip(names, vals))
            if all(fn(c) for _, _, fn in self.rules):
                yield c

    def __len__(self):
        return sum(1 for _ in self.configs())

    @property
    def size(self):
        return len(self)

    def sample(self, rng=None, tries=10000):
        """A random valid configuration."""
        rng = rng or random
        for _ in range(tries):
            c = {k: rng.choice(v) for k, v in self.knobs.items()}
            if self.valid(c):
                return c
        return rng.choice(list(self.configs()))

    def neighbour(self, cfg, rng=None):
        """cfg with one knob moved to an adjacent candidate (valid; cfg itself if none is)."""
        rng = rng or random
        names = list(self.knobs)
        for _ in range(50):
            k = rng.choice(names)
            cands = self.knobs[k]
            i = cands.index(cfg[k])
            j = i + rng.choice((-1, 1)) if len(cands) > 2 else 1 - i if len(cands) == 2 else i
            if 0 <= j < len(cands):
                c = dict(cfg)
                c[k] = cands[j]
                if self.valid(c):
                    return c
        return dict(cfg)

    def key(self, cfg):
        """A hashable form of a configuration (knobs it lacks, as in records made before the
        knob existed, take the template's default)."""
        cfg = self._complete(cfg)
        return tuple((k, cfg[k]) for k in self.knobs)

    def _complete(self, cfg):
        if all(k in cfg for k in self.knobs):
            return cfg
        return dict(self.default(), **cfg)

    def features(self, cfg):
        """Numbers describing cfg for a cost model: log2 of numeric knobs, 0/1 of the others,
        and derived sizes (tile areas, threads, shared bytes, dimensions each tile divides)."""
        f = []
        cfg = self._complete(cfg)
        for k, cands in self.knobs.items():
            v = cfg[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                f.append(float(cands.index(v)))
            else:
                f.append(math.log2(v) if v > 0 else -1.0)
        c = cfg
        if self.template == "matmul":
            M, N, K = self.shapes[:3]
            if self.gpu:
                tm, tn = c["block_m"] // c["thread_m"], c["block_n"] // c["thread_n"]
                f += [math.log2(c["thread_m"] * c["thread_n"]), math.log2(max(1, tm * tn)),
                      math.log2((c["block_m"] + c["block_n"]) * c["k_tile"]), math.log2(_staged(c)),
                      float(M % c["block_m"] == 0), float(N % c["block_n"] == 0), float(K % c["k_tile"] == 0)]
            else:
                f += [math.log2(c["bm"] * c["bn"]), float(M % c["bm"] == 0), float(N % c["bn"] == 0),
                      float(K % c["bk"] == 0), math.log2(max(1, (M // c["bm"]) * (N // c["bn"])))]
        return f

    # -- building -----------------------------------------------------------------------------

    def tensors(self):
        """(inputs, output) te tensors of this instance."""
        dt = self.dtype
        s = self.shapes
        if self.op == "matmul":
            M, N, K = s[:3]
            A = te.placeholder((M, K), dt, name="A")
            B = te.placeholder((K, N), dt, name="B")
            return [A, B], _ops.matmul(A, B)
        if self.op == "dense":
            M, N, K = s[:3]
            X = te.placeholder((M, K), dt, name="data")
            Wt = te.placeholder((N, K), dt, name="weight")
            return [X, Wt], _ops.dense(X, Wt)
        if self.op == "batch_matmul":
            Bt, M, N, K = s[:4]
            A = te.placeholder((Bt, M, K), dt, name="A")
            B = te.placeholder((Bt, K, N), dt, name="B")
            return [A, B], _ops.batch_matmul(A, B)
        if self.op == "conv2d":
            N, C, H, W, O, KH, KW, stride, pad, _, _ = self._conv_dims(False)
            D = te.placeholder((N, C, H, W), dt, name="data")
            Kt = te.placeholder((O, C, KH, KW), dt, name="kernel")
            return [D, Kt], _ops.conv2d_nchw(D, Kt, stride, pad)
        if self.op == "depthwise":
            N, C, H, W, O, KH, KW, stride, pad, _, _ = self._conv_dims(True)
            D = te.placeholder((N, C, H, W), dt, name="data")
            Kt = te.placeholder((C, 1, KH, KW), dt, name="kernel")
            return [D, Kt], _ops.depthwise_conv2d_nchw(D, Kt, stride, pad)
        if self.op == "pool":
            N, C, H, W, K = s[:5]
            stride = s[5] if len(s) > 5 else K
            pad = s[6] if len(s) > 6 else 0
            D = te.placeholder((N, C, H, W), dt, name="data")
            return [D], _ops.pool2d(D, K, stride, pad, "max")
        M, N = s[:2]
        X = te.placeholder((M, N), dt, name="x")
        return [X], _ops.softmax(X)

    def build(self, cfg, tensors=None):
        """(schedule, [inputs..., output]) of cfg for kiln.build / kiln.te.build_batch."""
        why = self.check(cfg)
        if why:
            raise InvalidArgument("%s %s: %s" % (self.op, self.target, why))
        cfg = dict(cfg)
        if cfg.pop("pack", False):
            ins, _ = tensors or self.tensors()
            out = _ops.matmul(ins[0], ins[1], pack=cfg["bn"])
        else:
            ins, out = tensors or self.tensors()
        fn = {"matmul": _sch.schedule_matmul, "batch_matmul": _sch.schedule_batch_matmul,
              "conv2d_nchw": _sch.schedule_conv2d_nchw, "depthwise_conv2d_nchw": _sch.schedule_depthwise_conv2d_nchw,
              "pool2d": _sch.schedule_pool2d, "softmax": _sch.schedule_softmax}[self.template]
        return fn(out, self.target, **cfg), list(ins) + [out]

    def signature(self):
        return signature(self.tensors()[1])

    def inputs(self, seed=0):
        """Random inputs (numpy) in the argument order."""
        rng = np.random.default_rng(seed)
        ins, _ = self.tensors()
        return [rng.uniform(-1, 1, size=dims(t)).astype(self.dtype) for t in ins]

    def output_shape(self):
        return dims(self.tensors()[1])

    def reference(self, inputs):
        """The numpy answer for inputs (float64 accumulation, then the dtype)."""
        x = [np.asarray(a, dtype=np.float64) for a in inputs]
        s = self.shapes
        if self.op == "matmul":
            r = x[0] @ x[1]
        elif self.op == "dense":
            r = x[0] @ x[1].T
        elif self.op == "batch_matmul":
            r = np.matmul(x[0], x[1])
        elif self.op in ("conv2d", "depthwise"):
            dw = self.op == "depthwise"
            N, C, H, W, O, KH, KW, stride, pad, OH, OW = self._conv_dims(dw)
            d = np.pad(x[0], ((0, 0), (0, 0), (pad, pad), (pad, pad)))
            r = np.zeros((N, O, OH, OW))
            for ky in range(KH):
                for kx in range(KW):
                    win = d[:, :, ky:ky + stride * OH:stride, kx:kx + stride * OW:stride]
                    if dw:
                        r += win * x[1][None, :, 0, ky, kx, None, None]
                    else:
                        r += np.einsum("nchw,oc->nohw", win, x[1][:, :, ky, kx])
        elif self.op == "pool":
            N, C, H, W, K = s[:5]
            stride = s[5] if len(s) > 5 else K
            pad = s[6] if len(s) > 6 else 0
            d = np.pad(x[0], ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
            OH, OW = (H + 2 * pad - K) // stride + 1, (W + 2 * pad - K) // stride + 1
            r = np.full((N, C, OH, OW), -np.inf)
            for ky in range(K):
                for kx in range(K):
                    r = np.maximum(r, d[:, :, ky:ky + stride * OH:stride, kx:kx + stride * OW:stride])
        else:
            e = np.exp(x[0] - x[0].max(axis=1, keepdims=True))
            r = e / e.sum(axis=1, keepdims=True)
        return r.astype(self.dtype)

    def __repr__(self):
        return "<kiln.topi.Space %s %s %s: %s>" % (self.op, self.target, self.shapes,
                                                  ", ".join("%s%s" % (k, v) for k, v in self.knobs.items()))


def space(op, target="cpu", shapes=(), dtype="float32", device=None):
    """The search space of ``op`` ("matmul", "dense", "batch_matmul", "conv2d", "depthwise",
    "pool", "softmax") on ``target`` ("cpu", "gpu", TVM's "llvm"/"cuda"/"rocm", a kiln target
    or a Device) for ``shapes`` (``OPS[op][1]`` says what they are). GPU limits (work-items per
    group, shared memory, wave size) come from ``device`` (a kiln Device, or its info map) or
    from the target when it is a Device; else the common ones (GPU_DEFAULTS). Shared memory is
    at most what te allows a kernel statically on the target (``static_shared``: a device's
    opt-in maximum, 227 KiB on sm_90, is not te's 48 KiB)."""
    limits = dict(GPU_DEFAULTS)
    dev = device if device is not None else (target if hasattr(target, "info") else None)
    info = getattr(dev, "info", dev) if dev is not None else None
    if isinstance(info, dict):
        for k in limits:
            if info.get(k):
                limits[k] = int(info[k])
    tgt = getattr(target, "id", target)
    if _sch.is_gpu(tgt):
        arch = info.get("arch") if isinstance(info, dict) else None
        limits["max_shared"] = min(limits["max_shared"], static_shared(arch or tgt))
    return Space(op, getattr(target, "id", target), shapes, dtype, limits)
