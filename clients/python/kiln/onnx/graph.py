"""A graph on a device: ``run``, ``time_evaluator``, ``profile``, ``nodes``.

Two executors take the same GraphPayload:
- "server": kilnd's graph_create / graph_run / graph_time / graph_free (docs/graph.md): the
  whole graph in one request;
- "client": for a kilnd without those methods (E_NO_METHOD), the client does their work with
  the methods it has: compile_batch for the programs, upload for the constants, alloc for the values
  (planned: a value's buffer is reused once its last reader has run), and per run one
  pipelined launch per kernel, the tensors staying on the device between nodes.
``executor="auto"`` picks "server" when kilnd answers graph_free (a cheap probe) and
"client" when it answers E_NO_METHOD.
"""

import time

import numpy as np

from .. import nd
from ..errors import InvalidArgument, KilnError, NoMethod, CompileError, InternalError
from ..module import BenchmarkResult
from ..te.build import eval_wire
from .ops import carray

__all__ = ["Graph", "GraphNode"]


class GraphNode:
    """One kernel of the fused graph: ``name``, ``label`` (the ONNX nodes fused into it, with
    their operators), ``onnx_nodes`` (their names), ``kernels`` (te kernels launched in order),
    ``program`` (index of its te program: nodes of one shape share one)."""

    def __init__(self, pnode):
        self.name = pnode.name
        self.label = pnode.label
        self.onnx_nodes = pnode.onnx_nodes
        self.kernels = pnode.kernels
        self.program = pnode.program
        self.args = pnode.args

    def __repr__(self):
        return "<GraphNode %s: %s>" % (self.name, self.label)


def shared_constants(session, device, constants):
    """{name: tensor id} of the constants, uploaded to ``device`` once per session: a later
    graph with the same weights (the model imported again, at another input shape) uses the
    same tensors. They live as long as the session, or until ``free_constants(session)``."""
    import hashlib
    cache = session.__dict__.setdefault("_kiln_onnx_constants", {})
    keys, pending = {}, {}
    for name, a in constants:
        k = keys[name] = (device.id, a.dtype.name, tuple(a.shape),
                          hashlib.blake2b(a.tobytes(), digest_size=20).digest())
        if k not in cache and k not in pending:
            pending[k] = nd.array_async(a, device)     # pipelined uploads
    for k, f in pending.items():
        cache[k] = f.result()
    return {name: cache[k].id for name, k in keys.items()}


def free_constants(session):
    """Frees the constants shared_constants uploaded for this session's graphs."""
    cache = session.__dict__.pop("_kiln_onnx_constants", {})
    for t in cache.values():
        try:
            t.free()
        except KilnError:
            pass


def _probe_server(session):
    try:
        session.call("graph_free", graph="0" * 64)
    except NoMethod:
        return False
    except KilnError:
        return True
    return True


class Graph:
    """An imported model on a device. ``inputs`` [(name, dtype, shape)], ``outputs`` [names],
    ``nodes`` [GraphNode], ``payload`` (the GraphPayload), ``executor`` ("client" or
    "server")."""

    def __init__(self, payload, session, device, executor="auto", constants="auto"):
        self.payload = payload
        self.session = session
        self.device = device
        self.inputs = list(payload.inputs)
        self.outputs = list(payload.outputs)
        self.nodes = [GraphNode(n) for n in payload.nodes]
        if executor not in ("auto", "client", "server"):
            raise InvalidArgument("executor is 'auto', 'client' or 'server', not %r" % (executor,))
        if executor == "auto":
            executor = "server" if _probe_server(session) else "client"
        if constants not in ("auto", "inline", "tensors"):
            raise InvalidArgument("constants is 'auto', 'inline' or 'tensors', not %r" % (constants,))
        self.constants = constants
        self.executor = executor
        self._last_inputs = None
        self._impl = (_ServerExecutor if executor == "server" else _ClientExecutor)(self)

    # -- running --------------------------------------------------------------------------

    def _arrays(self, args, kwargs):
        names = [n for n, _, _ in self.inputs]
        if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
            args, kwargs = (), args[0]
        if args and kwargs:
            raise InvalidArgument("run takes the inputs by position or by name, not both")
        if kwargs:
            unknown = [k for k in kwargs if k not in names]
            if unknown:
                raise InvalidArgument("the model has no input %s; its inputs are %s" % (", ".join(unknown),
                                                                                       ", ".join(names)))
            missing = [n for n in names if n not in kwargs]
            if missing:
                raise InvalidArgument("input %s is missing" % ", ".join(missing))
            args = [kwargs[n] for n in names]
        if len(args) != len(names):
            raise InvalidArgument("the model takes %d input%s (%s), %d given" % (
                len(names), "s" if len(names) != 1 else "", ", ".join(names), len(args)))
        out = []
        for a, (n, dt, shape) in zip(args, self.inputs):
            if isinstance(a, nd.NDArray):
                if (self.executor == "server" and a.device.id == self.device.id and a.dtype == dt
                        and tuple(a.shape) == tuple(shape)):
                    out.append(a)      # sent by id: graph_run copies it on the device
                    continue
                a = a.numpy()
            a = np.asarray(a)
            if a.dtype.name != dt:
                if a.dtype.kind == dt[0] or (a.dtype.kind == "f" and dt.startswith("float")):
                    a = a.astype(dt)
                else:
                    raise InvalidArgument("input %s is %s; the model takes %s" % (n, a.dtype.name, dt))
            if tuple(a.shape) != tuple(shape):
                raise InvalidArgument("input %s has shape %s; the graph was built for %s (import again with "
                                      "input_shapes to change it)" % (n, tuple(a.shape), tuple(shape)))
            out.append(carray(a))
        return out

    def run(self, *args, **kwargs):
        """Runs the graph; returns a list of numpy arrays in the model's output order.
        Inputs by position (``g.run(x)``), by name (``g.run(input=x)``) or as one dict."""
        arrays = self._arrays(args, kwargs)
        self._last_inputs = arrays
        return self._impl.run(arrays)

    __call__ = run

    def run_nd(self, *args, **kwargs):
        """As ``run``, but the outputs stay on the device: a list of NDArrays (new tensors of
        the session, freed by the caller; graph_run's ``keep``). Inputs may be NDArrays on
        the graph's device (sent by id, not copied through the client). Server executor only."""
        if self.executor != "server":
            raise InvalidArgument("run_nd needs the server executor (graph_run's keep)")
        arrays = self._arrays(args, kwargs)
        return self._impl.run(arrays, keep=True)

    def time_evaluator(self, number=10, repeat=3, min_repeat_ms=0):
        """TVM's time_evaluator for the whole graph: ``evaluator(*inputs)`` ->
        BenchmarkResult (seconds per run). Without inputs it uses the last run's (zeros if
        the graph never ran). The client executor times wall-clock runs with the inputs
        already on the device (launches sent and finished, outputs left on the device); the
        server executor is graph_time."""
        def evaluator(*args, **kwargs):
            if args or kwargs:
                arrays = self._arrays(args, kwargs)
            elif self._last_inputs is not None:
                arrays = self._last_inputs
            else:
                arrays = [np.zeros(s, dt) for _, dt, s in self.inputs]
            return self._impl.time(arrays, number, repeat, min_repeat_ms)
        return evaluator

    def profile(self, number=10, repeat=3):
        """Device time of each node's kernels (the daemon's ``time`` per kernel, inputs as
        for time_evaluator): a list of (GraphNode, seconds), in run order. With the server
        executor the kernels are timed through a client executor made for the call (the
        programs are cached: nothing compiles again) and freed after it."""
        arrays = self._last_inputs or [np.zeros(s, dt) for _, dt, s in self.inputs]
        if self.executor == "client":
            return self._impl.profile(arrays, number, repeat)
        impl = _ClientExecutor(self)
        try:
            return impl.profile(arrays, number, repeat)
        finally:
            impl.free()

    def free(self):
        """Releases the graph's device memory (and the daemon's graph)."""
        if self._impl is not None:
            self._impl.free()
            self._impl = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    # -- showing --------------------------------------------------------------------------

    def __str__(self):
        p = self.payload
        lines = ["graph %s on %s (%s executor): %d inputs, %d outputs, %d kernels from %d programs, "
                 "%d constants (%.1f MB), %d views"
                 % (p.name, self.device.id, self.executor, len(p.inputs), len(p.outputs), len(p.nodes),
                    len(p.programs), len(p.constants), p.constant_bytes() / 1e6, len(p.views))]
        for n, dt, s in p.inputs:
            lines.append("  input  %s %s %s" % (n, dt, list(s)))
        for node in p.nodes:
            out = node.writes[0]
            lines.append("  %-40s <- %s   [program %d, %d kernel%s]" % (
                "%s %s" % (out, list(p.shape(out))), node.label, node.program, len(node.kernels),
                "s" if len(node.kernels) > 1 else ""))
        for n in p.outputs:
            lines.append("  output %s %s %s" % (n, p.dtype(n), list(p.shape(n))))
        return "\n".join(lines)

    def __repr__(self):
        return "<kiln.onnx.Graph %s on %s: %d kernels>" % (self.payload.name, self.device.id, len(self.nodes))


class _ClientExecutor:
    def __init__(self, g):
        self.g = g
        self.p = p = g.payload
        self.session = s = g.session
        self.dev = g.device
        self.tensors = {}
        try:
            self._compile()
            self._allocate()
        except BaseException:
            self.free()
            raise

    def _compile(self):
        p = self.p
        target = self.dev.id
        items = [{"ir": prog, "target": target, "format": "te"} for prog in p.programs]
        mods = self.session.compile_batch(items)
        errors = []
        for i, m in enumerate(mods):
            if isinstance(m, KilnError):
                who = [n.label for n in p.nodes if n.program == i]
                errors.append("program %d (%s): %s" % (i, "; ".join(who[:3]), m.message if hasattr(m, "message")
                                                       else m))
        if errors:
            raise CompileError("the graph did not compile: " + " | ".join(errors[:3]))
        self.modules = mods

    def _allocate(self):
        """Constants uploaded once; inputs and outputs their own tensors; every other value
        a buffer from a pool, taken when its node runs and given back after its last
        reader (views share their base's buffer)."""
        p, dev = self.p, self.dev
        futs = {name: nd.array_async(a, dev) for name, a in p.constants}
        for name, f in futs.items():
            self.tensors[name] = f.result()
        for name, dt, shape in p.inputs:
            self.tensors[name] = nd.empty(shape or (1,), dt, dev)
        outputs = set(p.base(o) for o in p.outputs)
        last_use = {}
        for i, node in enumerate(p.nodes):
            for a in node.args:
                last_use[p.base(a)] = i
        free_pool = []     # (nbytes, NDArray)
        self.slot = {}
        itemsize = lambda dt: np.dtype(dt).itemsize   # noqa: E731
        for i, node in enumerate(p.nodes):
            for w in node.writes:
                b = p.base(w)
                if b in self.tensors or b in self.slot:
                    continue
                dt, shape = p.dtype(b), p.shape(b)
                if b in outputs:
                    self.tensors[b] = nd.empty(shape or (1,), dt, dev)
                    continue
                need = max(int(np.prod(shape, dtype=np.int64)) * itemsize(dt), 1)
                best = None
                for k, (size, t) in enumerate(free_pool):
                    if size >= need and (best is None or size < free_pool[best][0]):
                        best = k
                if best is not None:
                    self.slot[b] = free_pool.pop(best)
                else:
                    self.slot[b] = (need, nd.empty((need,), "uint8", dev))
            ends = set(p.base(a) for a in node.args if last_use.get(p.base(a)) == i)
            for b in ends:
                if b in self.slot and b not in outputs:
                    free_pool.append(self.slot[b])
        self.arena_bytes = sum(size for size, _ in {id(t): (s, t) for s, t in self.slot.values()}.values())
        self.launches = []
        for node in p.nodes:
            mod = self.modules[node.program]
            args = [{"tensor": self._tensor(a).id} for a in node.args]
            for kname in node.kernels:
                k = mod.kernel(kname)
                if k is None or "launch" not in k.info:
                    raise InternalError("kilnd's compile answer has no launch recipe for kernel %s" % kname)
                rec = k.info["launch"]
                if rec.get("vars"):
                    raise InternalError("kernel %s of node %s has shape variables; the importer makes fixed shapes"
                                        % (kname, node.name))
                grid = [eval_wire(x, {}) for x in rec["grid"]]
                block = [eval_wire(x, {}) for x in rec["block"]]
                if min(grid) < 1 or min(block) < 1:
                    continue   # an empty tensor: nothing to compute
                if len(k.args) != len(args):
                    raise InternalError("kernel %s takes %d arguments; node %s passes %d"
                                        % (kname, len(k.args), node.name, len(args)))
                self.launches.append((node, {"module": mod.id, "kernel": kname, "device": dev.id, "grid": grid,
                                             "block": block, "args": args}))

    def _tensor(self, name):
        b = self.p.base(name)
        t = self.tensors.get(b)
        if t is not None:
            return t
        return self.slot[b][1]

    def _send_inputs(self, arrays):
        return [self.tensors[n].copyfrom_async(a.reshape(self.tensors[n].shape))
                for (n, _, _), a in zip(self.p.inputs, arrays)]

    def _launch_all(self):
        conn = self.session._conn
        return [(node, conn.request("launch", params)) for node, params in self.launches]

    @staticmethod
    def _wait(launched):
        err = None
        for node, f in launched:
            try:
                f.result()
            except KilnError as e:
                if err is None:
                    err = (node, e)
        if err is not None:
            node, e = err
            raise type(e)("node %s (%s) failed: %s" % (node.name, node.label, getattr(e, "message", e))) from e

    def run(self, arrays):
        for f in self._send_inputs(arrays):
            f.result()
        launched = self._launch_all()
        outs = []
        for o in self.p.outputs:
            kind = self.p.kind(self.p.base(o))
            if kind == "input":
                outs.append(arrays[[n for n, _, _ in self.p.inputs].index(self.p.base(o))].reshape(self.p.shape(o))
                            .copy())
            elif kind == "constant":
                outs.append(dict(self.p.constants)[self.p.base(o)].reshape(self.p.shape(o)).copy())
            else:
                outs.append(self._tensor(o).numpy_async())
        self._wait(launched)
        return [o.result().reshape(self.p.shape(n)) if not isinstance(o, np.ndarray) else o
                for o, n in zip(outs, self.p.outputs)]

    def time(self, arrays, number, repeat, min_repeat_ms):
        for f in self._send_inputs(arrays):
            f.result()
        self._wait(self._launch_all())        # warm-up
        results = []
        number = max(int(number), 1)
        for _ in range(max(int(repeat), 1)):
            while True:
                t0 = time.perf_counter()
                for _ in range(number):
                    launched = self._launch_all()
                self._wait(launched)
                self.session.sync()
                dt = time.perf_counter() - t0
                if dt * 1e3 >= min_repeat_ms or number >= 1 << 20:
                    break
                number *= 2
            results.append(dt / number)
        return BenchmarkResult({"results": results, "number": number})

    def profile(self, arrays, number, repeat):
        for f in self._send_inputs(arrays):
            f.result()
        self._wait(self._launch_all())
        conn = self.session._conn
        per = {}
        for node, params in self.launches:
            q = dict(params, number=int(number), repeat=int(repeat))
            r = BenchmarkResult(conn.request("time", q).result())
            per[id(node)] = per.get(id(node), 0.0) + r.median
        nodes = {id(n): GraphNode(n) for n, _ in self.launches}
        return [(nodes[k], v) for k, v in per.items()]

    def free(self):
        ts = list(self.tensors.values()) + [t for _, t in getattr(self, "slot", {}).values()]
        seen = set()
        for t in ts:
            if id(t) in seen:
                continue
            seen.add(id(t))
            try:
                t.free()
            except KilnError:
                pass
        self.tensors = {}
        self.slot = {}


class _ServerExecutor:
    """graph_create / graph_run / graph_time / graph_free (docs/graph.md)."""

    def __init__(self, g):
        self.g = g
        self.session = g.session
        ids = None
        mode = g.constants
        if mode == "auto":
            # inline while the payload fits a message (the graph id then dedupes whole models);
            # tensors beyond that, uploaded in chunks
            limit = (self.session.limits or {}).get("max_message") or (64 << 20)
            mode = "tensors" if g.payload.constant_bytes() > limit // 2 else "inline"
        if mode == "tensors":
            ids = shared_constants(self.session, g.device, g.payload.constants)
        self.constant_ids = ids
        r = self.session.call("graph_create", device=g.device.id, graph=g.payload.encode(ids))
        self.id = r["graph"]
        self.info = r
        self.arena_bytes = r["arena_bytes"]

    def _inputs(self, arrays):
        return {n: {"tensor": a.id} if isinstance(a, nd.NDArray) else
                {"dtype": a.dtype.name, "shape": list(a.shape), "data": a.tobytes()}
                for (n, _, _), a in zip(self.g.inputs, arrays)}

    def run(self, arrays, keep=False):
        if keep:
            r = self.session.call("graph_run", graph=self.id, inputs=self._inputs(arrays), keep=True)
            return [nd.NDArray(self.g.device, t["id"], t["shape"], t["dtype"]) for t in r["outputs"]]
        r = self.session.call("graph_run", graph=self.id, inputs=self._inputs(arrays))
        outs = []
        for t in r["outputs"]:
            a = np.frombuffer(t["data"], dtype=np.dtype(t["dtype"])).reshape(t["shape"]).copy()
            outs.append(a)
        return outs

    def time(self, arrays, number, repeat, min_repeat_ms):
        r = self.session.call("graph_time", graph=self.id, inputs=self._inputs(arrays), number=int(number),
                              repeat=int(repeat), min_repeat_ms=int(min_repeat_ms))
        return BenchmarkResult(r)

    def free(self):
        try:
            self.session.call("graph_free", graph=self.id)
        except KilnError:
            pass
