"""kiln.topi.space and kiln.autotune (issue 15): spaces keep their rules, records round trip
and resume, a tiny tuning run on cpu:0 whose correctness check catches a wrong template, the
model tuner, apply(), the CLI."""

import json
import os
import random

import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln import autotune as at
from kiln.topi import schedules as S
from kiln.topi.space import Space

SPACES = [("matmul", (64, 48, 32)), ("dense", (16, 64, 32)), ("batch_matmul", (2, 32, 32, 16)),
          ("conv2d", (1, 8, 10, 10, 16, 3, 3, 1, 1)), ("depthwise", (1, 8, 12, 12, 3, 3, 1, 1)),
          ("pool", (1, 4, 8, 8, 2)), ("softmax", (8, 40))]


@pytest.mark.parametrize("op,shapes", SPACES)
@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_space_candidates_keep_the_rules(op, shapes, target):
    sp = topi.space(op, target, shapes)
    cfgs = list(sp.configs())
    assert cfgs and len(cfgs) == len(sp)
    assert sp.check(sp.default()) is None, sp.check(sp.default())
    for c in cfgs:
        assert sp.check(c) is None
        assert all(fn(c) for _, _, fn in sp.rules)
    for _ in range(20):
        assert sp.valid(sp.sample())
    s, args = sp.build(cfgs[-1])
    assert len(args) == len(sp.tensors()[0]) + 1


def test_space_rules_are_enforced():
    sp = topi.space("matmul", "gpu", (256, 256, 256))
    bad = dict(sp.default(), block_m=16, thread_m=32)  # 16 rows over 32 threads
    assert "divisible" in sp.check(bad)
    with pytest.raises(kiln.InvalidArgument):
        sp.build(bad)
    assert "not one of its candidates" in sp.check(dict(sp.default(), k_tile=3))
    assert "no knob" in sp.check(dict(sp.default(), nope=1))
    # the device's limits: 256 work-items a group and 8 KiB of shared memory
    small = topi.space("matmul", "gpu", (256, 256, 256), device={"max_block": 256, "max_shared": 8192,
                                                                 "wave_size": 64})
    assert len(small) < len(sp)
    for c in small.configs():
        assert 64 <= c["thread_m"] * c["thread_n"] <= 256
        assert (c["block_m"] + c["block_n"]) * c["k_tile"] * 4 <= 8192
    cpu = topi.space("matmul", "cpu", (256, 256, 256))
    assert "registers" in cpu.check(dict(cpu.default(), bm=32, bn=128))
    with pytest.raises(kiln.InvalidArgument):
        topi.space("nope", "cpu", (1,))
    with pytest.raises(kiln.InvalidArgument):
        topi.space("matmul", "cpu", (4, 4))


def test_space_reference_matches_default_build(s, dev):
    for op, shapes in SPACES:
        sp = topi.space(op, "cpu", shapes)
        sch, args = sp.build(sp.default())
        m = kiln.build(sch, args, "llvm", session=s)
        ins = sp.inputs()
        xs = [kiln.nd.array(a, dev) for a in ins] + [kiln.nd.empty(sp.output_shape(), "float32", dev)]
        m(*xs)
        np.testing.assert_allclose(xs[-1].numpy(), sp.reference(ins), rtol=1e-4, atol=1e-4, err_msg=op)


class WrongWhenBm4(Space):
    """matmul whose schedule with bm=4 computes 1.5 * A @ B: a template bug the check must catch."""

    def build(self, cfg, tensors=None):
        if cfg["bm"] != 4:
            return super().build(cfg, tensors)
        ins, _ = self.tensors()
        A, B = ins
        k = te.reduce_axis((0, A.shape[1]), name="k")
        C = te.compute((A.shape[0], B.shape[1]), lambda i, j: te.sum(A[i, k] * B[k, j] * 1.5, axis=k),
                       name="matmul", tag="matmul")
        return S.schedule_matmul(C, "cpu", **cfg), [A, B, C]


def small_space(target="cpu"):
    sp = WrongWhenBm4("matmul", target, (32, 32, 16), "float32", topi.space("matmul", "cpu", (1, 1, 1)).limits)
    sp.knobs = {"bm": [2, 4, 8], "bn": [8, 32], "bk": [4], "order": ["ji"], "unroll_k": [False]}
    return sp


def test_tiny_tuning_run_catches_a_wrong_template(s, dev, tmp_path):
    rec = str(tmp_path / "r.jsonl")
    task = at.Task("matmul", (32, 32, 16), "float32", dev, space=small_space())
    r = at.tune(task, s, trials=6, tuner="grid", records=rec, batch=3, repeat=2, min_repeat_ms=1,
                lease_s=10, progress=None)
    assert len(r.trials) == 6  # the default and the five others: the whole space
    wrong = [x for x in r.records if x["knobs"]["bm"] == 4]
    assert wrong and all(x["result"]["ok"] is False and x["result"]["error"] == "wrong" for x in wrong)
    assert "differ from numpy" in wrong[0]["result"]["message"]
    good = [x for x in r.records if x["knobs"]["bm"] != 4]
    assert all(x["result"]["ok"] for x in good), good
    assert r.best["knobs"]["bm"] != 4
    assert r.default["knobs"] == task.space.default() and r.speedup >= 1.0
    for x in good:
        res = x["result"]
        assert len(res["times"]) == 2 and res["mean"] > 0 and res["gflops"] > 0
    # records: one JSON line per trial, versioned, with the task key
    lines = open(rec).read().splitlines()
    assert len(lines) == 6
    one = json.loads(lines[0])
    assert one["v"] == at.SCHEMA_VERSION and one["tuner"] == "default"
    assert {"op", "shapes", "dtype", "target", "arch", "device", "device_name", "signature", "kiln"} <= set(one["task"])
    assert one["task"]["device"] == "cpu:0" and one["task"]["arch"] == "cpu"


class AlsoFailsToBuild(WrongWhenBm4):
    """As WrongWhenBm4, and bm=8 with bn=8 does not lower: a compile-stage failure."""

    def build(self, cfg, tensors=None):
        if cfg["bm"] == 8 and cfg["bn"] == 8:
            raise kiln.InvalidArgument("this template cannot lower bm=8 with bn=8")
        return super().build(cfg, tensors)


@pytest.mark.parametrize("pipeline", [True, False])
def test_pipelined_rounds_record_every_trial(s, dev, tmp_path, pipeline):
    # With pipeline, round N+1 is lowered and compiling while round N is measured: every
    # configuration is still one record, in round order, a wrong build still fails its check,
    # a configuration that does not lower still fails at "compile", and the measured ones are
    # timed (warm-up 0: the checked run was it) with the check's and the time's seconds.
    sp = AlsoFailsToBuild("matmul", "cpu", (32, 32, 16), "float32", topi.space("matmul", "cpu", (1, 1, 1)).limits)
    sp.knobs = {"bm": [2, 4, 8], "bn": [8, 32], "bk": [4], "order": ["ji"], "unroll_k": [False]}
    rec = str(tmp_path / "r.jsonl")
    task = at.Task("matmul", (32, 32, 16), "float32", dev, space=sp)
    seen = []
    r = at.tune(task, s, trials=6, tuner="grid", records=rec, batch=2, repeat=2, min_repeat_ms=1, lease_s=10,
                progress=None, pipeline=pipeline, callback=seen.append)
    assert len(r.trials) == len(seen) == len(at.load(rec)) == 6
    assert [x["trial"] for x in r.trials] == list(range(1, 7))
    assert [x["round"] for x in r.trials] == [1, 2, 2, 3, 3, 4]
    assert len({json.dumps(x["knobs"], sort_keys=True) for x in r.trials}) == 6  # the whole space, once
    for x in r.trials:
        res, k = x["result"], x["knobs"]
        assert res["compile_wait_s"] >= 0 and res["compile_s_batch"] >= 0
        if k["bm"] == 4:
            assert res["ok"] is False and res["error"] == "wrong" and res["stage"] == "check", res
        elif k["bm"] == 8 and k["bn"] == 8:
            assert res["ok"] is False and res["stage"] == "compile" and "cannot lower" in res["message"], res
        else:
            assert res["ok"] is True and len(res["times"]) == 2 and res["mean"] > 0, res
            assert res["check_s"] > 0 and res["time_s"] > 0
    assert r.best["knobs"]["bm"] != 4
    # pipelined, every build is its own compile_batch (all of a round sent at once), so a trial is
    # measured as soon as its build is ready; otherwise the round's share is one compile_batch
    lowered = {}
    for x in r.trials:
        if "cannot lower" not in x["result"].get("message", ""):
            lowered[x["round"]] = lowered.get(x["round"], 0) + 1
    for x in r.trials:
        res = x["result"]
        if "cannot lower" in res.get("message", ""):
            assert res["compile_items"] == 0, res
        else:
            assert res["compile_items"] == (1 if pipeline else lowered[x["round"]]), (x["round"], res)


class LoggedGrid(at.GridTuner):
    """The grid tuner, logging when it proposes a round and when it learns one's results."""

    def __init__(self, space, log):
        super().__init__(space)
        self.log = log

    def next_batch(self, n):
        out = super().next_batch(n)
        self.log.append(("propose", len(out)))
        return out

    def update(self, results):
        self.log.append(("update", len(results)))
        return super().update(results)


def _cores():
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("one core: no two disjoint pins")
    return cores


@pytest.mark.parametrize("pins,shared", [(("cpu:0=A", "compile=B"), False), (("cpu:0=A", "compile=A,B"), True),
                                         (("compile=B",), True), ((), True)])
def test_pinned_cpu_device_apart_from_the_compile_workers_pipelines(fresh_daemon, tmp_path, pins, shared):
    # kilnd says whether its compile workers run on cpu:0's cores; where they do not (both
    # pinned, cores that do not meet), tune() compiles round N+1 while round N is measured by
    # default: the tuner is asked for the next round before it has learnt this one's results.
    # The trials and their checks are those of the unpipelined loop: every one recorded, the
    # wrong template still caught, the good ones timed with the same settings.
    a, b = _cores()[:2]
    args = []
    for p in pins:
        args += ["--pin", p.replace("A", str(a)).replace("B", str(b))]
    d = fresh_daemon(*args, listen=["unix:" + str(tmp_path / "k.sock")])
    with kiln.connect(d.url) as s:
        dev = s.cpu(0)
        assert dev.info["shares_compile_cores"] is shared
        assert at.shares_compile_cores(dev) is shared
        sp = AlsoFailsToBuild("matmul", "cpu", (32, 32, 16), "float32", topi.space("matmul", "cpu", (1, 1, 1)).limits)
        sp.knobs = {"bm": [2, 4, 8], "bn": [8, 32], "bk": [4], "order": ["ji"], "unroll_k": [False]}
        log = []
        rec = str(tmp_path / "r.jsonl")
        task = at.Task("matmul", (32, 32, 16), "float32", dev, space=sp)
        r = at.tune(task, s, trials=6, tuner=LoggedGrid(sp, log), records=rec, batch=2, repeat=2, min_repeat_ms=1,
                    lease_s=10, progress=None)
    # rounds: the default knobs, then 2, 2 and 1 (the rest of the grid's six configurations)
    if shared:
        assert log == [("update", 1), ("propose", 2), ("update", 2), ("propose", 2), ("update", 2),
                       ("propose", 1), ("update", 1)], log
    else:
        assert log == [("propose", 2), ("update", 1), ("propose", 2), ("update", 2), ("propose", 1),
                       ("update", 2), ("update", 1)], log
    assert len(r.trials) == len(at.load(rec)) == 6
    assert [x["round"] for x in r.trials] == [1, 2, 2, 3, 3, 4]
    assert len({json.dumps(x["knobs"], sort_keys=True) for x in r.trials}) == 6
    for x in r.trials:
        res, k = x["result"], x["knobs"]
        if k["bm"] == 4:
            assert res["ok"] is False and res["error"] == "wrong" and res["stage"] == "check", res
        elif k["bm"] == 8 and k["bn"] == 8:
            assert res["ok"] is False and res["stage"] == "compile", res
        else:
            assert res["ok"] is True and len(res["times"]) == 2 and res["mean"] > 0, res


class WaitingGrid(LoggedGrid):
    """A grid tuner that asks for results before proposing until it has three."""

    def wants_results(self):
        return len(self.results) < 3


def test_a_tuner_that_wants_results_is_not_pipelined_until_it_has_them(fresh_daemon, tmp_path):
    # Pinned apart, rounds are pipelined, except while the tuner asks to learn the round in
    # flight first (the model tuner until it can fit its model): proposing then would be a
    # guess made without the results it is about to get.
    a, b = _cores()[:2]
    d = fresh_daemon("--pin", "cpu:0=%d" % a, "--pin", "compile=%d" % b, listen=["unix:" + str(tmp_path / "k.sock")])
    with kiln.connect(d.url) as s:
        dev = s.cpu(0)
        assert at.shares_compile_cores(dev) is False
        sp = AlsoFailsToBuild("matmul", "cpu", (32, 32, 16), "float32", topi.space("matmul", "cpu", (1, 1, 1)).limits)
        sp.knobs = {"bm": [2, 4, 8], "bn": [8, 32], "bk": [4], "order": ["ji"], "unroll_k": [False]}
        log = []
        task = at.Task("matmul", (32, 32, 16), "float32", dev, space=sp)
        r = at.tune(task, s, trials=6, tuner=WaitingGrid(sp, log), records=str(tmp_path / "r.jsonl"), batch=2,
                    repeat=2, min_repeat_ms=1, lease_s=10, progress=None)
    # the default, then round 2 proposed from its result; round 3 from rounds 1 and 2 (three
    # results); round 4 proposed while round 3 is measured
    assert log == [("update", 1), ("propose", 2), ("update", 2), ("propose", 2), ("propose", 1),
                   ("update", 2), ("update", 1)], log
    assert len(r.trials) == 6 and [x["round"] for x in r.trials] == [1, 2, 2, 3, 3, 4]


def test_the_model_tuner_wants_results_until_it_can_fit():
    sp = topi.space("matmul", "cpu", (64, 64, 64))
    tn = at.ModelTuner(sp, seed=1)
    rng = random.Random(0)
    assert tn.wants_results() is (not tn.fallback)
    cfgs = [sp.sample(rng) for _ in range(tn.min_train)]
    tn.update([(c, 1.0) for c in cfgs[:-1]])
    assert tn.wants_results() is (not tn.fallback)
    tn.update([(cfgs[-1], 1.0)])
    assert tn.wants_results() is False
    assert at.RandomTuner(sp).wants_results() is False


def test_a_trial_after_a_lost_device_worker_uploads_again(s, dev):
    # A timeout or fault ends the device worker and the tenant's tensors: the runner uploads
    # the inputs again for the next trial instead of failing every later one.
    task = at.Task("matmul", (32, 32, 16), "float32", dev, space=small_space())
    runner = at.Runner(s, dev, task)
    sch, args = task.space.build(task.space.default())
    m = kiln.build(sch, args, "llvm", session=s)
    opts = {"number": 1, "repeat": 1, "min_repeat_ms": 0, "flush": False, "timeout_ms": 10000}
    assert runner.trial(m, opts)["ok"]
    for t in runner.args():
        t.free()
    with pytest.raises(kiln.KilnError):
        runner.trial(m, opts)
    runner.lost()
    assert runner.trial(m, opts)["ok"]


def test_time_starts_from_the_number_the_checked_run_predicts():
    from kiln.autotune.tune import Runner, SEED_SHARE
    from kiln.module import BenchmarkResult
    r = object.__new__(Runner)
    r._ratios = []
    # a checked run of 1 ms, min_repeat_ms 50: SEED_SHARE of 50 ms of such runs
    assert r.seed_number(1e-3, 50, 10000) == round(50 * SEED_SHARE)
    # timed runs took half their checked run's time in the last trials: twice the runs
    r.learn([1e-3, 1e-3, 1e-3], [BenchmarkResult({"results": [x]}) for x in (4e-4, 5e-4, 9e-4)])
    assert r.seed_number(1e-3, 50, 10000) == round(2 * 50 * SEED_SHARE)
    assert r.seed_number(1e-3, 50, 10) == 10      # at most half the deadline by the estimate
    assert r.seed_number(0.0, 50, 10000) == 1     # no checked time: from 1, as kilnd grows
    assert r.seed_number(1e-3, 0, 10000) == 1     # no min_repeat_ms: no growth wanted
    assert r.seed_number(1.0, 50, 10000) == 1     # a run longer than the whole repeat
    r.learn([1e-3] * 20, [BenchmarkResult({"results": [1e-3]})] * 20)
    assert r.seed_number(1e-3, 50, 10000) == round(50 * SEED_SHARE)  # only the last trials count


def test_trials_seed_number_and_still_reach_min_repeat_ms(s, dev):
    # The checked run's time seeds `time`'s number (recorded as number_seed); kilnd still grows
    # it until each repeat lasts min_repeat_ms. A number the caller sets is used as it is.
    task = at.Task("matmul", (32, 32, 16), "float32", dev, space=small_space())
    runner = at.Runner(s, dev, task)
    sch, args = task.space.build(task.space.default())
    m = kiln.build(sch, args, "llvm", session=s)
    opts = {"number": None, "repeat": 2, "min_repeat_ms": 20, "flush": False, "timeout_ms": 10000}
    for _ in range(2):
        res = runner.trial(m, opts)
        assert res["ok"] and res["first_run_s"] > 0
        assert 1 < res["number_seed"] <= res["number"]
        assert all(t * res["number"] >= 0.020 for t in res["times"])
    assert len(runner._ratios) == 2
    res = runner.trial(m, dict(opts, number=3, min_repeat_ms=0))
    assert res["ok"] and res["number_seed"] == res["number"] == 3


def test_records_round_trip_and_resume(s, dev, tmp_path):
    rec = str(tmp_path / "r.jsonl")
    task = at.Task("matmul", (32, 32, 16), "float32", dev, space=small_space())
    first = at.tune(task, s, trials=3, tuner="random", records=rec, batch=2, repeat=1, min_repeat_ms=0,
                    lease_s=0, progress=None)
    assert len(first.trials) == 3
    with open(rec, "a") as f:  # a line of another schema and a torn line are skipped
        f.write(json.dumps({"v": 999, "task": {}, "knobs": {}}) + "\n{\"v\": 1, \"task")
    loaded = at.load(rec)
    assert [x["knobs"] for x in loaded] == [x["knobs"] for x in first.trials]
    with open(rec, "a") as f:
        f.write("\n")
    again = at.tune(task, s, trials=5, tuner="random", records=rec, batch=2, repeat=1, min_repeat_ms=0,
                    lease_s=0, progress=None)
    assert len(again.trials) == 2  # resumed: 3 there, 2 more
    keys = [json.dumps(x["knobs"], sort_keys=True) for x in at.load(rec)]
    assert len(keys) == len(set(keys)) == 5  # nothing measured twice
    b = at.best(rec, task)
    oks = [x for x in at.load(rec) if x["result"]["ok"]]
    assert b["result"]["mean"] == min(x["result"]["mean"] for x in oks)
    other = at.Task("matmul", (64, 64, 64), "float32", dev)
    assert at.best(rec, other) is None


def test_apply_makes_topi_use_the_best_knobs(tmp_path):
    sp = topi.space("matmul", "cpu", (64, 48, 32))
    task_key = {"op": "matmul", "shapes": [64, 48, 32], "dtype": "float32", "target": "cpu",
                "signature": json.loads(json.dumps(sp.signature()))}
    best = dict(sp.default(), bm=2, bn=16, bk=8)
    recs = [{"v": 1, "task": task_key, "knobs": best, "result": {"ok": True, "mean": 1e-4}},
            {"v": 1, "task": task_key, "knobs": dict(best, bm=16), "result": {"ok": True, "mean": 2e-4}},
            {"v": 1, "task": task_key, "knobs": dict(best, bm=32), "result": {"ok": False, "error": "wrong"}}]
    _, C = sp.tensors()
    assert S._knobs("matmul", "cpu", {}, C)["bm"] == 8
    with at.apply(recs):
        k = S._knobs("matmul", "cpu", {}, C)
        assert (k["bm"], k["bn"], k["bk"]) == (2, 16, 8)
        assert S._knobs("matmul", "cpu", {"bm": 4}, C)["bm"] == 4  # given knobs win
        assert S._knobs("matmul", "gpu", {}, C) == S.knobs("matmul", "gpu")  # other target: defaults
        _, other = topi.space("matmul", "cpu", (64, 64, 64)).tensors()
        assert S._knobs("matmul", "cpu", {}, other)["bm"] == 8  # other shapes: defaults
        topi.schedule_matmul(C, "cpu")
    assert S._knobs("matmul", "cpu", {}, C)["bm"] == 8


def test_a_trial_of_several_kernels_shares_min_repeat_ms():
    from kiln.autotune.tune import _min_repeat_shares
    # a packing kernel of 0.02 ms and a matmul of 1.3 ms: about min_repeat_ms for both together
    assert _min_repeat_shares(50, [2e-5, 1.3e-3]) == [1, 50]
    assert _min_repeat_shares(50, [1e-3, 1e-3]) == [25, 25]
    assert _min_repeat_shares(50, [1e-3]) == [50]  # one kernel: the whole of it
    assert _min_repeat_shares(0, [1e-3, 1e-3]) == [0, 0]  # no growth asked
    assert _min_repeat_shares(5, [0.0, 0.0, 0.0]) == [2, 2, 2]  # no times: even shares, rounded up
    assert _min_repeat_shares(50, [3e-3, 1e-3]) == [38, 13]  # rounded up, each at least 1 ms


@pytest.mark.skipif(not at.have_sklearn(), reason="scikit-learn is not installed (Debian: python3-sklearn)")
def test_model_tuner_learns_a_synthetic_cost():
    sp = topi.space("matmul", "cpu", (512, 512, 512))

    def score(c):  # fastest at bm=8, bn=64, bk=8
        return 100.0 / (1 + abs(np.log2(c["bm"] / 8)) + abs(np.log2(c["bn"] / 64)) + abs(np.log2(c["bk"] / 8)))
    best = max(score(c) for c in sp.configs())
    model = at.ModelTuner(sp, seed=1)
    rnd = at.RandomTuner(sp, seed=1)
    found = {}
    for name, tn in (("model", model), ("random", rnd)):
        got = []
        for _ in range(6):
            b = tn.next_batch(8)
            assert all(sp.valid(c) for c in b)
            res = [(c, score(c)) for c in b]
            tn.update(res)
            got += [x for _, x in res]
        found[name] = max(got)
        assert len(tn.tried) == 48
    assert found["model"] >= found["random"] and found["model"] >= 0.8 * best


def test_grid_tuner_walks_the_space_once():
    sp = topi.space("softmax", "gpu", (8, 40))
    g = at.GridTuner(sp)
    seen = []
    while True:
        b = g.next_batch(4)
        if not b:
            break
        seen += b
    assert seen == list(sp.configs())


def test_cli(unix_url, tmp_path, capsys):
    from kiln.autotune.__main__ import main
    rec = str(tmp_path / "r.jsonl")
    args = ["--op", "softmax", "--shape", "16,64", "--device", "cpu:0", "--trials", "3", "--records", rec,
            "--url", unix_url, "--tuner", "random", "--repeat", "1", "--min-repeat-ms", "0", "--lease", "5"]
    try:
        import matplotlib  # noqa: F401
        args += ["--plot", str(tmp_path / "best.png")]
    except ImportError:
        pass
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "best     {" in out and "GFLOP/s" in out and "default  {" in out
    assert len(at.load(rec)) == 3
    if "--plot" in args:
        assert os.path.getsize(str(tmp_path / "best.png")) > 1000


def test_trials_are_split_between_runners(unix_url, dev, tmp_path):
    # Two sessions (as two hosts would be): each round's batch is split between them, each
    # trial measured on one; the records say which.
    with kiln.connect(unix_url) as s1, kiln.connect(unix_url) as s2:
        task = at.Task("matmul", (32, 32, 16), "float32", s1.cpu(0), space=small_space())
        r = at.tune(task, [(s1, "cpu:0"), (s2, s2.cpu(0))], trials=5, tuner="random", batch=4, repeat=1,
                    min_repeat_ms=0, lease_s=0, progress=None)
    assert len(r.trials) == 5
    assert {x["runner"] for x in r.trials[1:]} == {0, 1}
    assert all(x["task"]["device"] == "cpu:0" for x in r.trials)
    assert len({json.dumps(x["knobs"], sort_keys=True) for x in r.trials}) == 5


@pytest.mark.skipif(not os.environ.get("KILN_HSA_LIBRARY"),
                    reason="KILN_HSA_LIBRARY unset: the software GPU runs this (.ci/softgpu)")
def test_rocm_tuning_on_the_software_gpu(fresh_daemon):
    # The GPU side end to end on hsa:0: the space takes the device's limits, trials build for
    # gfx942, run, are checked and timed (the figures are the interpreter's, not hardware's).
    d = fresh_daemon("--devices", "cpu,hsa", "--hsa-library", os.environ["KILN_HSA_LIBRARY"])
    with kiln.connect(d.urls[0]) as s:
        dev = s.device("hsa:0")
        task = at.Task("matmul", (32, 32, 16), "float32", dev)
        assert task.target == "gpu" and task.space.limits["wave_size"] == dev.wave_size
        r = at.tune(task, s, trials=3, tuner="random", batch=2, repeat=1, min_repeat_ms=0, lease_s=10,
                    progress=None)
        assert [x["result"]["ok"] for x in r.trials] == [True] * 3, r.trials
        assert r.trials[0]["task"]["arch"].startswith("gfx")
