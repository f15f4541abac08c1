#!/usr/bin/python3
"""Every configuration of a tuning task measured, several times: the ground truth the model
tuner's offline analysis (bench/autotune_curves_analysis.py --space) replays.

    chrt -f 10 /usr/bin/python3 bench/autotune_space.py [--kilnd build/server/kilnd]
        [--ops conv2d,matmul] [--passes 3] [--n 1024] [--pin KERNEL,COMPILE] --out FILE.jsonl

One kilnd (with --pin as bench/autotune_curves.py). Each pass is one kiln.autotune run of the
random tuner over the whole space (its trials = the space's size; the seed is the pass, so
every pass measures in another order), with the same measurement settings as a tuning run
(repeat 3, min_repeat_ms 50, the output checked first). The records go to FILE, one JSON line
each, with "run" = "<op>-space-<pass>".
"""

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from autotune import CONV, ROOT, at, start_pinned, commit, kiln, loadavg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kilnd", default=os.path.join(ROOT, "build", "server", "kilnd"))
    ap.add_argument("--ops", default="conv2d,matmul")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--pin", default=None, help="KERNEL,COMPILE cores")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kiln-space-")
    d = start_pinned(a.kilnd, tmp, a.pin)
    shapes = {"matmul": (a.n, a.n, a.n), "conv2d": CONV}
    print("autotune_space: kiln %s, load %s, %s" % (commit(), "/".join(loadavg()), " ".join(sys.argv[1:])),
          file=sys.stderr, flush=True)
    try:
        s = kiln.connect(d.urls[0])
        dev = s.cpu(0)
        with open(a.out, "a") as out:
            for op in a.ops.split(","):
                task = at.Task(op, shapes[op], "float32", dev)
                for p in range(a.passes):
                    rec = os.path.join(tmp, "%s-%d.jsonl" % (op, p))
                    t0 = time.monotonic()
                    r = at.tune(task, s, trials=len(task.space) + 1, tuner="random", records=rec, seed=p,
                                progress=None)
                    for x in r.records:
                        x["run"] = "%s-space-%d" % (op, p)
                        out.write(json.dumps(x, sort_keys=True) + "\n")
                    out.flush()
                    print("%s pass %d: %d trials in %.0f s, load %s" % (
                        op, p, len(r.records), time.monotonic() - t0, "/".join(loadavg())),
                        file=sys.stderr, flush=True)
        s.close()
    finally:
        d.stop()


if __name__ == "__main__":
    main()
