#!/usr/bin/env python3
"""SGEMM tuned by kiln.autotune on a CUDA device, beside cuBLAS measured in the same run
(issue 15: >= 85% of cuBLAS at 4096 within 10 minutes of tuning, TF32 off).

Runs on the lent GPU machine (bench/gpu/run.sh tune), with the machine's python3:
    python3 bench/gpu/tune_gemm.py --kilnd build/server/kilnd --sizes 1024,2048,4096 \
        --budget 60,60,240 --out $OUT [--resume RECORDS]
It starts one kilnd serving cuda:0, tunes matmul n x n x n (float32) for each size until its
time budget is spent (rounds of 8 trials; the records file makes each round resume the last),
measures cuBLAS SGEMM through torch.mm with TF32 off (CUDA events, the median of 3 repeats of
20 calls, 5 at 4096), and writes tune_gemm.md (the table, the machine, the date) and the
records (tune_gemm_records.jsonl) to --out. Tuner: model (scikit-learn's gradient boosting
where it is installed; where not, kiln.autotune's documented fallback).

Quick mode, for feedback in a few minutes: ``--configs FILE`` (a JSON list of knob maps; knobs
left out take the template's defaults) measures exactly those configurations at each size
(checked and timed as the tuner does, in the order given, the first one as the ratio's base)
beside cuBLAS, writes tune_gemm_quick.md, and tunes nothing; their records go to the same
records file, so a later full run resumes from them."""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

import kiln  # noqa: E402
from kiln.autotune import records as R  # noqa: E402
from kiln.autotune.tune import Task, tune  # noqa: E402
from kiln.daemon import start_daemon  # noqa: E402
from kiln.topi.space import Space, space as make_space  # noqa: E402


class ListedSpace(Space):
    """The matmul space reduced to the listed configurations (each checked against the
    template's rules), in that order: the grid tuner measures exactly them."""

    def __init__(self, base, cfgs):
        self.__dict__.update(base.__dict__)
        self.listed = []
        for c in cfgs:
            full = dict(base.default(), **c)
            why = base.check(full)
            if why:
                sys.exit("tune_gemm: %s: %s" % (json.dumps(c, sort_keys=True), why))
            self.listed.append(full)

    def configs(self):
        return iter([dict(c) for c in self.listed])

    def default(self):
        return dict(self.listed[0])

    def sample(self, rng=None, tries=0):
        return dict((rng or __import__("random")).choice(self.listed))

    def neighbour(self, cfg, rng=None):
        return self.sample(rng)


def quick(session, dev, n, cfgs, records):
    """Each listed configuration checked and timed once at n x n x n: [(cfg, record)]."""
    base = make_space("matmul", dev, [n, n, n], "float32", device=dev)
    sp = ListedSpace(base, cfgs)
    task = Task("matmul", [n, n, n], "float32", dev, space=sp)
    res = tune(task, [(session, dev)], trials=len(sp.listed), tuner="grid", records=records, repeat=3,
               min_repeat_ms=20, timeout_ms=10000, lease_s=120, progress=sys.stderr)
    by_key = {sp.key(r["knobs"]): r for r in res.records}
    return [(c, by_key.get(sp.key(c))) for c in sp.listed]


def write_quick(out, rows, gpu):
    with open(os.path.join(out, "tune_gemm_quick.md"), "w") as f:
        f.write("# SGEMM: listed configurations beside cuBLAS (bench/gpu/tune_gemm.py --configs)\n\n")
        f.write("%s; GPU: %s.\n\n" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), gpu))
        f.write("| n | knobs | TFLOP/s | of cuBLAS | |\n|---|---|---|---|---|\n")
        for n, ref, results in rows:
            for c, r in results:
                res = (r or {}).get("result", {})
                tf = res.get("gflops", 0) / 1e3 if res.get("ok") else None
                f.write("| %d | `%s` | %s | %s | %s |\n" % (
                    n, json.dumps(c, sort_keys=True), "%.1f" % tf if tf else "-",
                    "%.0f%%" % (100 * tf / ref) if tf and ref else "-",
                    "" if res.get("ok") else "%s %s" % (res.get("error", "not measured"), res.get("message", "")[:200])))
            f.write("| %d | cuBLAS | %s | 100%% | |\n" % (n, "%.1f" % ref if ref else "-"))


def cublas_tflops(n):
    """cuBLAS SGEMM (torch.mm, TF32 off) in TFLOP/s, or an error string."""
    try:
        import torch
    except ImportError as e:
        return None, "no torch: %s" % e
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    c = torch.mm(a, b)
    torch.cuda.synchronize()
    reps = 20 if n <= 2048 else 5
    times = []
    for _ in range(3):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / 1e3 / reps)
    t = sorted(times)[1]
    return 2.0 * n ** 3 / t / 1e12, "torch %s, cuBLAS, TF32 off" % torch.__version__


def tune_size(session, dev, n, budget_s, records):
    task = Task("matmul", [n, n, n], "float32", dev)
    start = time.time()
    trials = 0
    res = None
    while time.time() - start < budget_s:
        # `trials` counts the task's records, resumed ones too: 8 more than it holds
        res = tune(task, [(session, dev)], trials=trials + 8, tuner="model", records=records, repeat=3,
                   min_repeat_ms=20, timeout_ms=10000, lease_s=120, progress=sys.stderr)
        if len(res.records) < trials + 8:
            break  # the space is exhausted
        trials = len(res.records)
    spent = time.time() - start
    return res, spent


def _gpu_name(dev):
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "%s (no nvidia-smi)" % dev.name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kilnd", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--sizes", default="1024,2048,4096")
    ap.add_argument("--budget", default="60,60,240", help="seconds of tuning per size")
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", help="records of an earlier run to go on from (copied into --out first)")
    ap.add_argument("--configs", help="quick mode: a JSON file (or literal) listing knob maps to time, no tuning")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    budgets = [float(x) for x in a.budget.split(",")]
    os.makedirs(a.out, exist_ok=True)
    records = os.path.join(a.out, "tune_gemm_records.jsonl")
    if a.resume and os.path.abspath(a.resume) != os.path.abspath(records):
        import shutil
        shutil.copyfile(a.resume, records)
    rows = []
    with start_daemon(kilnd=a.kilnd, log_level="warn") as d:
        s = kiln.connect(d.urls[0])
        dev = s.device(a.device)
        if not dev.exist:
            sys.exit("tune_gemm: kilnd serves no %s" % a.device)
        if a.configs:
            text = open(a.configs).read() if os.path.exists(a.configs) else a.configs
            cfgs = json.loads(text)
            for n in sizes:
                results = quick(s, dev, n, cfgs, records)
                ref, _ = cublas_tflops(n)
                rows.append((n, ref, results))
                for c, r in results:
                    res = (r or {}).get("result", {})
                    print(json.dumps({"n": n, "knobs": c, "tflops": res.get("gflops", 0) / 1e3 if res.get("ok") else None,
                                      "cublas_tflops": ref, "error": res.get("error")}, sort_keys=True), flush=True)
            write_quick(a.out, rows, _gpu_name(dev))
            return 0
        for n, budget in zip(sizes, budgets):
            res, spent = tune_size(s, dev, n, budget, records)
            best = res.best if res else None
            ref, ref_what = cublas_tflops(n)
            row = {"n": n, "budget_s": budget, "spent_s": round(spent, 1), "trials": len(res.records) if res else 0,
                   "failed": sum(1 for r in res.records if not r["result"].get("ok")) if res else 0,
                   "cublas_tflops": ref, "cublas": ref_what}
            if best:
                row["best_tflops"] = best["result"]["gflops"] / 1e3
                row["best_knobs"] = best["knobs"]
                row["first_best_s"] = best.get("elapsed_s")
            if res and res.default:
                row["default_tflops"] = res.default["result"]["gflops"] / 1e3
            rows.append(row)
            print(json.dumps(row, sort_keys=True), flush=True)
    gpu = _gpu_name(dev)
    with open(os.path.join(a.out, "tune_gemm.md"), "w") as f:
        f.write("# SGEMM tuned by kiln.autotune beside cuBLAS\n\n")
        f.write("Written by `bench/gpu/tune_gemm.py` (through `bench/gpu/run.sh tune`) on %s.\n\n"
                % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        f.write("GPU: %s; host %s, %d cores; Python %s; records schema v%s.\n\n"
                % (gpu, platform.processor() or platform.machine(), os.cpu_count(), platform.python_version(),
                   R.SCHEMA_VERSION))
        f.write("| n | tuning budget | trials (failed) | default knobs | best found | cuBLAS | best / cuBLAS |\n")
        f.write("|---|---|---|---|---|---|---|\n")
        for r in rows:
            best = r.get("best_tflops")
            ref = r.get("cublas_tflops")
            f.write("| %d | %.0f s (spent %.0f s) | %d (%d) | %s | %s | %s | %s |\n" % (
                r["n"], r["budget_s"], r["spent_s"], r["trials"], r["failed"],
                "%.1f TFLOP/s" % r["default_tflops"] if r.get("default_tflops") else "-",
                "%.1f TFLOP/s" % best if best else "none correct",
                "%.1f TFLOP/s" % ref if ref else r["cublas"],
                "%.0f%%" % (100 * best / ref) if best and ref else "-"))
        f.write("\ncuBLAS: %s.\n\nBest knobs:\n\n" % rows[0]["cublas"] if rows else "")
        for r in rows:
            f.write("- %d: `%s`\n" % (r["n"], json.dumps(r.get("best_knobs"), sort_keys=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
