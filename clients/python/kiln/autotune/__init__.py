"""kiln.autotune: searches kiln.topi template spaces for the fastest knobs on a device
(docs/autotune.md).

    import kiln, kiln.autotune as at
    s = kiln.connect()
    task = at.Task("matmul", (1024, 1024, 1024), "float32", s.cpu(0))
    r = at.tune(task, s, trials=200, tuner="model", records="r.jsonl")
    print(r.best["knobs"], r.best["result"]["gflops"], r.speedup)
    with at.apply("r.jsonl"):
        sch = kiln.topi.schedule_matmul(C, "cpu")     # uses the tuned knobs

Command line: ``python3 -m kiln.autotune --op matmul --shape 1024,1024,1024 --device cpu:0
--trials 200 --records r.jsonl [--url URL ...] [--tuner model|random|grid] [--plot best.png]``.
"""

from .records import SCHEMA_VERSION, load, append, best, apply, same_task
from .tuners import Tuner, RandomTuner, GridTuner, ModelTuner, make_tuner, have_sklearn
from .tune import Task, Runner, tune, TuneResult, shares_compile_cores

__all__ = ["SCHEMA_VERSION", "load", "append", "best", "apply", "same_task", "Tuner", "RandomTuner", "GridTuner",
           "ModelTuner", "make_tuner", "have_sklearn", "Task", "Runner", "tune", "TuneResult", "shares_compile_cores", "plot"]


def plot(records, path, title=None):
    """best-so-far GFLOP/s against trials and against time, to a PNG (matplotlib; optional)."""
    from .plot import plot as _plot
    return _plot(records, path, title)
