"""Tensors on a kiln device, TVM's ``tvm.nd`` spelling.

    a = kiln.nd.array(np.arange(10, dtype="float32"), dev)
    b = kiln.nd.empty((10,), "float32", dev)
    b.copyfrom(a)
    print(b.numpy())

A tensor lives in the daemon until freed: ``free()``, ``with`` block, or when the NDArray is
collected (the ``free`` request is sent without waiting for its reply). Arrays larger than
``CHUNK_BYTES`` move in chunks (``alloc`` + ``write`` at byte offsets, ``read`` at byte
offsets into the result array), pipelined on the connection.
"""

from typing import Any, Optional, Sequence, Union

import numpy as np

from . import dtypes as _dt
from ._rpc import CombinedFuture, Future, completed_future, SINK_FILLED
from .errors import InvalidArgument, InternalError
from .session import Device  # for the hints (session imports nothing of nd at import time)

__all__ = ["NDArray", "array", "empty", "array_async", "empty_async", "CHUNK_BYTES"]

# Bytes per message for large transfers. Reads straight into the result's memory past 1 MiB.
CHUNK_BYTES = 64 << 20
_SMALL = 1 << 20


def _chunk_bytes(session):
    lim = (session.limits or {}).get("max_message") or 0
    c = CHUNK_BYTES
    if lim and c > lim - (1 << 20):
        c = max(1 << 20, lim - (1 << 20))
    return c


def _resolve_device(dev):
    from .session import Device, default_session
    if dev is None:
        return default_session().cpu(0)
    if isinstance(dev, Device):
        return dev
    if isinstance(dev, str):
        return default_session().device(dev)
    raise InvalidArgument("a device is a kiln Device (s.cpu(0), s.rocm(0), ...), not %r" % (dev,))


def _shape_tuple(shape):
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        out = tuple(int(d) for d in shape)
    except TypeError:
        raise InvalidArgument("a shape is a tuple of ints, not %r" % (shape,)) from None
    if any(d < 0 for d in out):
        raise InvalidArgument("shape %r has a negative dimension" % (out,))
    return out


class NDArray:
    """A tensor held by kilnd. ``id`` is the daemon's tensor id."""

    __slots__ = ("device", "id", "shape", "dtype", "_freed", "_borrowed", "__weakref__")

    def __init__(self, device, tensor_id, shape, dtype):
        self.device = device
        self.id = tensor_id
        self.shape = tuple(shape)
        self.dtype = dtype
        self._freed = False
        self._borrowed = False  # attach(own=False): collection does not free it

    @classmethod
    def attach(cls, session, tensor_id, own=False):
        """An NDArray for a tensor id made elsewhere: another session or process of the same
        tenant, ``kiln tensors``. Raises NotFound when the tenant has no such tensor. With
        ``own=False`` (the default) collecting the NDArray leaves the tensor alone; ``free()``
        still frees it."""
        from .errors import NotFound
        tensor_id = int(tensor_id)
        for t in session.tensors():
            if t["id"] == tensor_id:
                a = cls(session.device(t["device"]), tensor_id, t["shape"], t["dtype"])
                a._borrowed = not own
                return a
        raise NotFound("no tensor %d for tenant %s (freed, never made, or another tenant's)"
                       % (tensor_id, session.tenant))

    # -- properties ------------------------------------------------------------------------

    @property
    def session(self):
        return self.device.session

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * _dt.ITEMSIZE[self.dtype]

    @property
    def handle(self) -> int:
        return self.id

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __str__(self):
        """The values, as numpy prints them (downloads the tensor)."""
        if self._freed:
            return repr(self)
        return str(self.numpy())

    def __repr__(self):
        state = " freed" if self._freed else ""
        return "<kiln.NDArray id=%d shape=%s dtype=%s device=%s%s>" % (
            self.id, self.shape, self.dtype, self.device.id, state)

    # -- data out --------------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """A new, writable numpy array with the tensor's data."""
        return self.numpy_async().result()

    asnumpy = numpy

    def __array__(self, dtype=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def numpy_async(self):
        self._check()
        conn = self.session._conn
        out = np.empty(self.shape, dtype=_dt.numpy_dtype(self.dtype))
        nbytes = self.nbytes
        if nbytes == 0:
            return completed_future(conn, out, method="read")
        if nbytes < _SMALL:
            return conn.request("download", {"id": self.id}, transform=lambda t: self._from_wire(t, out))
        flat = out.reshape(-1).view(np.uint8)
        chunk = _chunk_bytes(self.session)
        parts = []
        for off in range(0, nbytes, chunk):
            size = min(chunk, nbytes - off)
            sink = memoryview(flat[off:off + size])
            parts.append(conn.request("read", {"id": self.id, "offset": off, "size": size},
                                      transform=_filler(sink), sink=sink))
        return CombinedFuture(conn, parts, lambda _: out, method="read")

    def _from_wire(self, t, out):
        if not isinstance(t, dict) or "data" not in t:
            raise InternalError("download answered %r, not a tensor map" % (type(t).__name__,))
        data = t["data"]
        if len(data) != out.nbytes:
            raise InternalError("download of tensor %d gave %d bytes for %d expected" % (self.id, len(data), out.nbytes))
        out.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
        return out

    # -- data in ---------------------------------------------------------------------------

    def copyfrom(self, source: Any) -> "NDArray":
        """Copies ``source`` (numpy array-like or NDArray) into this tensor; the shape must
        match, the dtype is converted. Returns self."""
        self.copyfrom_async(source).result()
        return self

    def copyfrom_async(self, source):
        self._check()
        if isinstance(source, NDArray):
            source = source.numpy()
        arr, _ = _dt.prepare(source, self.dtype)
        if tuple(arr.shape) != self.shape:
            raise InvalidArgument("copyfrom: source shape %s differs from the tensor's %s" % (arr.shape, self.shape))
        conn = self.session._conn
        return CombinedFuture(conn, _write_chunks(self.session, self.id, arr), lambda _: self, method="write")

    def copyto(self, target: Union[Device, "NDArray", np.ndarray]) -> Union["NDArray", np.ndarray]:
        """To a Device: a new NDArray there. To an NDArray: copies into it. To a numpy
        array: fills it."""
        from .session import Device
        if isinstance(target, Device):
            return array(self.numpy(), target, dtype=self.dtype)
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        if isinstance(target, np.ndarray):
            target[...] = self.numpy()
            return target
        raise InvalidArgument("copyto takes a Device, an NDArray or a numpy array, not %r" % (target,))

    # -- life ------------------------------------------------------------------------------

    def _check(self):
        if self._freed:
            raise InvalidArgument("tensor %d was freed" % self.id)

    def free(self) -> None:
        """Frees the tensor now and waits for the daemon's answer."""
        if not self._freed:
            self._freed = True
            self.session._conn.request("free", {"id": self.id}).result()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        try:
            if not self._freed and not self._borrowed:
                self._freed = True
                conn = self.device.session._conn
                if not conn.closed:
                    conn.fire_and_forget("free", {"id": self.id})
        except Exception:
            pass


def _filler(sink):
    def fill(value):
        if value is SINK_FILLED:
            return None
        if not isinstance(value, (bytes, bytearray)) or len(value) != len(sink):
            raise InternalError("read answered %d bytes for %d asked" % (len(value) if value is not None else -1, len(sink)))
        sink[:] = value
        return None
    return fill


def _write_chunks(session, tid, arr):
    conn = session._conn
    flat = memoryview(arr.reshape(-1).view(np.uint8)) if arr.nbytes else memoryview(b"")
    chunk = _chunk_bytes(session)
    parts = []
    for off in range(0, arr.nbytes, chunk):
        parts.append(conn.request("write", {"id": tid, "offset": off},
                                  tail=("data", flat[off:off + chunk])))
    return parts


def array_async(obj: Any, dev: Optional[Device] = None, dtype: Optional[str] = None) -> Future:
    """As ``array``, returning a Future of the NDArray."""
    dev = _resolve_device(dev)
    arr, name = _dt.prepare(obj, dtype)
    session = dev.session
    conn = session._conn
    shape = tuple(arr.shape)
    if arr.nbytes <= _chunk_bytes(session):
        data = memoryview(arr.reshape(-1).view(np.uint8)) if arr.nbytes else b""
        head = {"device": dev.id}
        tensor = {"dtype": name, "shape": list(shape)}
        fut = _upload(conn, head, tensor, data,
                      transform=lambda r: NDArray(dev, _id_of(r), shape, name))
        return fut
    # Too big for one message: alloc, then pipelined writes. The writes need the id, so the
    # alloc reply is awaited here; the writes stay in flight in the returned future.
    t = NDArray(dev, _id_of(conn.request("alloc", {"device": dev.id, "dtype": name,
                                                   "shape": list(shape)}).result()), shape, name)
    return CombinedFuture(conn, _write_chunks(session, t.id, arr), lambda _: t, method="upload")


def _upload(conn, head, tensor, data, transform):
    # upload's tensor map is nested, so the zero-copy tail is spelled out here: the params map
    # is {"device": .., "tensor": {"dtype": .., "shape": .., "data": <bin>}} with data last.
    import msgpack
    from ._rpc import Future, bin_header, map_header
    if conn._dead is not None:
        raise conn._dead
    msgid = conn.next_msgid()
    fut = Future(conn, "upload", transform)
    head_bytes = bytearray(b"\x94\x00") + msgpack.packb(msgid) + msgpack.packb("upload") + b"\x91"
    head_bytes += map_header(len(head) + 1)
    for k, v in head.items():
        head_bytes += msgpack.packb(k) + msgpack.packb(v)
    head_bytes += msgpack.packb("tensor") + map_header(3)
    for k, v in tensor.items():
        head_bytes += msgpack.packb(k) + msgpack.packb(v)
    head_bytes += msgpack.packb("data") + bin_header(len(data))
    conn._pending[msgid] = fut
    try:
        conn._send([bytes(head_bytes), data])
    except BaseException:
        conn._pending.pop(msgid, None)
        raise
    return fut


def _id_of(r):
    if not isinstance(r, dict) or not isinstance(r.get("id"), int):
        raise InternalError("expected {'id': uint} from the daemon, got %r" % (r,))
    return r["id"]


def array(obj: Any, dev: Optional[Device] = None, dtype: Optional[str] = None) -> NDArray:
    """Copies a numpy array (or anything ``np.asarray`` takes) to device ``dev`` (default:
    cpu:0 of the default session). ``dtype`` converts first; ``dtype="bfloat16"`` takes
    uint16 bits as they are and rounds float arrays to bfloat16."""
    return array_async(obj, dev, dtype).result()


def empty_async(shape: Union[int, Sequence[int]], dtype: str = "float32",
                dev: Optional[Device] = None) -> Future:
    dev = _resolve_device(dev)
    shape = _shape_tuple(shape)
    name = _dt.wire_dtype(dtype)
    return dev.session._conn.request("alloc", {"device": dev.id, "dtype": name, "shape": list(shape)},
                                     transform=lambda r: NDArray(dev, _id_of(r), shape, name))


def empty(shape: Union[int, Sequence[int]], dtype: str = "float32", dev: Optional[Device] = None) -> NDArray:
    """A new tensor of ``shape`` and ``dtype`` on ``dev`` (kilnd zero-fills it)."""
    return empty_async(shape, dtype, dev).result()
