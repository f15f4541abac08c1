"""kilnd as the systemd unit runs it (server/dist/kilnd.service.in): root, with its bounding
set cut to CAP_SETUID, CAP_SETGID, CAP_CHOWN and CAP_KILL, so without CAP_DAC_OVERRIDE. Its
compile workers run as nobody in private directories of their own uid; kilnd must still remove
them when it stops. Needs root and util-linux's setpriv (both in CI)."""

import os
import shutil
import tempfile

import pytest

import kiln

UNIT_CAPS = "-all,+setuid,+setgid,+chown,+kill"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv to run kilnd with the unit's capabilities")
def test_compile_folders_are_removed_without_dac_override(kilnd_bin, tmp_path):
    wrapper = tmp_path / "kilnd-unit-caps"
    wrapper.write_text("#!/bin/sh\nexec setpriv --bounding-set=%s --inh-caps=-all %s \"$@\"\n"
                       % (UNIT_CAPS, os.path.abspath(kilnd_bin)))
    wrapper.chmod(0o755)
    # TMPDIR must be reachable by nobody (pytest's own folders are root's, mode 0700)
    tmp = tempfile.mkdtemp(prefix="kiln-unit-caps-", dir="/tmp")
    os.chmod(tmp, 0o755)
    env = dict(os.environ, TMPDIR=tmp)
    d = kiln.start_daemon(str(wrapper), listen=["unix:" + str(tmp_path / "k.sock")], env=env,
                          args=["--compile-workers", "1", "--cache-dir", str(tmp_path / "cache")])
    try:
        with kiln.connect(d.urls[0]) as s:
            m = s.compile("define void @k(ptr %p) section \"kiln.kernel\" {\n  ret void\n}\n",
                          target=s.cpu(0))
            assert m["k"]
        made = [p for p in os.listdir(tmp) if p.startswith("kiln-compile-")]
        assert made, "the compile worker had no private directory under TMPDIR"
        assert os.stat(os.path.join(tmp, made[0])).st_uid != 0  # the worker's, as the test means
        d.stop(grace=10)
        assert [p for p in os.listdir(tmp) if p.startswith("kiln-compile-")] == []
    finally:
        d.stop(grace=10)
        shutil.rmtree(tmp, ignore_errors=True)
