#!/usr/bin/python3
"""The worker seam before and after issue 12: what a client feels of kilnd's data path.

    /usr/bin/python3 bench/seam_bench.py [--label main] [--rounds 3] [--out FILE.json]

Starts its own kilnd (KILND, else build/server/kilnd; --devices cpu) on a unix socket in a
fresh temporary directory with a fresh cache, talks to it with kilnd_bench.py's bare
msgpack client (one request in flight), and stops it. Three measurements, each repeated
--rounds times on a fresh kilnd, the median round reported:

  (1) cached `compile` round trip: the vadd IR for cpu, after 200 warm-ups (p50, p99);
  (2) `launch` round trip: vadd of 1 float on cpu:0, result checked, after 200 warm-ups;
  (3) kilnd's RSS holding 1,000 cached modules: 1,000 distinct vadd payloads (a comment
      salt each) compiled for cpu with `compile_batch`, each launched once (so that every
      module has been looked up the way a launch does), then kilnd idle for 3 s (its sweep
      trims the heap once idle); VmRSS from /proc before the compiles and after, and
      what `stats` says the module table and the memory cache hold.

Prints one JSON line per round and the medians; --out writes the medians as JSON for
bench/results/seam.md. Nothing is hard-coded: every number comes from the run.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kilnd_bench import VADD, Client, KilnError, git_rev, loadavg, machine, pct, start  # noqa: E402


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise KilnError("no VmRSS for pid %d" % pid)


def vadd_args(c):
    ids = [c.call("alloc", {"device": "cpu:0", "dtype": "float32", "shape": [1]})["id"] for _ in range(3)]
    c.call("write", {"id": ids[0], "data": b"\x00\x00\x80\x3f"})  # 1.0f
    c.call("write", {"id": ids[1], "data": b"\x00\x00\x00\x40"})  # 2.0f
    return ids, [{"tensor": ids[0]}, {"tensor": ids[1]}, {"tensor": ids[2]}, 1]


def timed(c, method, params, runs):
    for _ in range(200):
        r = c.call(method, params)
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        r = c.call(method, params)
        ts.append((time.perf_counter() - t) * 1e6)
    return ts, r


def one_round(base_ir, runs, modules, tmp, n):
    d = start(os.path.join(tmp, "cache-%d" % n), devices="cpu")
    out = {}
    try:
        c = Client(d.url)
        # (1) cached compile
        params = {"ir": base_ir, "target": "cpu"}
        m = c.call("compile", params)
        ts, r = timed(c, "compile", params, runs)
        if not r["cached"]:
            raise KilnError("repeated payload was not a cache hit")
        out["compile_p50_us"], out["compile_p99_us"] = pct(ts, 50), pct(ts, 99)
        # (2) launch
        ids, args = vadd_args(c)
        lp = {"module": m["module"], "kernel": m["kernels"][0]["name"], "device": "cpu:0", "grid": [1],
              "block": [1], "args": args}
        ts, _ = timed(c, "launch", lp, runs)
        if bytes(c.call("read", {"id": ids[2]})) != b"\x00\x00\x40\x40":
            raise KilnError("vadd on cpu:0 did not give 3.0f")
        out["launch_p50_us"], out["launch_p99_us"] = pct(ts, 50), pct(ts, 99)
        # (3) RSS with `modules` cached modules
        time.sleep(3)
        out["rss_before_kib"] = rss_kib(d.pid)
        items = [{"ir": ("; seam %d\n" % i) + base_ir, "target": "cpu"} for i in range(modules)]
        res = c.call("compile_batch", {"items": items})
        errs = [x for x in res if "error" in x]
        if errs:
            raise KilnError("%d batch items failed, first: %r" % (len(errs), errs[0]["error"]))
        for x in res:
            c.call("launch", dict(lp, module=x["module"]))
        time.sleep(3)
        out["rss_after_kib"] = rss_kib(d.pid)
        st = c.call("stats", {})
        out["module_table_bytes"] = st["compile"]["module_bytes"]
        out["module_table_entries"] = st["compile"]["modules"]
        out["cache_memory_bytes"] = st["cache"]["bytes_memory"]
        out["modules"] = modules
        c.close()
    finally:
        d.stop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", default="", help="what was measured (e.g. main, seam)")
    ap.add_argument("--runs", type=int, default=3000, help="round trips per latency measurement")
    ap.add_argument("--modules", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="write the medians (JSON) here")
    args = ap.parse_args()
    base_ir = open(VADD).read()
    model, cores = machine()
    info = dict(label=args.label, date=datetime.datetime.now().isoformat(timespec="minutes"), model=model,
                cores=cores, linux=platform.release(), rev=git_rev(), load_before=loadavg(),
                runs=args.runs, rounds=args.rounds)
    tmp = tempfile.mkdtemp(prefix="seam-bench-")
    rounds = []
    try:
        for n in range(args.rounds):
            r = one_round(base_ir, args.runs, args.modules, tmp, n)
            print(json.dumps(r), flush=True)
            rounds.append(r)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    info["load_after"] = loadavg()
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    info["median"] = med
    info["rounds_raw"] = rounds
    print(json.dumps(info, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
