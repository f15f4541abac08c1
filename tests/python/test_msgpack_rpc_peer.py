"""kilnd through a third-party MessagePack-RPC client: the msgpack-rpc session of pynvim
(Debian's python3-pynvim), written for neovim and nothing of kiln's. Its session sends a
notification as soon as it connects ([2, "nvim_set_client_info", [five items]]), sends
positional params as given, and raises on error replies (issue 11 §5)."""

import numpy as np
import pytest
from pynvim import msgpack_rpc

E_INVALID_ARGUMENT, E_NO_METHOD = 1, 2


def error_code(exc):
    err = exc.value.args[0]
    assert isinstance(err, list) and len(err) == 2, err
    return err[0]


def session_for(url):
    kind, _, rest = url.partition(":")
    if kind == "unix":
        return msgpack_rpc.socket_session(rest)
    host, _, port = rest.rpartition(":")
    return msgpack_rpc.tcp_session(host, int(port))


@pytest.fixture(params=["tcp", "unix"])
def session(request, tcp_url, unix_url):
    s = session_for(tcp_url if request.param == "tcp" else unix_url)
    s.error_wrapper = lambda e: Exception(e)
    yield s
    s.close()


def test_connect_time_notification_is_ignored_and_requests_work(session):
    # The session sent nvim_set_client_info when it connected: the connection is still there.
    assert session.request("ping") == "pong"
    hello = session.request("hello", {"client": "pynvim"})
    assert hello["version"] == 1 and hello["tenant"] == "default"


def test_bad_params_cost_only_that_request(session):
    with pytest.raises(Exception) as e:
        session.request("ping", 1, 2)  # params [1, 2]: not [map]
    assert error_code(e) == E_INVALID_ARGUMENT
    with pytest.raises(Exception) as e:
        session.request("nvim_get_api_info")
    assert error_code(e) == E_NO_METHOD
    assert session.request("ping") == "pong"


def test_notifications_any_method_any_params(session):
    session.request("nvim_command", "echo 1", async_=True)  # a notification
    session.request("ping", 1, {"x": [1, 2]}, async_=True)
    assert session.request("ping") == "pong"


def test_tensor_round_trip(session):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = session.request("upload", {"tensor": {"dtype": "float32", "shape": [3, 4],
                                              "data": a.tobytes()}})
    t = session.request("download", {"id": r["id"]})
    assert t["dtype"] == "float32" and t["shape"] == [3, 4]
    assert np.array_equal(np.frombuffer(t["data"], dtype=np.float32).reshape(3, 4), a)
    assert session.request("free", {"id": r["id"]}) is None
