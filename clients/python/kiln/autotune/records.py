"""Tuning records: JSON lines, one per trial (docs/autotune.md "Records").

    {"v": 1, "task": {...}, "knobs": {...}, "result": {...}, "tuner": str, "trial": int,
     "t": unix seconds, "elapsed_s": seconds since the run began}

``task``: op, shapes, dtype, target ("cpu"/"gpu"), arch, device, device_name, signature, kiln,
options (the compile options).
``result``: {"ok": true, "times": [s...], "mean", "median", "min", "cv", "number", "number_seed",
"first_run_s", "repeat", "gflops", "compile_ms"} or {"ok": false, "error": kind, "message": str}.
"""

import contextlib
import json
import os

from ..topi import schedules as _sch
from ..topi.space import signature as _signature

SCHEMA_VERSION = 1

__all__ = ["SCHEMA_VERSION", "load", "append", "best", "apply", "same_task"]


def load(path):
    """Records of a file (a missing file: none). Lines of another schema version, and lines
    that do not parse (a run killed mid-write), are skipped."""
    out = []
    if not path or not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and r.get("v") == SCHEMA_VERSION and isinstance(r.get("task"), dict):
                out.append(r)
    return out


def append(path, rec):
    """Appends one record (a whole line, flushed: a killed run loses at most the trial in hand)."""
    line = json.dumps(rec, sort_keys=True) + "\n"
    with open(path, "a") as f:
        f.write(line)
        f.flush()


def _records(records):
    if isinstance(records, (str, os.PathLike)):
        return load(records)
    return list(records)


def _norm(x):
    return json.loads(json.dumps(x))


def same_task(a, b, keys=("op", "shapes", "dtype", "target", "arch", "device_name")):
    """Whether two task maps name the same task (fields either lacks are not compared)."""
    for k in keys:
        if k in a and k in b and _norm(a[k]) != _norm(b[k]):
            return False
    return True


def best(records, task):
    """The fastest correct record of ``task`` (a Task or a task map) in ``records`` (a list
    or a path), or None."""
    key = task.key() if hasattr(task, "key") else task
    top = None
    for r in _records(records):
        res = r.get("result") or {}
        if not res.get("ok") or not same_task(r["task"], key):
            continue
        if top is None or res["mean"] < top["result"]["mean"]:
            top = r
    return top


@contextlib.contextmanager
def apply(records, target=None):
    """Within the block, kiln.topi schedules of an op and shapes found in ``records`` (a list
    or a path) use the best knobs recorded for them (knobs passed to a schedule still win).
    Matches by the template instance's signature (output and input shapes, dtype) and the
    target kind; ``target`` ("cpu"/"gpu") limits it to records of that kind."""
    table = {}
    for r in _records(records):
        res = r.get("result") or {}
        t = r["task"]
        if not res.get("ok") or "signature" not in t:
            continue
        if target is not None and t.get("target") != target:
            continue
        k = (t.get("target"), json.dumps(t["signature"]))
        if k not in table or res["mean"] < table[k][0]:
            table[k] = (res["mean"], dict(r["knobs"]))

    def provider(template, kind, out):
        try:
            sig = json.dumps(_norm(_signature(out)))
        except Exception:
            return None
        hit = table.get((kind, sig))
        return dict(hit[1]) if hit else None

    _sch.KNOB_PROVIDERS.append(provider)
    try:
        yield table
    finally:
        _sch.KNOB_PROVIDERS.remove(provider)
