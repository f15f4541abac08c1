"""Starting and stopping one kilnd process by hand, for tests that look at its start itself (its
listeners, its refusals, its log): kilnd with --ready-fd on a pipe, never a sleep."""

import os
import subprocess


def start_kilnd(kilnd_bin, *args, cwd, prefix=(), env=None, expect_ready=True, timeout=60):
    """kilnd (the command after `prefix`, such as setpriv's) with --ready-fd, the cpu alone,
    one compile worker and args: (process, listener lines) once every listener is up; or with
    expect_ready=False, (returncode, stderr) once it has exited."""
    r, w = os.pipe()
    cmd = list(prefix) + [kilnd_bin, "--ready-fd", str(w), "--devices", "cpu", "--compile-workers", "1"]
    p = subprocess.Popen(cmd + list(args), pass_fds=(w,), env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, cwd=cwd)
    os.close(w)
    with os.fdopen(r) as f:
        lines = f.read().split()
    if not expect_ready:
        _, err = p.communicate(timeout=timeout)
        return p.returncode, err
    assert lines, p.communicate(timeout=timeout)
    return p, lines


def stop_kilnd(p, timeout=60):
    """SIGTERM; kilnd must exit 0. Returns its stderr."""
    p.terminate()
    _, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err
    return err
