"""python3 -m kiln.autotune --op matmul --shape 1024,1024,1024 --device cpu:0 --trials 200
--records r.jsonl [--url tcp:HOST:PORT ...] [--tuner model|random|grid] [--plot best.png]"""

import argparse
import json
import sys

import kiln

from .tune import Task, tune


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kiln.autotune", description=__doc__.split("\n")[0])
    ap.add_argument("--op", required=True, help="matmul, dense, batch_matmul, conv2d, depthwise, pool, softmax")
    ap.add_argument("--shape", required=True, help="comma-separated: kiln.topi.space's shapes of the op")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--trials", type=int, default=200, help="trials of the task in the records, resumed ones included")
    ap.add_argument("--records", help="JSON-lines records file (appended; resumes)")
    ap.add_argument("--url", action="append", default=[],
                    help="kilnd to measure on (repeat for several hosts; default: kiln.connect()'s)")
    ap.add_argument("--token", default=None)
    ap.add_argument("--tuner", default="model", choices=["model", "random", "grid"])
    ap.add_argument("--batch", type=int, default=None, help="configurations per round")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--min-repeat-ms", type=int, default=50)
    ap.add_argument("--flush", action="store_true", help="evict caches before each repeat")
    ap.add_argument("--timeout-ms", type=int, default=10000, help="each run's deadline")
    ap.add_argument("--lease", type=int, default=60, help="lease seconds per round (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", help="PNG of best-so-far against trials and time (matplotlib)")
    ap.add_argument("--json", action="store_true", help="print the best record as JSON")
    a = ap.parse_args(argv)
    shapes = [int(x) for x in a.shape.split(",") if x]
    sessions = [kiln.connect(u, token=a.token) for u in a.url] or [kiln.connect(token=a.token)]
    dev = sessions[0].device(a.device)
    if not dev.exist:
        sys.exit("kiln.autotune: %s is not served by %s" % (a.device, sessions[0].url))
    task = Task(a.op, shapes, a.dtype, dev)
    runners = [(s, s.device(a.device)) for s in sessions]
    res = tune(task, runners, trials=a.trials, tuner=a.tuner, records=a.records, batch=a.batch, repeat=a.repeat,
               min_repeat_ms=a.min_repeat_ms, flush=a.flush, timeout_ms=a.timeout_ms, lease_s=a.lease, seed=a.seed)
    b = res.best
    if not b:
        print("no correct configuration among %d trials" % len(res.records))
        return 1
    r = b["result"]
    print("task     %s %s %s on %s (%s)" % (a.op, tuple(shapes), a.dtype, a.device, dev.name))
    print("trials   %d (%d this run, %d failed)" % (len(res.records), len(res.trials),
                                                   sum(1 for x in res.records if not x["result"].get("ok"))))
    print("best     %s" % json.dumps(b["knobs"], sort_keys=True))
    print("time     %.4f ms (mean of %d repeats, cv %.3f)" % (r["mean"] * 1e3, r["repeat"], r["cv"]))
    print("GFLOP/s  %.2f" % r["gflops"])
    if res.default:
        d = res.default["result"]
        print("default  %s: %.4f ms, %.2f GFLOP/s; best is %.2fx" % (
            json.dumps(res.default["knobs"], sort_keys=True), d["mean"] * 1e3, d["gflops"], d["mean"] / r["mean"]))
    if a.json:
        print(json.dumps(b, sort_keys=True))
    if a.plot:
        from .plot import plot
        plot(res.records, a.plot, "%s %s on %s" % (a.op, "x".join(map(str, shapes)), a.device))
        print("plot     %s" % a.plot)
    for s in sessions:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
