#!/usr/bin/python3
"""The model tuner against the random tuner over several seeds (issue 15: the model reaches
random's best-after-N trials in at most half the trials, on the matmul and conv2d tasks).

    /usr/bin/python3 bench/autotune_curves.py [--kilnd build/server/kilnd] [--seeds 3]
        [--ops matmul,conv2d] [--trials 80] [--conv-trials 40] [--n 1024] [--pin KERNEL,COMPILE]
        [--device cpu:0] [--out FILE] [--records FILE.jsonl]

One kilnd (with --pin, cpu:0 on core KERNEL and the compile workers on COMPILE, so that the
measurements are not disturbed by the compiles and kiln.autotune pipelines). For each op and
each seed 0..K-1, the model tuner and then the random tuner run the same task with that seed
and fresh records (the default knobs first, as every tune does). A single run says little:
the random tuner's best after N is itself the luckiest of N draws, and trial times scatter
with the machine's load. So each seed's pair is reported (the trial at which the model first
reached random's best after N, and whether that is within N / 2), and the median over the
seeds of each tuner's best-after-n curve, and whether the model's median curve at N / 2
reaches random's at N. ``--records`` keeps every trial (one JSON line, "run" =
"<op>-<tuner>-<seed>": what bench/autotune_curves_analysis.py reads). ``--device cuda:0``
runs the same on a GPU (bench/gpu/run.sh curves).
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from autotune import CONV, ROOT, at, start_pinned, best_after, commit, kiln, loadavg, trials_to_reach  # noqa: E402


def tune_once(s, dev, op, shapes, tuner, trials, seed, tmp):
    rec = os.path.join(tmp, "%s-%s-%d.jsonl" % (op, tuner, seed))
    task = at.Task(op, shapes, "float32", dev)
    t0 = time.monotonic()
    r = at.tune(task, s, trials=trials, tuner=tuner, records=rec, seed=seed, progress=None)
    return r.records, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", default=os.path.join(ROOT, "build", "server", "kilnd"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--ops", default="matmul,conv2d")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--trials", type=int, default=80)
    ap.add_argument("--conv-trials", type=int, default=40)
    ap.add_argument("--pin", default=None, help="KERNEL,COMPILE cores")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--out", default=None)
    ap.add_argument("--records", default=None, help="every trial, one JSON line each")
    a = ap.parse_args()
    if not at.have_sklearn():
        sys.exit("autotune_curves: scikit-learn is not installed (Debian: python3-sklearn); "
                 "the model tuner would propose at random")
    lines = []

    def out(x=""):
        print(x, flush=True)
        lines.append(x)

    tmp = tempfile.mkdtemp(prefix="kiln-curves-")
    d = start_pinned(a.kilnd, tmp, a.pin)
    load0, t_start = loadavg(), datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    tasks = {"matmul": ((a.n, a.n, a.n), a.trials), "conv2d": (CONV, a.conv_trials)}
    results = {}
    try:
        s = kiln.connect(d.urls[0])
        dev = s.device(a.device)
        for op in a.ops.split(","):
            shapes, trials = tasks[op]
            for seed in range(a.seeds):
                for tuner in ("model", "random"):
                    recs, wall = tune_once(s, dev, op, shapes, tuner, trials, seed, tmp)
                    results[(op, seed, tuner)] = (recs, wall)
                    if a.records:
                        with open(a.records, "a") as f:
                            for x in recs:
                                f.write(json.dumps(dict(x, run="%s-%s-%d" % (op, tuner, seed)), sort_keys=True) + "\n")
                    print("%s seed %d %s: %d trials in %.0f s" % (op, seed, tuner, len(recs), wall),
                          file=sys.stderr, flush=True)
        s.close()
    finally:
        d.stop()
    out("## Model against random over %d seeds, %s, %s, kiln %s" % (a.seeds, t_start, a.device, commit()))
    out()
    out("`/usr/bin/python3 bench/autotune_curves.py %s` — load average %s at the start, %s at the end. "
        "%s; each seed: the model tuner, then the random tuner, fresh records." % (
            " ".join(sys.argv[1:]), "/".join(load0), "/".join(loadavg()),
            "kilnd `--pin cpu:0=%s --pin compile=%s`" % tuple(a.pin.split(",")) if a.pin else "kilnd unpinned"))
    for op in a.ops.split(","):
        shapes, trials = tasks[op]
        marks = sorted({n for n in (4, 8, 12, 16, 24, 32, 40, 48, 64, 80, 120, 160) if n <= trials}
                       | {trials // 2, trials})
        out()
        out("### %s %s, %d trials a run" % (op, "x".join(map(str, shapes)), trials))
        out()
        out("| seed | random's best after %d (GFLOP/s) | model first reaches it at trial | within %d? | model's best after %d | wall s (model, random) |"
            % (trials, trials // 2, trials))
        out("|---|---|---|---|---|---|")
        within = 0
        curves = {"model": [], "random": []}
        for seed in range(a.seeds):
            rm, wm = results[(op, seed, "model")]
            rr, wr = results[(op, seed, "random")]
            bm, br = best_after(rm, marks), best_after(rr, marks)
            curves["model"].append(bm)
            curves["random"].append(br)
            target = br[marks[-1]]
            reach = trials_to_reach(rm, target)
            ok = reach is not None and reach <= trials // 2
            within += ok
            out("| %d | %.1f | %s | %s | %.1f | %.0f, %.0f |" % (
                seed, target, reach if reach else "not within %d" % trials, "yes" if ok else "**no**",
                bm[marks[-1]], wm, wr))
        out()
        out("Median over the seeds of the best GFLOP/s after n trials:")
        out()
        out("| n | " + " | ".join(str(n) for n in marks) + " |")
        out("|---|" + "---|" * len(marks))
        for t in ("model", "random"):
            out("| %s | " % t + " | ".join("%.1f" % statistics.median(c[n] for c in curves[t]) for n in marks) + " |")
        out()
        mh = statistics.median(c[max(n for n in marks if n <= trials // 2)] for c in curves["model"])
        rn = statistics.median(c[marks[-1]] for c in curves["random"])
        out("The model reached random's best-after-%d within %d trials in **%d of %d** seeds; its median "
            "curve after %d trials, %.1f GFLOP/s, is %s random's after %d, %.1f (%.0f%%)." % (
                trials, trials // 2, within, a.seeds, max(n for n in marks if n <= trials // 2), mh,
                "**at or above**" if mh >= rn else "**below**", trials, rn, 100.0 * mh / rn))
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
