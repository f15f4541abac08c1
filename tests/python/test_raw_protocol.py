"""kilnd against an independent MessagePack-RPC client: python3-msgpack and a socket only,
nothing of kiln's client code (docs/protocol.md is the contract checked here)."""

import socket
import time

import msgpack
import pytest

E_INVALID_ARGUMENT, E_NO_METHOD, E_RESOURCE_EXHAUSTED = 1, 2, 6
LIMIT_CODES = (E_INVALID_ARGUMENT, E_RESOURCE_EXHAUSTED)


class Raw:
    def __init__(self, url, timeout=20.0):
        kind, _, rest = url.partition(":")
        if kind == "unix":
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(rest)
        else:
            host, _, port = rest.rpartition(":")
            self.sock = socket.create_connection((host, int(port)))
        self.sock.settimeout(timeout)
        self.up = msgpack.Unpacker(raw=False, max_buffer_size=1 << 31)
        self.eof = False

    def send(self, data):
        self.sock.sendall(data)

    def request(self, msgid, method, params):
        self.send(msgpack.packb([0, msgid, method, params], use_bin_type=True))

    def recv(self):
        """The next message; None at end of stream."""
        while True:
            try:
                return self.up.unpack()
            except msgpack.OutOfData:
                pass
            if self.eof:
                return None
            data = self.sock.recv(1 << 20)
            if not data:
                self.eof = True
            else:
                self.up.feed(data)

    def call(self, msgid, method, params):
        self.request(msgid, method, params)
        m = self.recv()
        assert m is not None and m[0] == 1 and m[1] == msgid, m
        return m

    def until_eof(self):
        out = []
        while True:
            m = self.recv()
            if m is None:
                return out
            out.append(m)

    def close(self):
        self.sock.close()


@pytest.fixture
def raw(unix_url):
    r = Raw(unix_url)
    yield r
    r.close()


@pytest.fixture
def bystander(tcp_url):
    """A second connection that must notice nothing while another one misbehaves."""
    r = Raw(tcp_url)
    assert r.call(1, "ping", [])[3] == "pong"
    yield r
    assert r.call(2, "ping", [])[3] == "pong", "another client's bad input disturbed this connection"
    r.close()


def test_empty_array_params_and_other_param_forms(raw):
    assert raw.call(1, "ping", []) == [1, 1, None, "pong"]
    assert raw.call(2, "ping", None)[3] == "pong"
    assert raw.call(3, "ping", [{}])[3] == "pong"
    assert raw.call(4, "ping", {})[3] == "pong"  # a bare map
    devs = raw.call(5, "devices", [])[3]
    assert any(d["id"] == "cpu:0" for d in devs)
    st = raw.call(6, "stats", [])[3]
    assert st["server"].startswith("kilnd")
    h = raw.call(7, "hello", [{"version": 1, "client": "raw-test"}])[3]
    assert h["version"] == 1 and set(h["limits"]) >= {"max_message", "max_depth", "max_items", "max_str"}


def test_bin_method_name(raw):
    raw.send(msgpack.packb([0, 9, b"ping", []], use_bin_type=True))
    assert raw.recv() == [1, 9, None, "pong"]


def test_msgid_full_range(raw):
    for msgid in (0, 127, 128, 65535, 65536, 2**32 - 1):
        assert raw.call(msgid, "ping", [])[3] == "pong"


def test_bad_fields_keep_the_connection(raw):
    m = raw.call(1, "alloc", [{"dtype": "float32", "shape": [2], "nope": 1}])
    assert m[2][0] == E_INVALID_ARGUMENT and "nope" in m[2][1] and m[3] is None
    m = raw.call(2, "frobnicate", [])
    assert m[2][0] == E_NO_METHOD and isinstance(m[2][1], str) and m[3] is None
    m = raw.call(3, "alloc", [{"dtype": 5, "shape": [2]}])
    assert m[2][0] == E_INVALID_ARGUMENT
    raw.send(msgpack.packb([2, "some-notification", []]))  # ignored, no reply
    assert raw.call(4, "ping", [])[3] == "pong"


def test_pipelining(raw):
    n = 1000
    raw.send(b"".join(msgpack.packb([0, i, "ping", []]) for i in range(n)))
    got = {}
    for _ in range(n):
        m = raw.recv()
        assert m[0] == 1 and m[2] is None and m[3] == "pong"
        got[m[1]] = True
    assert sorted(got) == list(range(n))


def test_tensor_round_trip_and_same_device_order(raw):
    data = bytes(range(256)) * 64
    # upload, then download of the id it returns needs the reply; but write then read of one
    # tensor pipelined must see the write (same tenant, same device: in order)
    tid = raw.call(1, "alloc", [{"dtype": "uint8", "shape": [len(data)]}])[3]["id"]
    raw.send(msgpack.packb([0, 2, "write", [{"id": tid, "offset": 0, "data": data}]], use_bin_type=True)
             + msgpack.packb([0, 3, "read", [{"id": tid}]]))
    replies = {m[1]: m for m in (raw.recv(), raw.recv())}
    assert replies[2][2] is None and replies[3][3] == data
    t = raw.call(4, "download", [{"id": tid}])[3]
    assert t == {"dtype": "uint8", "shape": [len(data)], "data": data}
    assert raw.call(5, "free", [{"id": tid}])[2] is None


def test_out_of_order_replies(raw):
    # a slow request (a 256 MiB download) followed by a fast one (ping): the ping answer
    # must not wait for the download's
    size = 256 << 20
    tid = raw.call(1, "alloc", [{"dtype": "uint8", "shape": [size]}])[3]["id"]
    order = []
    for attempt in range(5):
        raw.send(msgpack.packb([0, 100 + attempt, "read", [{"id": tid, "offset": 0, "size": size}]])
                 + msgpack.packb([0, 200 + attempt, "ping", []]))
        first, second = raw.recv(), raw.recv()
        assert {first[1], second[1]} == {100 + attempt, 200 + attempt}
        big = first if first[1] == 100 + attempt else second
        assert len(big[3]) == size
        order.append(first[1])
        if first[1] >= 200:
            break
    raw.call(2, "free", [{"id": tid}])
    assert any(m >= 200 for m in order), "replies always came in request order: %r" % order


def expect_error_then_close(raw, msgid=None, codes=LIMIT_CODES):
    msgs = raw.until_eof()
    assert raw.eof, "the connection was not closed"
    assert len(msgs) >= 1, "no error was sent before the close"
    m = msgs[-1]
    if m[0] == 1:
        code, message = m[2]
        if msgid is not None:
            assert m[1] == msgid
        assert m[3] is None
    else:
        assert m[0] == 2 and m[1] == "error", m
        body = m[2][0] if isinstance(m[2], list) else m[2]
        code, message = body["code"], body["message"]
    assert code in codes, (code, message)
    assert isinstance(message, str) and message
    return code, message


@pytest.mark.parametrize("garbage", [b"\xc1", b"hello, kiln\n", b"\x93\x00\x01", b"\x94\x07\x01\xa4ping\x90",
                                     b"\x94\x00\xa4oops\xa4ping\x90"])
def test_garbage_gets_an_error_and_a_close(raw, bystander, garbage):
    raw.send(garbage + msgpack.packb([0, 99, "ping", []]))
    msgs = raw.until_eof()
    assert raw.eof
    assert not [m for m in msgs if m[0] == 1 and m[1] == 99], "the stream was used after garbage: %r" % msgs
    errors = [m for m in msgs if (m[0] == 1 and m[2] is not None) or (m[0] == 2 and m[1] == "error")]
    assert errors, "garbage %r got no error before the close: %r" % (garbage, msgs)


def test_huge_array_header(raw, bystander):
    raw.send(b"\xdd\xff\xff\xff\xff" + b"\x00" * 10)  # a 2^32-1 element array, 10 bytes behind it
    expect_error_then_close(raw)


def test_huge_array_header_inside_a_request(raw, bystander):
    raw.send(b"\x94\x00\x07\xa4ping\xdd\xff\xff\xff\xff" + b"\xc0" * 10)
    expect_error_then_close(raw, msgid=7)


def test_nesting_10000_deep(raw, bystander):
    raw.send(b"\x91" * 10000 + b"\xc0")
    expect_error_then_close(raw)


def test_nesting_10000_deep_inside_a_request(raw, bystander):
    raw.send(b"\x94\x00\x08\xa4ping" + b"\x91" * 10000 + b"\xc0")
    expect_error_then_close(raw, msgid=8)


def test_4gib_bin_header_with_10_bytes(raw, bystander):
    raw.send(b"\xc6\xff\xff\xff\xff" + b"x" * 10)
    expect_error_then_close(raw)


def test_4gib_bin_header_inside_an_upload(raw, bystander):
    raw.send(b"\x94\x00\x0b\xa6upload\x91\x81\xa6tensor\x83\xa5dtype\xa5uint8\xa5shape\x91\xce\xff\xff\xff\xff"
             b"\xa4data\xc6\xff\xff\xff\xff" + b"x" * 10)
    expect_error_then_close(raw, msgid=11)


def test_daemon_survives_everything(unix_url, tcp_url):
    # after the tests above, a new connection still works on both listeners
    for url in (unix_url, tcp_url):
        r = Raw(url)
        assert r.call(1, "ping", [])[3] == "pong"
        r.close()


def test_client_that_disconnects_with_replies_pending(unix_url, bystander):
    r = Raw(unix_url)
    r.send(b"".join(msgpack.packb([0, i, "stats", []]) for i in range(200)))
    r.sock.close()
    r = Raw(unix_url)
    assert r.call(1, "ping", [])[3] == "pong"
    r.close()
