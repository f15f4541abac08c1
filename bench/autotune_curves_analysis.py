#!/usr/bin/python3
"""What bench/autotune_curves.py's records say once measurement noise is set aside, and how
variants of the model tuner do on them offline.

    /usr/bin/python3 bench/autotune_curves_analysis.py [RECORDS] [--seeds 20] [--noise 0.08]
        [--variants base,random,thompson,log,shallow,explore25,conv_features]
        [--space SPACE.jsonl[.xz]] [--no-pipeline]

RECORDS (default bench/results/autotune_curves_records.jsonl.xz): the records of an
autotune_curves.py run, one JSON line each with "run" = "<op>-<tuner>-<seed>" (its
``--records``).

1. Median scoring: every configuration measured in any run gets the median of its
   measurements; each seed's pair is scored again with it (the trial at which the model first
   tried a configuration at least as good as random's final best), and the spread of the
   repeated configurations' measurements is printed.
2. Offline tuning: the space cut down to the configurations measured, each worth its median,
   a trial's measurement that times (1 + N(0, noise)); the default first, then batches of 8, as
   kiln.autotune.tune. For each variant and seed, the share of seeds in which it reaches a
   random tuner's best-after-N (another seed's draws) within N / 2, by the noisy measurements
   and by the medians, and its best median configuration after N / 2 as a share of the
   measured maximum. Figures of a cut-down space: the tuners see fewer configurations than
   the real one has.

With ``--space`` (records of bench/autotune_space.py: every configuration measured in each
of several passes), part 2 runs on the whole space instead: each configuration worth the
median of its passes, a trial's measurement one of its passes' measurements drawn at random
(the noise this machine made, not a model of it). Rounds are pipelined as kiln.autotune.tune
pipelines them on a pinned kilnd (the next batch proposed before this one's results are
learnt, unless the tuner wants them first: Tuner.wants_results); ``--no-pipeline``: every
batch proposed after the last one's results. Besides the per-seed counts it prints the
medians over the seeds of each tuner's best after N / 2 and of random's best after N (the
median curves of bench/autotune_curves.py).
"""

import argparse
import collections
import importlib
import json
import lzma
import math
import os
import random
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "clients", "python"))

import numpy as np  # noqa: E402

from kiln import topi  # noqa: E402

T = importlib.import_module("kiln.autotune.tuners")
SP = importlib.import_module("kiln.topi.space")
SHAPES = {"matmul": (1024, 1024, 1024), "conv2d": (1, 64, 56, 56, 64, 3, 3, 1, 1)}
TRIALS = {"matmul": 80, "conv2d": 40}


def key(c):
    return json.dumps(c, sort_keys=True)


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    runs = collections.defaultdict(list)
    with opener(path, "rt") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                runs[r["run"]].append(r)
    return runs


def score(r):
    return r["result"]["gflops"] if r["result"].get("ok") else 0.0


def medians(runs, op):
    d = collections.defaultdict(list)
    for name, recs in runs.items():
        if name.startswith(op + "-"):
            for r in recs:
                d[key(r["knobs"])].append(score(r))
    return d, {k: statistics.median(v) for k, v in d.items()}


def median_scoring(runs, op, truth=None):
    """Each seed's pair scored by every configuration's median: over the runs' own
    measurements, or over ``truth`` (the medians of a whole measured space, --space)."""
    seen, med = medians(runs, op)
    rep = [v for v in seen.values() if len(v) > 1 and max(v) > 0]
    print("%s: %d configurations measured, %d more than once; their median relative spread "
          "(max - min) / max: %.2f" % (op, len(seen), len(rep),
                                       statistics.median((max(v) - min(v)) / max(v) for v in rep)))
    by = truth if truth is not None else med
    if truth is not None:
        print("  scored by the medians of the measured space's passes")
    n = TRIALS[op]
    seeds = sorted(int(k.rsplit("-", 1)[1]) for k in runs if k.startswith(op + "-model-"))
    within, m_half, r_all = 0, [], []
    for s in seeds:
        m = sorted(runs["%s-model-%d" % (op, s)], key=lambda r: r["trial"])
        rr = sorted(runs["%s-random-%d" % (op, s)], key=lambda r: r["trial"])
        target = max(by[key(r["knobs"])] for r in rr)
        reach = next((i + 1 for i, r in enumerate(m) if by[key(r["knobs"])] >= target), None)
        within += bool(reach and reach <= n // 2)
        m_half.append(max(by[key(r["knobs"])] for r in m[: n // 2]))
        r_all.append(target)
        print("  seed %d: random's final best by medians %.1f; the model reaches it at trial %s (%s)" % (
            s, target, reach, "within %d" % (n // 2) if reach and reach <= n // 2 else "not within %d" % (n // 2)))
    if seeds:
        print("  within %d: %d of %d seeds; median of the model's best after %d %.1f, of random's after %d %.1f (%.0f%%)"
              % (n // 2, within, len(seeds), n // 2, statistics.median(m_half), n, statistics.median(r_all),
                 100.0 * statistics.median(m_half) / statistics.median(r_all)))
    return med


class CutSpace:
    """The space cut down to the configurations measured."""

    def __init__(self, space, med):
        self.sp, self.med = space, med
        self.cfgs = [json.loads(k) for k in med]

    def __len__(self):
        return len(self.cfgs)

    def configs(self):
        return iter(self.cfgs)

    def sample(self, rng):
        return rng.choice(self.cfgs)

    def key(self, c):
        return key(c)

    def features(self, c):
        return self.sp.features(c)

    def neighbour(self, c, rng):
        return self.sp.neighbour(c, rng)

    def default(self):
        d = self.sp.default()
        return d if key(d) in self.med else self.cfgs[0]


class Ensemble(T.ModelTuner):
    """The model tuner with options: `k` bootstrapped models each proposing its own best
    (k 1: one model on all results), a log-scaled target, tree depth and count."""

    def __init__(self, space, seed, k=8, log=False, depth=3, est=120, explore=0.15):
        super().__init__(space, seed, explore=explore)
        self.k, self.log, self.depth, self.est = k, log, depth, est

    def _fit(self):
        from sklearn.ensemble import GradientBoostingRegressor
        X = np.array([self.space.features(c) for c, _ in self.results])
        top = max([s for _, s in self.results] + [1e-9])
        Y = np.array([math.log(max(s / top, 0.02)) if self.log else s / top for _, s in self.results])
        self.models = []
        for _ in range(self.k):
            idx = [self.rng.randrange(len(X)) for _ in range(len(X))] if self.k > 1 else list(range(len(X)))
            m = GradientBoostingRegressor(n_estimators=self.est, max_depth=self.depth, learning_rate=0.1,
                                          subsample=1.0 if self.k > 1 else 0.8,
                                          random_state=self.rng.randrange(1 << 30))
            self.models.append(m.fit(X[idx], Y[idx]))

    def next_batch(self, n):
        if len(self.results) < self.min_train:
            out = self._random(n)
        else:
            self._fit()
            cand = [c for c in self.space.configs() if self.is_new(c)]
            F = np.array([self.space.features(c) for c in cand]) if cand else None
            preds = [m.predict(F) for m in self.models] if cand else []
            out, keys = [], set()
            for j in range(max(1, int(round(n * (1 - self.explore)))) if cand else 0):
                for i in np.argsort(-preds[j % len(preds)]):
                    if key(cand[i]) not in keys:
                        keys.add(key(cand[i]))
                        out.append(cand[i])
                        break
            out += self._random(n - len(out), exclude=out)
        for c in out:
            self.mark(c)
        return out


def conv_features(orig):
    """conv2d's features plus derived ones: the register tile, whether the row block divides the
    output row, its size and its vector count."""
    def features(self, cfg):
        f = orig(self, cfg)
        if self.template == "conv2d_nchw" and not self.gpu:
            c = self._complete(cfg)
            ow_full = self.shapes[3]
            ow = c["ow_block"] or min(ow_full, 64)
            f += [math.log2(c["oc_block"] * ow), float(ow_full % ow == 0), math.log2(ow),
                  math.log2(max(1, ow // c["vec"])), math.log2(c["oc_block"] * c["vec"])]
        return f
    return features


VARIANTS = {
    "base": lambda sp, s: T.ModelTuner(sp, s),
    "random": lambda sp, s: T.RandomTuner(sp, s + 1000),
    "thompson": lambda sp, s: Ensemble(sp, s),
    "log": lambda sp, s: Ensemble(sp, s, k=1, log=True),
    "shallow": lambda sp, s: Ensemble(sp, s, depth=2, est=80),
    "explore25": lambda sp, s: Ensemble(sp, s, explore=0.25),
    "conv_features": lambda sp, s: T.ModelTuner(sp, s),
}


def tune(make, space, n, seed, noise, med, measured=None, pipeline=False):
    """One simulated tuning run: the default first, then batches of 8; ``measured``
    (configuration key -> its measurements) draws a trial's measurement from them, else the
    median times (1 + N(0, noise)). ``pipeline``: as kiln.autotune.tune on a pinned kilnd."""
    rng = random.Random(seed * 7919 + 1)
    tn = make(space, seed)
    if measured:
        measure = lambda c: rng.choice(measured[key(c)])  # noqa: E731
    else:
        measure = lambda c: max(0.0, med[key(c)] * (1 + rng.gauss(0, noise)))  # noqa: E731
    d = space.default()
    tn.mark(d)
    hist = [(d, measure(d))]
    tn.update(hist[:])
    ahead = None
    while len(hist) < n:
        batch = ahead if ahead is not None else tn.next_batch(min(8, n - len(hist)))
        ahead = None
        if not batch:
            break
        res = [(c, measure(c)) for c in batch]
        if pipeline and len(hist) + len(batch) < n and not tn.wants_results():
            ahead = tn.next_batch(min(8, n - len(hist) - len(batch)))
        tn.update(res)
        hist += res
    return hist


def offline(op, med, variants, seeds, noise, measured=None, pipeline=False):
    sp = topi.space(op, "cpu", SHAPES[op])
    space = CutSpace(sp, med) if measured is None else sp
    n, top = TRIALS[op], max(med.values())
    print("%s offline: %d configurations, %d trials, %d seeds, %s%s" % (
        op, len(space), n, seeds, "noise %.2f" % noise if measured is None else "measurements drawn from the passes",
        ", pipelined" if pipeline else ""))
    orig = SP.Space.features
    for name in variants:
        SP.Space.features = conv_features(orig) if name == "conv_features" else orig
        noisy = by_median = 0
        half, m_half, r_all = [], [], []
        for s in range(seeds):
            rr = tune(VARIANTS["random"], space, n, s, noise, med, measured, pipeline)
            hm = tune(VARIANTS[name], space, n, s, noise, med, measured, pipeline)
            m_half.append(max(v for _, v in hm[: n // 2]))
            r_all.append(max(v for _, v in rr))
            target = max(v for _, v in rr)
            reach = next((i + 1 for i, (_, v) in enumerate(hm) if v >= target), None)
            noisy += bool(reach and reach <= n // 2)
            target_m = max(med[key(c)] for c, _ in rr)
            reach_m = next((i + 1 for i, (c, _) in enumerate(hm) if med[key(c)] >= target_m), None)
            by_median += bool(reach_m and reach_m <= n // 2)
            half.append(max(med[key(c)] for c, _ in hm[: n // 2]) / top)
        SP.Space.features = orig
        print("  %-14s within half: %2d/%d by measurements, %2d/%d by medians; best median after %d: %.3f of the maximum;"
              " median best after %d %.1f, random's after %d %.1f"
              % (name, noisy, seeds, by_median, seeds, n // 2, statistics.mean(half), n // 2,
                 statistics.median(m_half), n, statistics.median(r_all)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("records", nargs="?", default=os.path.join(HERE, "results", "autotune_curves_records.jsonl.xz"))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--noise", type=float, default=0.08)
    ap.add_argument("--ops", default="conv2d,matmul")
    ap.add_argument("--variants", default="base,random,thompson,log,shallow,explore25,conv_features")
    ap.add_argument("--space", default=None, help="bench/autotune_space.py records: the whole space as ground truth")
    ap.add_argument("--no-pipeline", action="store_true")
    a = ap.parse_args()
    if not T.have_sklearn():
        sys.exit("autotune_curves_analysis: scikit-learn is not installed (Debian: python3-sklearn)")
    runs = load(a.records)
    space_runs = load(a.space) if a.space else None
    for op in a.ops.split(","):
        med = median_scoring(runs, op, medians(space_runs, op)[1] if space_runs else None)
        variants = [v for v in a.variants.split(",") if v != "conv_features" or op == "conv2d"]
        if space_runs is None:
            offline(op, med, variants, a.seeds, a.noise, pipeline=not a.no_pipeline)
            continue
        measured, med = medians(space_runs, op)
        offline(op, med, variants, a.seeds, a.noise, measured, pipeline=not a.no_pipeline)


if __name__ == "__main__":
    main()
