"""Tuners: what to try next. Each has ``next_batch(n)`` (up to n configurations not tried
yet) and ``update(results)`` ((cfg, score) pairs; score is GFLOP/s, 0 for a failed trial).

- ``RandomTuner``: configurations drawn without replacement.
- ``GridTuner``: the space in grid order.
- ``ModelTuner``: a gradient-boosted regression model (scikit-learn's
  GradientBoostingRegressor) over the space's knob and derived features, trained online on
  every result (and on records of the same op with other shapes: warm start), proposing the
  configurations it predicts fastest: every configuration is scored when the space is small,
  otherwise simulated annealing over neighbours walks to them; a share of each batch is
  random (exploration). Without scikit-learn it says so and proposes at random.
"""

import math
import random
import sys

import numpy as np

__all__ = ["Tuner", "RandomTuner", "GridTuner", "ModelTuner", "make_tuner", "have_sklearn"]


def have_sklearn():
    try:
        import sklearn.ensemble  # noqa: F401
        return True
    except ImportError:
        return False


class Tuner:
    name = "tuner"

    def __init__(self, space, seed=0):
        self.space = space
        self.rng = random.Random(seed)
        self.tried = set()
        self.results = []  # (cfg, score)

    def mark(self, cfg):
        self.tried.add(self.space.key(cfg))

    def is_new(self, cfg):
        return self.space.key(cfg) not in self.tried

    def update(self, results):
        for cfg, score in results:
            self.mark(cfg)
            self.results.append((cfg, score))

    def next_batch(self, n):
        raise NotImplementedError

    def wants_results(self):
        """Whether the next batch should wait for the results of the one being measured
        (kiln.autotune.tune then does not compile it while this one is measured)."""
        return False

    def _random(self, n, exclude=()):
        out, keys = [], set(self.space.key(c) for c in exclude)
        for _ in range(n * 50):
            if len(out) >= n:
                break
            c = self.space.sample(self.rng)
            k = self.space.key(c)
            if k not in self.tried and k not in keys:
                keys.add(k)
                out.append(c)
        if len(out) < n:  # a small space: take what is left
            for c in self.space.configs():
                k = self.space.key(c)
                if len(out) >= n:
                    break
                if k not in self.tried and k not in keys:
                    keys.add(k)
                    out.append(c)
        return out


class RandomTuner(Tuner):
    name = "random"

    def next_batch(self, n):
        out = self._random(n)
        for c in out:
            self.mark(c)
        return out


class GridTuner(Tuner):
    name = "grid"

    def __init__(self, space, seed=0):
        super().__init__(space, seed)
        self._it = space.configs()

    def next_batch(self, n):
        out = []
        for c in self._it:
            if self.is_new(c):
                out.append(c)
                self.mark(c)
                if len(out) >= n:
                    break
        return out


class ModelTuner(Tuner):
    name = "model"

    def __init__(self, space, seed=0, explore=0.15, min_train=8, enumerate_below=5000, sa_steps=150,
                 sa_chains=64, warm=()):
        super().__init__(space, seed)
        self.explore = explore
        self.min_train = min_train
        self.enumerate_below = enumerate_below
        self.sa_steps = sa_steps
        self.sa_chains = sa_chains
        self.warm = list(warm)  # (features, relative score) of related tasks
        self.model = None
        self.fallback = not have_sklearn()
        if self.fallback:
            sys.stderr.write("kiln.autotune: scikit-learn is not installed (Debian: python3-sklearn); "
                             "the model tuner proposes at random\n")
        self._all = None
        self._size = None

    def wants_results(self):
        # until the model can be fitted, a batch proposed without the results in flight is
        # random: waiting for them starts the guided batches a round earlier
        return not self.fallback and len(self.results) + len(self.warm) < self.min_train

    def _fit(self):
        from sklearn.ensemble import GradientBoostingRegressor
        xs = [self.space.features(c) for c, _ in self.results]
        top = max([s for _, s in self.results] + [1e-9])
        ys = [s / top for _, s in self.results]  # relative to the best: comparable with warm data
        width = len(xs[0]) if xs else None
        for f, y in self.warm:
            if width is None or len(f) == width:
                xs.append(f)
                ys.append(y)
        if len(xs) < self.min_train:
            self.model = None
            return
        m = GradientBoostingRegressor(n_estimators=120, max_depth=3, learning_rate=0.1, subsample=0.8,
                                      random_state=self.rng.randrange(1 << 30))
        m.fit(np.array(xs), np.array(ys))
        self.model = m

    def _predict(self, cfgs):
        return self.model.predict(np.array([self.space.features(c) for c in cfgs]))

    def _anneal(self, n):
        """Simulated annealing on the model's prediction from the best measured points and
        random ones; returns the best unseen configurations met on the way."""
        sp = self.space
        starts = [c for c, _ in sorted(self.results, key=lambda r: -r[1])[: self.sa_chains // 2]]
        starts += [sp.sample(self.rng) for _ in range(self.sa_chains - len(starts))]
        cur = starts
        cur_s = self._predict(cur)
        seen = {}
        for step in range(self.sa_steps):
            temp = max(0.02, 1.0 - step / self.sa_steps)
            nxt = [sp.neighbour(c, self.rng) for c in cur]
            nxt_s = self._predict(nxt)
            for i, (c, s) in enumerate(zip(nxt, nxt_s)):
                k = sp.key(c)
                if k not in self.tried:
                    seen[k] = (s, c)
                if s > cur_s[i] or self.rng.random() < math.exp((s - cur_s[i]) / temp):
                    cur[i], cur_s[i] = c, s
        ranked = sorted(seen.values(), key=lambda t: -t[0])
        return [c for _, c in ranked[:n]]

    def next_batch(self, n):
        if self.fallback or len(self.results) + len(self.warm) < self.min_train:
            out = self._random(n)
        else:
            self._fit()
            if self.model is None:
                out = self._random(n)
            else:
                n_model = max(1, int(round(n * (1 - self.explore))))
                if self._size is None:  # counting a space enumerates it: once
                    self._size = len(self.space)
                if self._all is None and self._size <= self.enumerate_below:
                    self._all = list(self.space.configs())
                if self._all is not None:
                    cand = [c for c in self._all if self.is_new(c)]
                    # trees predict in steps: many candidates tie, and ties go to the first
                    # in order, so the order is shuffled (else grid order biases every batch)
                    self.rng.shuffle(cand)
                    if cand:
                        pred = self._predict(cand)
                        order = np.argsort(-pred, kind="stable")[:n_model]
                        out = [cand[i] for i in order]
                    else:
                        out = []
                else:
                    out = self._anneal(n_model)
                out += self._random(n - len(out), exclude=out)
        for c in out:
            self.mark(c)
        return out


def make_tuner(name, space, seed=0, warm=()):
    if name == "random":
        return RandomTuner(space, seed)
    if name == "grid":
        return GridTuner(space, seed)
    if name == "model":
        return ModelTuner(space, seed, warm=warm)
    raise ValueError("no tuner %r: random, grid or model" % (name,))
