"""Tensors through the real kilnd: every dtype, empty, 0-d and 300 MiB arrays, copies, frees."""

import gc

import numpy as np
import pytest

import kiln
from kiln import dtypes

ALL = [n for n in dtypes.WIRE_DTYPES if n != "bfloat16"]


def sample(name, shape=(5, 7)):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    if name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    dt = np.dtype(name)
    if dt.kind == "f":
        return (rng.standard_normal(size=shape) * 1000).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


@pytest.mark.parametrize("name", ALL)
def test_round_trip_every_dtype(dev, name):
    x = sample(name)
    a = kiln.nd.array(x, dev)
    assert a.dtype == name and a.shape == x.shape and a.nbytes == x.nbytes
    y = a.numpy()
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.array_equal(y, x, equal_nan=name.startswith("float"))
    y[0, 0] = y[0, 1]  # numpy() gives a writable copy
    assert np.array_equal(a.asnumpy(), x)


@pytest.mark.parametrize("name", ALL)
def test_extremes_every_dtype(dev, name):
    dt = np.dtype(name)
    if dt.kind == "b":
        x = np.array([True, False, True])
    elif dt.kind == "f":
        fi = np.finfo(dt)
        x = np.array([fi.min, fi.max, fi.tiny, -0.0, np.inf, -np.inf, np.nan], dtype=dt)
    else:
        ii = np.iinfo(dt)
        x = np.array([ii.min, ii.max, 0, 1], dtype=dt)
    y = kiln.nd.array(x, dev).numpy()
    assert x.tobytes() == y.tobytes()


def test_bfloat16_round_trip(dev):
    f = np.array([[1.0, -2.5], [3.140625, 65280.0]], dtype=np.float32)
    a = kiln.nd.array(f, dev, dtype="bfloat16")  # floats are rounded to bfloat16
    assert a.dtype == "bfloat16" and a.nbytes == 8 and a.shape == (2, 2)
    out = a.numpy()
    if dtypes.BFLOAT16 is None:
        assert out.dtype == np.uint16  # documented: raw bits without ml_dtypes
    assert np.array_equal(dtypes.bfloat16_to_float32(out), f)
    bits = dtypes.float32_to_bfloat16(f)
    b = kiln.nd.array(bits, dev, dtype="bfloat16")  # uint16 bits are taken as they are
    assert np.array_equal(dtypes.bfloat16_to_float32(b.numpy()), f)
    assert b.numpy().view(np.uint16).tobytes() == bits.tobytes()


@pytest.mark.parametrize("shape", [(0,), (3, 0, 2), (0, 0)])
def test_empty_arrays(dev, shape):
    x = np.zeros(shape, dtype=np.float32)
    a = kiln.nd.array(x, dev)
    assert a.shape == shape and a.nbytes == 0
    y = a.numpy()
    assert y.shape == shape and y.dtype == np.float32
    e = kiln.nd.empty(shape, "int64", dev)
    assert e.numpy().shape == shape


@pytest.mark.parametrize("name", ["float32", "int8", "bool", "uint64"])
def test_zero_d(dev, name):
    x = sample(name, shape=())
    a = kiln.nd.array(x, dev)
    assert a.shape == () and a.ndim == 0 and a.size == 1
    y = a.numpy()
    assert y.shape == () and y.dtype == x.dtype and y == x


def test_python_scalars_and_lists(dev):
    assert kiln.nd.array(3.5, dev).numpy() == 3.5
    assert kiln.nd.array([[1, 2], [3, 4]], dev, dtype="int16").numpy().tolist() == [[1, 2], [3, 4]]


def test_300_mib_round_trip(dev):
    n = 300 * (1 << 20) // 4
    x = np.arange(n, dtype=np.uint32)
    x ^= np.uint32(0x9E3779B9)
    a = kiln.nd.array(x, dev)  # alloc + 5 pipelined writes of 64 MiB
    assert a.nbytes == 300 << 20
    y = a.numpy()             # 5 pipelined reads straight into the result
    assert np.array_equal(x, y)
    a.free()


def test_chunk_boundaries(dev, monkeypatch):
    monkeypatch.setattr(kiln.nd, "CHUNK_BYTES", 1 << 20)
    for nbytes in ((1 << 20) + 4, (3 << 20) - 4, 5 << 20):
        x = np.random.default_rng(nbytes).integers(0, 255, nbytes, dtype=np.uint8)
        a = kiln.nd.array(x, dev)
        assert np.array_equal(a.numpy(), x)
        b = kiln.nd.empty(x.shape, "uint8", dev)
        b.copyfrom(x)
        assert np.array_equal(b.numpy(), x)


def test_non_contiguous_and_big_endian(dev):
    x = np.arange(24, dtype=">f8").reshape(4, 6)[:, ::2]
    y = kiln.nd.array(x, dev).numpy()
    assert y.dtype == np.float64 and np.array_equal(y, x)


def test_empty_is_zero_filled(dev):
    e = kiln.nd.empty((3, 4), "float64", dev)
    assert e.shape == (3, 4) and e.dtype == "float64"
    assert not e.numpy().any()
    assert kiln.nd.empty(5, dev=dev).shape == (5,)


def test_copyfrom_and_copyto(dev):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    e = kiln.nd.empty((3, 4), "int32", dev)
    assert e.copyfrom(x) is e
    assert np.array_equal(e.numpy(), x)
    e.copyfrom(x.astype(np.float64) * 2)  # converted to the tensor's dtype
    assert np.array_equal(e.numpy(), x * 2)
    f = kiln.nd.empty((3, 4), "int32", dev)
    f.copyfrom(e)
    assert np.array_equal(f.numpy(), x * 2)
    g = e.copyto(dev)
    assert g.id != e.id and np.array_equal(g.numpy(), x * 2)
    out = np.zeros((3, 4), np.int32)
    e.copyto(out)
    assert np.array_equal(out, x * 2)
    with pytest.raises(kiln.InvalidArgument):
        e.copyfrom(np.zeros((4, 3)))


def test_unsupported_dtype_is_refused(dev):
    with pytest.raises(kiln.InvalidArgument):
        kiln.nd.array(np.zeros(3, np.complex64), dev)
    with pytest.raises(kiln.InvalidArgument):
        kiln.nd.empty((3,), "complex64", dev)


def test_free_and_collect(s, dev):
    a = kiln.nd.array(np.ones(4, np.float32), dev)
    tid = a.id
    a.free()
    with pytest.raises(kiln.NotFound):
        s.call("download", id=tid)
    with pytest.raises(kiln.InvalidArgument):
        a.numpy()  # the client knows it is freed
    b = kiln.nd.array(np.ones(4, np.float32), dev)
    tid = b.id
    del b
    gc.collect()
    s.sync()  # the free was sent without waiting; wait for its answer
    with pytest.raises(kiln.NotFound):
        s.call("download", id=tid)
    with kiln.nd.array(np.ones(2), dev) as c:
        tid = c.id
    with pytest.raises(kiln.NotFound):
        s.call("download", id=tid)


def test_collection_keeps_live_count_flat(s, dev):
    before = s.stats()["tensors"]
    for _ in range(200):
        kiln.nd.array(np.ones(16, np.float32), dev)  # dropped at once
    gc.collect()
    s.sync()
    assert s.stats()["tensors"] <= before + 1


def test_tensors_belong_to_the_tenant(unix_url, tcp_url, dev):
    a = kiln.nd.array(np.arange(3, dtype=np.int8), dev)
    with kiln.connect(tcp_url) as other:
        t = other.call("download", id=a.id)
        assert t["dtype"] == "int8" and t["shape"] == [3] and t["data"] == b"\x00\x01\x02"


def test_repr_and_properties(dev):
    a = kiln.nd.array(np.zeros((2, 3), np.float16), dev)
    assert "float16" in repr(a) and "(2, 3)" in repr(a)
    assert a.device == dev and a.session is dev.session and len(a) == 2 and a.nbytes == 12
    assert np.asarray(a).shape == (2, 3)


def test_round_trip_on_every_served_device(s, monkeypatch):
    # cpu:0 everywhere; hsa:N and cuda:N too on a GPU box
    monkeypatch.setattr(kiln.nd, "CHUNK_BYTES", 4 << 20)
    for d in s.devices():
        for name in ALL:
            x = sample(name, shape=(3, 5))
            assert np.array_equal(kiln.nd.array(x, d).numpy(), x), (d, name)
        big = np.arange((10 << 20) // 8, dtype=np.int64)  # chunked at 4 MiB
        a = kiln.nd.array(big, d)
        assert a.device == d and np.array_equal(a.numpy(), big), d
