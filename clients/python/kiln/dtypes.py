"""The protocol's dtypes (docs/protocol.md §3) and their numpy counterparts.

bfloat16 has no numpy dtype. When the ``ml_dtypes`` package is importable, a bfloat16
tensor comes back as an array of ``ml_dtypes.bfloat16``; otherwise as ``uint16`` holding the
raw bits (the upper half of the float32 bit pattern). ``float32_to_bfloat16`` and
``bfloat16_to_float32`` convert between float32 arrays and those bits in either case.
"""

import numpy as np

from .errors import InvalidArgument

try:  # optional; never required
    import ml_dtypes as _ml_dtypes
    BFLOAT16 = np.dtype(_ml_dtypes.bfloat16)
except Exception:  # ImportError, or a broken install
    _ml_dtypes = None
    BFLOAT16 = None

WIRE_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
               "uint8", "uint16", "uint32", "uint64", "bool")

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int16": 2,
            "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1}


def numpy_dtype(name):
    """The numpy dtype that holds a tensor of wire dtype ``name`` (bfloat16: see above)."""
    if name == "bfloat16":
        return BFLOAT16 if BFLOAT16 is not None else np.dtype("<u2")
    if name not in ITEMSIZE:
        raise InvalidArgument("unknown dtype %r; kiln's dtypes are %s" % (name, ", ".join(WIRE_DTYPES)))
    return np.dtype(name).newbyteorder("<") if name != "bool" else np.dtype(bool)


def wire_dtype(dt):
    """The wire name of a numpy dtype (or a dtype name): float32 -> "float32"."""
    if isinstance(dt, str) and dt == "bfloat16":
        return "bfloat16"
    try:
        dt = np.dtype(dt)
    except TypeError:
        raise InvalidArgument("%r is not a dtype kiln knows (%s)" % (dt, ", ".join(WIRE_DTYPES))) from None
    if BFLOAT16 is not None and dt == BFLOAT16:
        return "bfloat16"
    if dt.kind == "b":
        return "bool"
    if dt.kind in "iuf" and dt.fields is None:
        name = np.dtype(dt.kind + str(dt.itemsize)).name
        if name in ITEMSIZE:
            return name
    raise InvalidArgument("numpy dtype %s has no kiln counterpart; kiln's dtypes are %s"
                          % (dt, ", ".join(WIRE_DTYPES)))


def float32_to_bfloat16(x):
    """float array -> bfloat16 bits as uint16, rounding to nearest even (NaN stays NaN)."""
    f = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = f.view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded = np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)
    return rounded


def bfloat16_to_float32(bits):
    """bfloat16 (as ml_dtypes.bfloat16 or uint16 bits) -> float32 array."""
    a = np.asarray(bits)
    if BFLOAT16 is not None and a.dtype == BFLOAT16:
        return a.astype(np.float32)
    if a.dtype != np.uint16:
        raise InvalidArgument("bfloat16 bits are uint16, not %s" % a.dtype)
    return (a.astype(np.uint32) << 16).view(np.float32)


def prepare(obj, dtype=None):
    """Any array-like (and an optional wire dtype) -> (C-contiguous little-endian numpy
    array whose bytes are the tensor's data, wire dtype name)."""
    if dtype is not None and not isinstance(dtype, str):
        dtype = wire_dtype(dtype)
    arr = np.asarray(obj)
    if dtype == "bfloat16":
        if BFLOAT16 is not None and arr.dtype == BFLOAT16:
            arr = arr.view(np.uint16)
        elif arr.dtype != np.uint16:
            arr = float32_to_bfloat16(arr)
        name = "bfloat16"
    else:
        if dtype is not None:
            arr = arr.astype(numpy_dtype(dtype), copy=False)
        if arr.dtype.kind in "OUSV" or arr.dtype.kind == "c":
            raise InvalidArgument("numpy dtype %s has no kiln counterpart; kiln's dtypes are %s"
                                  % (arr.dtype, ", ".join(WIRE_DTYPES)))
        name = wire_dtype(arr.dtype)
        if name == "bfloat16":
            arr = arr.view(np.uint16)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    return arr, name
