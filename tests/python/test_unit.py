"""Client-only units: error mapping for every code, urls, dtypes. No daemon needed."""

import numpy as np
import pytest

import kiln
from kiln import dtypes
from kiln._rpc import parse_url
from kiln.errors import error_from_wire

CODES = [
    (1, "E_INVALID_ARGUMENT", kiln.InvalidArgument), (2, "E_NO_METHOD", kiln.NoMethod),
    (3, "E_UNAUTHENTICATED", kiln.Unauthenticated), (4, "E_PERMISSION", kiln.PermissionDenied),
    (5, "E_NOT_FOUND", kiln.NotFound), (6, "E_RESOURCE_EXHAUSTED", kiln.ResourceExhausted),
    (7, "E_COMPILE", kiln.CompileError), (8, "E_COMPILER_CRASHED", kiln.CompilerCrashed),
    (9, "E_DEVICE", kiln.DeviceError), (10, "E_DEVICE_FAULT", kiln.DeviceFault),
    (11, "E_TIMEOUT", kiln.Timeout), (12, "E_CANCELLED", kiln.Cancelled),
    (13, "E_UNAVAILABLE", kiln.Unavailable), (14, "E_INTERNAL", kiln.InternalError),
]


@pytest.mark.parametrize("code,name,cls", CODES)
def test_error_code_maps_to_its_class(code, name, cls):
    e = error_from_wire([code, "what went wrong; do this"])
    assert type(e) is cls
    assert isinstance(e, kiln.KilnError)
    assert e.code == code and e.name == name
    assert e.message == "what went wrong; do this"
    assert str(e) == name + ": what went wrong; do this"
    # the notification form carries the same error
    n = error_from_wire({"code": code, "message": "m"})
    assert type(n) is cls and n.message == "m"
    assert kiln.ERROR_CLASSES[code] is cls


def test_every_protocol_code_has_a_class():
    assert sorted(kiln.ERROR_CLASSES) == list(range(1, 15))
    assert len(set(kiln.ERROR_CLASSES.values())) == 14


def test_unknown_code_is_a_plain_kiln_error():
    e = error_from_wire([99, "new"])
    assert type(e) is kiln.KilnError and e.code == 99 and e.message == "new"
    e = error_from_wire("nonsense")
    assert type(e) is kiln.KilnError and "malformed" in e.message
    e = error_from_wire([5, b"bytes message"])
    assert type(e) is kiln.NotFound and e.message == "bytes message"


def test_builtin_bases():
    assert issubclass(kiln.InvalidArgument, ValueError)
    assert issubclass(kiln.Timeout, TimeoutError)
    assert issubclass(kiln.Unavailable, ConnectionError)
    assert issubclass(kiln.NotFound, LookupError)
    assert issubclass(kiln.PermissionDenied, PermissionError)


def test_error_pickles():
    import pickle
    e = pickle.loads(pickle.dumps(kiln.CompileError("line 3:7: bad")))
    assert type(e) is kiln.CompileError and e.message == "line 3:7: bad" and e.code == 7


def test_parse_url():
    assert parse_url("tcp:127.0.0.1:7070") == ("tcp", ("127.0.0.1", 7070))
    assert parse_url("tcp://localhost:1") == ("tcp", ("localhost", 1))
    assert parse_url("tcp:[::1]:7070") == ("tcp", ("::1", 7070))
    assert parse_url("unix:/run/kiln.sock") == ("unix", "/run/kiln.sock")
    assert parse_url("unix:///run/kiln.sock") == ("unix", "/run/kiln.sock")
    for bad in ("http://x", "tcp:host", "tcp:host:99999", "unix:", 7070):
        with pytest.raises(kiln.InvalidArgument):
            parse_url(bad)


def test_wire_dtypes():
    for name in dtypes.WIRE_DTYPES:
        if name == "bfloat16":
            continue
        assert dtypes.wire_dtype(np.dtype(name)) == name
        assert dtypes.numpy_dtype(name).itemsize == dtypes.ITEMSIZE[name]
    assert dtypes.wire_dtype(">f4") == "float32"
    for bad in ("complex64", "U3", object, "float128"):
        with pytest.raises(kiln.InvalidArgument):
            dtypes.wire_dtype(bad)


def test_bfloat16_rounding():
    f = np.array([1.0, -2.5, 3.140625, 1.00390625, 1.01171875, np.inf, 0.0], dtype=np.float32)
    bits = dtypes.float32_to_bfloat16(f)
    assert bits.dtype == np.uint16
    # 1.00390625 is halfway between 1.0 and 1.0078125: ties to even -> 1.0;
    # 1.01171875 is halfway between 1.0078125 and 1.015625: ties to even -> 1.015625
    assert list(dtypes.bfloat16_to_float32(bits)) == [1.0, -2.5, 3.140625, 1.0, 1.015625, np.inf, 0.0]
    nan = dtypes.float32_to_bfloat16(np.array([np.nan], dtype=np.float32))
    assert np.isnan(dtypes.bfloat16_to_float32(nan))[0]


def test_prepare_makes_c_contiguous_little_endian():
    a = np.arange(12, dtype=">i4").reshape(3, 4).T
    arr, name = dtypes.prepare(a)
    assert name == "int32" and arr.flags.c_contiguous and arr.dtype.byteorder in "<="
    assert (arr == a).all()
    z, name = dtypes.prepare(np.float64(2.5))
    assert z.shape == () and name == "float64"
