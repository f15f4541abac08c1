"""Reads PyTorch checkpoints of the legacy (pre-zip) ``torch.save`` format into numpy arrays,
without torch: a restricted unpickler that knows only the few globals a state dict uses
(OrderedDict, the tensor and parameter rebuild functions, the storage types), so a
checkpoint cannot run code.

    state = kiln.onnx.torchfile.load("efficientnet-lite0-57934424.pth")   # {name: ndarray}

Format: five concatenated pickles and the raw storages: the magic number, the protocol
version (1001), system info, the object (storages as persistent ids
``('storage', StorageType, key, location, numel, ...)``), the list of storage keys in file
order; then per key an int64 element count and the little-endian elements.
"""

import collections
import io
import pickle
import struct

import numpy as np

from ..errors import InvalidArgument

__all__ = ["load", "MAGIC"]

MAGIC = 0x1950a86a20f9469cfc6c
PROTOCOL = 1001

_STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
             "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16, "CharStorage": np.int8,
             "ByteStorage": np.uint8, "BoolStorage": np.bool_}


class _StorageType:
    def __init__(self, name):
        self.name = name
        self.dtype = np.dtype(_STORAGES[name])


class _Storage:
    def __init__(self, dtype, key, numel):
        self.dtype, self.key, self.numel = dtype, key, numel
        self.data = None


class _Lazy:
    """A tensor whose storage is read after the object pickle."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

    def array(self):
        st = self.storage
        if st.data is None:
            raise InvalidArgument("checkpoint: storage %s was never written" % st.key)
        n = 1
        for d in self.size:
            n *= d
        if n == 0:
            return np.zeros(self.size, st.dtype)
        last = self.offset + sum((d - 1) * s for d, s in zip(self.size, self.stride))
        if self.offset < 0 or last >= st.numel or any(s < 0 for s in self.stride):
            raise InvalidArgument("checkpoint: a tensor of size %s, stride %s, offset %d reaches past its storage "
                                  "of %d elements" % (self.size, self.stride, self.offset, st.numel))
        item = st.dtype.itemsize
        v = np.lib.stride_tricks.as_strided(st.data[self.offset:], shape=self.size,
                                            strides=[s * item for s in self.stride])
        return np.array(v)


def _rebuild_tensor(storage, storage_offset, size, stride, *rest):
    if not isinstance(storage, _Storage):
        raise InvalidArgument("checkpoint: a tensor rebuilt from %r, not a storage" % (storage,))
    return _Lazy(storage, int(storage_offset), [int(x) for x in size], [int(x) for x in stride])


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, *rest):
    return data


_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, f):
        super().__init__(f)
        self.storages = {}

    def find_class(self, module, name):
        fn = _GLOBALS.get((module, name))
        if fn is not None:
            return fn
        if module == "torch" and name in _STORAGES:
            return _StorageType(name)
        raise pickle.UnpicklingError("checkpoint refers to %s.%s, which a state dict does not need; refused"
                                     % (module, name))

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage" or not isinstance(pid[1], _StorageType):
            raise pickle.UnpicklingError("checkpoint has an unknown persistent id %r" % (pid[:2],))
        _, typ, key, _location, numel = pid[:5]
        st = self.storages.get(key)
        if st is None:
            st = self.storages[key] = _Storage(typ.dtype, key, int(numel))
        return st


class _PlainUnpickler(pickle.Unpickler):
    """The header pickles hold plain data: no globals at all."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError("unexpected global %s.%s in a checkpoint header" % (module, name))


def _plain_load(f):
    return _PlainUnpickler(f).load()


def _materialise(obj):
    if isinstance(obj, _Lazy):
        return obj.array()
    if isinstance(obj, dict):
        return collections.OrderedDict((k, _materialise(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_materialise(v) for v in obj)
    return obj


def load(path_or_bytes):
    """The checkpoint's object (a state dict: {name: numpy array}). Raises
    kiln.InvalidArgument for the zip format, a foreign file, or anything but a state dict."""
    data = path_or_bytes
    if not isinstance(data, (bytes, bytearray)):
        with open(path_or_bytes, "rb") as fh:
            data = fh.read()
    if data[:2] == b"PK":
        raise InvalidArgument("this checkpoint is torch's zip format; kiln.onnx.torchfile reads the legacy format")
    f = io.BytesIO(data)
    try:
        if _plain_load(f) != MAGIC:
            raise InvalidArgument("not a torch checkpoint (wrong magic number)")
        if _plain_load(f) != PROTOCOL:
            raise InvalidArgument("torch checkpoint protocol is not %d" % PROTOCOL)
        _plain_load(f)                      # system info: endianness, type sizes
        u = _Unpickler(f)
        obj = u.load()
        keys = _plain_load(f)
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, struct.error) as e:
        raise InvalidArgument("not a readable legacy torch checkpoint: %s" % e) from None
    for key in keys:
        st = u.storages.get(key)
        if st is None:
            raise InvalidArgument("checkpoint lists storage %r that no tensor uses" % (key,))
        head = f.read(8)
        if len(head) != 8:
            raise InvalidArgument("checkpoint is truncated (storage %s)" % key)
        (n,) = struct.unpack("<q", head)
        if n != st.numel:
            raise InvalidArgument("checkpoint storage %s has %d elements; its tensors say %d" % (key, n, st.numel))
        raw = f.read(n * st.dtype.itemsize)
        if len(raw) != n * st.dtype.itemsize:
            raise InvalidArgument("checkpoint is truncated (storage %s)" % key)
        st.data = np.frombuffer(raw, dtype=st.dtype.newbyteorder("<")).astype(st.dtype)
    return _materialise(obj)
