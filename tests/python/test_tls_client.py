"""The Python client on tls: URLs against the real kilnd, with certificates made at test time
(tests/server/make_pki.sh): the daemon's certificate verified by default, the CA and client
certificate options, transfers through the TLS socket (issue 11 §8)."""

import os
import subprocess

import numpy as np
import pytest

import kiln

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    subprocess.run(["sh", os.path.join(ROOT, "tests", "server", "make_pki.sh"), str(d)], check=True)
    return d


def tls_daemon(kilnd_bin, pki, *more):
    # Two TLS threads beside kilnd's loop whatever the machine's cores (a small machine gets
    # none by default): large transfers go through the pool (the TSan stage runs this too).
    env = dict(os.environ, KILN_TLS_THREADS="2")
    d = kiln.start_daemon(kilnd_bin, listen=["tls:127.0.0.1:0"], env=env,
                          args=["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")] + list(more))
    url = next(u for u in d.urls if u.startswith("tls:"))
    return d, url


@pytest.fixture(scope="module")
def tls_url(kilnd_bin, pki):
    d, url = tls_daemon(kilnd_bin, pki)
    yield url
    assert d.stop(grace=5) == 0


@pytest.fixture(autouse=True)
def no_tls_env(monkeypatch):
    for k in ("KILN_TLS_CA", "KILN_TLS_CERT", "KILN_TLS_KEY", "KILN_URL"):
        monkeypatch.delenv(k, raising=False)


def test_round_trips_through_tls(tls_url, pki):
    with kiln.connect(tls_url, tls_ca=str(pki / "ca.pem"), autostart=False) as s:
        assert s.ping() == "pong"
        dev = s.cpu(0)
        a = np.random.default_rng(1).standard_normal((4096, 4096)).astype(np.float32)  # 64 MiB
        t = kiln.nd.array(a, dev)
        assert np.array_equal(t.numpy(), a)
        futs = [s.call_async("ping") for _ in range(2000)]
        assert all(f.result(60) == "pong" for f in futs)


def test_verification_is_on_by_default(tls_url, pki):
    with pytest.raises(kiln.Unavailable, match="not trusted"):
        kiln.connect(tls_url, autostart=False)
    with pytest.raises(kiln.Unavailable, match="not trusted"):
        kiln.connect(tls_url, tls_ca=str(pki / "other-ca.pem"), autostart=False)
    with pytest.raises(kiln.InvalidArgument):
        kiln.connect(tls_url, tls_ca=str(pki / "missing.pem"), autostart=False)


def test_environment_and_ssl_context(tls_url, pki, monkeypatch):
    monkeypatch.setenv("KILN_TLS_CA", str(pki / "ca.pem"))
    with kiln.connect(tls_url, autostart=False) as s:
        assert s.call("ping") == "pong"
    monkeypatch.delenv("KILN_TLS_CA")
    ctx = kiln.tls_context(ca=str(pki / "ca.pem"))
    with kiln.connect(tls_url, ssl_context=ctx, autostart=False) as s:
        assert s.call("ping") == "pong"


def test_client_certificates(kilnd_bin, pki):
    d, url = tls_daemon(kilnd_bin, pki, "--tls-client-ca", str(pki / "ca.pem"))
    try:
        with pytest.raises(kiln.Unavailable):
            kiln.connect(url, tls_ca=str(pki / "ca.pem"), autostart=False)
        with pytest.raises(kiln.Unavailable):
            kiln.connect(url, tls_ca=str(pki / "ca.pem"), tls_cert=str(pki / "other-client.pem"),
                         tls_key=str(pki / "other-client.key"), autostart=False)
        with kiln.connect(url, tls_ca=str(pki / "ca.pem"), tls_cert=str(pki / "client.pem"),
                          tls_key=str(pki / "client.key"), autostart=False) as s:
            assert s.call("ping") == "pong"
    finally:
        assert d.stop(grace=5) == 0
